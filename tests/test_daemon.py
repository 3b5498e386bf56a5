"""The compile daemon with real servers, sockets and worker processes (spawned), running the
fake compile function `kiln.daemon.fake:compile` in place of codegen."""
import logging
import os
import stat
import tempfile
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kiln.cache import Cache
from kiln.daemon import create_server
from kiln.ir import parse_function
from kiln.proto import compiler_pb2 as pb
from kiln.proto import compiler_pb2_grpc, function_to_proto
from kiln.proto.messages import metadata_from_proto, options_to_proto

FAKE = "kiln.daemon.fake:compile"
COMPILE_TIMEOUT = 3.0


def kernel_ir(name: str, scale: int = 2):
    return parse_function(f'''
kernel @{name}(%x: ptr<fp32> {{divisibility = 16}}) {{
  %r = arange {{end = 64, start = 0}} : <64xint32>
  %xs = splat %x : <64xptr<fp32>>
  %xp = addptr %xs, %r : <64xptr<fp32>>
  %v = load %xp : <64xfp32>
  %s = constant {{value = {scale}.0}} : <64xfp32>
  %w = mul %v, %s : <64xfp32>
  store %xp, %w
  return
}}
''')


def request(name: str, target="sm_90a", dumps=False, **options):
    return pb.CompileRequest(ir=function_to_proto(kernel_ir(name)), target=target,
                             options=options_to_proto({"num_warps": 4, **options}), include_ir_dumps=dumps)


def channel(address):
    return grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", -1)])


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("daemon-cache"), size_limit=1 << 30)
    server, port = create_server("127.0.0.1:0", FAKE, workers=2, cache=cache,
                                 compile_timeout=COMPILE_TIMEOUT, max_request_bytes=256 << 10)
    server.start()
    assert server.pool.wait_ready(60)
    yield server, f"127.0.0.1:{port}"
    server.stop(1)
    cache.close()


@pytest.fixture
def stub(daemon):
    with channel(daemon[1]) as ch:
        yield compiler_pb2_grpc.CompilerStub(ch)


def stats(stub):
    return stub.Stats(pb.StatsRequest(), timeout=10)


def test_compile_then_hit_then_lookup(stub):
    first = stub.Compile(request("first", dumps=True), timeout=30)
    assert first.cache_status == pb.CACHE_MISS and first.cubin.startswith(b"\x7fELF")
    assert "first" in first.ptx and "kernel @first" in first.kir and first.llir
    meta = metadata_from_proto(first.metadata)
    assert meta["name"] == "first" and meta["target"] == "sm_90a" and meta["n_regs"] == 32
    assert len(first.key) == 64 and first.compile_ms > 0
    again = stub.Compile(request("first"), timeout=30)
    assert again.cache_status == pb.CACHE_HIT and again.cubin == first.cubin and again.key == first.key
    assert again.kir == "" and again.compile_ms == 0
    found = stub.Lookup(pb.LookupRequest(key=first.key), timeout=10)
    assert found.found and found.result.cubin == first.cubin and found.result.ptx == first.ptx
    assert not stub.Lookup(pb.LookupRequest(key="0" * 64), timeout=10).found
    other_target = stub.Compile(request("first", target="sm_80"), timeout=30)
    assert other_target.cache_status == pb.CACHE_MISS and other_target.key != first.key


def _client_process(address: str, name: str, start_at: float):
    """One rank of a job: wait for the common start time, then ask for the kernel."""
    with channel(address) as ch:
        stub = compiler_pb2_grpc.CompilerStub(ch)
        stub.Stats(pb.StatsRequest(), timeout=30)  # connected before the race starts
        time.sleep(max(0.0, start_at - time.time()))
        reply = stub.Compile(request(name, fake_sleep_s=1.0), timeout=60)
        return reply.cache_status, reply.cubin


def test_eight_processes_cold_start_one_kernel_compile_once(stub, daemon):
    import multiprocessing
    before = stats(stub)
    with multiprocessing.get_context("spawn").Pool(8) as ranks:
        start_at = time.time() + 3.0  # spawn and imports take a while on two cores
        results = ranks.starmap(_client_process, [(daemon[1], "merged", start_at)] * 8)
    statuses = sorted(pb.CacheStatus.Name(status) for status, _ in results)
    assert statuses.count("CACHE_MISS") == 1, statuses
    assert len({cubin for _, cubin in results}) == 1
    after = stats(stub)
    assert after.misses - before.misses == 1
    assert after.merged - before.merged + after.hits - before.hits == 7


def test_distinct_kernels_compile_in_parallel(stub, daemon):
    results = {}

    def client(name):
        with channel(daemon[1]) as ch:
            results[name] = compiler_pb2_grpc.CompilerStub(ch).Compile(request(name, fake_sleep_s=1.0), timeout=30)
    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in ("par_a", "par_b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start < 1.9  # two 1 s compiles side by side
    pids = {metadata_from_proto(r.metadata)["worker_pid"] for r in results.values()}
    assert len(pids) == 2


def test_worker_crash_is_an_error_and_the_worker_is_replaced(stub):
    restarts = stats(stub).worker_restarts
    for how in ("abort", "exit"):
        with pytest.raises(grpc.RpcError) as e:
            stub.Compile(request("crash_" + how, fake_crash=how), timeout=30)
        assert e.value.code() == grpc.StatusCode.INTERNAL and "died" in e.value.details()
    assert stats(stub).worker_restarts == restarts + 2
    assert stub.Compile(request("after_crash"), timeout=30).cache_status == pb.CACHE_MISS


def test_hung_compile_is_stopped_and_replaced(stub):
    with pytest.raises(grpc.RpcError) as e:
        stub.Compile(request("hang", fake_sleep_s=60), timeout=30)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "replaced" in e.value.details()
    assert stub.Compile(request("after_hang"), timeout=30).cubin


def test_client_deadline(stub, daemon):
    with pytest.raises(grpc.RpcError) as e:
        stub.Compile(request("slow", fake_sleep_s=1.5), timeout=0.3)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # the server's handler leaves the flight at the same deadline, on its own thread: asked again before
    # it ran (a loaded machine), the request would join the compile still in flight (CACHE_MERGED)
    flights, until = daemon[0].service.flights, time.monotonic() + 10
    while len(flights) and time.monotonic() < until:
        time.sleep(0.01)
    # nobody waited for the compile any more: it was abandoned, and asking again compiles
    assert stub.Compile(request("slow", fake_sleep_s=1.5), timeout=30).cache_status == pb.CACHE_MISS


def test_compile_error_is_reported_and_not_cached(stub):
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as e:
            stub.Compile(request("fails", fake_error="no lowering for op 'frob'"), timeout=30)
        assert e.value.code() == grpc.StatusCode.INTERNAL and "no lowering for op 'frob'" in e.value.details()


def _malformed():
    unknown_version = request("bad")
    unknown_version.ir.ir_version = 99
    unknown_op = request("bad")
    unknown_op.ir.body[0].name = "frobnicate"
    bad_value = request("bad")
    bad_value.ir.body[1].operands[0] = 1000
    ill_typed = request("bad")
    ill_typed.ir.body[0].result_types[0].block.shape[0] = 32  # arange 0..64 of 32 elements
    bad_option = request("bad")
    bad_option.options.extra.add(name="x")  # an attribute with no value
    return {"unknown version": (unknown_version, "ir_version 99"), "unknown op": (unknown_op, "frobnicate"),
            "bad value": (bad_value, "%1000"), "ill typed": (ill_typed, "arange"),
            "no ir": (pb.CompileRequest(target="sm_90a"), "no IR"),
            "bad target": (request("bad", target="gfx90a"), "gfx90a"),
            "old target": (request("bad", target="sm_70"), "sm_70"),
            "bad option": (bad_option, "no value")}


@pytest.mark.parametrize("case", sorted(_malformed()))
def test_malformed_requests_are_invalid_argument(stub, case):
    req, words = _malformed()[case]
    with pytest.raises(grpc.RpcError) as e:
        stub.Compile(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in e.value.details()


def test_oversized_request_is_resource_exhausted(stub):
    req = request("huge")
    req.ir.attrs.add(name="padding").value.string_value = "x" * (300 << 10)
    with pytest.raises(grpc.RpcError) as e:
        stub.Compile(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stub.Compile(request("after_huge"), timeout=30).cubin  # still serving


def test_batch_streams_every_item(stub):
    reqs = [request("batch_a"), request("batch_b"), request("batch_a"), request("bad", target="sm_1"),
            request("batch_c", fake_error="boom")]
    items = list(stub.CompileBatch(pb.CompileBatchRequest(requests=reqs), timeout=30))
    by_index = {item.index: item for item in items}
    assert sorted(by_index) == [0, 1, 2, 3, 4]
    assert by_index[0].result.cubin == by_index[2].result.cubin
    assert by_index[3].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "boom" in by_index[4].error.message
    statuses = sorted(pb.CacheStatus.Name(by_index[i].result.cache_status) for i in (0, 2))
    assert statuses[1] == "CACHE_MISS" and statuses[0] in ("CACHE_HIT", "CACHE_MERGED")  # compiled once


def test_corrupt_blob_is_recompiled(stub, daemon):
    first = stub.Compile(request("corrupt"), timeout=30)
    cache = daemon[0].service.cache
    from kiln.cache import digest
    cache._dc.set("blob/" + digest(first.cubin), b"garbage")
    again = stub.Compile(request("corrupt"), timeout=30)
    assert again.cache_status == pb.CACHE_MISS and again.cubin == first.cubin


def test_stats_and_health_and_reflection(stub, daemon):
    s = stats(stub)
    assert s.workers == 2 and s.requests > 0 and s.compile_latency.max_ms > 0
    assert s.cache.entries > 0
    assert set(s.compiler_identity) == {"kiln", "codegen", "llvm", "nvjitlink", "ptxas", "libdevice"}
    with channel(daemon[1]) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "kiln.v1.Compiler"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
        reflect = reflection_pb2_grpc.ServerReflectionStub(ch)
        [reply] = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                               timeout=10)
        names = {s.name for s in reply.list_services_response.service}
        assert {"kiln.v1.Compiler", "grpc.health.v1.Health"} <= names


def test_unix_socket_is_private_and_shutdown_drains(tmp_path):
    path = os.path.join(tempfile.mkdtemp(prefix="kiln-", dir="/tmp"), "d.sock")
    server, port = create_server(f"unix:{path}", FAKE, workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    try:
        assert port == 0 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with channel(f"unix:{path}") as ch:
            future = compiler_pb2_grpc.CompilerStub(ch).Compile.future(request("drain", fake_sleep_s=0.5), timeout=30)
            time.sleep(0.2)
            server.stop(10)  # waits for the compile in flight
            assert future.result().cubin
    finally:
        server.stop(0)


def test_compile_function_that_cannot_load(tmp_path):
    server, port = create_server("127.0.0.1:0", "kiln.no_such_module:compile", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    try:
        with channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                compiler_pb2_grpc.CompilerStub(ch).Compile(request("unloadable"), timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "kiln.no_such_module" in e.value.details()
    finally:
        server.stop(0)


def test_real_codegen_through_the_daemon(tmp_path, caplog):
    pytest.importorskip("llvmlite")
    try:
        from kiln.codegen import compile as _  # noqa: F401
    except ImportError as e:
        pytest.skip(f"kiln.codegen is not importable: {e}")
    caplog.set_level(logging.INFO, logger="kiln.daemon")
    server, port = create_server("127.0.0.1:0", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    try:
        with channel(f"127.0.0.1:{port}") as ch:
            stub = compiler_pb2_grpc.CompilerStub(ch)
            req = request("real")
            reply = stub.Compile(req, timeout=120)
            assert ".entry real" in reply.ptx and reply.cubin and reply.cache_status == pb.CACHE_MISS
            meta = metadata_from_proto(reply.metadata)
            assert meta["name"] == "real" and meta["target"] == "sm_90a" and meta["num_warps"] == 4
            assert isinstance(meta["args"], list)  # nested metadata arrives exactly
            assert stub.Compile(req, timeout=30).cache_status == pb.CACHE_HIT
    finally:
        server.stop(0)
    # the log says where the compile's time went: the worker's CPU and each stage of codegen
    compiled = [r.getMessage() for r in caplog.records if "event=compiled" in r.getMessage()]
    assert len(compiled) == 1 and "kernel=real" in compiled[0] and "cpu_ms=" in compiled[0]
    stages = dict(part.split(":") for part in compiled[0].split("stages=")[1].split(","))
    assert list(stages) == ["decode", "lower", "llvm", "ptx", "link"]
    assert all(float(ms) >= 0 for ms in stages.values())


def test_identical_requests_are_decoded_once(daemon):
    service = daemon[0].service
    first, again = service._decode(request("memo")), service._decode(request("memo"))
    assert first is again and first.key == service._decode(request("memo", dumps=True)).key
    assert service._decode(request("memo", target="sm_80")).key != first.key


def test_prometheus_metrics(stub, daemon):
    import urllib.request

    from kiln.daemon.metrics import serve_metrics
    stub.Compile(request("metered"), timeout=30)
    httpd = serve_metrics(daemon[0].service, "127.0.0.1", 0)
    try:
        url = "http://127.0.0.1:%d/metrics" % httpd.server_address[1]
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        httpd.shutdown()
    assert "# TYPE kiln_daemon_requests_total counter" in text and "\nkiln_daemon_requests_total " in text
    assert 'kiln_compile_seconds_bucket{le="+Inf"}' in text and "\nkiln_daemon_cancelled_total " in text
    assert 'kiln_build_info{version="' in text
    assert "kiln_daemon_workers 2.0" in text
