"""Launch options that only some CUDA targets take, refused as Triton 3.9's CUDA backend refuses them.

kiln's block IR is built once for every target, so the check runs when a binary is built for one
(and when `triton.compile` parses its options for a target); the interpreter takes every option,
as Triton's does.

`clc=True` (cluster launch control) asks Triton to turn a tile kernel into a persistent one whose
programs take their next tile from the hardware's scheduler, which Blackwell (sm_100) has. kiln
takes it from sm_100 on and launches the kernel as written, one program per tile: the option
changes which SM runs which tile, never a result. Below sm_100 it is Triton's error.

`num_ctas > 1` (each program a cluster of CTAs) needs thread block clusters, which Hopper (sm_90) has:
kiln takes it from there on and runs each program on one CTA, as the results are the same; below
sm_90 it is Triton's error.
"""
from __future__ import annotations

from .errors import KilnError

CLC_CAPABILITY = 100
CLUSTER_CAPABILITY = 90


class TargetOptionError(KilnError, ValueError):
    """A launch option the target cannot take (a ValueError, as Triton raises it)."""


def check(options: dict, capability: int) -> None:
    """Raise TargetOptionError for an option of `options` that a GPU of `capability` (90 for sm_90) lacks."""
    if options.get("clc") and capability < CLC_CAPABILITY:
        raise TargetOptionError(f"clc=True requires NVIDIA SM100+ (Blackwell); current target is sm_{capability}")
    if (options.get("num_ctas") or 1) > 1 and capability < CLUSTER_CAPABILITY:
        raise TargetOptionError(f"num_ctas > 1 requires NVIDIA SM90+ (Hopper). Current target is sm_{capability}. "
                                "Please set num_ctas=1 or target an SM90+ GPU.")
