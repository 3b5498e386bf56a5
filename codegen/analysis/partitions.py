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


def dot_replicas(num_warps: int) -> int:
    """How many groups of num_warps warps a warp-specialized GEMM runs its dots on at most: one
    warpgroup of dots is replicated to take turns with another (ping-pong), more are not."""
    return 2 if num_warps == 4 else 1
