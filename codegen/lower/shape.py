"""Creation, grid queries and shape ops.

`splat`, `broadcast` and `expand_dims` move no data when the layouts line up (the layout
pass arranges that); so do `reshape`, `permute`, `join` and `split` where their layouts keep
every element in its thread, and `cat` where both halves do (kiln.ir.layout_moves: a renaming of
registers). Otherwise they exchange elements through shared memory with the index map of the op.
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import block_type, scalar_of

from kiln.ir import layout as lay
from kiln.ir.layout_moves import register_moves
from .shared import exchange, flats_of
from .types import reg_type


def _program_id(lw, op):
    lw.bind(op.results[0], [lw.program_id(op.attrs["axis"])])


def _num_programs(lw, op):
    lw.bind(op.results[0], [lw.sreg("nctaid." + "xyz"[op.attrs["axis"]])])


def _arange(lw, op):
    out = op.results[0]
    layout = lw.layout(out)
    start = op.attrs["start"]
    regs = [lw._add_const(idx[0], start) for idx in lw.indices(layout, out.type.shape)]
    lw.bind(out, regs, layout)


def _splat(lw, op):
    out = op.results[0]
    layout = lw.layout(out)
    lw.bind(out, [lw.scalar(op.operands[0])] * len(layout.offsets(out.type.shape)), layout)


def _broadcast(lw, op):
    src, out = op.operands[0], op.results[0]
    layout = lw.layout(out)
    regs = lw.regs(src, layout)
    src_shape, shape = src.type.shape, out.type.shape
    position = {off: i for i, off in enumerate(layout.offsets(src_shape))}
    out_regs = []
    for off in layout.offsets(shape):
        key = tuple(0 if s == 1 else o for s, o in zip(src_shape, off))
        out_regs.append(regs[position[key]])
    lw.bind(out, out_regs, layout)


def _expand_dims(lw, op):
    src, out = op.operands[0], op.results[0]
    layout, src_layout = lw.layout(out), lw.layout(src)
    axis = op.attrs["axis"]
    free = (isinstance(src_layout, lay.Slice) and src_layout.dim == axis and src_layout.parent == layout) or \
           (isinstance(src_layout, lay.Blocked) and src_layout.insert_dim(axis) == layout)
    if free:
        lw.bind(out, lw.regs(src), layout)
    else:  # the source in the slice of `layout`: index math is recomputed there, no shared memory
        lw.bind(out, lw.regs(src, lay.Slice(axis, layout)), layout)


def _convert_layout(lw, op):
    """Through shared memory, or for index math recomputed in the new layout (Lowering.regs)."""
    out = op.results[0]
    layout = lw.layout(out)
    outer, lw.converting = lw.converting, True
    try:
        lw.bind(out, lw.regs(op.operands[0], layout), layout)
    finally:
        lw.converting = outer


def _renamed(lw, op, which: int = 0):
    """Result `which` of a shape op as its operands' registers, where its layouts keep every
    element in its thread; else None."""
    moves = register_moves(op, lw.num_warps, which)
    if moves is None:
        return None
    regs = [lw.regs(v) for v in op.operands]
    return [regs[k][i] for k, i in moves]


def _bind_renamed(lw, op) -> bool:
    """Binds every result of `op` renamed (True), or nothing (False)."""
    renamed = [_renamed(lw, op, i) for i in range(len(op.results))]
    if any(r is None for r in renamed):
        return False
    for r, regs in zip(op.results, renamed):
        lw.bind(r, regs, lw.layout(r))
    return True


def _reshape(lw, op):
    """Row-major reshape: the flat index of each element is unchanged."""
    if _bind_renamed(lw, op):
        return
    src, out = op.operands[0], op.results[0]
    layout = lw.layout(out)
    (regs,) = exchange(lw, reg_type(scalar_of(src.type)), src.type.numel,
                       [(lw.regs(src), flats_of(lw, lw.layout(src), src.type.shape))],
                       [flats_of(lw, layout, out.type.shape)])
    lw.bind(out, regs, layout)


def _permute(lw, op):
    if _bind_renamed(lw, op):
        return
    src, out = op.operands[0], op.results[0]
    order = op.attrs["order"]
    layout = lw.layout(out)

    def to_source(idx):
        src_idx = [None] * len(order)
        for i, o in enumerate(order):
            src_idx[o] = idx[i]
        return src_idx, src.type.shape
    (regs,) = exchange(lw, reg_type(scalar_of(src.type)), src.type.numel,
                       [(lw.regs(src), flats_of(lw, lw.layout(src), src.type.shape))],
                       [flats_of(lw, layout, out.type.shape, to_source)])
    lw.bind(out, regs, layout)


def _scaled(lw, flats, scale, plus):
    out = []
    for f in flats:
        v = lw.b.mul(f, lw.i32(scale)) if scale != 1 else f
        out.append(lw.b.add(v, lw.i32(plus)) if plus else v)
    return out


def _join(lw, op):
    if _bind_renamed(lw, op):
        return
    a, b = op.operands
    out = op.results[0]
    layout = lw.layout(out)
    writes = [(lw.regs(v), _scaled(lw, flats_of(lw, lw.layout(v), v.type.shape), 2, k)) for k, v in enumerate((a, b))]
    (regs,) = exchange(lw, reg_type(scalar_of(a.type)), out.type.numel, writes, [flats_of(lw, layout, out.type.shape)])
    lw.bind(out, regs, layout)


def _split(lw, op):
    if _bind_renamed(lw, op):
        return
    src = op.operands[0]
    writes = [(lw.regs(src), flats_of(lw, lw.layout(src), src.type.shape))]
    reads = []
    for k, r in enumerate(op.results):
        if isinstance(r.type, block_type):
            reads.append(_scaled(lw, flats_of(lw, lw.layout(r), r.type.shape), 2, k))
        else:
            reads.append([lw.i32(k)])
    results = exchange(lw, reg_type(scalar_of(src.type)), src.type.numel, writes, reads)
    for r, regs in zip(op.results, results):
        lw.bind(r, regs, lw.layout(r))


def _cat(lw, op):
    if _bind_renamed(lw, op):
        return
    a, b = op.operands
    out = op.results[0]
    layout = lw.layout(out)
    writes = [(lw.regs(v), _scaled(lw, flats_of(lw, lw.layout(v), v.type.shape), 1, k * a.type.numel))
              for k, v in enumerate((a, b))]
    (regs,) = exchange(lw, reg_type(scalar_of(a.type)), out.type.numel, writes, [flats_of(lw, layout, out.type.shape)])
    lw.bind(out, regs, layout)


def _gather(lw, op):
    """out[i] = src[i with i[axis] replaced by index[i]], through shared memory."""
    src, index = op.operands
    out = op.results[0]
    axis = op.attrs["axis"]
    layout = lw.layout(out)
    idx_regs = lw.regs(index, layout)
    reads = []
    for reg, idx in zip(idx_regs, lw.indices(layout, out.type.shape)):
        pos = reg if reg.type.width == 32 else (lw.b.trunc(reg, ir.IntType(32)) if reg.type.width > 32
                                                  else lw.b.sext(reg, ir.IntType(32)))
        where = list(idx)
        where[axis] = pos
        reads.append(lw.flat_index(where, src.type.shape))
    (regs,) = exchange(lw, reg_type(scalar_of(src.type)), src.type.numel,
                       [(lw.regs(src), flats_of(lw, lw.layout(src), src.type.shape))], [reads])
    lw.bind(out, regs, layout)


def _histogram(lw, op):
    """Counts of values in [0, num_bins): shared-memory counters bumped with atomics by
    one owner per element, then read back in the result's layout."""
    from .types import I32
    values = op.operands[0]
    out = op.results[0]
    bins = op.attrs["num_bins"]
    layout = lw.layout(values)
    regs = lw.regs(values, layout)
    masks = lw.regs(op.operands[1], layout) if len(op.operands) > 1 else [None] * len(regs)
    owner = lw.owner_mask(layout, values.type.shape)
    base = lw.smem(bins * 4)
    threads = 32 * lw.num_warps
    for start in range(0, bins, threads):  # zero the counters
        i = lw.b.add(lw.thread, lw.i32(start))
        with lw.b.if_then(lw.b.icmp_unsigned("<", i, lw.i32(bins))):
            lw.b.store(ir.Constant(I32, 0), lw.smem_ptr(base, I32, i))
    lw.barrier()
    signed = scalar_of(values.type).signed
    for v, m in zip(regs, masks):
        bin_ = lw.b.sext(v, ir.IntType(64)) if signed else lw.b.zext(v, ir.IntType(64))
        ok = lw.b.icmp_unsigned("<", bin_, ir.Constant(ir.IntType(64), bins))  # negatives wrap high
        for extra in (m, owner):
            if extra is not None:
                ok = lw.b.and_(ok, extra)
        with lw.b.if_then(ok):
            slot = lw.smem_ptr(base, I32, lw.b.trunc(bin_, I32))
            lw.b.atomic_rmw("add", slot, ir.Constant(I32, 1), 'syncscope("block") monotonic')
    lw.barrier()
    out_layout = lw.layout(out)
    counts = [lw.b.load(lw.smem_ptr(base, I32, idx[0]), typ=I32) for idx in lw.indices(out_layout, out.type.shape)]
    lw.bind(out, counts, out_layout)


RULES = {
    "gather": _gather, "histogram": _histogram,
    "program_id": _program_id, "num_programs": _num_programs, "arange": _arange,
    "splat": _splat, "broadcast": _broadcast, "expand_dims": _expand_dims,
    "convert_layout": _convert_layout, "reshape": _reshape, "permute": _permute, "join": _join, "split": _split, "cat": _cat,
}
