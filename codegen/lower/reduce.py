"""Reductions and scans with a combine region.

reduce: each thread folds its own registers along the axis, then lanes that hold other
parts of the axis exchange partials with butterfly shuffles (`shfl.sync.bfly`), then
warps exchange through shared memory. The result lives in `Slice(axis, layout)`: every
thread that took part holds the whole result for its remaining coordinates.

scan: the block is moved to a layout where one thread holds each whole line along the
axis and scans it in order (simple and exact; a shuffle-based scan is future work).
"""
from __future__ import annotations

from collections import OrderedDict

import llvmlite.ir as ir

from kiln.ir.types import block_type, scalar_of

from .. import layout as lay
from .shared import elem_bytes, load_elements, store_elements
from .types import GLOBAL_PTR, I32, I64, reg_type


def combine(lw, op, lhs, rhs):
    """Lower op's combine region on (lhs..., rhs...); its yielded values."""
    term = lw.region_values(op.regions[0], [[v] for v in list(lhs) + list(rhs)])
    return [lw.scalar(v) for v in term.operands]


def _to_words(lw, v):
    t = v.type
    if t == GLOBAL_PTR:
        v, t = lw.b.ptrtoint(v, I64), I64
    if isinstance(t, ir.IntType):
        if t.width == 64:
            lo = lw.b.trunc(v, I32)
            hi = lw.b.trunc(lw.b.lshr(v, ir.Constant(I64, 32)), I32)
            return [lo, hi]
        return [lw.b.zext(v, I32) if t.width < 32 else v]
    bits = {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(t)]
    as_int = lw.b.bitcast(v, ir.IntType(bits))
    return _to_words(lw, as_int)


def _from_words(lw, words, t):
    if t == GLOBAL_PTR:
        return lw.b.inttoptr(_from_words(lw, words, I64), GLOBAL_PTR)
    if isinstance(t, ir.IntType):
        if t.width == 64:
            lo, hi = (lw.b.zext(w, I64) for w in words)
            return lw.b.or_(lo, lw.b.shl(hi, ir.Constant(I64, 32)))
        return lw.b.trunc(words[0], t) if t.width < 32 else words[0]
    bits = {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(t)]
    return lw.b.bitcast(_from_words(lw, words, ir.IntType(bits)), t)


def shuffle(lw, v, kind: str, offset, clamp: int):
    """`shfl.sync.<kind>` of any scalar, 32 bits at a time."""
    fn = lw.intrinsic(f"llvm.nvvm.shfl.sync.{kind}.i32", I32, [I32, I32, I32, I32])
    off = offset if isinstance(offset, ir.Value) else lw.i32(offset)
    words = [lw.b.call(fn, [lw.i32(-1), w, off, lw.i32(clamp)]) for w in _to_words(lw, v)]
    return _from_words(lw, words, v.type)


def _reduce(lw, op):
    src = op.operands[0]
    axis, shape = op.attrs["axis"], src.type.shape
    layout = lw.layout(src)
    inputs = [lw.regs(v, layout) for v in op.operands]
    offsets = layout.offsets(shape)
    groups: OrderedDict = OrderedDict()
    for i, off in enumerate(offsets):
        groups.setdefault(off[:axis] + off[axis + 1:], []).append((off[axis], i))
    partial = {}
    for key, members in groups.items():
        members.sort()
        acc = [regs[members[0][1]] for regs in inputs]
        for _, i in members[1:]:
            acc = combine(lw, op, acc, [regs[i] for regs in inputs])
        partial[key] = acc
    lanes = layout.lane_axis(shape, axis)
    k = 1
    while k < lanes.distinct:
        for key, acc in partial.items():
            other = [shuffle(lw, v, "bfly", k * lanes.stride, 0x1F) for v in acc]
            partial[key] = combine(lw, op, acc, other)
        k *= 2
    warps = layout.warp_axis(shape, axis)
    if warps.distinct > 1:
        partial = _across_warps(lw, op, layout, shape, axis, groups, partial, warps)
    _bind_results(lw, op, layout, axis, partial)


def _across_warps(lw, op, layout, shape, axis, groups, partial, warps):
    out_shape = shape[:axis] + shape[axis + 1:]
    numel = 1
    for d in out_shape:
        numel *= d
    types = [v.type for v in next(iter(partial.values()))]
    sizes = [warps.distinct * numel * max(8, elem_bytes(t)) for t in types]
    base = lw.smem(sum(sizes))
    indices = lw.indices(layout, shape)
    warp_id = lw.id_along(warps, lw.warp, lw.b)
    slot = lw.b.and_(warp_id, lw.i32(warps.distinct - 1))
    flat_of = {}
    for key, members in groups.items():
        idx = indices[members[0][1]]
        flat_of[key] = lw.flat_index(idx[:axis] + idx[axis + 1:], out_shape) if out_shape else lw.i32(0)
    offset = 0
    for j, t in enumerate(types):
        for key, acc in partial.items():
            pos = lw.b.add(lw.b.mul(slot, lw.i32(numel)), flat_of[key])
            store_elements(lw, base, t, [acc[j]], [pos], offset)
        offset += sizes[j]
    lw.barrier()
    result = {}
    for key in partial:
        acc = None
        for w in range(warps.distinct):
            pos = lw.b.add(lw.i32(w * numel), flat_of[key])
            vals, offset = [], 0
            for j, t in enumerate(types):
                vals += load_elements(lw, base, t, [pos], offset)
                offset += sizes[j]
            acc = vals if acc is None else combine(lw, op, acc, vals)
        result[key] = acc
    return result


def _bind_results(lw, op, layout, axis, partial):
    for j, r in enumerate(op.results):
        if isinstance(r.type, block_type):
            out_layout = lw.layout(r) or lay.Slice(axis, layout)
            regs = [partial[off][j] for off in out_layout.offsets(r.type.shape)]
            lw.bind(r, regs, out_layout)
        else:
            lw.bind(r, [partial[()][j]])


def _scan(lw, op):
    src = op.operands[0]
    axis, shape = op.attrs["axis"], src.type.shape
    others = [d for d in reversed(range(len(shape))) if d != axis]
    lines = lay.blocked_for(shape, (axis, *others), shape[axis], lw.num_warps)
    inputs = [lw.regs(v, lines) for v in op.operands]
    offsets = lines.offsets(shape)
    groups: OrderedDict = OrderedDict()
    for i, off in enumerate(offsets):
        groups.setdefault(off[:axis] + off[axis + 1:], []).append((off[axis], i))
    outs = [[None] * len(offsets) for _ in inputs]
    for members in groups.values():
        members.sort(reverse=bool(op.attrs.get("reverse")))
        acc = None
        for _, i in members:
            x = [regs[i] for regs in inputs]
            acc = x if acc is None else combine(lw, op, acc, x)
            for j, v in enumerate(acc):
                outs[j][i] = v
    for r, regs in zip(op.results, outs):
        lw.bind(r, regs, lines)


RULES = {"reduce": _reduce, "scan": _scan}
