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
from .control import set_loop_hints
from .elementwise import cast_value
from .shared import elem_bytes, flats_of, load_elements, store_elements
from .types import reg_type
from ..analysis.access import register_run
from ..analysis.dots import fma_staging


# a thread's FMAs in one trip of the k loop (its outputs x k_vec) up to which the loop is kept one
SMALL_TRIP_FMAS = 64


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
    k_vec, a_stride, a_bytes, total = fma_staging(op)
    base = lw.smem(total)

    def a_flat(idx):  # row (batch * M + m) of A's padded rows
        row = lw.b.add(lw.b.mul(idx[0], lw.i32(M)), idx[1]) if batched else idx[0]
        return lw.b.add(lw.b.mul(row, lw.i32(a_stride)), idx[-1])
    store_elements(lw, base, a_ty, lw.regs(a), [a_flat(idx) for idx in lw.indices(lw.layout(a), a.type.shape)])
    store_elements(lw, base, b_ty, lw.regs(b), flats_of(lw, lw.layout(b), b.type.shape), a_bytes)
    lw.barrier()

    offsets = layout.offsets(out.type.shape)
    indices = lw.indices(layout, out.type.shape)
    rows, cols = OrderedDict(), OrderedDict()  # the thread's rows of A and columns of B, by offset
    for off, idx in zip(offsets, indices):
        # a row of A starts at (batch*M + m) * a_stride, a column of B at batch*K*N + n
        rows.setdefault(off[:-1], a_flat(list(idx[:-1]) + [lw.i32(0)]))
        cols.setdefault((off[0], off[-1]) if batched else off[-1:],
                        lw.b.add(lw.b.mul(idx[0], lw.i32(K * N)), idx[-1]) if batched else idx[-1])
    n_vec = _column_run(layout, len(out.type.shape), N, elem_bytes(b_ty))

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
    # k_vec steps of k per trip: each row's k_vec elements in one load, each run of n_vec columns in one
    a_vals = {off: [cast_value(lw, v, s_a, s_acc) for v in _load_run(lw, base, a_ty, lw.b.add(row, k), k_vec)]
              for off, row in rows.items()}
    b_vals = {}
    for j in range(k_vec):
        k_row = lw.b.mul(lw.b.add(k, lw.i32(j)), lw.i32(N))
        for off, col in cols.items():
            if (off[-1] % n_vec) == 0:
                run = _load_run(lw, base, b_ty, lw.b.add(k_row, col), n_vec, a_bytes)
                for e, v in enumerate(run):
                    b_vals[(j, off[:-1] + (off[-1] + e,))] = cast_value(lw, v, s_b, s_acc)
    new = []
    for p, off in zip(phis, offsets):
        row, col = off[:-1], ((off[0], off[-1]) if batched else off[-1:])
        value = p
        for j in range(k_vec):
            x, y = a_vals[row][j], b_vals[(j, col)]
            if s_acc.is_floating():
                fma = lw.intrinsic(f"llvm.fma.{ {'fp32': 'f32', 'fp64': 'f64', 'fp16': 'f16'}[s_acc.name] }", p.type,
                                   [p.type] * 3)
                value = lw.b.call(fma, [x, y, value])
            else:
                value = lw.b.add(value, lw.b.mul(x, y))
        new.append(value)
    k_next = lw.b.add(k, lw.i32(k_vec))
    k.add_incoming(k_next, loop)
    for p, v in zip(phis, new):
        p.add_incoming(v, loop)
    latch = lw.b.cbranch(lw.b.icmp_unsigned("<", k_next, lw.i32(K)), loop, done)
    if len(offsets) * k_vec <= SMALL_TRIP_FMAS:
        # kept a loop: LLVM unrolls a small trip's loop whole, and ptxas then hoists every trip's shared
        # loads ahead of the FMAs (fla's 16x16 fp32 dots on 2 warps: 234 registers, 79 as a loop). A large
        # trip LLVM leaves a loop, and ptxas unrolls it as it sees fit (the hint would say nounroll to it).
        set_loop_hints(lw, latch, "llvm.loop.unroll.disable")
    lw.b.position_at_end(done)
    lw.bind(out, [cast_value(lw, v, s_acc, s_out) for v in new], layout)  # K >= 1, so the loop ran and its last values are the result


def _column_run(layout, rank, N, size) -> int:
    """Columns of B a thread reads in one load: the accumulator layout's runs along N (each
    starting at a multiple of its length), at most 16 bytes, dividing N (so every row's run is
    as aligned as the first's)."""
    d, run = register_run(layout)
    if d != rank - 1:
        return 1
    run = min(run, max(1, 16 // size))
    while N % run:
        run //= 2
    return max(1, run)


def _load_run(lw, base, elem_ty, flat, n, byte_offset=0):
    """The n elements from flat index `flat` on (n a power of two, the address n elements
    aligned): one vector load."""
    if n == 1:
        return load_elements(lw, base, elem_ty, [flat], byte_offset)
    ptr = lw.smem_ptr(base, elem_ty, flat, byte_offset)
    vec = lw.b.load(ptr, typ=ir.VectorType(elem_ty, n), align=n * elem_bytes(elem_ty))
    return [lw.b.extract_element(vec, lw.i32(i)) for i in range(n)]


def _mma_dot(lw, op):
    from .mma import lower_mma_dot
    return lower_mma_dot(lw, op)


RULES = {"dot": _dot, "mma_dot": _mma_dot}
