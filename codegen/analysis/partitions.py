"""The warps a kernel's CTA runs: its num_warps, plus those of a `warp_specialize` partition."""
from __future__ import annotations


def cta_warps(fn, num_warps: int) -> int:
    return num_warps + max((op.attrs["warps"] for op in fn.walk() if op.name == "warp_specialize"), default=0)
