"""The warps a kernel's CTA runs: its num_warps (as many times as a `warp_specialize` op replicates
its first region), plus those of the op's producer partition."""
from __future__ import annotations


def _ops(fn):
    return [op for op in fn.walk() if op.name == "warp_specialize"]


def cta_warps(fn, num_warps: int) -> int:
    ops = _ops(fn)
    if not ops:
        return num_warps
    return max(num_warps * op.attrs.get("replicas", 1) + op.attrs["warps"] for op in ops)


def replicated(fn) -> bool:
    """Does a warp_specialize op run its first region on more than one group of num_warps warps?"""
    return any(op.attrs.get("replicas", 1) > 1 for op in _ops(fn))
