"""Which engine runs each `dot`, and where a tensor-core dot in a loop stages its operands.

Every `dot` gets `engine = "mma"` (mma.sync: the types, shapes and target allow it and the layouts
pass gave its result an mma layout) or `engine = "fma"` (each thread's FMAs over k). Lowering
emits what the attr says and decides nothing itself.

An mma.sync dot with operands in registers writes them to shared memory before its fragment loads.
Inside a loop it gets two staging buffers of its own, taken in turns
(`staging = [offset, bytes]`: the first at `offset` bytes into shared memory, the second right
after it), so a thread may write the next k-step's operands while slower warps still read the
last ones, and the barrier before the writes goes (one barrier per k-step, not two). They lie after
smem_alloc's buffers; the transient scratch area then starts after them everywhere. Where that
would take the kernel past the shared memory of one CTA, no dot gets buffers and each stages in
the scratch area after a barrier. Outside loops a dot always stages there.

    %d = dot %a, %b, %acc {engine = "mma", staging = [33792, 4608]}

Runs last: the decision adds up the scratch area's extent, which scratch_barriers plans.
"""
from __future__ import annotations

from kiln.ir.layout import is_mma_layout

from ..analysis.dots import mma_eligible, mma_staging
from ..analysis.scratch_use import scratch_extent
from ..analysis.shared_buffers import reserved_bytes
from ..occupancy import max_shared_per_cta
from .rewrite import in_loop

name = "dot_staging"
ALIGN = 16


def apply(fn, ctx) -> None:
    dots = [op for op in fn.walk() if op.name == "dot"]
    for op in dots:
        op.attrs.pop("staging", None)  # only this pass's plans count, never an incoming attr
        op.attrs["engine"] = "mma" if runs_on_mma(op, ctx) else "fma"
    looped = [op for op in dots if op.attrs["engine"] == "mma" and in_loop(op)]
    if not looped:
        return
    offset = reserved_bytes(fn)
    for op in looped:
        size = -(-mma_staging(op)[-1] // ALIGN) * ALIGN
        op.attrs["staging"] = [offset, size]
        offset += 2 * size
    if offset + scratch_extent(fn) > max_shared_per_cta(ctx.target.capability):
        for op in looped:
            del op.attrs["staging"]


def runs_on_mma(op, ctx) -> bool:
    """Can mma.sync run `dot` op: its types, shapes and target, and an mma layout for its result?"""
    out = op.results[0]
    return mma_eligible(op, ctx) and is_mma_layout(out.type.encoding, out.type.shape, ctx.num_warps)
