"""Every bad request gets INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for size) with a short,
one-line message and one log line, and the daemon keeps serving; a request with no
deadline gets the daemon's own. Real servers, sockets and worker processes."""
import logging
import math

import grpc
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server
from kiln.ir import dtype, parse_function
from kiln.proto import compiler_pb2 as pb
from kiln.proto import compiler_pb2_grpc, function_to_proto
from kiln.proto.convert import type_to_proto
from kiln.proto.messages import options_to_proto

IR = "kernel @{name}(%x: ptr<int32>) {{\n  %v = load %x : int32\n  store %x, %v\n  return\n}}\n"


def request(name="k", **options):
    return pb.CompileRequest(ir=function_to_proto(parse_function(IR.format(name=name))), target="sm_90a",
                             options=options_to_proto({"num_warps": 4, **options}))


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("statuses-cache"))
    server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1, cache=cache,
                                 max_request_bytes=256 << 10)
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield compiler_pb2_grpc.CompilerStub(channel)
    server.stop(1)
    cache.close()


def test_a_miss_with_no_deadline_is_compiled(stub):
    reply = stub.Compile(request("no_deadline"))  # no timeout: the daemon's default deadline
    assert reply.cache_status == pb.CACHE_MISS and reply.cubin
    items = list(stub.CompileBatch(pb.CompileBatchRequest(requests=[request("no_deadline_batch")])))
    assert len(items) == 1 and items[0].result.cubin


def _bad_requests():
    nan = request("nan")
    nan.options.extra.add(name="fake_sleep_s").value.float_value = math.nan
    typed = request("typed")
    typed.options.extra.add(name="kind").value.type_value.CopyFrom(type_to_proto(dtype("fp32")))
    long_name = request("long_name")
    long_name.ir.body[0].name = "x" * 20_000
    return {"nan option": (nan, "fake_sleep_s"), "type-valued option": (typed, "kind"),
            "num_warps 0": (request("w0", num_warps=0), "num_warps"),
            "num_warps 3": (request("w3", num_warps=3), "power of two"),
            "maxnreg 1000": (request("r", maxnreg=1000), "maxnreg"),
            "20 kB op name": (long_name, "xxx")}


@pytest.mark.parametrize("case", sorted(_bad_requests()))
def test_bad_requests_are_invalid_argument_with_a_short_message(stub, case, caplog):
    req, words = _bad_requests()[case]
    with caplog.at_level(logging.INFO, logger="kiln.daemon"):
        with pytest.raises(grpc.RpcError) as e:
            stub.Compile(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert words in e.value.details() and len(e.value.details()) <= 200 and "\n" not in e.value.details()
    logged = [r for r in caplog.records if "bad_request" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is None
    [item] = stub.CompileBatch(pb.CompileBatchRequest(requests=[req]), timeout=30)
    assert item.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and len(item.error.message) <= 200
    assert stub.Compile(request("still_serving"), timeout=30).cubin


def test_an_option_codegen_refuses_is_invalid_argument(tmp_path):
    server, port = create_server("127.0.0.1:0", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.RpcError) as e:
                compiler_pb2_grpc.CompilerStub(channel).Compile(request("unknown", frobnicate=1), timeout=120)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "frobnicate" in e.value.details()
    finally:
        server.stop(1)


def test_a_slot_waiting_to_restart_leaves_its_jobs_to_the_live_workers():
    """One worker is down and its restart is not due for a minute: the jobs it takes from
    the queue go back to the live worker instead of failing with UNAVAILABLE."""
    import time

    from kiln.daemon.pool import WorkerPool
    from kiln.proto import canonical_bytes
    pool = WorkerPool("kiln.daemon.fake:compile", 2)
    try:
        assert pool.wait_ready(60)
        down = pool._slots[0]
        down.retry_at, down.start_error = time.monotonic() + 60, "worker did not start (test)"
        down._kill(down.proc)
        down.proc = None  # as a failed restart leaves it
        jobs = [pool.submit(canonical_bytes(parse_function(IR.format(name=f"k{i}"))), "sm_90a", {}) for i in range(6)]
        results = [job.result(timeout=60) for job in jobs]
        assert {r.kernel.metadata["worker_pid"] for r in results} == {pool._slots[1].proc.pid}
    finally:
        pool.close()


def test_decoded_requests_are_kept_up_to_a_byte_budget(tmp_path, monkeypatch):
    """The memo of decoded requests is bounded in bytes, not only in count: 40 large valid
    requests once took the daemon from 60 MB to 1.1 GB."""
    from kiln.daemon import service
    monkeypatch.setattr(service, "_DECODED_BYTES", 1 << 20)
    server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = compiler_pb2_grpc.CompilerStub(channel)
            for i in range(12):
                req = request(f"big{i}")
                req.ir.files.append("x" * (200 << 10))  # a long source path: a valid, large request
                stub.Compile(req, timeout=60)
        assert len(server.service._decoded) <= 5 and server.service._decoded_bytes <= 1 << 20
    finally:
        server.stop(1)


def test_the_daemon_starts_on_a_damaged_cache_db(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "node"))
    Cache().close()
    (tmp_path / "node" / "cache.db").write_bytes(b"\0garbage" * 512)
    with pytest.warns(RuntimeWarning, match="damaged"):
        server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert compiler_pb2_grpc.CompilerStub(channel).Compile(request("after_damage"), timeout=60).cubin
    finally:
        server.stop(1)
