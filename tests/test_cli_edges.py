"""The `kiln` command's rough edges, as a new user meets them: each command runs as a
process of its own against real cache directories, sockets and daemons."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import kiln
from kiln.cache import Cache
from kiln.daemon import create_server, launch
from kiln.daemon.client import Client

REPO = pathlib.Path(kiln.__file__).resolve().parent.parent
FAKE_ARGS = ["--workers", "1", "--compile-fn", "kiln.daemon.fake:compile"]
IR = "kernel @{name}(%x: ptr<int32>) {{\n  %v = load %x : int32\n  store %x, %v\n  return\n}}\n"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """Runtime and cache directories of a node of its own (the socket path kept short)."""
    runtime = tempfile.mkdtemp(prefix="kc-", dir="/tmp")
    env = {"KILN_RUNTIME_DIR": runtime, "KILN_CACHE_DIR": str(tmp_path / "cache")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("KILN_DAEMON", raising=False)
    monkeypatch.delenv("KILN_DAEMON_TOKEN", raising=False)
    yield dict(os.environ)
    for pid_file in pathlib.Path(runtime).glob("daemon*.pid"):
        try:
            os.kill(json.loads(pid_file.read_text())["pid"], 15)
        except (OSError, ValueError):
            pass


@pytest.fixture
def unix_daemon(tmp_path):
    """The address of a daemon (in this process) on a Unix socket of its own."""
    path = os.path.join(tempfile.mkdtemp(prefix="kp-", dir="/tmp"), "d.sock")
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    yield f"unix:{path}"
    server.stop(0)


def manifest_of(tmp_path, n) -> str:
    manifest = tmp_path / "run.jsonl"
    manifest.write_text("".join(json.dumps({"name": f"k{i}", "target": "sm_90a", "options": {},
                                            "ir": IR.format(name=f"k{i}")}) + "\n" for i in range(n)))
    return str(manifest)


def kiln_cmd(*args, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "kiln.daemon", *args], capture_output=True, text=True, timeout=120,
                          env=env, **kwargs)


def fill(path, n, target="sm_90a"):
    with Cache(path) as cache:
        for i in range(n):
            cache.put_result(f"{i:064x}", {"cubin": b"\x7fELF" * 300}, {"name": f"kernel_{i}", "target": target})


def test_ls_has_a_header_and_a_target_column_and_ends_quietly_in_a_closed_pipe(tmp_path):
    fill(tmp_path / "c", 1000)  # ~90 kB of listing: more than a pipe holds
    proc = subprocess.Popen([sys.executable, "-m", "kiln.daemon", "cache", "ls", "--dir", str(tmp_path / "c")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    header, first = proc.stdout.readline().split(), proc.stdout.readline().split()
    proc.stdout.close()  # as `| head -2` does
    assert proc.wait(120) == 0
    assert proc.stderr.read() == ""  # was a BrokenPipeError traceback
    assert header == ["KEY", "CREATED", "KERNEL", "TARGET", "OPTIONS", "CUBIN", "ALL"]
    assert first[0] == "0" * 16 and first[3] == "kernel_0" and first[4] == "sm_90a" and first[5:8] == ["-", "1.2", "KiB"]


def test_prune_speaks_words_and_json_on_request(tmp_path):
    fill(tmp_path / "c", 2)
    out = kiln_cmd("cache", "prune", "--dir", str(tmp_path / "c"))
    assert out.stdout.startswith("dropped 0 kernels whose files were gone and 0 files no kernel used; evicted 0 items")
    assert "GiB" in out.stdout
    assert json.loads(kiln_cmd("cache", "prune", "--json", "--dir", str(tmp_path / "c")).stdout)["evicted"] == 0


def test_stats_count_the_hits_of_every_process_in_binary_units(tmp_path):
    fill(tmp_path / "c", 1)
    reader = textwrap.dedent(f"""
        from kiln.cache import Cache
        cache = Cache({str(tmp_path / "c")!r})
        for key in ["{0:064x}"] * 3 + ["{1:064x}"]:
            cache.get_result(key)
    """)  # and exits without closing the cache
    subprocess.run([sys.executable, "-c", reader], check=True, timeout=120)
    stats = json.loads(kiln_cmd("cache", "stats", "--json", "--dir", str(tmp_path / "c")).stdout)
    assert (stats["hits"], stats["misses"]) == (3, 1)  # was 0 and 0: the command's own reads
    env = {**os.environ, "KILN_CACHE_SIZE": "8G"}
    assert kiln_cmd("cache", "stats", "--dir", str(tmp_path / "c"), env=env).stdout.rstrip().endswith("of 8.0 GiB")


def test_import_and_export_errors_are_one_line(tmp_path):
    (tmp_path / "not.zip").write_text("hello")
    for args in (["import", str(tmp_path / "missing.zip")], ["import", str(tmp_path / "not.zip")],
                 ["export", str(tmp_path / "no" / "such" / "dir.zip")]):
        out = kiln_cmd("cache", *args, "--dir", str(tmp_path / "c"))
        assert out.returncode == 1 and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr


def test_prewarm_of_one_kernel_says_kernel(tmp_path, unix_daemon):
    out = kiln_cmd("prewarm", "--from-manifest", manifest_of(tmp_path, 1), "--address", unix_daemon)
    assert out.stdout.startswith("prewarmed 1 kernel: compiled 1"), out.stdout + out.stderr


def test_status_and_stop_reach_a_daemon_started_with_listen(node, monkeypatch):
    started = kiln_cmd("daemon", "start", "--listen", "127.0.0.1:0", *FAKE_ARGS, env=node, check=True)
    assert "KILN_DAEMON_PLAINTEXT_TOKEN=1" in started.stdout  # it serves plaintext: how its clients may reach it
    deadline = time.monotonic() + 120
    while not launch.other_daemons():
        assert time.monotonic() < deadline, "the daemon never wrote its pid file"
        time.sleep(0.05)
    [(address, pid)] = launch.other_daemons()
    refused = kiln_cmd("daemon", "status", "--address", address, env=node)  # its token, not over plaintext unasked
    assert refused.returncode == 4 and "KILN_DAEMON_PLAINTEXT_TOKEN=1" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    monkeypatch.setenv("KILN_DAEMON_PLAINTEXT_TOKEN", "1")
    node = {**node, "KILN_DAEMON_PLAINTEXT_TOKEN": "1"}
    while not Client(address, token=launch.own_token(address)).healthy(1.0):
        assert time.monotonic() < deadline
    status = kiln_cmd("daemon", "status", "--json", "--address", address, env=node)
    assert json.loads(status.stdout)["workers"] == 1, status.stderr  # the token from the daemon's own file
    wrong = kiln_cmd("daemon", "status", "--address", address, env={**node, "KILN_DAEMON_TOKEN": "wrong"})
    assert "UNAUTHENTICATED" in wrong.stderr and str(launch.token_file()) in wrong.stderr
    plain_stop = kiln_cmd("daemon", "stop", env=node)
    assert plain_stop.returncode == 0 and f"kiln daemon stop --address {address}" in plain_stop.stdout
    assert f"kiln daemon {pid} stopped" in kiln_cmd("daemon", "stop", "--address", address, env=node).stdout
    assert not launch.other_daemons()


def test_a_stale_socket_costs_no_health_check(node, monkeypatch):
    """A crashed daemon's socket made the next start wait 2.5 s on health checks of nobody."""
    sock_path = launch.default_address()[len("unix:"):]
    os.makedirs(os.path.dirname(sock_path), mode=0o700, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(sock_path)
    stale.close()  # the file stays, nobody listens
    events = []
    healthy, spawn = Client.healthy, launch.spawn_daemon
    monkeypatch.setattr(Client, "healthy", lambda self, timeout=2.0: events.append("health") or healthy(self, timeout))
    monkeypatch.setattr(launch, "spawn_daemon", lambda args: events.append("spawn") or spawn(args))
    assert launch.ensure_daemon(FAKE_ARGS, idle_exit=30) == launch.default_address()
    assert events[0] == "spawn" and "health" in events  # nothing asked the stale socket


def test_the_daemon_down_warning_shows_the_users_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import kiln as triton
        import kiln.language as tl

        @triton.jit
        def k(X, N: tl.constexpr):
            tl.store(X + tl.arange(0, N), tl.load(X + tl.arange(0, N)) + 1)

        k.warmup(np.zeros(16, np.float32), N=16, grid=(1,), target="sm_90a")
    """))
    env = {**os.environ, "KILN_INTERPRET": "0", "KILN_DAEMON": f"unix:{tmp_path}/nobody.sock",
           "KILN_CACHE_DIR": str(tmp_path / "c")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith(f"{script}:10: RuntimeWarning: kiln: the compile daemon at unix:"), out.stderr
    assert str(REPO) not in out.stderr and len(out.stderr.splitlines()) == 2


def test_prewarm_on_a_terminal_draws_a_tqdm_bar(tmp_path, unix_daemon):
    import fcntl
    import pty
    import struct
    import termios
    terminal, stderr = pty.openpty()  # stderr a terminal of 100 columns, as a user's
    fcntl.ioctl(stderr, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    out = subprocess.run([sys.executable, "-m", "kiln.daemon", "prewarm", "--from-manifest", manifest_of(tmp_path, 3),
                          "--address", unix_daemon], stdout=subprocess.PIPE, stderr=stderr, timeout=120)
    os.close(stderr)
    drawn = b""
    while True:
        try:
            chunk = os.read(terminal, 1 << 16)
        except OSError:  # EIO: the other end is closed and all is read
            break
        if not chunk:
            break
        drawn += chunk
    os.close(terminal)
    drawn = drawn.decode()
    assert out.returncode == 0 and out.stdout.decode().startswith("prewarmed 3 kernels")
    assert "prewarm: 100%|" in drawn and "| 3/3 [" in drawn, drawn  # tqdm's bar


def test_metrics_are_prometheus_clients_with_the_cancelled_count(tmp_path):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from kiln.daemon.metrics import serve_metrics
    server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    httpd = serve_metrics(server.service, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{httpd.server_address[1]}/metrics", timeout=30) as reply:
            text = reply.read().decode()
    finally:
        httpd.shutdown()
        server.stop(0)
    samples = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples["kiln_daemon_workers"] == 1 and samples["kiln_daemon_cancelled_total"] == 0
    assert samples["kiln_daemon_requests_total"] == 0 and samples["kiln_cache_entries"] == 0
