"""Triton's `knobs.compilation.listener`: told of every compile with its times (a CompileTimes).

kiln's stages: `ir_initialization` is the kernel's source to block IR (for a cached kernel, the
lookup); the lowering stages are what kiln then makes of it in that compile: the binary
(`cubin`, through kiln's tiers) for a GPU, the block IR's text (`kir`) for the interpreter;
`store_results` is keeping the kernel for later launches. A cached kernel has no lowering stage.
"""
from __future__ import annotations

import math
import time


def listener():
    """The listener set (knobs.compilation.listener), or None."""
    from .dropin import knobs
    return knobs.compilation.listener


def _micros(start: float, end: float) -> int:
    return max(1, math.ceil((end - start) * 1e6))  # a stage that ran took some time


class CompileTimer:
    def __init__(self):
        self.start = time.perf_counter()
        self.ir_done = None
        self.stages: list = []

    def ir_initialized(self) -> None:
        self.ir_done = time.perf_counter()

    def stage(self, name: str) -> None:
        self.stages.append((name, time.perf_counter()))

    def times(self):
        from .dropin.knobs import CompileTimes
        now = time.perf_counter()
        if self.ir_done is None:  # a cached kernel: its lookup
            return CompileTimes(_micros(self.start, now), [], 0)
        stages, begin = [], self.ir_done
        for name, end in self.stages:
            stages.append((name, _micros(begin, end)))
            begin = end
        return CompileTimes(_micros(self.start, self.ir_done), stages, _micros(begin, now))


def notify(call, timer: CompileTimer, src, metadata: dict, cache_hit: bool, metadata_group=None) -> None:
    call(src=src, metadata=metadata, metadata_group=dict(metadata_group or {}), times=timer.times(),
         cache_hit=cache_hit)
