"""`dot(a, b, acc)`: on tensor cores (`mma.sync`, kiln.codegen.lower.mma) where the dot_staging
pass said `engine = "mma"`, else a and b are staged in shared memory (row-major) and each thread
runs a loop over k doing FMAs for its accumulator registers, loading the a-rows and
b-columns it needs once per k. Inputs are widened to the accumulator's type (fp16/bf16
-> fp32, int8 -> int32). Correct for every dtype. `mma_dot` (operands in ring tiles) is
lowered by kiln.codegen.lower.mma too.
"""
from __future__ import annotations

from collections import OrderedDict

import llvmlite.ir as ir

from kiln.ir.types import float32, scalar_of

from .context import LoweringError
from .elementwise import cast_value
from .shared import elem_bytes, flats_of, load_elements, store_elements
from .types import reg_type


def _dot(lw, op):
    a, b, acc = op.operands
    out = op.results[0]
    engine = op.attrs.get("engine")
    if engine == "mma":
        from .mma import lower_mma
        return lower_mma(lw, op)
    if engine != "fma":
        raise LoweringError(f"dot without an engine ({engine!r}): the dot_staging pass says mma or fma")
    batched = len(out.type.shape) == 3  # [B, M, K] x [B, K, N]: batch index leads every key
    (M, K), (_, N) = a.type.shape[-2:], b.type.shape[-2:]
    layout = lw.layout(out)
    s_a, s_b, s_out = scalar_of(a.type), scalar_of(b.type), scalar_of(out.type)  # e4m3 x e5m2 differ
    # fp16/bf16 accumulators sum in fp32 and round once at the end
    s_acc = float32 if s_out.name in ("fp16", "bf16") else s_out
    acc_regs = [cast_value(lw, r, s_out, s_acc) for r in lw.regs(acc, layout)]
    a_ty, b_ty = reg_type(a.type), reg_type(b.type)
    a_bytes = a.type.numel * elem_bytes(a_ty)
    base = lw.smem(a_bytes + b.type.numel * elem_bytes(b_ty))
    store_elements(lw, base, a_ty, lw.regs(a), flats_of(lw, lw.layout(a), a.type.shape))
    store_elements(lw, base, b_ty, lw.regs(b), flats_of(lw, lw.layout(b), b.type.shape), a_bytes)
    lw.barrier()

    offsets = layout.offsets(out.type.shape)
    indices = lw.indices(layout, out.type.shape)
    rows, cols = OrderedDict(), OrderedDict()
    for off, idx in zip(offsets, indices):
        # a row of A starts at (batch*M + m)*K, a column of B at batch*K*N + n
        if batched:
            rows.setdefault(off[:2], lw.b.add(lw.b.mul(idx[0], lw.i32(M)), idx[1]))
            cols.setdefault((off[0], off[2]), (lw.b.mul(idx[0], lw.i32(K)), idx[2]))
        else:
            rows.setdefault(off[:1], idx[0])
            cols.setdefault(off[1:], (lw.i32(0), idx[1]))

    pre = lw.b.block
    loop = lw.llfn.append_basic_block("dot.k")
    done = lw.llfn.append_basic_block("dot.done")
    lw.b.branch(loop)
    lw.b.position_at_end(loop)
    k = lw.b.phi(ir.IntType(32))
    k.add_incoming(lw.i32(0), pre)
    phis = [lw.b.phi(r.type) for r in acc_regs]
    for p, r in zip(phis, acc_regs):
        p.add_incoming(r, pre)
    a_vals = {}
    for off, row in rows.items():
        (v,) = load_elements(lw, base, a_ty, [lw.b.add(lw.b.mul(row, lw.i32(K)), k)])
        a_vals[off] = cast_value(lw, v, s_a, s_acc)
    b_vals = {}
    for off, (krow0, col) in cols.items():
        krow = lw.b.add(krow0, k)
        (v,) = load_elements(lw, base, b_ty, [lw.b.add(lw.b.mul(krow, lw.i32(N)), col)], a_bytes)
        b_vals[off] = cast_value(lw, v, s_b, s_acc)
    new = []
    for p, off in zip(phis, offsets):
        x, y = (a_vals[off[:2]], b_vals[(off[0], off[2])]) if batched else (a_vals[off[:1]], b_vals[off[1:]])
        if s_acc.is_floating():
            fma = lw.intrinsic(f"llvm.fma.{ {'fp32': 'f32', 'fp64': 'f64', 'fp16': 'f16'}[s_acc.name] }", p.type, [p.type] * 3)
            new.append(lw.b.call(fma, [x, y, p]))
        else:
            new.append(lw.b.add(p, lw.b.mul(x, y)))
    k_next = lw.b.add(k, lw.i32(1))
    k.add_incoming(k_next, loop)
    for p, v in zip(phis, new):
        p.add_incoming(v, loop)
    lw.b.cbranch(lw.b.icmp_unsigned("<", k_next, lw.i32(K)), loop, done)
    lw.b.position_at_end(done)
    lw.bind(out, [cast_value(lw, v, s_acc, s_out) for v in new], layout)  # K >= 1, so the loop ran and its last values are the result


def _mma_dot(lw, op):
    from .mma import lower_mma_dot
    return lower_mma_dot(lw, op)


RULES = {"dot": _dot, "mma_dot": _mma_dot}
