"""10,000 hostile requests against a real daemon process (the fake compile function in its
workers), and 3,000 whose workers run the real compiler: random bytes, truncated and byte-mutated messages, and messages mutated field by
field so that they decode and reach the verifier, the limits and the pool. The daemon must
answer every one with a status of the request's own (never UNKNOWN or INTERNAL), stay up,
and hold its memory. Seeded: a failure replays.

A soak outside CI's 15 minutes: `KILN_FUZZ_REQUESTS=100000 KILN_FUZZ_SEED=7 pytest tests/test_daemon_fuzz.py`;
with `KILN_FUZZ_COMPILE_FN=kiln.codegen:compile` the requests that decode reach the real compiler (seeds 7-11,
100,000 each: 0 INTERNAL/UNKNOWN, bench/results/2026-11-28-cpu-fuzz-soak-100k.md). A failure names the
request's index in its seed's sequence: `request_at(seed, index)` rebuilds it alone."""
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

import grpc
import pytest

from kiln.daemon.client import Client
from kiln.ir import parse_function
from kiln.proto import compiler_pb2 as pb
from kiln.proto import function_to_proto
from kiln.proto.messages import options_to_proto

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"
REQUESTS = int(os.environ.get("KILN_FUZZ_REQUESTS", 10_000))
SEED = int(os.environ.get("KILN_FUZZ_SEED", 12))
COMPILE_FN = os.environ.get("KILN_FUZZ_COMPILE_FN", "kiln.daemon.fake:compile")  # kiln.codegen:compile: the real one
IN_FLIGHT = 32
RSS_GROWTH_LIMIT = 256 << 20  # bytes the daemon may grow by after warming up: a leak of ~30 kB a request fails
CALL_TIMEOUT_S = 60  # a hang guard only
BAD_KEPT = 20  # INTERNAL/UNKNOWN answers reported in full
CODES = {code.value[0]: code for code in grpc.StatusCode}


def seeds() -> list[pb.CompileRequest]:
    out = []
    for path in sorted(CORPUS.glob("*.kir")):
        fn = parse_function(path.read_text())
        out.append(pb.CompileRequest(ir=function_to_proto(fn), target=random.choice(["sm_80", "sm_90a"]),
                                     options=options_to_proto({"num_warps": 4, "num_stages": 2})))
    return out


def mutate_fields(rng: random.Random, req: pb.CompileRequest) -> pb.CompileRequest:
    """A copy with a few fields changed: still a message, usually a wrong one."""
    req = pb.CompileRequest.FromString(req.SerializeToString())
    for _ in range(rng.randint(1, 3)):
        ops = req.ir.body
        op = ops[rng.randrange(len(ops))] if len(ops) else None
        choice = rng.randrange(10)
        if choice == 0 and op is not None and op.operands:
            op.operands[rng.randrange(len(op.operands))] = rng.choice([0, 1, 2**31, 2**32 - 1, rng.randrange(64)])
        elif choice == 1 and op is not None:
            op.name = rng.choice(["add", "load", "for", "reduce", "return", "dot", "", "x" * 300, "\u00e9"])
        elif choice == 2 and op is not None and op.result_types:
            t = op.result_types[rng.randrange(len(op.result_types))]
            if t.HasField("block"):
                t.block.shape[rng.randrange(len(t.block.shape))] = rng.choice([0, -1, 3, 1 << 20, 1 << 40, 2**62])
            else:
                t.scalar = rng.choice(["fp32", "int1", "fp8e4nv", "bogus", ""])
        elif choice == 3 and len(ops) > 1:
            del ops[rng.randrange(len(ops))]
        elif choice == 4 and op is not None and op.attrs:
            attr = op.attrs[rng.randrange(len(op.attrs))].value
            rng.choice([lambda: setattr(attr, "int_value", rng.choice([-2**63, 2**63 - 1, 0])),
                        lambda: setattr(attr, "float_value", rng.choice([float("nan"), float("inf"), -0.0])),
                        lambda: setattr(attr, "string_value", "s" * rng.randrange(3000)),
                        lambda: attr.int_list.values.extend(range(rng.randrange(100)))])()
        elif choice == 5:
            req.target = rng.choice(["sm_90a", "sm_7", "sm_999", "", "sm_80f", "x" * 500])
        elif choice == 6:
            extra = req.options.extra.add(name=rng.choice(["num_warps", "maxnreg", "zz", ""]))
            rng.choice([lambda: setattr(extra.value, "int_value", rng.choice([0, 3, 2**40])),
                        lambda: setattr(extra.value, "float_value", float("nan")),
                        lambda: None])()
        elif choice == 7 and req.ir.args:
            arg = req.ir.args[rng.randrange(len(req.ir.args))]
            arg.type.CopyFrom(rng.choice([pb.CompileRequest().ir.args.add().type, arg.type]))
            arg.name = rng.choice(["", "x", "%", "n" * 100])
        elif choice == 8 and op is not None:
            op.loc.file, op.loc.line = rng.choice([0, 7, 2**31]), rng.choice([-1, 0, 2**31 - 1])
        elif choice == 9 and op is not None and op.regions:
            region = op.regions[rng.randrange(len(op.regions))]
            if region.ops:
                del region.ops[rng.randrange(len(region.ops))]
            region.arg_types.add(scalar="int32")
        req.ir.ir_version = rng.choice([req.ir.ir_version] * 8 + [0, 99])
    return req


def hostile(rng: random.Random, valid: list[pb.CompileRequest]) -> tuple[str, bytes]:
    """(method, request bytes)."""
    kind = rng.randrange(10)
    base = rng.choice(valid)
    if kind == 0:
        return rng.choice(["Compile", "Lookup", "Stats", "CompileBatch"]), rng.randbytes(rng.randrange(2000))
    if kind <= 2:
        data = base.SerializeToString()
        return "Compile", data[:rng.randrange(len(data))]
    if kind <= 4:
        data = bytearray(base.SerializeToString())
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return "Compile", bytes(data)
    if kind == 5:
        items = [mutate_fields(rng, rng.choice(valid)) for _ in range(rng.randint(1, 4))]
        return "CompileBatch", pb.CompileBatchRequest(requests=items).SerializeToString()
    if kind == 6:
        key = rng.choice(["", "0" * 64, "../" * 30, rng.randbytes(16).hex()])
        return "Lookup", pb.LookupRequest(key=key, include_ir_dumps=rng.random() < 0.5).SerializeToString()
    return "Compile", mutate_fields(rng, base).SerializeToString()


def request_at(seed: int, n: int) -> tuple[str, bytes]:
    """The `n`th request `hammer(..., seed)` sends: a failure it reports as (n, ...) replays alone."""
    rng = random.Random(seed)
    random.seed(seed)
    valid = seeds()
    for _ in range(n):
        hostile(rng, valid)
    return hostile(rng, valid)


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def daemon_process(tmp_path, request):
    compile_fn = getattr(request, "param", COMPILE_FN)
    folder = tempfile.mkdtemp(prefix="kf-", dir="/tmp")  # socket paths are short
    socket_path = os.path.join(folder, "d.sock")
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "cache"), "KILN_RUNTIME_DIR": folder}
    log = open(tmp_path / "daemon.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "kiln.daemon", "daemon", "start", "--foreground",
                             "--socket", socket_path, "--workers", "1", "--compile-fn", compile_fn],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    address = f"unix:{socket_path}"
    deadline = time.monotonic() + 120
    while not Client(address).healthy(1.0):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
    yield proc, address
    proc.terminate()
    proc.wait(30)
    log.close()


def test_ten_thousand_hostile_requests(daemon_process):
    hammer(*daemon_process, REQUESTS, SEED)


@pytest.mark.parametrize("daemon_process", ["kiln.codegen:compile"], indirect=True)
def test_hostile_requests_that_reach_the_real_compiler(daemon_process):
    """The fake compile function never looks inside the IR; codegen does (a constant whose value was a
    string reached its arithmetic: INTERNAL)."""
    hammer(*daemon_process, 3000, 3)


def hammer(proc, address, requests: int, seed: int) -> None:
    rng = random.Random(seed)
    random.seed(seed)
    valid = seeds()
    statuses: dict = {}
    channel = grpc.insecure_channel(address)
    calls = {name: channel.unary_unary(f"/kiln.v1.Compiler/{name}") for name in ("Compile", "Lookup", "Stats")}
    batch = channel.unary_stream("/kiln.v1.Compiler/CompileBatch")
    bad = []  # the first BAD_KEPT, with their indices; `failed` counts them all
    failed = 0
    started = time.monotonic()

    def settle(n, method, future):
        """`n`: the request's index in the seeded sequence (`request_at` rebuilds it)."""
        nonlocal failed
        try:
            if method == "CompileBatch":
                for data in future:  # a stream: the codes of its items count as well
                    item = pb.CompileBatchItem.FromString(data)
                    if item.HasField("error"):
                        code = CODES[item.error.code]
                        statuses[code] = statuses.get(code, 0) + 1
                        if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
                            failed += 1
                            if len(bad) < BAD_KEPT:
                                bad.append((n, method, code, item.error.message))
            else:
                future.result()
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
            if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
                failed += 1
                if len(bad) < BAD_KEPT:
                    bad.append((n, method, code, e.details()))
        statuses[code] = statuses.get(code, 0) + 1

    rss_warm = None
    pending = []
    for n in range(requests):
        method, data = hostile(rng, valid)
        if method == "CompileBatch":
            settle(n, method, batch(data, timeout=CALL_TIMEOUT_S))
        else:
            pending.append((n, method, calls[method].future(data, timeout=CALL_TIMEOUT_S)))
        if len(pending) >= IN_FLIGHT:
            for item in pending:
                settle(*item)
            pending = []
        if n == requests // 5:
            rss_warm = rss_bytes(proc.pid)
    for item in pending:
        settle(*item)
    channel.close()
    rss_growth = rss_bytes(proc.pid) - rss_warm
    print(f"\nfuzz: seed {seed}, {requests} requests, {time.monotonic() - started:.0f} s, "
          f"{failed} INTERNAL/UNKNOWN, daemon RSS +{rss_growth >> 20} MiB after warm-up; statuses: "
          + ", ".join(f"{code.name} {count}" for code, count in sorted(statuses.items(), key=lambda kv: -kv[1])))

    assert proc.poll() is None, "the daemon died"
    assert Client(address).healthy(5.0)
    assert not bad, (failed, bad)
    assert not {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL} & set(statuses), statuses
    assert sum(statuses.values()) >= requests
    assert statuses.get(grpc.StatusCode.OK, 0) > requests // 100
    assert statuses.get(grpc.StatusCode.INVALID_ARGUMENT, 0) > requests // 10
    assert rss_growth < RSS_GROWTH_LIMIT
