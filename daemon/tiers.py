"""Compile through the tiers: node cache (read directly) -> shared tier (Redis, when
KILN_REMOTE_CACHE names one; see kiln.cache.remote) -> compile daemon -> this process.

`cached_compile` is what the runtime calls on an in-memory miss. It returns a
`kiln.codegen.CompiledKernel` (kiln.codegen.artifact) with its key and the tier it came from. A daemon that is down or refuses costs one
warning and a local compile, never a failed step; a cache that cannot be read or written
is skipped the same way. A shared-tier hit is copied into the node cache; a binary made
here or by a daemon on another host is written to both.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
import warnings

from kiln.cache import Cache
from kiln.cache.metadata import MetadataError, checked, expected
from kiln.cache.store import CacheNotWritable
from kiln.codegen.artifact import CompiledKernel
from kiln.ir import print_function, verify
from kiln.ir.core import Function

from . import launch

log = logging.getLogger("kiln.daemon")
_TEXT = ("ptx", "llir", "kir")
RETRY_DAEMON_S = 60.0  # after a daemon failed, compile here for this long before asking it again


# a compiled kernel, wherever it came from (`source`: cache, shared, daemon or local): codegen's record
Binary = CompiledKernel


class _State:
    """What a process keeps between calls: one cache handle, one client per address."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tier_lock = threading.Lock()  # not `lock`: making the tier opens the node cache under `lock`
        self.cache: Cache | None = None
        self.remote = None  # the shared tier, made on first use (False: none configured)
        self.clients: dict = {}
        self.warned: set[str] = set()
        self.down_until: dict[str, float] = {}  # a daemon that failed is left alone for a while

    def node_cache(self) -> Cache:
        with self.lock:
            if self.cache is None:
                self.cache = Cache()
            return self.cache

    def shared_tier(self):
        """The shared tier that KILN_REMOTE_CACHE names, or None. Made once: a rank's compile threads
        ask at their first kernels all at once, and each would otherwise make a client of its own."""
        if self.remote is None:
            with self.tier_lock:
                if self.remote is None:
                    self.remote = self._make_shared_tier()
        return self.remote or None

    def _make_shared_tier(self):
        from kiln.cache import env, remote
        url = env.remote_cache_url()
        if not url:
            return False
        try:
            counts = self.node_cache()
        except Exception:  # noqa: BLE001 - then this node keeps no counts of it
            counts = None
        try:
            return remote.RemoteCache(url, counts_to=counts)
        except Exception as e:  # noqa: BLE001 - a bad URL, or no redis package: a warning, not a failure
            self.warn_once("remote", f"kiln: no shared cache ({type(e).__name__}: {e})")
            return False

    def client(self, address: str):
        from kiln.cache import env
        from .client import Client
        with self.lock:
            if address not in self.clients:
                self.clients[address] = Client(address, token=env.daemon_token(), tls_ca=env.daemon_tls_ca())
            return self.clients[address]

    def warn_once(self, what: str, message: str) -> None:
        if what not in self.warned:
            self.warned.add(what)
            warnings.warn(message, RuntimeWarning, stacklevel=_user_frame())


def _user_frame() -> int:
    """The stacklevel, for a warning warned from `warn_once`, of the first frame outside kiln:
    the user's line that launched the kernel, not kiln's own."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and (frame.f_code.co_filename.startswith("<kiln")
                                        or str(frame.f_globals.get("__name__")).split(".")[0] == "kiln"):
        frame, level = frame.f_back, level + 1
    return level


_state = _State()


def node_cache() -> Cache:
    """This process's handle on the node cache."""
    return _state.node_cache()


def shared_tier():
    """This process's shared tier (KILN_REMOTE_CACHE), or None."""
    return _state.shared_tier()


def daemon_client(address: str):
    """This process's client of the daemon at `address`."""
    return _state.client(address)


def warn_once(what: str, message: str) -> None:
    """A RuntimeWarning, once per process for each `what`."""
    _state.warn_once(what, message)


def cache_write_failed(error: Exception, what: str = "cache-write") -> None:
    """Warn, once, that the node cache cannot be written; a cache opened read-only (its disk full)
    warned so when it opened, and a store into it says nothing more."""
    if not isinstance(error, CacheNotWritable):
        warn_once(what, f"kiln: the node cache cannot be written ({error})")


def cached_binary(key: str, name: str, target: str, options: dict) -> Binary | None:
    """The binary stored under compile key `key` (kernel `name` for `target` with `options`) in
    the node cache or the shared tier, checked as `cached_compile` checks it; None otherwise
    (the daemon and a local compile need the IR: `cached_compile`)."""
    return _from_cache(name, target, options, key) or _from_shared(name, target, options, key)


def cached_compile(fn: Function, target: str, options: dict, compile_fn=None) -> Binary:
    """The compiled `fn`, from the first tier that has or can make it.

    `compile_fn` is the in-process compiler (default `kiln.codegen.compile`)."""
    # protobuf: imported when a key is made, not on a warm hit (cached_binary)
    from kiln.proto import compile_key, function_to_proto
    # one encoding for the key, the limits and the request: each took 0.03 s of the rank's GIL for
    # a foreach AdamW step
    encoded = function_to_proto(fn)
    key = compile_key(fn, target, options, encoded=encoded)
    _record(fn, target, options)
    if _always_compile():  # TRITON_ALWAYS_COMPILE=1: no tier is asked; what this process makes is stored
        _check_limits(fn.name, encoded)
        return _compile_here(fn, target, options, key, compile_fn)
    binary = _from_cache(fn.name, target, options, key)
    if binary is None:
        binary = _from_shared(fn.name, target, options, key)
    if binary is None:
        _check_limits(fn.name, encoded)
        binary = _from_daemon(fn, target, options, key, encoded)
    if binary is None:
        binary = _compile_here(fn, target, options, key, compile_fn)
    return binary


def _always_compile() -> bool:
    """Triton's `knobs.compilation.always_compile`: every compile call compiles (a dump of each stage,
    a compiler being debugged), as Triton's skips its cache then."""
    from kiln.ir_dump import compilation_knob
    return compilation_knob("always_compile", "TRITON_ALWAYS_COMPILE")


class KernelTooLarge(ValueError):
    """A kernel over the daemon's limits (`kiln.daemon.limits`): refused here too, not compiled in this
    process instead, where it would take minutes and gigabytes (a 100,000-step static_range, a block of
    2^24 elements)."""


def _check_limits(name: str, encoded) -> None:
    from . import limits
    try:
        limits.check_function(encoded)
    except limits.TooMuchWork as e:
        raise KernelTooLarge(f"kernel {name}: {e}; no GPU runs such a kernel well (the daemon refuses it too)") from None


def _record(fn: Function, target: str, options: dict) -> None:
    from kiln.cache import env
    manifest = env.manifest_path()
    if manifest is None:
        return
    from .prewarm import record
    try:
        record(manifest, fn, target, options)
    except OSError as e:
        _state.warn_once("manifest", f"kiln: cannot record to the manifest {manifest} ({e})")


def _from_cache(name: str, target: str, options: dict, key: str) -> Binary | None:
    try:
        hit = _state.node_cache().get_result(key, ("cubin",) + _TEXT)
    except Exception as e:  # noqa: BLE001 - a broken cache is skipped, not fatal
        _state.warn_once("cache", f"kiln: the node cache cannot be read ({e}); compiling without it")
        return None
    if hit is None:
        return None
    artifacts, metadata = hit
    try:
        checked(metadata, **expected(name, target, options))
        kir, llir, ptx = (artifacts[n].decode() for n in ("kir", "llir", "ptx"))
    except (MetadataError, UnicodeDecodeError) as e:  # the compile that follows rewrites the entry
        _state.warn_once(f"entry:{key}", f"kiln: ignored the node cache's entry for {name} ({e})")
        return None
    return Binary(name, target, kir, llir, ptx, artifacts["cubin"], metadata, key, "cache")


def _from_shared(name: str, target: str, options: dict, key: str) -> Binary | None:
    tier = _state.shared_tier()
    found = tier.get(key) if tier is not None else None
    if found is None:
        return None
    artifacts, metadata, created = found
    try:
        checked(metadata, **expected(name, target, options))
        kir, llir, ptx = (artifacts[n].decode() for n in ("kir", "llir", "ptx"))
        cubin = artifacts["cubin"]
    except (MetadataError, UnicodeDecodeError, KeyError) as e:  # the compile that follows rewrites the entry
        _state.warn_once(f"shared:{key}", f"kiln: ignored the shared cache's entry for {name} ({e})")
        return None
    try:
        _state.node_cache().copy_result(key, artifacts, metadata, created)
    except Exception as e:  # noqa: BLE001
        cache_write_failed(e)
    return Binary(name, target, kir, llir, ptx, cubin, metadata, key, "shared")


def _from_daemon(fn, target, options, key, encoded=None) -> Binary | None:
    address = launch.configured_address()
    if address is None or time.monotonic() < _state.down_until.get(address, 0.0):
        return None
    import grpc  # not before: 60 ms of a cold process that compiles on its own (KILN_DAEMON=off)

    from kiln.proto.messages import metadata_from_proto
    try:
        if address == launch.default_address():
            launch.ensure_daemon()
        reply = _state.client(address).compile(fn, target, options, include_ir_dumps=True, encoded=encoded)
    except grpc.RpcError as e:
        if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED):
            _state.down_until[address] = time.monotonic() + RETRY_DAEMON_S
            _state.warn_once(address, f"kiln: the compile daemon at {address} failed ({e.code().name}: "
                                      f"{e.details()}); compiling in this process")
        else:  # a compile error: the local compile raises it with its own type and traceback
            log.info("daemon refused %s: %s %s", fn.name, e.code().name, e.details())
            if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                verify(fn)  # malformed IR is the user's error, raised here without a compile; what passes is
                # the daemon's lowering refusing it (the local compile gives that error its own type) or a
                # daemon of another kiln build refusing an op this one knows
        return None
    except Exception as e:  # noqa: BLE001 - the daemon could not be started
        _state.down_until[address] = time.monotonic() + RETRY_DAEMON_S
        _state.warn_once(address, f"kiln: no compile daemon ({e}); compiling in this process")
        return None
    if reply.key != key:
        # Its code generator is not ours: its binary may lack fixes this build has, and
        # cached under our key it would outlive the daemon. Compile here instead.
        _state.warn_once("identity", f"kiln: the compile daemon at {address} runs another kiln build than this "
                                     "process; compiling here until it is restarted (kiln daemon stop)")
        return None
    try:
        metadata = checked(metadata_from_proto(reply.metadata), **expected(fn.name, target, options))
    except (MetadataError, ValueError) as e:  # not JSON, or not this kernel's
        _state.down_until[address] = time.monotonic() + RETRY_DAEMON_S
        _state.warn_once(address, f"kiln: the compile daemon at {address} sent a bad reply ({e}); "
                                  "compiling in this process")
        return None
    binary = Binary(fn.name, target, reply.kir, reply.llir, reply.ptx, reply.cubin, metadata, key, "daemon")
    if not address.startswith("unix:"):
        _store(binary, fn, options)  # a daemon on another node filled its own cache, not ours
    return binary


# One in-process compile at a time: llvmlite parses into LLVM's global context, which is not
# safe across threads (an autotuner builds its configs from several when no daemon answers).
_compile_here_lock = threading.Lock()


class _NodeSubsets:
    """kiln.codegen.backend's libdevice subsets in the node cache: a record naming the blob of
    the bitcode (a blob's name is its SHA-256, checked on read; the backend checks the bitcode)."""

    def get(self, key: str) -> bytes | None:
        cache = _state.node_cache()
        record = cache.get_record(key)
        name = record.get("bitcode") if record else None
        return cache.get_blob(name) if type(name) is str else None

    def put(self, key: str, data: bytes) -> None:
        cache = _state.node_cache()
        cache.put_record(key, {"bitcode": cache.put_blob(data)})


def keep_libdevice_subsets() -> None:
    """Let this process's compiles keep the libdevice subsets they make in the node cache, and
    find the ones other processes made (kiln.codegen.backend.subset_store). Where the backend is
    not loaded (a compile function of another compiler), nothing: it is not loaded for this."""
    backend = sys.modules.get("kiln.codegen.backend")
    if backend is not None and backend.subset_store is None:
        backend.subset_store = _NodeSubsets()


def _compile_here(fn, target, options, key, compile_fn) -> Binary:
    if compile_fn is None:
        from kiln.codegen import compile as compile_fn
    keep_libdevice_subsets()
    with _compile_here_lock:
        kernel = compile_fn(fn, target, options)
    metadata = checked(dict(kernel.metadata), **expected(fn.name, target, options))  # a codegen bug stops here
    binary = Binary(fn.name, target, kernel.kir, kernel.llir, kernel.ptx, bytes(kernel.cubin), metadata, key, "local")
    _store(binary, fn, options)
    return binary


def _store(binary: Binary, fn: Function, options: dict) -> None:
    # as the daemon stores it: with the IR, target and options, so `kiln prewarm --from-cache` can replay it
    metadata = {**binary.metadata, "target": binary.target, "options": options}
    artifacts = {"cubin": binary.cubin, "ptx": binary.ptx, "llir": binary.llir, "kir": binary.kir,
                 "ir": print_function(fn)}
    try:
        _state.node_cache().put_result(binary.key, artifacts, metadata)
    except Exception as e:  # noqa: BLE001
        cache_write_failed(e)
    tier = _state.shared_tier()
    if tier is not None:  # never raises; a tier that is down was warned of when it failed
        tier.put(binary.key, artifacts, metadata)
