"""A daemon token crosses a network only inside TLS: a client with a token and no CA refuses a
TCP address beyond loopback, unless the user says the network is trusted."""
import pytest

from kiln.daemon.client import Client, PlaintextToken


@pytest.mark.parametrize("address", ["10.1.2.3:7000", "cache-host:7000", "[2001:db8::1]:7000"])
def test_a_token_is_not_sent_in_the_clear(address, monkeypatch):
    monkeypatch.delenv("KILN_DAEMON_PLAINTEXT_TOKEN", raising=False)
    with pytest.raises(PlaintextToken, match="KILN_DAEMON_TLS_CA"):
        Client(address, token="secret")
    Client(address, token="secret", tls_ca="ca.pem")  # TLS: fine
    Client(address)  # no token: nothing to leak
    monkeypatch.setenv("KILN_DAEMON_PLAINTEXT_TOKEN", "1")
    Client(address, token="secret")


@pytest.mark.parametrize("address", ["127.0.0.1:7000", "localhost:7000", "[::1]:7000", "unix:/tmp/d.sock"])
def test_loopback_and_unix_sockets_may_carry_a_token(address, monkeypatch):
    monkeypatch.delenv("KILN_DAEMON_PLAINTEXT_TOKEN", raising=False)
    Client(address, token="secret")
