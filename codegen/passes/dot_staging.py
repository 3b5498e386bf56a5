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

The function's `dot_staging = N` says how many bytes the buffers take. Each dot's pair is its own,
so a loop of many small dots takes many pairs (fla's gated delta rule kernels, 2 warps: 57-173 KB
where Triton's kernel asks 7-41 KB, one CTA per SM where Triton's has four): `compile` builds the
kernel again without them (`dot_staging = 0`, every dot staging in the scratch area as Triton's
conversions do) where the link shows them costing a CTA per SM, and keeps what holds more CTAs.

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
    if fn.attrs.get("dot_staging", 1) == 0:
        return  # the variant without buffers (kiln.codegen.compiler)
    fn.attrs.pop("dot_staging", None)  # the bytes are this pass's to count, never an incoming attr's
    looped = [op for op in dots if op.attrs["engine"] == "mma" and in_loop(op)]
    if not looped:
        return
    start = offset = reserved_bytes(fn)
    for op in looped:
        size = -(-mma_staging(op)[-1] // ALIGN) * ALIGN
        op.attrs["staging"] = [offset, size]
        offset += 2 * size
    if offset + scratch_extent(fn) > max_shared_per_cta(ctx.target.capability):
        for op in looped:
            del op.attrs["staging"]
        return
    fn.attrs["dot_staging"] = offset - start


def runs_on_mma(op, ctx) -> bool:
    """Can mma.sync run `dot` op: its types, shapes and target, and an mma layout for its result?"""
    out = op.results[0]
    return mma_eligible(op, ctx) and is_mma_layout(out.type.encoding, out.type.shape, ctx.num_warps)
