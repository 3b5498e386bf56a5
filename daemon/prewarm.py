"""Prewarming: compile many kernels through the daemon's pool before a run needs them.

The kernels come from a manifest (JSON lines that a run records: block IR text, target,
options) or from the node cache itself, which keeps every kernel's IR; either can be
replayed for other targets or after a kiln upgrade, on a machine without a GPU.
"""
from __future__ import annotations

import fcntl
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
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


def _add(kernels: list, seen: set, fn_text: str, target: str, options: dict) -> None:
    marker = (fn_text, target, json.dumps(options, sort_keys=True))
    if marker not in seen:
        seen.add(marker)
        kernels.append((parse_function(fn_text), target, options))


@dataclass
class Report:
    total: int = 0
    statuses: Counter = field(default_factory=Counter)  # CACHE_HIT / CACHE_MISS / CACHE_MERGED / ERROR
    errors: list = field(default_factory=list)           # (kernel name, target, message)

    @property
    def ok(self) -> bool:
        return not self.errors


def prewarm(kernels: list[Kernel], client, progress: Callable[[int, int], None] | None = None,
            timeout: float | None = None) -> Report:
    """Compile `kernels` through `client`'s daemon, all at once: the pool runs them in parallel."""
    from kiln.proto import compiler_pb2 as pb

    report = Report(total=len(kernels))
    if not kernels:
        return report
    for done, item in enumerate(client.compile_many(kernels, timeout=timeout), 1):
        if item.HasField("error"):
            fn, target, _ = kernels[item.index]
            report.statuses["ERROR"] += 1
            report.errors.append((fn.name, target, item.error.message))
        else:
            report.statuses[pb.CacheStatus.Name(item.result.cache_status)] += 1
        if progress:
            progress(done, len(kernels))
    return report


def progress_bar(done: int, total: int, out=sys.stderr) -> None:
    width = 30
    filled = width * done // total
    out.write(f"\rprewarm [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        out.write("\n")
    out.flush()
