"""A throwaway PKI for the TLS tests, made with `cryptography`: a self-signed CA, a server
certificate it signed for localhost and 127.0.0.1, and a second CA that signed nothing."""
import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _certificate(subject: str, key, issuer=None, issuer_key=None, ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _write(folder, name, data: bytes) -> str:
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def make_pki(folder) -> dict:
    """PEM files in `folder`: {"ca", "other_ca", "cert", "key"} -> path."""
    folder = str(folder)
    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate("kiln test CA", ca_key, ca=True)
    server = _certificate("kiln test server", server_key, issuer=ca, issuer_key=ca_key)
    pem = serialization.Encoding.PEM
    return {"ca": _write(folder, "ca.pem", ca.public_bytes(pem)),
            "other_ca": _write(folder, "other.pem", _certificate("other", other_key, ca=True).public_bytes(pem)),
            "cert": _write(folder, "server.pem", server.public_bytes(pem)),
            "key": _write(folder, "server.key", server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                                         serialization.NoEncryption()))}
