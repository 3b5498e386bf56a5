"""Every `descriptor_load` that no TMA ring took becomes its fallback (the same block
loaded through pointers, which the frontend emitted beside it).

`smem_pipeline` (sm_90a) copies a host TensorDescriptor's blocks with TMA where they feed
wgmma in a pipelined loop; everywhere else, and on every other target, the pointer load
is the load. Runs after `smem_pipeline`; passes after it never see the op.
"""
from __future__ import annotations

from .rewrite import replace_uses

name = "descriptor_loads"


def apply(fn, ctx=None) -> None:
    strip(fn, [op for op in fn.walk() if op.name == "descriptor_load"])


def strip(fn, ops) -> None:
    """Replace each of `ops` (descriptor_loads) by its fallback value."""
    replace_uses(fn, {op.results[0]: op.operands[-1] for op in ops})
    for op in ops:
        op.parent.ops.remove(op)
