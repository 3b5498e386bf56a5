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

from kiln.ir.types import block_type

from kiln.ir import layout as lay
from .shared import elem_bytes, load_elements, store_elements
from .types import GLOBAL_PTR, I32, I64
from ..scratch_bytes import cross_warp_sizes, scan_tile


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
        partial = _across_warps(lw, op, layout, shape, axis, groups, partial, warps, lanes)
    _bind_results(lw, op, layout, axis, partial)


def _across_warps(lw, op, layout, shape, axis, groups, partial, warps, lanes):
    """Each warp's partials through the scratch area, written by the first lane along the axis of each
    group that holds one: its other lanes hold the same sum, but not always the same bits (a product
    contracted into the shuffles' first add: the lane's own product unrounded, its neighbour's rounded),
    and lanes writing one address different values raced (racecheck's WAW), the sum read back being
    whichever landed last."""
    out_shape = shape[:axis] + shape[axis + 1:]
    numel = 1
    for d in out_shape:
        numel *= d
    types = [v.type for v in next(iter(partial.values()))]
    sizes = cross_warp_sizes(warps.distinct, numel, [elem_bytes(t) for t in types])
    base = lw.smem(sum(sizes))
    indices = lw.indices(layout, shape)
    warp_id = lw.id_along(warps, lw.warp, lw.b)
    slot = lw.b.and_(warp_id, lw.i32(warps.distinct - 1))
    flat_of = {}
    for key, members in groups.items():
        idx = indices[members[0][1]]
        flat_of[key] = lw.flat_index(idx[:axis] + idx[axis + 1:], out_shape) if out_shape else lw.i32(0)
    first = lw.b.icmp_unsigned("==", lw.id_along(lanes, lw.lane, lw.b), lw.i32(0))
    with lw.if_then(first):
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


class _Prefix:
    """A combine of earlier elements that may be absent: `has` is True (statically
    present), False (statically absent) or an i1 known only at run time."""

    def __init__(self, vals=None, has=False):
        self.vals, self.has = vals, has

    def then(self, lw, op, vals, has):
        """This prefix followed by `vals` (present where `has`)."""
        if has is False:
            return self
        if self.has is False:
            return _Prefix(vals, has)
        both = combine(lw, op, self.vals, vals)
        if has is True:
            if self.has is True:
                return _Prefix(both, True)
            return _Prefix(_select(lw, self.has, both, vals), True)
        if self.has is True:
            return _Prefix(_select(lw, has, both, self.vals), True)
        picked = _select(lw, has, _select(lw, self.has, both, vals), self.vals)
        return _Prefix(picked, lw.b.or_(self.has, has))

    def apply(self, lw, op, vals):
        if self.has is False:
            return vals
        both = combine(lw, op, self.vals, vals)
        return both if self.has is True else _select(lw, self.has, both, vals)


def _select(lw, cond, a, b):
    return [lw.b.select(cond, x, y) for x, y in zip(a, b)]


def _scan(lw, op):
    """Scan along `axis` in the operand's own layout: each thread scans its run of
    elements, lanes scan their totals with `shfl.sync.up` (down when reversed), warps
    add the totals of the warps before them through shared memory, and each repetition
    of the layout tile starts from the total of the ones before."""
    src = op.operands[0]
    axis, shape = op.attrs["axis"], src.type.shape
    reverse = bool(op.attrs.get("reverse"))
    layout = lw.layout(src)
    inputs = [lw.regs(v, layout) for v in op.operands]
    offsets = layout.offsets(shape)
    tile = scan_tile(layout, shape, axis)
    chunks: OrderedDict = OrderedDict()  # (other coords, repetition) -> register ids in scan order
    for i, off in enumerate(offsets):
        key = off[:axis] + off[axis + 1:]
        chunks.setdefault((key, off[axis] // tile), []).append((off[axis], i))
    for members in chunks.values():
        members.sort(reverse=reverse)
    reps = sorted({rep for _, rep in chunks}, reverse=reverse)
    keys = list(OrderedDict.fromkeys(key for key, _ in chunks))
    lanes, warps = layout.lane_axis(shape, axis), layout.warp_axis(shape, axis)
    lane_pos = lw.b.and_(lw.id_along(lanes, lw.lane, lw.b), lw.i32(lanes.distinct - 1))
    warp_pos = lw.b.and_(lw.id_along(warps, lw.warp, lw.b), lw.i32(warps.distinct - 1))
    if reverse:  # count positions from the far end
        lane_pos = lw.b.sub(lw.i32(lanes.distinct - 1), lane_pos)
        warp_pos = lw.b.sub(lw.i32(warps.distinct - 1), warp_pos)

    local, totals = {}, {}
    for ck, members in chunks.items():
        acc, run = None, []
        for _, i in members:
            x = [regs[i] for regs in inputs]
            acc = x if acc is None else combine(lw, op, acc, x)
            run.append(acc)
        local[ck], totals[ck] = run, acc
    lane_incl = {ck: _lane_scan(lw, op, t, lanes, lane_pos, reverse) for ck, t in totals.items()}
    lane_prev = {}
    for ck, incl in lane_incl.items():
        if lanes.distinct > 1:
            kind, clamp = ("down", 0x1F) if reverse else ("up", 0)
            prev = [shuffle(lw, v, kind, lanes.stride, clamp) for v in incl]
            lane_prev[ck] = (prev, lw.b.icmp_unsigned(">", lane_pos, lw.i32(0)))
        else:
            lane_prev[ck] = (None, False)
    warp_prev, rep_totals = _warp_totals(lw, op, layout, shape, axis, chunks, lane_incl, lanes, warps,
                                         lane_pos, warp_pos, reps, reverse)
    outs = [[None] * len(offsets) for _ in inputs]
    for key in keys:
        carry = _Prefix()
        for rep in reps:
            ck = (key, rep)
            if ck not in chunks:
                continue
            prefix = carry
            if warps.distinct > 1:
                prefix = prefix.then(lw, op, *warp_prev[ck])
            prefix = prefix.then(lw, op, *lane_prev[ck])
            for (_, i), vals in zip(chunks[ck], local[ck]):
                for j, v in enumerate(prefix.apply(lw, op, vals)):
                    outs[j][i] = v
            carry = carry.then(lw, op, rep_totals[ck], True)
    for r, regs in zip(op.results, outs):
        lw.bind(r, regs, layout)


def _lane_scan(lw, op, vals, lanes, lane_pos, reverse):
    """Inclusive Hillis-Steele scan over the lanes along the axis."""
    k = 1
    while k < lanes.distinct:
        kind, clamp = ("down", 0x1F) if reverse else ("up", 0)
        other = [shuffle(lw, v, kind, k * lanes.stride, clamp) for v in vals]
        take = lw.b.icmp_unsigned(">=", lane_pos, lw.i32(k))
        vals = _select(lw, take, combine(lw, op, other, vals), vals)
        k *= 2
    return vals


def _warp_totals(lw, op, layout, shape, axis, chunks, lane_incl, lanes, warps, lane_pos, warp_pos, reps, reverse):
    """Per chunk: the combine of the warps before this one (and whether there are any),
    and the whole repetition's total."""
    if warps.distinct == 1:
        if lanes.distinct == 1:
            return {}, dict(lane_incl)
        # the repetition's total sits in the last lane in scan order: fetch it from there
        pos = lw.b.and_(lw.id_along(lanes, lw.lane, lw.b), lw.i32(lanes.distinct - 1))
        last = lw.i32(0) if reverse else lw.i32(lanes.distinct - 1)
        src = lw.b.add(lw.b.sub(lw.lane, lw.b.mul(pos, lw.i32(lanes.stride))), lw.b.mul(last, lw.i32(lanes.stride)))
        return {}, {ck: [shuffle(lw, v, "idx", src, 0x1F) for v in vals] for ck, vals in lane_incl.items()}
    out_shape = shape[:axis] + shape[axis + 1:]
    numel = 1
    for d in out_shape:
        numel *= d
    types = [v.type for v in next(iter(lane_incl.values()))]
    n_reps = len(reps)
    sizes = cross_warp_sizes(n_reps * warps.distinct, numel, [elem_bytes(t) for t in types])
    base = lw.smem(sum(sizes))
    indices = lw.indices(layout, shape)
    flat = {}
    for ck, members in chunks.items():
        idx = indices[members[0][1]]
        flat[ck] = lw.flat_index(idx[:axis] + idx[axis + 1:], out_shape) if out_shape else lw.i32(0)
    rep_slot = {rep: k for k, rep in enumerate(sorted(reps))}
    last_lane = lw.b.icmp_unsigned("==", lane_pos, lw.i32(lanes.distinct - 1))

    def slot(ck, w):
        return lw.b.add(lw.i32((rep_slot[ck[1]] * warps.distinct) * numel), lw.b.add(lw.b.mul(w, lw.i32(numel)), flat[ck]))

    with lw.b.if_then(last_lane):
        for ck, vals in lane_incl.items():
            offset = 0
            for j, t in enumerate(types):
                store_elements(lw, base, t, [vals[j]], [slot(ck, warp_pos)], offset)
                offset += sizes[j]
    lw.barrier()
    warp_prev, rep_totals = {}, {}
    for ck in lane_incl:
        # the warps before this one are a prefix of the running total: warps [0, warp_pos) combined is
        # the total after warp warp_pos - 1 (one combine and one select a warp)
        total = prefix = None
        for w in range(warps.distinct):
            vals, offset = [], 0
            for j, t in enumerate(types):
                vals += load_elements(lw, base, t, [slot(ck, lw.i32(w))], offset)
                offset += sizes[j]
            total = vals if total is None else combine(lw, op, total, vals)
            if w < warps.distinct - 1:
                prefix = total if prefix is None else _select(
                    lw, lw.b.icmp_unsigned("<", lw.i32(w), warp_pos), total, prefix)
        warp_prev[ck] = (prefix, lw.b.icmp_unsigned(">", warp_pos, lw.i32(0)))
        rep_totals[ck] = total
    return warp_prev, rep_totals


RULES = {"reduce": _reduce, "scan": _scan}
