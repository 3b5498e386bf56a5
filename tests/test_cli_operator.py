"""The `kiln` command as an operator expects it: user mistakes are one-line errors, one socket
address in every shell, --version, --json, LSB exit codes, ccache-style stats, health without
the token, Prometheus histograms and a doctor that names fixes. Each command runs as a process
of its own against real cache directories and real daemons (the fake compile function)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

FAKE_ARGS = ["--workers", "1", "--compile-fn", "kiln.daemon.fake:compile"]
UNSET = ("KILN_DAEMON", "KILN_DAEMON_TOKEN", "KILN_DAEMON_TLS_CA", "KILN_RUNTIME_DIR", "XDG_RUNTIME_DIR",
         "KILN_REMOTE_CACHE", "KILN_REMOTE_CACHE_KEY", "KILN_REMOTE_CACHE_KEY_FILE", "KILN_DROPIN", "KILN_SHARE_GRAPHS")


def kiln(*args, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "kiln.daemon", *args], capture_output=True, text=True, timeout=120,
                          env=env, **kwargs)


@pytest.fixture
def node():
    """The environment of a node of its own: a cache directory short enough for the socket
    beneath it, no KILN_DAEMON (the node daemon), no token, no runtime directory named, no
    shared tier, no drop-in."""
    folder = tempfile.mkdtemp(prefix="ko-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env["KILN_CACHE_DIR"] = os.path.join(folder, "c")
    yield env
    kiln("daemon", "stop", env=env)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_shell_with_xdg_runtime_dir_finds_the_daemon_a_batch_job_started(node):
    """An ssh shell has XDG_RUNTIME_DIR, a batch job may not: both use the cache directory's run/."""
    started = kiln("daemon", "start", *FAKE_ARGS, env=node)
    assert started.returncode == 0, started.stderr
    shell = {**node, "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="kx-", dir="/tmp")}
    status = kiln("daemon", "status", env=shell)
    assert status.returncode == 0 and f"unix:{node['KILN_CACHE_DIR']}/run/daemon.sock" in status.stdout, status.stderr
    assert "stopped" in kiln("daemon", "stop", env=shell).stdout
    moved = {**node, "KILN_RUNTIME_DIR": os.path.join(shell["XDG_RUNTIME_DIR"], "k")}  # the explicit override
    started = kiln("daemon", "start", *FAKE_ARGS, env=moved).stdout
    assert started.strip().endswith(f"{moved['KILN_RUNTIME_DIR']}/daemon.sock")
    assert kiln("daemon", "stop", env=moved).returncode == 0
    shutil.rmtree(shell["XDG_RUNTIME_DIR"])


def one_line_error(out, prog="kiln daemon start"):
    """Whether `out` failed as argparse fails: exit 2, no traceback, the last line `PROG: error: ...`."""
    last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    return out.returncode == 2 and "Traceback" not in out.stderr and last.startswith(f"{prog}: error: ")


def test_status_and_stop_before_any_daemon_ran(node):
    """Was a FileNotFoundError traceback on the runtime directory that no daemon had made yet."""
    assert not os.path.exists(node["KILN_CACHE_DIR"])
    address = f"unix:{node['KILN_CACHE_DIR']}/run/daemon.sock"
    status = kiln("daemon", "status", env=node)
    assert status.returncode == 3 and "Traceback" not in status.stderr  # LSB: not running
    assert status.stderr.strip() == f"no kiln daemon answers at {address}: not running"
    down = kiln("daemon", "status", "--json", env=node)
    assert down.returncode == 3
    assert json.loads(down.stdout) == {"running": False, "address": address, "status": 3, "error": "not running"}
    stop = kiln("daemon", "stop", env=node)
    assert stop.returncode == 0 and stop.stdout.strip() == "no kiln daemon is running"  # LSB: stopping a stopped one


@pytest.mark.parametrize("args,says", [
    (["--metrics", "notaport"], "argument --metrics: 'notaport': 'notaport' is not a port"),
    (["--listen", "host:notaport"], "argument --listen: 'host:notaport': 'notaport' is not a port"),
    (["--listen", "7411"], "argument --listen: '7411': give HOST:PORT"),
    (["--workers", "-2"], "argument --workers: '-2' is not a whole number of 1 or more"),
    (["--compile-timeout", "0"], "argument --compile-timeout: 0 is not a number above 0"),
    (["--listen", "127.0.0.1:0", "--tls-cert", "cert.pem"], "--tls-cert and --tls-key go together"),
    (["--listen", "127.0.0.1:0", "--tls-cert", "missing.pem", "--tls-key", "missing.pem"],
     "cannot read the TLS key missing.pem"),
])
def test_bad_start_options_are_one_line_errors_and_start_nothing(node, args, says):
    out = kiln("daemon", "start", *args, *FAKE_ARGS, env=node)
    assert one_line_error(out) and says in out.stderr, out.stderr
    assert not os.path.exists(os.path.join(node["KILN_CACHE_DIR"], "run", "daemon.log"))  # nothing was spawned


def test_version_python_m_kiln_and_bare_kiln(node):
    import kiln as kiln_package
    as_module = [sys.executable, "-m", "kiln"]
    version = subprocess.run([*as_module, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"kiln {kiln_package.__version__}"
    stats = subprocess.run([*as_module, "cache", "stats", "--json"], capture_output=True, text=True, timeout=60,
                           env=node)
    assert stats.returncode == 0 and json.loads(stats.stdout)["path"] == node["KILN_CACHE_DIR"]
    bare = subprocess.run(as_module, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and "daemon" in bare.stderr and "doctor" in bare.stderr  # the help, on stderr
    assert bare.stderr.strip().splitlines()[-1].startswith("kiln: error: name a command, e.g. `kiln daemon status`")
    assert "arguments are required" not in bare.stderr
    group = kiln("cache", env=node)
    assert group.returncode == 2 and "kiln cache: error: name a command" in group.stderr and "export" in group.stderr


def test_start_on_port_0_prints_the_port_it_serves(node, monkeypatch):
    from kiln.daemon.client import Client
    monkeypatch.setenv("KILN_DAEMON_PLAINTEXT_TOKEN", "1")  # its token over plaintext loopback: the user's say-so
    out = kiln("daemon", "start", "--listen", "127.0.0.1:0", *FAKE_ARGS, env=node)
    assert out.returncode == 0, out.stderr
    head, _, rest = out.stdout.partition("kiln daemon serving at 127.0.0.1:")
    port = rest.split()[0]
    assert head == "" and port.isdigit() and int(port) > 0, out.stdout
    address = f"127.0.0.1:{port}"
    token = open(os.path.join(node["KILN_CACHE_DIR"], "run", "daemon.token")).read()
    with Client(address, token=token) as client:
        assert client.stats(timeout=30).workers == 1
    taken = kiln("daemon", "start", "--listen", address, *FAKE_ARGS, env=node)  # the port is the first one's
    assert taken.returncode == 1 and "the daemon did not start: event=start_failed" in taken.stderr, taken.stderr
    assert open(os.path.join(node["KILN_CACHE_DIR"], "run", "daemon.token")).read() == token  # the server's, kept
    assert "stopped" in kiln("daemon", "stop", "--address", address, env=node).stdout
    assert not os.path.exists(os.path.join(node["KILN_CACHE_DIR"], "run", f"daemon-{port}.pid"))


def test_status_and_stop_exit_codes_are_lsbs(node):
    """status: 0 running, 3 stopped, 1 dead with its pid file left; stop: 0, whether it ran or not."""
    assert kiln("daemon", "start", *FAKE_ARGS, env=node).returncode == 0
    up = kiln("daemon", "status", "--json", env=node)
    assert up.returncode == 0 and json.loads(up.stdout)["running"] is True and json.loads(up.stdout)["workers"] == 1
    assert kiln("daemon", "stop", env=node).returncode == 0
    assert kiln("daemon", "stop", env=node).returncode == 0
    assert kiln("daemon", "status", env=node).returncode == 3
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has: a daemon killed without its cleanup
    pid_file = os.path.join(node["KILN_CACHE_DIR"], "run", "daemon.pid")
    with open(pid_file, "w") as f:
        json.dump({"pid": gone.pid, "address": "unix:" + os.path.join(node["KILN_CACHE_DIR"], "run", "daemon.sock")}, f)
    dead = kiln("daemon", "status", "--json", env=node)
    assert dead.returncode == 1 and json.loads(dead.stdout)["running"] is False
    stale = kiln("daemon", "stop", env=node)
    assert stale.returncode == 0 and "removed a stale pid file" in stale.stdout and not os.path.exists(pid_file)


@pytest.fixture
def unix_daemon(tmp_path):
    """The address of a daemon (in this process) on a Unix socket of its own."""
    from kiln.cache import Cache
    from kiln.daemon import create_server
    path = os.path.join(tempfile.mkdtemp(prefix="kp-", dir="/tmp"), "d.sock")
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "dc"))
    server.start()
    yield f"unix:{path}"
    server.stop(0)


IR = "kernel @{name}(%x: ptr<int32>) {{\n  %v = load %x : int32\n  store %x, %v\n  return\n}}\n"


def test_json_on_prewarm_and_cache_clear_export_import(node, unix_daemon, tmp_path):
    manifest = tmp_path / "run.jsonl"
    manifest.write_text("".join(json.dumps({"name": f"k{i}", "target": "sm_90a", "options": {},
                                            "ir": IR.format(name=f"k{i}")}) + "\n" for i in range(2)))
    first = kiln("prewarm", "--from-manifest", str(manifest), "--address", unix_daemon, "--json", env=node)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"kernels": 2, "compiled": 2, "cached": 0, "merged": 0, "failed": 0,
                                        "errors": [], "skipped": [], "shared": None,
                                        "artifacts": None}
    again = kiln("prewarm", "--from-manifest", str(manifest), "--address", unix_daemon, env=node)
    assert again.stdout.startswith("prewarmed 2 kernels: cached 2"), again.stdout  # was "hit 2"
    daemon_cache = str(tmp_path / "dc")
    archive = str(tmp_path / "k.zip")
    exported = kiln("cache", "export", archive, "--dir", daemon_cache, "--json", env=node)
    assert json.loads(exported.stdout) == {"exported": 2, "file": archive}
    imported = kiln("cache", "import", archive, "--dir", str(tmp_path / "other"), "--json", env=node)
    assert imported.returncode == 0 and json.loads(imported.stdout) == {"imported": 2, "file": archive, "refused": []}
    cleared = kiln("cache", "clear", "--dir", str(tmp_path / "other"), "--json", env=node)
    assert json.loads(cleared.stdout)["removed"] > 2  # two entries and their files
    emptied = kiln("cache", "stats", "--json", "--dir", str(tmp_path / "other"), env=node)
    assert json.loads(emptied.stdout)["entries"] == 0


def test_stats_lead_with_the_hit_rate_and_zero_on_request(node, tmp_path):
    from kiln.cache import Cache
    path = str(tmp_path / "c")
    with Cache(path) as cache:
        cache.put_result("0" * 64, {"cubin": b"\x7fELF"}, {"name": "k", "target": "sm_90a"})
    reader = (f"from kiln.cache import Cache\nc = Cache({path!r})\n"
              "for key in ['0' * 64] * 3 + ['1' * 64]:\n    c.get_result(key)\n")
    subprocess.run([sys.executable, "-c", reader], check=True, timeout=120)
    text = kiln("cache", "stats", "--dir", path, env=node).stdout
    assert text.splitlines()[0].startswith("node cache: hit rate 75.0% (3 hits, 1 miss)"), text
    zeroed = kiln("cache", "stats", "--zero", "--json", "--dir", path, env=node)
    doc = json.loads(zeroed.stdout)
    assert (doc["hits"], doc["misses"], doc["hit_rate"], doc["zeroed"]) == (3, 1, 0.75, True)  # what was zeroed
    after = json.loads(kiln("cache", "stats", "--json", "--dir", path, env=node).stdout)
    assert (after["hits"], after["misses"], after["hit_rate"], after["entries"]) == (0, 0, None, 1)
    assert "hit rate - (0 hits, 0 misses)" in kiln("cache", "stats", "--dir", path, env=node).stdout


def test_ls_rows_tell_one_kernels_specializations_apart(node, tmp_path):
    from kiln.cache import Cache
    path = str(tmp_path / "c")
    with Cache(path) as cache:
        for i, (arg_type, warps) in enumerate((("ptr<fp16>", 4), ("ptr<fp32>", 4), ("ptr<fp32>", 8))):
            cache.put_result(f"{i:064x}", {"cubin": b"\x7fELF" * 100},
                             {"name": "add", "target": "sm_90a", "options": {"num_warps": warps},
                              "args": [{"name": "x", "type": arg_type}, {"name": "n", "type": "int32"}]},
                             created=1000.0 + i)
    rows = [line.split("  ")[2:] for line in kiln("cache", "ls", "--dir", path, env=node).stdout.splitlines()[1:]]
    assert len({tuple(r) for r in rows}) == 3, rows  # were three alike but for the key
    listed = kiln("cache", "ls", "--dir", path, env=node).stdout.splitlines()
    assert "add(*fp16, int32)" in listed[1] and "warps=4" in listed[1] and "warps=8" in listed[3]
    doc = json.loads(kiln("cache", "ls", "--json", "--dir", path, env=node).stdout)
    assert doc[2]["signature"] == ["*fp32", "int32"] and doc[2]["options"] == {"num_warps": 8}


def test_the_health_check_needs_no_token_and_nothing_else_goes_without(tmp_path):
    """Kubernetes' gRPC probes present no token; Stats, Compile and reflection still want it."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    from kiln.cache import Cache
    from kiln.daemon import create_server
    from kiln.proto import compiler_pb2 as pb
    from kiln.proto import compiler_pb2_grpc
    server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"),
                                 token="s3cret")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "kiln.v1.Compiler"):
                reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            refused = []
            for call in (lambda: compiler_pb2_grpc.CompilerStub(channel).Stats(pb.StatsRequest(), timeout=30),
                         lambda: list(reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                             iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=30))):
                with pytest.raises(grpc.RpcError) as e:
                    call()
                refused.append(e.value.code())
            assert refused == [grpc.StatusCode.UNAUTHENTICATED] * 2
    finally:
        server.stop(0)


def test_metrics_have_a_compile_histogram_in_seconds_and_build_info(tmp_path):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    import kiln as kiln_package
    from kiln.cache import Cache
    from kiln.daemon import create_server
    from kiln.daemon.client import Client
    from kiln.daemon.metrics import COMPILE_BUCKETS_S, serve_metrics
    from kiln.ir import parse_function
    path = os.path.join(tempfile.mkdtemp(prefix="km-", dir="/tmp"), "d.sock")
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
    httpd = serve_metrics(server.service, "127.0.0.1", 0)
    server.start()
    try:
        with Client(f"unix:{path}") as client:
            for name in ("h1", "h2"):
                client.compile(parse_function(IR.format(name=name)), "sm_90a", {}, timeout=60)
            client.compile(parse_function(IR.format(name="h1")), "sm_90a", {}, timeout=60)  # a hit: no compile
        slowest_ms = server.service.Stats(None, None).compile_latency.max_ms
        with urllib.request.urlopen(f"http://127.0.0.1:{httpd.server_address[1]}/metrics", timeout=30) as reply:
            families = {f.name: f for f in text_string_to_metric_families(reply.read().decode())}
    finally:
        httpd.shutdown()
        server.stop(0)
    histogram = families["kiln_compile_seconds"]
    assert histogram.type == "histogram"
    samples = {(s.name, s.labels.get("le")): s.value for s in histogram.samples}
    assert samples[("kiln_compile_seconds_count", None)] == 2 and samples[("kiln_compile_seconds_bucket", "+Inf")] == 2
    assert {float(le) for name, le in samples if le not in (None, "+Inf")} == set(COMPILE_BUCKETS_S)
    total_ms = samples[("kiln_compile_seconds_sum", None)] * 1e3  # seconds: the status' milliseconds / 1000
    assert slowest_ms * (1 - 1e-9) <= total_ms <= 2 * slowest_ms * (1 + 1e-9)
    [info] = families["kiln_build_info"].samples
    assert info.labels == {"version": kiln_package.__version__} and info.value == 1
    assert "kiln_daemon_compile_ms" not in families


def doctor(env):
    out = subprocess.run([sys.executable, "-m", "kiln", "doctor", "--json"], capture_output=True, text=True,
                         timeout=300, env=env)
    doc = json.loads(out.stdout)
    return out.returncode, doc, {c["name"]: c for c in doc["checks"]}


def test_doctor_passes_on_this_machine_or_names_each_fix(node):
    code, doc, checks = doctor(node)
    assert list(checks) == ["driver", "nvJitLink", "libdevice", "llvmlite", "cache", "daemon", "shared tier",
                            "sharing", "drop-in"]
    broken = [c for c in doc["checks"] if c["status"] == "fail"]
    assert code == (1 if broken else 0) and doc["ok"] is not broken
    assert all(c["fix"] for c in doc["checks"] if c["status"] != "ok"), doc["checks"]
    assert not broken, broken  # this machine: a GPU host, or a CPU host that compiles only
    driver = checks["driver"]  # no driver: a warning, a compile-only node
    assert driver["status"] == "ok" or driver["detail"].startswith(("no driver: compile-only", "CUDA ")), driver
    assert checks["daemon"]["status"] == "warn" and "not running" in checks["daemon"]["detail"]
    assert checks["sharing"]["detail"] == ("KILN_DROPIN off, KILN_SHARE_GRAPHS on (with the drop-in only), KILN_BACKWARD_AHEAD on, "
                                           "KILN_FOLLOWERS_TRACE on, KILN_AUTOTUNE_ONCE on, KILN_DEFER_FULL_GC on, KILN_BRIEF_GUARD_TEXT on, "
                                           "KILN_SHARE_TORCH_KEY on, KILN_FOREACH_ARGS 64, "
                                           "KILN_REMOTE_CACHE off, "
                                           "KILN_DAEMON the node daemon")
    text = subprocess.run([sys.executable, "-m", "kiln", "doctor"], capture_output=True, text=True, timeout=300,
                          env=node).stdout
    assert "\nwarn  daemon: none answers at unix:" in text and "\n      fix: kiln daemon start" in text
    assert text.rstrip().splitlines()[-1].startswith("0 broken")


def test_doctor_sees_the_daemon_and_its_version(node):
    import kiln as kiln_package
    assert kiln("daemon", "start", *FAKE_ARGS, env=node).returncode == 0
    _, _, checks = doctor(node)
    assert checks["daemon"]["status"] == "ok"
    assert f"kiln {kiln_package.__version__}, 1 workers" in checks["daemon"]["detail"]


def test_doctor_fails_with_a_fix_for_what_is_broken(node, tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # anyone could plant kernels here
    with socket_free_port() as port:
        env = {**node, "KILN_CACHE_DIR": str(open_dir), "KILN_DAEMON": "unix:/nonexistent/kiln.sock",
               "KILN_REMOTE_CACHE": f"redis://127.0.0.1:{port}/0", "KILN_REMOTE_CACHE_KEY": "k" * 32,
               "KILN_DROPIN": "perhaps"}
        code, doc, checks = doctor(env)
    assert code == 1 and doc["ok"] is False
    for name, says, fix in (("cache", "refusing", "chmod go-w"), ("daemon", "does not answer", "unset KILN_DAEMON"),
                            ("shared tier", "not reachable", "start Redis"), ("sharing", "'perhaps'", "KILN_DROPIN=1")):
        assert checks[name]["status"] == "fail" and says in checks[name]["detail"] and fix in checks[name]["fix"], \
            checks[name]


def test_doctor_reaches_redis_and_names_the_sharing_paths(node):
    redis_server = pytest.importorskip("redis_server")
    if redis_server.find() is None:
        pytest.skip(redis_server.MISSING)
    with redis_server.RedisServer() as srv:
        env = {**node, "KILN_REMOTE_CACHE": srv.url, "KILN_REMOTE_CACHE_KEY": "k" * 32, "KILN_DROPIN": "1",
               "KILN_SHARE_GRAPHS": "0", "KILN_DAEMON": "off"}
        code, _, checks = doctor(env)
    assert checks["shared tier"]["status"] == "ok" and "Redis answers" in checks["shared tier"]["detail"]
    assert checks["sharing"]["detail"] == ("KILN_DROPIN on, KILN_SHARE_GRAPHS off, KILN_BACKWARD_AHEAD off, "
                                           "KILN_FOLLOWERS_TRACE off, KILN_AUTOTUNE_ONCE off, KILN_DEFER_FULL_GC off, "
                                           "KILN_BRIEF_GUARD_TEXT off, KILN_SHARE_TORCH_KEY off, KILN_FOREACH_ARGS PyTorch's own, "
                                           "KILN_REMOTE_CACHE on, "
                                           "KILN_DAEMON off")
    assert checks["daemon"]["status"] == "ok" and "KILN_DAEMON=off" in checks["daemon"]["detail"]
    from kiln.dropin.doctor import installed_hook
    if installed_hook() is not None:  # else the drop-in check fails, saying to reinstall kiln
        assert checks["drop-in"]["status"] == "ok" and checks["drop-in"]["detail"] == \
            "import triton -> kiln (KILN_DROPIN on)"
        assert code == 0


class socket_free_port:
    """A loopback port that nothing listens on, while the block runs (held bound, not listening)."""

    def __enter__(self):
        import socket
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc):
        self.sock.close()


def test_doctor_warns_when_the_jobs_pytorch_does_not_take_the_backward_ahead(monkeypatch):
    from kiln.dropin import doctor
    env = {"KILN_DROPIN": "1", "PATH": os.environ.get("PATH", "")}
    monkeypatch.setattr(doctor, "_backward_ahead_probe", lambda environ: "this PyTorch's AOTAutograd differs (x)")
    check = doctor.check_sharing(env)
    assert check["status"] == doctor.WARN and "the leader compiles each backward itself" in check["detail"]
    assert "KILN_BACKWARD_AHEAD on, but this PyTorch's AOTAutograd differs (x)" in check["detail"]
    monkeypatch.setattr(doctor, "_backward_ahead_probe", lambda environ: pytest.fail("probed with the hook off"))
    assert doctor.check_sharing({**env, "KILN_BACKWARD_AHEAD": "0"})["status"] == doctor.OK


def test_doctor_says_whether_waiting_ranks_trace_graphs_themselves(monkeypatch):
    from kiln.dropin import doctor
    monkeypatch.setattr(doctor, "_backward_ahead_probe", lambda environ: "on")
    env = {"KILN_DROPIN": "1", "KILN_DAEMON": "unix:/run/kiln.sock", "PATH": os.environ.get("PATH", "")}
    assert "KILN_FOLLOWERS_TRACE on" in doctor.check_sharing(env)["detail"]  # the default
    assert "KILN_FOLLOWERS_TRACE off" in doctor.check_sharing({**env, "KILN_FOLLOWERS_TRACE": "0"})["detail"]
    assert "KILN_FOLLOWERS_TRACE off" in doctor.check_sharing({**env, "KILN_BACKWARD_AHEAD": "0"})["detail"]
    assert "KILN_AUTOTUNE_ONCE on" in doctor.check_sharing(env)["detail"]  # the default
    assert "KILN_AUTOTUNE_ONCE off" in doctor.check_sharing({**env, "KILN_AUTOTUNE_ONCE": "0"})["detail"]
