"""A daemon token goes only over TLS or a Unix socket: a client with a token and no CA refuses any TCP
address, loopback included (whoever holds a loopback port gets what is sent to it, and any user of
the host can bind one the daemon is not on), unless the user sets KILN_DAEMON_PLAINTEXT_TOKEN=1."""
import pytest

from kiln.daemon.client import Client, PlaintextToken

TCP = ["10.1.2.3:7000", "cache-host:7000", "[2001:db8::1]:7000",
       "127.0.0.1:7000", "localhost:7000", "[::1]:7000", "ipv4:127.0.0.1:7000", "dns:///localhost:7000"]


@pytest.mark.parametrize("address", TCP)
def test_a_token_is_not_sent_over_plaintext_tcp(address, monkeypatch):
    monkeypatch.delenv("KILN_DAEMON_PLAINTEXT_TOKEN", raising=False)
    with pytest.raises(PlaintextToken, match="KILN_DAEMON_PLAINTEXT_TOKEN=1") as refused:
        Client(address, token="secret")
    assert "KILN_DAEMON_TLS_CA" in str(refused.value) and "secret" not in str(refused.value)
    Client(address, token="secret", tls_ca="ca.pem")  # TLS: fine
    Client(address)  # no token: nothing to leak
    monkeypatch.setenv("KILN_DAEMON_PLAINTEXT_TOKEN", "1")  # the user's say-so
    Client(address, token="secret")


def test_unix_sockets_carry_a_token(monkeypatch):
    monkeypatch.delenv("KILN_DAEMON_PLAINTEXT_TOKEN", raising=False)
    Client("unix:/tmp/d.sock", token="secret")
    with pytest.raises(PlaintextToken):  # an abstract socket has no owner or mode: anyone may bind its name
        Client("unix-abstract:kiln", token="secret")

