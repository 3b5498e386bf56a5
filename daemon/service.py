"""The `kiln.v1.Compiler` service: requests in, node cache first, single flight, the pool.

A request's IR is decoded and verified (INVALID_ARGUMENT if that fails), its compile key
computed from the canonical bytes, and then: a hit in the node cache answers at once;
otherwise the request joins the compile already in flight for that key (MERGED) or starts
one (MISS). The result goes into the node cache (and the shared tier, when the daemon has
one) before any waiter hears of it. A request whose client goes away (cancelled, or past its
deadline) stops waiting at once, and a compile nobody waits for any more is abandoned (see
`flight`). What one request may ask for is bounded (see `limits`).
"""
from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

import grpc

from kiln.cache import Cache
from kiln.cache.metadata import MetadataError, checked, expected
from kiln.codegen.artifact import CompiledKernel
from kiln.ir import options as options_record
from kiln.ir import print_function
from kiln.ir.core import Function
from kiln.proto import compiler_pb2 as pb
from kiln.proto import compiler_pb2_grpc
from kiln.proto.convert import ConversionError, canonical_forms, function_from_proto
from kiln.proto.key import compiler_identity, key_from_canonical
from kiln.proto.messages import metadata_to_proto, options_from_proto

from . import shared_tier
from . import limits
from .flight import SingleFlight
from .leases import BUSY, KINDS, STORED, YOURS, Leases
from .pool import JobFailed, WorkerPool
from .worker import Compiled
from .rpc import Undecodable, completed, gone, time_left
from .stats import ServiceStats

log = logging.getLogger("kiln.daemon")

_TARGET = re.compile(r"sm_(\d+)[af]?\Z")
_TEXT_ARTIFACTS = ("ptx", "llir", "kir")
_DECODED_KEPT = 256  # recent requests kept decoded
_DECODED_BYTES = 16 << 20  # ...of at most this many request bytes in all (decoded, a few times more memory)
_MESSAGE_CHARS = 200  # an error echoes at most this much of the request back
# the options codegen reads (and num_ctas), and the values each accepts (kiln.ir.options); any other
# option is the compile function's to judge
_OPTION_RANGES = options_record.RANGES


_OUTCOMES = {STORED: pb.ClaimResponse.STORED, YOURS: pb.ClaimResponse.YOURS, BUSY: pb.ClaimResponse.BUSY}


@dataclass
class _Request:
    fn: Function
    ir: bytes            # canonical
    target: str
    options: dict
    key: str
    dumps: bool


class CompilerService(compiler_pb2_grpc.CompilerServicer):
    def __init__(self, pool: WorkerPool, cache: Cache, identity: dict | None = None, remote=None):
        self.pool, self.cache, self.remote = pool, cache, remote  # remote: the shared tier (cache.remote), or None
        self.identity = identity if identity is not None else compiler_identity()
        self.flights = SingleFlight()
        self.leases = Leases(stored=lambda key: key in self.cache)
        self.stats = ServiceStats()
        self.last_request = time.monotonic()
        self._decoded: OrderedDict[bytes, tuple[_Request, int]] = OrderedDict()  # -> (request, its bytes)
        self._decoded_bytes = 0
        self._decoded_lock = threading.Lock()

    def idle_for(self) -> float:
        """Seconds since the last request, or 0 while any work is in flight."""
        if self.pool.busy or self.pool.queue_depth or len(self.flights) or self.leases.stats()["held"]:
            return 0.0
        return time.monotonic() - self.last_request

    # --- RPCs ------------------------------------------------------------------------------
    def Compile(self, request, context):
        self.last_request = time.monotonic()
        self.stats.count("requests")
        self._refuse_undecodable(request, context)
        try:
            req = self._decode(request)
        except ConversionError as e:
            context.abort(_status_of(e), self._refused(e))
        future, status = self._start(req)
        try:
            next(completed([future], context), None)
        finally:
            self._leave([(req, future)])
        if not future.done() or future.cancelled():  # cancelled: it was the last to leave
            context.abort(*gone(context, "compile"))
        try:
            result = future.result()
        except JobFailed as e:
            context.abort(grpc.StatusCode[e.code], _short(e.message))
        return self._response(req, result, status)

    def CompileBatch(self, request, context):
        self.last_request = time.monotonic()
        self._refuse_undecodable(request, context)
        self.stats.count("requests", len(request.requests))
        try:
            limits.check_batch(len(request.requests))
        except limits.TooMuchWork as e:
            context.abort(_status_of(e), self._refused(e))
        waiting: dict = {}
        answered = 0
        try:  # the handler is a generator: one whose client went away is closed at its yield
            for index, item in enumerate(request.requests):
                try:
                    req = self._decode(item)
                except ConversionError as e:
                    yield pb.CompileBatchItem(index=index, error=pb.Error(
                        code=_status_of(e).value[0], message=self._refused(e)))
                    continue
                future, status = self._start(req)
                waiting.setdefault(future, []).append((index, req, status))
            for future in completed(list(waiting), context):
                answered += 1
                for index, req, status in waiting[future]:
                    try:
                        yield pb.CompileBatchItem(index=index, result=self._response(req, future.result(), status))
                    except JobFailed as e:
                        yield pb.CompileBatchItem(index=index, error=pb.Error(
                            code=grpc.StatusCode[e.code].value[0], message=_short(e.message)))
        finally:
            self._leave([(req, future) for future, reqs in waiting.items() for _, req, _ in reqs])
        if answered < len(waiting):
            context.abort(*gone(context, "batch"))
        if self.remote is not None:  # a prewarm fills the shared tier, also with what this node had already
            shared_tier.fill(self, [reqs[0][1].key for reqs in waiting.values() if reqs[0][2] == pb.CACHE_HIT])

    def Lookup(self, request, context):
        self.last_request = time.monotonic()
        self._refuse_undecodable(request, context)
        result = self._cached(request.key, request.include_ir_dumps)
        if result is None:
            return pb.LookupResponse(found=False)
        return pb.LookupResponse(found=True, result=_response_message(request.key, result, pb.CACHE_HIT,
                                                                      request.include_ir_dumps))

    def Claim(self, request, context):
        self.last_request = time.monotonic()
        self._refuse_undecodable(request, context)
        _check_lease_request(context, request.holder, [request.key])
        pid = request.pid or None if context.peer().startswith("unix:") else None  # a TCP peer's pid is not ours to see
        wait = min(max(0.0, request.wait_seconds), time_left(context))
        if request.kind not in KINDS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown claim kind {request.kind[:40]!r}")
        outcome, waited, busy_before = self.leases.claim(request.key, request.holder, pid, wait,
                                            cancelled=lambda: not context.is_active(), if_free=request.if_free,
                                            kind=request.kind)
        return pb.ClaimResponse(outcome=_OUTCOMES[outcome], waited_s=waited, busy_before=busy_before)

    def Renew(self, request, context):
        self.last_request = time.monotonic()
        self._refuse_undecodable(request, context)
        _check_lease_request(context, request.holder, request.keys)
        return pb.RenewResponse(lost=self.leases.renew(request.holder, request.keys))

    def Release(self, request, context):
        self.last_request = time.monotonic()
        self._refuse_undecodable(request, context)
        _check_lease_request(context, request.holder, request.keys)
        self.leases.release(request.holder, request.keys, request.stored)
        return pb.ReleaseResponse()

    def Stats(self, request, context):
        self._refuse_undecodable(request, context)
        snap = self.stats.snapshot()
        cache = self.cache.stats()
        lat = snap["latency_ms"]
        return pb.StatsResponse(
            version=self.identity.get("kiln", ""), compiler_identity=self.identity, uptime_s=snap["uptime_s"],
            workers=self.pool.size, busy_workers=self.pool.busy, queue_depth=self.pool.queue_depth,
            requests=snap["requests"], hits=snap["hits"], misses=snap["misses"], merged=snap["merged"],
            errors=snap["errors"], worker_restarts=self.pool.restarts,
            compile_latency=pb.LatencyPercentiles(p50_ms=lat["p50"], p90_ms=lat["p90"], p99_ms=lat["p99"],
                                                  max_ms=lat["max"]),
            cache=pb.CacheStats(path=cache["path"], entries=cache["entries"], volume_bytes=cache["volume_bytes"],
                                size_limit_bytes=cache["size_limit_bytes"]),
            remote_cache=shared_tier.stats_message(self.remote), claims=pb.ClaimStats(**self.leases.stats()))

    # --- the work ----------------------------------------------------------------------------
    def _decode(self, request) -> _Request:
        """The request, decoded, verified and keyed. Ranks of one job send identical
        requests: those are decoded once (a big kernel takes milliseconds to verify)."""
        raw = request.SerializeToString(deterministic=True)
        fingerprint = hashlib.sha256(raw).digest()
        with self._decoded_lock:
            kept = self._decoded.get(fingerprint)
            if kept is not None:
                self._decoded.move_to_end(fingerprint)
                return kept[0]
        try:
            req = self._decode_new(request)
        except ConversionError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever a hostile message trips over, it is the request's fault
            raise ConversionError(f"undecodable request: {type(e).__name__}: {e}") from None
        with self._decoded_lock:
            if fingerprint not in self._decoded:
                self._decoded[fingerprint] = req, len(raw)
                self._decoded_bytes += len(raw)
            while self._decoded and (len(self._decoded) > _DECODED_KEPT or self._decoded_bytes > _DECODED_BYTES):
                self._decoded_bytes -= self._decoded.popitem(last=False)[1][1]
        return req

    def _decode_new(self, request) -> _Request:
        if not request.HasField("ir"):
            raise ConversionError("the request carries no IR")
        limits.check_function(request.ir)
        if not _TARGET.match(request.target) or not 80 <= int(_TARGET.match(request.target)[1]) <= 121:
            raise ConversionError(f"unknown target {request.target!r}: expected sm_80 ... sm_121a")
        fn = function_from_proto(request.ir, verify=True)
        options = _checked_options(options_from_proto(request.options))
        ir, ir_for_key = canonical_forms(fn)
        key = key_from_canonical(ir_for_key, request.target, options, self.identity)
        return _Request(fn, ir, request.target, options, key, request.include_ir_dumps)

    def _start(self, req: _Request) -> tuple[Future, int]:
        """A future of the Compiled answer, and the cache status to report with it."""
        hit = self._cached(req.key, req.dumps, req)
        if hit is not None:
            return _resolved(hit), pb.CACHE_HIT
        future, owner = self.flights.join(req.key)
        if not owner:
            self.stats.count("merged")
            return future, pb.CACHE_MERGED
        hit = self._cached(req.key, req.dumps, req)  # a compile may have landed between the first look and the join
        if hit is None and self.remote is not None:
            hit = shared_tier.fetch(self, req)
        if hit is not None:
            self.flights.land(req.key, future, hit)
            return future, pb.CACHE_HIT
        job = self.pool.submit(req.ir, req.target, req.options)
        self.flights.on_abandon(req.key, future, job.abandon)
        job.add_done_callback(lambda job: self._landed(req, future, job))
        return future, pb.CACHE_MISS

    def _leave(self, joined) -> None:
        """A request stops waiting for the compiles it joined, (request, future) pairs."""
        for req, future in joined:
            if not future.done() and self.flights.leave(req.key, future):
                self.stats.count("cancelled")
                log.info("key=%s kernel=%s event=abandoned", req.key[:16], req.fn.name)

    def _refuse_undecodable(self, request, context) -> None:
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, self._refused(request.error))

    def _refused(self, error: Exception) -> str:
        """Count and log a bad request in one line; the short message to answer it with."""
        self.stats.count("errors")
        message = _short(str(error))
        log.info("event=bad_request error=%r", message)
        return message

    def _cached(self, key: str, dumps: bool, req: _Request | None = None) -> Compiled | None:
        """The node cache's result for `key` (checked against `req`, when there is one), or None."""
        names = ("cubin",) + (_TEXT_ARTIFACTS if dumps else ("ptx",))
        try:
            hit = self.cache.get_result(key, names)
            if hit is None:
                return None
            checked(hit[1], **({} if req is None else expected(req.fn.name, req.target, req.options)))
            result = _result_from_cache(*hit)
        except (MetadataError, UnicodeDecodeError) as e:  # a miss: the compile that follows rewrites it
            log.warning("key=%s event=cache_entry_refused error=%r", key[:16], str(e))
            return None
        except Exception as e:  # noqa: BLE001 - a cache that cannot be read is a miss, not a failed request
            log.error("key=%s event=cache_read_failed error=%r", key[:16], str(e))
            return None
        self.stats.count("hits")
        return result

    def _landed(self, req: _Request, future: Future, job: Future) -> None:
        """Runs when the worker answers: store the result, then release every waiter."""
        if job.abandoned.is_set():
            return  # its waiters are gone, and its flight with them (the pool logged it)
        try:
            result = job.result()
        except Exception as e:  # noqa: BLE001 - whatever it is, the waiters must hear of it
            error = e if isinstance(e, JobFailed) else JobFailed("INTERNAL", f"{type(e).__name__}: {e}")
            error = _asm_refused(error, req.fn)
            self.stats.count("errors")
            log.warning("key=%s event=compile_failed code=%s error=%r", req.key[:16], error.code, error.message)
            self.flights.land(req.key, future, error=error)
            return
        self.stats.count("misses")
        self.stats.compiled(result.compile_ms)
        kernel = result.kernel
        artifacts = {"cubin": kernel.cubin, "ptx": kernel.ptx, "llir": kernel.llir, "kir": kernel.kir,
                     "ir": print_function(req.fn)}
        metadata = {**kernel.metadata, "target": req.target, "options": req.options}
        try:
            self.cache.put_result(req.key, artifacts, metadata)
        except Exception as e:  # noqa: BLE001 - a full disk must not fail the compile
            log.error("key=%s event=cache_write_failed error=%r", req.key[:16], str(e))
        log.info("key=%s kernel=%s event=compiled ms=%.1f cpu_ms=%.0f stages=%s", req.key[:16], req.fn.name,
                 result.compile_ms, result.cpu_ms, _stages_text(result.stage_ms))
        if self.remote is not None:  # before the waiters hear: a prewarm that ends finds every kernel there
            self.remote.put(req.key, artifacts, metadata)  # (a tier that fails is skipped for a while after)
        self.flights.land(req.key, future, result)

    def _response(self, req: _Request, result: Compiled, status) -> pb.CompileResponse:
        return _response_message(req.key, result, status, req.dumps)


def _asm_refused(error: JobFailed, fn: Function) -> JobFailed:
    """ptxas refusing the PTX of a kernel that holds inline assembly: the request's PTX text, which kiln
    passes on unread (the verifier checks its operands and constraints), so INVALID_ARGUMENT, not INTERNAL."""
    if error.code != "INTERNAL" or not error.message.startswith("PTXAssembleError"):
        return error
    if not any(op.name == "inline_asm" for op in fn.walk()):
        return error  # kiln's own PTX: kiln's bug
    return JobFailed("INVALID_ARGUMENT", f"ptxas refused the PTX of a kernel with inline assembly: {error.message}",
                     error.details)


def _stages_text(stage_ms: dict) -> str:
    """`decode:3,lower:310,llvm:240,ptx:60,link:520`: where a compile's wall time went."""
    return ",".join(f"{name}:{ms:.0f}" for name, ms in stage_ms.items()) or "-"


def _status_of(error: ConversionError) -> grpc.StatusCode:
    return grpc.StatusCode[getattr(error, "code", "INVALID_ARGUMENT")]


def _short(message: str) -> str:
    """One line of at most _MESSAGE_CHARS: an error must not echo a request's megabytes."""
    line = " ".join(message.split())
    return line if len(line) <= _MESSAGE_CHARS else line[:_MESSAGE_CHARS - 3] + "..."


def _checked_options(options: dict) -> dict:
    """`options` if each is a plain, finite value, codegen's own in their ranges; else ConversionError."""
    if len(options) > 64:
        raise ConversionError(f"{len(options)} options; at most 64")
    for name, value in options.items():
        values = value if isinstance(value, list) else [value]
        if len(name) > 64 or len(values) > 64 or not all(_plain(v) for v in values):
            raise ConversionError(f"option {name[:64]!r} must be a short name with an int, float, bool or short str")
        limits = _OPTION_RANGES.get(name)
        if limits and (type(value) not in (int, bool) or not limits[0] <= value <= limits[1]):
            raise ConversionError(f"option {name} = {value!r:.40} is not an int from {limits[0]} to {limits[1]}")
    warps = options.get("num_warps", options_record.DEFAULT_NUM_WARPS)
    if not options_record.in_range("num_warps", warps):
        raise ConversionError(f"option num_warps = {warps} is not a power of two")
    return options


def _plain(value) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    return type(value) in (int, bool) or (type(value) is str and len(value) <= 1024)


def _resolved(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


def _result_from_cache(artifacts: dict, metadata: dict) -> Compiled:
    """A node-cache entry (checked) as the daemon's answer; the texts not read are empty."""
    text = {name: artifacts[name].decode() if name in artifacts else "" for name in _TEXT_ARTIFACTS}
    return Compiled(CompiledKernel(metadata.get("name", ""), metadata.get("target", ""), text["kir"], text["llir"],
                                   text["ptx"], artifacts["cubin"], metadata))


def _response_message(key: str, result: Compiled, status, dumps: bool) -> pb.CompileResponse:
    kernel = result.kernel
    metadata = {k: v for k, v in kernel.metadata.items() if k != "options"}
    response = pb.CompileResponse(key=key, cache_status=status, cubin=kernel.cubin, ptx=kernel.ptx,
                                  metadata=metadata_to_proto(metadata),
                                  compile_ms=result.compile_ms if status == pb.CACHE_MISS else 0.0)
    if dumps:
        response.llir, response.kir = kernel.llir, kernel.kir
    return response


_HEX_KEY = re.compile(r"[0-9a-f]{64}\Z")
_MAX_LEASE_KEYS = 1024
_MAX_HOLDER_CHARS = 256


def _check_lease_request(context, holder: str, keys) -> None:
    """Lease keys are node-cache keys (hex SHA-256); a holder names one process, briefly."""
    if not holder or len(holder) > _MAX_HOLDER_CHARS:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"holder: 1 to {_MAX_HOLDER_CHARS} characters")
    if len(keys) > _MAX_LEASE_KEYS:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{len(keys)} keys; at most {_MAX_LEASE_KEYS}")
    for key in keys:
        if not _HEX_KEY.match(key):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"key {key[:80]!r} is not a hex SHA-256")
