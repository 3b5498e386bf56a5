"""A daemon that serves other hosts: TLS with a certificate from the cluster's own CA, plus the
token. A client without the CA, with another CA, or without the token is refused; one with
both compiles remotely and keeps the result in its node cache."""
import os
import socket
import subprocess
import sys
import time
import warnings

import grpc
import pytest

from kiln.cache import Cache
from kiln.daemon import cli, create_server, tiers
from kiln.daemon.client import Client, PlaintextToken
from kiln.daemon.tls import TLSError, channel_credentials, server_credentials
from kiln.ir import parse_function

pytest.importorskip("cryptography", reason="the TLS tests make their CA with `cryptography`")
from tls_certs import make_pki  # noqa: E402

TOKEN = "cluster-token"
FN = parse_function("kernel @remote_k(%x: ptr<int32>) {\n  %v = load %x : int32\n  store %x, %v\n  return\n}\n")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def daemon(pki, tmp_path_factory):
    server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1, token=TOKEN,
                                 cache=Cache(tmp_path_factory.mktemp("daemon-cache")),
                                 tls=server_credentials(pki["cert"], pki["key"]))
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code()


def test_a_client_with_the_ca_and_the_token_compiles(daemon, pki):
    with Client(daemon, token=TOKEN, tls_ca=pki["ca"]) as client:
        reply = client.compile(FN, "sm_90a", {}, timeout=30)
    assert reply.cubin and "remote_k" in reply.ptx


def test_clients_without_the_ca_or_the_token_are_refused(daemon, pki, monkeypatch):
    monkeypatch.delenv("KILN_DAEMON_PLAINTEXT_TOKEN", raising=False)
    with pytest.raises(PlaintextToken):  # a token and no CA: the client sends nothing
        Client(daemon, token=TOKEN)
    monkeypatch.setenv("KILN_DAEMON_PLAINTEXT_TOKEN", "1")
    for refused in (Client(daemon, token=TOKEN),                       # plaintext to a TLS port, told to
                    Client(daemon, token=TOKEN, tls_ca=pki["other_ca"])):  # a server it cannot verify
        with refused:
            assert _code(lambda: refused.stats(timeout=10)) == grpc.StatusCode.UNAVAILABLE
    for refused in (Client(daemon, tls_ca=pki["ca"]), Client(daemon, token="wrong", tls_ca=pki["ca"])):
        with refused:
            assert _code(lambda: refused.compile(FN, "sm_90a", {}, timeout=10)) == grpc.StatusCode.UNAUTHENTICATED


def test_a_host_without_a_toolkit_compiles_through_the_remote_daemon(daemon, pki, monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KILN_DAEMON", daemon)
    monkeypatch.setenv("KILN_DAEMON_TOKEN", TOKEN)
    monkeypatch.setenv("KILN_DAEMON_TLS_CA", pki["ca"])
    monkeypatch.setattr(tiers, "_state", tiers._State())

    def no_toolkit(fn, target, options):
        raise AssertionError("compiled here")
    binary = tiers.cached_compile(FN, "sm_90a", {}, compile_fn=no_toolkit)
    assert binary.source == "daemon"
    again = tiers.cached_compile(FN, "sm_90a", {}, compile_fn=no_toolkit)
    assert again.source == "cache" and again.cubin == binary.cubin  # kept in this host's node cache


def test_a_client_without_the_ca_warns_once_and_compiles_here(daemon, monkeypatch, tmp_path):
    from kiln.daemon import fake
    monkeypatch.setenv("KILN_DAEMON", daemon)
    monkeypatch.setenv("KILN_DAEMON_TOKEN", TOKEN)
    monkeypatch.delenv("KILN_DAEMON_TLS_CA", raising=False)
    for plaintext_ok, said in (("0", "KILN_DAEMON_PLAINTEXT_TOKEN=1"), ("1", "UNAVAILABLE")):
        monkeypatch.setenv("KILN_DAEMON_PLAINTEXT_TOKEN", plaintext_ok)  # "0": the token stays here; "1": TLS refuses
        monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / f"cache{plaintext_ok}"))
        monkeypatch.setattr(tiers, "_state", tiers._State())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert tiers.cached_compile(FN, "sm_80", {}, compile_fn=fake.compile).source == "local"
            assert tiers.cached_compile(FN, "sm_80", {}, compile_fn=fake.compile).source == "cache"
        assert len(caught) == 1 and said in str(caught[0].message), [str(w.message) for w in caught]


def test_bad_tls_files_are_one_line_errors(pki, tmp_path):
    with pytest.raises(TLSError, match="cannot read the TLS CA"):
        channel_credentials(tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(TLSError, match="is not PEM"):
        server_credentials(tmp_path / "junk.pem", pki["key"])
    assert cli.main(["daemon", "start", "--tls-cert", pki["cert"]]) == 2  # half a pair, and no --listen


def test_cli_serves_tls_and_status_needs_the_ca(pki, tmp_path):
    """`kiln daemon start --listen --tls-cert --tls-key`, then `kiln daemon status` with and without the CA."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_RUNTIME_DIR=str(tmp_path / "run"),
               KILN_DAEMON_TOKEN=TOKEN)
    env.pop("KILN_DAEMON_TLS_CA", None)
    kiln = [sys.executable, "-m", "kiln.daemon"]
    proc = subprocess.Popen([*kiln, "daemon", "start", "--foreground", "--listen", f"127.0.0.1:{port}",
                             "--tls-cert", pki["cert"], "--tls-key", pki["key"], "--workers", "1",
                             "--compile-fn", "kiln.daemon.fake:compile"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        status = [*kiln, "daemon", "status", "--address", f"127.0.0.1:{port}"]
        deadline = time.monotonic() + 60
        while True:
            with_ca = subprocess.run([*status, "--tls-ca", pki["ca"]], env=env, capture_output=True, text=True)
            if with_ca.returncode == 0 or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.2)
        assert with_ca.returncode == 0, with_ca.stderr
        assert f"kiln daemon at 127.0.0.1:{port}" in with_ca.stdout
        without = subprocess.run(status, env=env, capture_output=True, text=True)  # the token stays here
        assert without.returncode == 4 and "KILN_DAEMON_TLS_CA" in without.stderr  # LSB: status unknown
        told = subprocess.run(status, env={**env, "KILN_DAEMON_PLAINTEXT_TOKEN": "1"}, capture_output=True, text=True)
        assert told.returncode == 4 and "UNAVAILABLE" in told.stderr  # LSB: running (its pid lives), status unknown
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "tls=True" in err
