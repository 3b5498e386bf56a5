"""TLS for a daemon that serves other hosts (`kiln daemon start --listen --tls-cert --tls-key`).

The server presents its certificate chain; a client trusts only the CA it is given
(`--tls-ca` or KILN_DAEMON_TLS_CA), checks the server's name against the certificate, and
still presents the token (`auth`). A client given no CA speaks plaintext, which a TLS daemon
does not answer.
"""
from __future__ import annotations

from pathlib import Path

import grpc


class TLSError(ValueError):
    """A certificate, key or CA file that cannot be read."""


def _read(path, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TLSError(f"cannot read the {what} {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise TLSError(f"the {what} {path} is not PEM")
    return data


def server_credentials(cert_file, key_file) -> grpc.ServerCredentials:
    """From PEM files: the certificate chain (leaf first) and its private key."""
    return grpc.ssl_server_credentials([(_read(key_file, "TLS key"), _read(cert_file, "TLS certificate"))])


def channel_credentials(ca_file) -> grpc.ChannelCredentials:
    """Trust exactly the CA in the PEM file `ca_file`."""
    return grpc.ssl_channel_credentials(root_certificates=_read(ca_file, "TLS CA"))
