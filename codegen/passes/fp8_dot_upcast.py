"""fp8 dots that no fp8 instruction runs -> the same dots on fp16 operands, as Triton does on GPUs
without fp8 mma.sync.

Where a dot was not taken by wgmma (smem_pipeline runs first) and the target's PTX has no fp8
mma.sync (sm_89 on needs PTX 8.4; the LLVM kiln builds with writes 8.0), its e4m3 and e5m2 operands
are cast to fp16, which holds every fp8 value exactly: the dot then runs on fp16 mma.sync (16x8x16
steps, products exact, sums in the accumulator's type) instead of on FMAs. Dots whose fp16 form no
mma runs either (a shape of fewer than 16 rows, 8 columns or 16 of K) stay as they are.
"""
from __future__ import annotations

from kiln.ir.core import Operation
from kiln.ir.types import float16, scalar_of

from ..analysis.dots import fp8_mma, mma_eligible

name = "fp8_dot_upcast"

FP8 = ("fp8e4nv", "fp8e5")


def apply(fn, ctx) -> None:
    if fp8_mma(ctx):
        return
    for dot in [op for op in fn.walk() if op.name == "dot"]:
        a, b, acc = dot.operands
        if scalar_of(a.type).name not in FP8 or scalar_of(b.type).name not in FP8:
            continue
        block = dot.parent
        casts = [Operation("cast", [x], [x.type.with_element_ty(float16)], {}, loc=dot.loc) for x in (a, b)]
        upcast = Operation("dot", [casts[0].results[0], casts[1].results[0], acc], [], dict(dot.attrs), loc=dot.loc)
        if not mma_eligible(upcast, ctx):
            continue
        at = block.ops.index(dot)
        for op in casts:
            op.parent = block
        block.ops[at:at] = casts
        dot.operands = [casts[0].results[0], casts[1].results[0], acc]
