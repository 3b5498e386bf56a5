"""The node daemon as users meet it: started on demand by many processes at once (one
daemon), the `kiln daemon` and `kiln cache` commands, a client that survives fork, TCP
with a token, stale sockets, idle exit."""
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import grpc
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server
from kiln.daemon.client import Client
from kiln.ir import parse_function

FAKE_ARGS = ["--workers", "1", "--compile-fn", "kiln.daemon.fake:compile"]
IR = '''
kernel @{name}(%x: ptr<fp32>) {{
  %v = load %x : fp32
  %w = add %v, %v : fp32
  store %x, %w
  return
}}
'''


def kernel(name):
    return parse_function(IR.format(name=name))


def kiln(*args, env=None, check=True):
    out = subprocess.run([sys.executable, "-m", "kiln.daemon", *args], capture_output=True, text=True,
                         timeout=120, env=env)
    if check and out.returncode != 0:
        raise AssertionError(f"kiln {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out


def _ensure(_):
    from kiln.daemon.launch import ensure_daemon
    return ensure_daemon(FAKE_ARGS, idle_exit=60)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A private node: runtime and cache directories of its own (short: socket paths are limited)."""
    runtime = tempfile.mkdtemp(prefix="kr-", dir="/tmp")
    env = {"KILN_RUNTIME_DIR": runtime, "KILN_CACHE_DIR": str(tmp_path_factory.mktemp("node-cache"))}
    saved = {k: os.environ.get(k) for k in [*env, "KILN_DAEMON"]}
    os.environ.update(env)
    os.environ.pop("KILN_DAEMON", None)  # the node daemon, not the test run's default of off
    yield dict(os.environ)
    kiln("daemon", "stop", check=False)
    shutil.rmtree(runtime, ignore_errors=True)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_many_processes_start_one_daemon(node):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        addresses = pool.map(_ensure, range(4))
    assert len(set(addresses)) == 1 and addresses[0] == f"unix:{node['KILN_RUNTIME_DIR']}/daemon.sock"
    log = open(os.path.join(node["KILN_RUNTIME_DIR"], "daemon.log")).read()
    assert log.count("event=serving") == 1, log
    path = addresses[0][len("unix:"):]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_client_keeps_working_after_fork(node):
    from kiln.daemon.launch import ensure_daemon
    client = Client(ensure_daemon(FAKE_ARGS, idle_exit=60))
    assert client.compile(kernel("forked"), "sm_90a", {}).cubin
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a DataLoader worker, say
        try:
            replies = [client.compile(kernel(name), "sm_90a", {}, timeout=20) for name in ("forked", "in_child")]
            report = "ok" if all(r.cubin for r in replies) else "empty cubin"
        except BaseException as e:
            report = f"{type(e).__name__}: {e}"
        os.write(write_end, report.encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as child:
        assert child.read() == "ok"
    assert client.lookup(client.compile(kernel("in_child"), "sm_90a", {}).key) is not None
    client.close()


def test_status_and_cache_commands(node, tmp_path):
    from kiln.daemon.launch import ensure_daemon
    with Client(ensure_daemon(FAKE_ARGS, idle_exit=60)) as client:
        key = client.compile(kernel("listed"), "sm_90a", {"num_warps": 2}).key
    status = json.loads(kiln("daemon", "status", "--json").stdout)
    assert status["workers"] == 1 and status["misses"] >= 1 and isinstance(status["cache"]["entries"], int)
    assert "requests" in kiln("daemon", "status").stdout
    assert key[:16] in kiln("cache", "ls").stdout
    assert json.loads(kiln("cache", "stats", "--json").stdout)["entries"] >= 1
    archive = str(tmp_path / "kernels.zip")
    assert "exported" in kiln("cache", "export", archive).stdout
    other = str(tmp_path / "other")
    assert "imported" in kiln("cache", "import", archive, "--dir", other).stdout
    with Cache(other) as imported:
        artifacts, metadata = imported.get_result(key)
        assert b"kernel @listed" in artifacts["ir"] and metadata["options"] == {"num_warps": 2}
    kiln("cache", "prune")


def test_stop(node):
    from kiln.daemon.launch import ensure_daemon, read_pid_file
    address = ensure_daemon(FAKE_ARGS, idle_exit=60)
    pid = read_pid_file()["pid"]
    assert "stopped" in kiln("daemon", "stop").stdout
    from kiln.daemon.cli import _running
    assert not _running(pid)  # gone, or a zombie until this process (its parent) waits for it
    assert not Client(address).healthy(0.5)
    again = kiln("daemon", "stop", check=False)
    assert again.returncode == 0 and "no kiln daemon is running" in again.stdout  # LSB: stopping a stopped one succeeds


def test_a_daemon_that_exited_unwaited_counts_as_stopped():
    """`kiln daemon stop` polls the pid: a daemon spawned by a process that has not waited for
    it yet stays a zombie after it exits, which signal 0 still reaches (the stop then waited
    60 s and failed)."""
    import subprocess
    import time
    from kiln.daemon.cli import _running
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while _running(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child.pid)
    child.wait()
    assert _running(os.getpid())


def test_tcp_needs_the_token(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DAEMON_PLAINTEXT_TOKEN", "1")  # plaintext TCP carries a token only when told to
    server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1,
                                 cache=Cache(tmp_path / "c"), token="s3cret")
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        for token in (None, "wrong"):
            with Client(address, token=token) as client:
                with pytest.raises(grpc.RpcError) as e:
                    client.compile(kernel("tcp"), "sm_90a", {})
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert client.healthy()  # the health check alone needs no token (Kubernetes' gRPC probes)
                with pytest.raises(grpc.RpcError):
                    list(client.compile_many([(kernel("tcp"), "sm_90a", {})]))
        with Client(address, token="s3cret") as client:
            assert client.healthy() and client.compile(kernel("tcp"), "sm_90a", {}).cubin
            [item] = list(client.compile_many([(kernel("tcp"), "sm_90a", {})]))
            assert item.result.cubin
    finally:
        server.stop(0)


def test_stale_socket_is_replaced_and_live_one_refused(tmp_path):
    path = os.path.join(tempfile.mkdtemp(prefix="ks-", dir="/tmp"), "d.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens: what a killed daemon leaves
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    try:
        with pytest.raises(RuntimeError, match="already listens"):
            create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
        assert Client(f"unix:{path}").healthy()
    finally:
        server.stop(0)


def test_idle_daemon_exits(tmp_path):
    path = os.path.join(tempfile.mkdtemp(prefix="ki-", dir="/tmp"), "d.sock")
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "c"), "KILN_RUNTIME_DIR": str(tmp_path / "run")}
    proc = subprocess.Popen([sys.executable, "-m", "kiln.daemon", "daemon", "start", "--foreground", "--socket", path,
                             "--idle-exit", "1", *FAKE_ARGS], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    assert "event=idle_exit" in proc.stderr.read()


def test_a_daemon_on_its_own_socket_keeps_its_own_pid_file(tmp_path):
    path = os.path.join(tempfile.mkdtemp(prefix="ko-", dir="/tmp"), "d.sock")
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "c"), "KILN_RUNTIME_DIR": str(tmp_path / "run")}
    kiln("daemon", "start", "--socket", path, *FAKE_ARGS, env=env)
    assert Client(f"unix:{path}").healthy() and os.path.exists(path + ".pid")
    assert not (tmp_path / "run" / "daemon.pid").exists()  # the node daemon's is not touched
    assert "no kiln daemon is running" in kiln("daemon", "stop", env=env).stdout  # no node daemon to stop
    assert "stopped" in kiln("daemon", "stop", "--socket", path, env=env).stdout
    assert not os.path.exists(path + ".pid")
