"""Bounded work: a compile nobody waits for any more is abandoned (queued: never run;
running: its worker replaced), one that someone still waits for is not, and one request
can ask for only so much (arguments, ops, block elements, batch items). Real servers,
sockets and worker processes running the fake compile function."""
import time

import grpc
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server, limits, prewarm
from kiln.daemon.client import Client
from kiln.ir import parse_function
from kiln.proto import compiler_pb2 as pb
from kiln.proto import compiler_pb2_grpc, function_to_proto, ir_pb2
from kiln.proto.messages import options_to_proto

IR = "kernel @{name}(%x: ptr<int32>) {{\n  %v = load %x : int32\n  store %x, %v\n  return\n}}\n"
HANG_GUARD_S = 120  # deadlines of the calls that must succeed: only so that a broken daemon fails the test


def request(name, **options):
    return pb.CompileRequest(ir=function_to_proto(parse_function(IR.format(name=name))), target="sm_90a",
                             options=options_to_proto({"num_warps": 4, **options}))


@pytest.fixture
def daemon(tmp_path):
    """A daemon with one worker, and a stub to it (its address as `stub.address`)."""
    server, port = create_server("127.0.0.1:0", "kiln.daemon.fake:compile", workers=1, cache=Cache(tmp_path / "c"))
    server.start()
    assert server.pool.wait_ready(HANG_GUARD_S)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = compiler_pb2_grpc.CompilerStub(channel)
        stub.address = f"127.0.0.1:{port}"
        yield server, stub
    server.stop(0)


def until(condition):
    """Wait for `condition()` (a state the test drives the daemon into, not a timing)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, "the daemon never got there"
        time.sleep(0.01)


def test_queued_compiles_of_clients_that_gave_up_never_run(daemon):
    """430 abandoned jobs once stayed queued, and the next kernel waited 14 s behind them."""
    server, stub = daemon
    blocker = stub.Compile.future(request("blocker", fake_sleep_s=1.0), timeout=HANG_GUARD_S)
    until(lambda: server.pool.busy == 1)
    for i in range(10):  # past their deadline while queued
        with pytest.raises(grpc.RpcError) as e:
            stub.Compile(request(f"late{i}", fake_sleep_s=1.0), timeout=0.05)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    for i in range(10):  # cancelled by their clients while queued
        call = stub.Compile.future(request(f"cancelled{i}", fake_sleep_s=1.0), timeout=HANG_GUARD_S)
        until(lambda: server.pool.queue_depth >= 11 + i)
        call.cancel()
    until(lambda: server.service.stats.snapshot()["cancelled"] == 20)
    assert blocker.result().cache_status == pb.CACHE_MISS
    assert stub.Compile(request("next"), timeout=HANG_GUARD_S).cache_status == pb.CACHE_MISS
    assert server.service.stats.snapshot()["misses"] == 2  # the blocker and the next: none of the 20 ran
    assert server.pool.cancelled == 20 and server.pool.restarts == 0
    assert stub.Compile(request("late0", fake_sleep_s=0), timeout=HANG_GUARD_S).cache_status == pb.CACHE_MISS


def test_a_running_compile_nobody_waits_for_is_stopped(daemon):
    """A compile that would hold the only worker for 10 minutes is stopped when its client
    gives up; the next request gets a fresh worker."""
    server, stub = daemon
    first_worker = server.pool._slots[0].proc.pid
    call = stub.Compile.future(request("endless", fake_sleep_s=600), timeout=HANG_GUARD_S)
    until(lambda: server.pool.busy == 1)
    call.cancel()
    reply = stub.Compile(request("after"), timeout=HANG_GUARD_S)
    assert reply.cache_status == pb.CACHE_MISS and server.pool.restarts == 1 and server.pool.cancelled == 1
    assert server.pool._slots[0].proc.pid != first_worker


def test_a_compile_another_request_waits_for_goes_on(daemon):
    server, stub = daemon
    staying = stub.Compile.future(request("shared", fake_sleep_s=0.5), timeout=HANG_GUARD_S)
    until(lambda: server.pool.busy == 1)
    with pytest.raises(grpc.RpcError) as e:
        stub.Compile(request("shared", fake_sleep_s=0.5), timeout=0.05)  # merged into the same compile
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert staying.result().cubin
    assert server.pool.restarts == 0 and server.pool.cancelled == 0
    assert server.service.stats.snapshot()["merged"] == 1


def test_a_batch_whose_client_left_abandons_its_compiles(daemon):
    server, stub = daemon
    batch = pb.CompileBatchRequest(requests=[request(f"b{i}", fake_sleep_s=600) for i in range(5)])
    with pytest.raises(grpc.RpcError) as e:
        list(stub.CompileBatch(batch, timeout=0.5))
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert stub.Compile(request("after_batch"), timeout=HANG_GUARD_S).cubin
    assert server.pool.cancelled == 5 and server.service.stats.snapshot()["misses"] == 1


# --- what one request may ask for ----------------------------------------------------------------

def _with_args(n):
    args = ", ".join(f"%a{i}: ptr<int32>" for i in range(n))
    return pb.CompileRequest(ir=function_to_proto(parse_function(f"kernel @wide({args}) {{\n  return\n}}\n")),
                             target="sm_90a")


def _with_ops(n, nested=False):
    req = request("long")
    const = ir_pb2.Operation(name="constant", result_types=[ir_pb2.Type(scalar="int32")])
    const.attrs.add(name="value").value.int_value = 1
    body = req.ir.body
    if nested:  # inside a region: counted all the same
        region = body.add(name="if").regions.add()
        body = region.ops
    body.extend([const] * n)
    return req


def _with_block(shape):
    req = request("big_block")
    req.ir.body[0].result_types[0].CopyFrom(ir_pb2.Type(block=ir_pb2.BlockType(
        element=ir_pb2.Type(scalar="int32"), shape=shape)))
    return req


@pytest.mark.parametrize("case, req, code, words", [
    ("arguments", _with_args(limits.MAX_ARGS + 1), "INVALID_ARGUMENT", "1025 kernel arguments; at most 1024"),
    ("ops", _with_ops(limits.MAX_OPS + 1), "RESOURCE_EXHAUSTED", "more than 65536 operations"),
    ("nested ops", _with_ops(limits.MAX_OPS, nested=True), "RESOURCE_EXHAUSTED", "more than 65536 operations"),
    ("block elements", _with_block([2048, 1024]), "INVALID_ARGUMENT", "more than 1048576 elements"),
    ("block rank", _with_block([1] * 17), "INVALID_ARGUMENT", "17 dimensions"),
])
def test_a_request_over_a_limit_is_refused_with_a_short_message(daemon, case, req, code, words):
    server, stub = daemon
    with pytest.raises(grpc.RpcError) as e:
        stub.Compile(req, timeout=HANG_GUARD_S)
    assert e.value.code() == grpc.StatusCode[code] and words in e.value.details() and len(e.value.details()) <= 200
    [item] = stub.CompileBatch(pb.CompileBatchRequest(requests=[req]), timeout=HANG_GUARD_S)
    assert item.error.code == grpc.StatusCode[code].value[0]
    assert server.service.stats.snapshot()["misses"] == 0  # no worker saw it


def test_a_kernel_at_the_limits_is_compiled(daemon):
    _, stub = daemon
    assert stub.Compile(_with_args(limits.MAX_ARGS), timeout=HANG_GUARD_S).cubin


def test_a_batch_over_the_limit_is_refused_and_prewarm_sends_several(daemon, monkeypatch):
    server, stub = daemon
    with pytest.raises(grpc.RpcError) as e:
        list(stub.CompileBatch(pb.CompileBatchRequest(requests=[request("x")] * (limits.MAX_BATCH_ITEMS + 1)),
                               timeout=HANG_GUARD_S))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "4097 kernels in one batch" in e.value.details()
    monkeypatch.setattr(limits, "MAX_BATCH_ITEMS", 3)
    kernels = [(parse_function(IR.format(name=f"p{i}")), "sm_90a", {}) for i in range(8)]
    with Client(stub.address) as client:
        report = prewarm.prewarm(kernels, client)
    assert report.ok and report.statuses["CACHE_MISS"] == 8


def test_bytes_that_are_no_message_are_invalid_argument(daemon):
    """gRPC answers INTERNAL for a request it cannot parse; the daemon says whose fault it is."""
    server, stub = daemon
    channel = grpc.insecure_channel(stub.address)
    for method in ("Compile", "Lookup", "Stats"):
        with pytest.raises(grpc.RpcError) as e:
            channel.unary_unary(f"/kiln.v1.Compiler/{method}")(b"\xff\xff\xff", timeout=HANG_GUARD_S)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a kiln.v1." in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        list(channel.unary_stream("/kiln.v1.Compiler/CompileBatch")(b"\x0a\x05abc", timeout=HANG_GUARD_S))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
