"""Prewarming: compile many kernels through the daemon's pool before a run needs them.

The kernels come from a manifest (JSON lines that a run records: block IR text, target,
options), from the node cache itself, which keeps every kernel's IR (either can be
replayed for other targets or after a kiln upgrade), or from the signatures that the
kernels of a Python module declare (`jit(prewarm=[...])`, see kiln.signatures). None
needs a GPU when the targets are named.

    prewarm_module("my_kernels", targets=["sm_90a"]) -> Report      # kiln prewarm my_kernels.py
"""
from __future__ import annotations

import fcntl
import importlib
import importlib.util
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable

from kiln.ir import parse_function, print_function
from kiln.ir.core import Function

Kernel = tuple[Function, str, dict]  # (IR, target, options)


def record(manifest: str | Path, fn: Function, target: str, options: dict) -> None:
    """Append one compile to `manifest`; many processes may record into one file."""
    line = json.dumps({"name": fn.name, "target": target, "options": options, "ir": print_function(fn)},
                      sort_keys=True) + "\n"
    with open(manifest, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # one whole line at a time
        f.write(line)


def from_manifest(manifest: str | Path, targets: Iterable[str] = ()) -> list[Kernel]:
    """The kernels a manifest names, each for `targets` if given (else its own target)."""
    kernels, seen = [], set()
    for number, line in enumerate(Path(manifest).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            fn_text, target, options = entry["ir"], entry["target"], entry["options"]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{manifest}:{number}: not a manifest entry ({e})") from None
        for t in list(targets) or [target]:
            _add(kernels, seen, fn_text, t, options)
    return kernels


def from_cache(cache, targets: Iterable[str] = ()) -> list[Kernel]:
    """Every kernel in the node cache whose IR and options it kept, for `targets` if given."""
    kernels, seen = [], set()
    for key in cache.keys():
        hit = cache.get_result(key, ("ir",))
        if hit is None or "options" not in hit[1] or "target" not in hit[1]:
            continue
        for t in list(targets) or [hit[1]["target"]]:
            _add(kernels, seen, hit[0]["ir"].decode(), t, hit[1]["options"])
    return kernels


def share_artifacts(cache, tier) -> tuple[int, int]:
    """Write the node cache's torch.compile artifacts (Inductor's graphs, AOTAutograd's entries,
    autotuning choices: `kiln.daemon.artifacts`) that the shared tier lacks; (written, held there
    before). A node that ran a job without the tier so fills it, and a new node's first step
    finds its graphs there, as it finds the kernels the daemon writes through."""
    keys, created = [], {}
    for key in cache.keys():
        entry = cache.entry(key)
        if entry is not None and entry["metadata"].get("kind") == "torch-artifact":
            keys.append(key)
            created[key] = entry["created"]
    present = tier.has(keys) if keys else []
    written = held = 0
    for key, there in zip(keys, present or [False] * len(keys)):
        if there:
            held += 1
            continue
        hit = cache.get_result(key)
        if hit is not None and tier.put(key, *hit, created[key]):
            written += 1
    return written, held


def _add(kernels: list, seen: set, fn_text: str, target: str, options: dict) -> None:
    marker = (fn_text, target, json.dumps(options, sort_keys=True))
    if marker not in seen:
        seen.add(marker)
        kernels.append((parse_function(fn_text), target, options))


@dataclass
class Report:
    total: int = 0                                       # compiles asked of the daemon
    statuses: Counter = field(default_factory=Counter)  # CACHE_HIT / CACHE_MISS / CACHE_MERGED / ERROR
    errors: list = field(default_factory=list)           # (kernel name, target, message)
    skipped: list = field(default_factory=list)          # (kernel, reason): declared, but not buildable here
    keys: list = field(default_factory=list)             # compile keys of the kernels that compiled
    shared: tuple | None = None                          # (shared tier, how many of `keys` it holds), if one is set
    artifacts: tuple | None = None                       # --from-cache: torch.compile's, (written to the tier, there already)

    @property
    def ok(self) -> bool:
        return not self.errors


def prewarm(kernels: list[Kernel], client, progress: Callable[[int, int], None] | None = None,
            timeout: float | None = None, labels: list[str] | None = None) -> Report:
    """Compile `kernels` through `client`'s daemon, all at once: the pool runs them in parallel.

    `labels` name the kernels in errors (default: their IR names)."""
    from kiln.proto import compiler_pb2 as pb

    report = Report(total=len(kernels))
    if not kernels:
        return report
    for done, item in enumerate(_in_batches(client, kernels, timeout), 1):
        if item.HasField("error"):
            fn, target, _ = kernels[item.index]
            report.statuses["ERROR"] += 1
            report.errors.append((labels[item.index] if labels else fn.name, target, item.error.message))
        else:
            report.statuses[pb.CacheStatus.Name(item.result.cache_status)] += 1
            report.keys.append(item.result.key)
        if progress:
            progress(done, len(kernels))
    return report


def _in_batches(client, kernels: list[Kernel], timeout: float | None):
    """`client.compile_many(kernels)`, as batches of at most the daemon's limit; indices into `kernels`."""
    from .limits import MAX_BATCH_ITEMS
    for start in range(0, len(kernels), MAX_BATCH_ITEMS):
        for item in client.compile_many(kernels[start:start + MAX_BATCH_ITEMS], timeout=timeout):
            item.index += start
            yield item


class ProgressBar:
    """A `progress(done, total)` callback that draws a tqdm bar (on stderr)."""

    def __init__(self, out=None):
        self.out, self._bar = out, None

    def __call__(self, done: int, total: int) -> None:
        from tqdm import tqdm
        if self._bar is None:
            self._bar = tqdm(total=total, desc="prewarm", unit="kernel", file=self.out or sys.stderr)
        self._bar.update(done - self._bar.n)
        if done == total:
            self._bar.close()


class NoDaemon(RuntimeError):
    """No daemon to prewarm through: KILN_DAEMON=off and none named, or it does not answer."""


def through_daemon(kernels: list[Kernel], address: str | None = None, tls_ca=None, **kwargs) -> Report:
    """`prewarm` through the daemon at `address` (default: KILN_DAEMON or the node daemon, started if need be;
    `tls_ca`, default KILN_DAEMON_TLS_CA: its CA). With KILN_REMOTE_CACHE set here, the report counts
    how many of the kernels the shared tier holds afterwards (the daemon writes them there)."""
    from kiln.cache import env, remote

    import grpc

    from . import launch
    from .client import Client

    address = address or launch.configured_address()
    if address is None:
        raise NoDaemon("KILN_DAEMON=off, and prewarming compiles through a daemon: name one (--address)")
    if kernels and address == launch.default_address():
        launch.ensure_daemon()
    with Client(address, token=env.daemon_token(), tls_ca=tls_ca or env.daemon_tls_ca()) as client:
        try:
            report = prewarm(kernels, client, **kwargs)
        except grpc.RpcError as e:  # the whole batch failed: the daemon, not one kernel
            raise NoDaemon(f"the daemon at {address} failed: {e.code().name}: {e.details()}") from None
    tier = remote.from_env()
    if tier is not None:
        present = tier.has(report.keys)
        report.shared = (tier.where, "?" if present is None else sum(present))
        tier.close()
    return report


# --- kernels declared in Python source ----------------------------------------------------

@dataclass
class ModuleKernels:
    """What a module's kernels declare, built into IR: ready to send, or why not."""

    kernels: list = field(default_factory=list)  # (IR, target, options)
    labels: list = field(default_factory=list)   # one per kernel: the kernel with its signature
    errors: list = field(default_factory=list)   # (label, targets, message): no IR could be built
    skipped: list = field(default_factory=list)  # (label, reason)


def load_module(module_or_path) -> ModuleType:
    """A module by dotted name, or a .py file by path, imported (never run as __main__)."""
    if isinstance(module_or_path, ModuleType):
        return module_or_path
    text = str(module_or_path)
    if not (text.endswith(".py") or os.sep in text):
        return importlib.import_module(text)
    path = os.path.abspath(text)  # the kernels' source locations, and so their compile keys, hold this path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {text}")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as when the file runs as a script: it may import its neighbours
    name = Path(path).stem
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == path:
        return loaded  # imported already: running it twice would make new kernel objects
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def kernels_in(module: ModuleType) -> list:
    """The kernels at `module`'s top level, outermost wrappers only (a JITFunction under an
    autotuner is prewarmed with the autotuner's configs, not on its own)."""
    from kiln.signatures import is_kernel

    found = list({id(v): v for v in vars(module).values() if is_kernel(v)}.values())
    wrapped = set()
    for kernel in found:
        inner = kernel
        while hasattr(inner, "fn") and is_kernel(inner.fn):
            inner = inner.fn
            wrapped.add(id(inner))
    return [k for k in found if id(k) not in wrapped]


NO_SIGNATURES = "declares no signatures (jit(prewarm=[...]))"  # a device function, or a kernel left out


def from_module(module_or_path, targets: Iterable[str]) -> ModuleKernels:
    """Every declared signature x autotune config of `module_or_path`'s kernels, for each target."""
    from kiln.signatures import expand, innermost

    targets = list(targets)
    out = ModuleKernels()
    for kernel in kernels_in(load_module(module_or_path)):
        if not innermost(kernel).prewarm:
            out.skipped.append((innermost(kernel).__name__, NO_SIGNATURES))
            continue
        expansion = expand(kernel)
        out.skipped += [(s.label, s.reason) for s in expansion.skipped]
        for declared in expansion.declared:
            try:
                fn, options = declared.build()
            except Exception as e:  # noqa: BLE001 - one bad signature must not stop the others
                out.errors.append((declared.label, ", ".join(targets), f"{type(e).__name__}: {e}"))
                continue
            for target in targets:
                out.kernels.append((fn, target, options))
                out.labels.append(declared.label)
    return out


def local_target() -> str | None:
    """The local GPU's target, or None on a machine without one."""
    from kiln.runtime import cuda_driver
    return cuda_driver.compile_target(0) if cuda_driver.is_available() else None


def prewarm_module(module_or_path, targets: Iterable[str] = (), *, address: str | None = None,
                   progress: Callable[[int, int], None] | None = None, timeout: float | None = None,
                   tls_ca=None) -> Report:
    """Compile every declared signature (x autotune config) of the kernels of a module (a dotted
    name, a .py path or the module itself) for `targets` (default: the local GPU's), in
    parallel on the daemon's pool. Errors are reported per kernel, never raised."""
    targets = list(targets) or [t for t in (local_target(),) if t]
    if not targets:
        raise ValueError("no GPU here: name the targets to compile for (targets=[...], --target sm_90a)")
    found = from_module(module_or_path, targets)
    report = through_daemon(found.kernels, address, tls_ca, progress=progress, timeout=timeout, labels=found.labels)
    report.errors[:0] = found.errors
    report.skipped = found.skipped
    return report
