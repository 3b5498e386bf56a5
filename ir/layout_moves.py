"""Shape ops as renamings of registers: `reshape`, `permute`, `join`, `split` and `cat` move no
data when the result's layout gives every thread exactly the elements it already holds.

`derived_layout` is the layout pass's side: from the operand's `Blocked` layout, the result
layout that keeps each element in its thread (join adds a last dim of 2 held by one thread;
split drops one; permute permutes the dims; reshape keeps each lane and warp id bit on the same
bit of the row-major flat index; cat repeats its operands' layout once more along dim 0). Where no
Blocked layout can (a wgmma accumulator reshaped to 3-D on its way to a split, as tutorial 09's
epilogue subtiling does) the same moves apply bit by bit to a `Linear` layout, for the next shape op
to read; the split's halves come out in wgmma layouts again. Triton infers the same layouts.
`register_moves` is lowering's side and the scratch model's: given the layouts both carry, the
source register each result register is, the same for every thread, or None where the op has
to exchange its elements through shared memory after all.
"""
from __future__ import annotations

import functools

import numpy as np

from .layout import Blocked, Linear, as_linear, thread_bases, thread_indices, wgmma_layout
from .types import block_type

RENAMING_OPS = ("reshape", "permute", "join", "split", "cat")


def derived_layout(op, source_layout, num_warps: int):
    """The layout of `op`'s (first) result that keeps every element in the thread holding it in
    `source_layout` (the layout of `op`'s first operand), or None where none does: a Blocked or
    wgmma layout where one does, else a `Linear` one (for another shape op to read)."""
    if source_layout is None:  # (a loop-carried value the layout pass has not reached yet)
        return None
    derived = _blocked_derived(op, source_layout, num_warps) if isinstance(source_layout, Blocked) else None
    return derived if derived is not None else _linear_derived(op, source_layout, num_warps)


def _blocked_derived(op, source_layout: Blocked, num_warps: int) -> Blocked | None:
    src_shape, dst_shape = tuple(op.operands[0].type.shape), tuple(op.results[0].type.shape)
    if op.name == "join":
        rank = source_layout.rank
        return Blocked(source_layout.size_per_thread + (2,), source_layout.threads_per_warp + (1,),
                       source_layout.warps_per_cta + (1,), (rank,) + source_layout.order)
    if op.name == "split":
        last = source_layout.rank - 1
        if source_layout.threads_per_warp[last] != 1 or source_layout.warps_per_cta[last] != 1 or last == 0:
            return None  # (one lane and warp along the pair: both of its elements in each thread)
        return Blocked(source_layout.size_per_thread[:last], source_layout.threads_per_warp[:last],
                       source_layout.warps_per_cta[:last], tuple(o for o in source_layout.order if o != last))
    if op.name == "permute":
        perm = tuple(op.attrs["order"])  # result dim i is source dim perm[i]
        where = {d: i for i, d in enumerate(perm)}
        pick = lambda t: tuple(t[d] for d in perm)  # noqa: E731
        return Blocked(pick(source_layout.size_per_thread), pick(source_layout.threads_per_warp),
                       pick(source_layout.warps_per_cta), tuple(where[d] for d in source_layout.order))
    if op.name == "reshape":
        return _reshaped(source_layout, src_shape, dst_shape, num_warps)
    if op.name == "cat":  # the tile that covers one operand, repeated over the other: both in place
        return source_layout if _flat_bits(source_layout, src_shape) is not None else None
    return None


def _log2(n: int) -> int | None:
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def _flat_bits(layout: Blocked, shape) -> tuple[list[int], list[int]] | None:
    """The row-major flat-index bit each lane id bit and each warp id bit of `layout` moves
    (a Blocked layout over power-of-two dims moves one bit per id bit), or None where an id
    bit moves none (the layout wraps: several threads hold an element) or a dim is no power of 2."""
    logs = [_log2(n) for n in shape]
    if None in logs or any(layout.tile(d) > n for d, n in enumerate(shape)):
        return None
    low = [sum(logs[d + 1:]) for d in range(len(shape))]  # the flat bit of each dim's bit 0
    units = [layout.size_per_thread, layout.threads_per_warp, layout.warps_per_cta]
    if any(_log2(n) is None for unit in units for n in unit):
        return None

    def bits(counts, unit) -> list[int]:
        out = []
        for d in layout.order:  # ids are numbered fastest along order[0]
            first = _log2(unit(d))
            for k in range(_log2(counts[d])):
                out.append(low[d] + first + k)
        return out
    spt, tpw = layout.size_per_thread, layout.threads_per_warp
    return bits(tpw, lambda d: spt[d]), bits(layout.warps_per_cta, lambda d: spt[d] * tpw[d])


def _reshaped(layout: Blocked, src_shape, dst_shape, num_warps: int) -> Blocked | None:
    """The Blocked layout of `dst_shape` whose lane and warp id bits move the flat-index bits
    they move in `layout` over `src_shape` (so a row-major reshape moves no data), or None."""
    moved = _flat_bits(layout, src_shape)
    return None if moved is None else _blocked_for_bits(*moved, dst_shape)


def _blocked_for_bits(lane_bits, warp_bits, dst_shape) -> Blocked | None:
    """The Blocked layout of `dst_shape` whose lane and warp id bits (in id order) move these
    row-major flat-index bits, or None where none does."""
    logs = [_log2(n) for n in dst_shape]
    if None in logs:
        return None
    moved = (list(lane_bits), list(warp_bits))
    low = [sum(logs[d + 1:]) for d in range(len(dst_shape))]

    def coordinate(bit):  # (dim, bit within the dim) of a flat-index bit in dst_shape
        for d, n in enumerate(logs):
            if low[d] <= bit < low[d] + n:
                return d, bit - low[d]
        raise AssertionError(bit)

    rank = len(dst_shape)
    runs = {"lanes": [], "warps": []}  # per id kind: (dim, first bit, count) in id-bit order
    for kind, bits in (("lanes", lane_bits), ("warps", warp_bits)):
        for bit in bits:
            d, k = coordinate(bit)
            run = runs[kind]
            if run and run[-1][0] == d and run[-1][1] + run[-1][2] == k:
                run[-1] = (d, run[-1][1], run[-1][2] + 1)
            elif any(r[0] == d for r in run):
                return None  # a dim's id bits not in one run
            else:
                run.append((d, k, 1))
    spt, tpw, wpc = [1] * rank, [1] * rank, [1] * rank
    for d in range(rank):
        lanes = [r for r in runs["lanes"] if r[0] == d]
        warps = [r for r in runs["warps"] if r[0] == d]
        if lanes and warps and warps[0][1] != lanes[0][1] + lanes[0][2]:
            return None  # registers between a dim's lanes and its warps: no Blocked layout has that
        first = lanes[0][1] if lanes else warps[0][1] if warps else logs[d]
        spt[d] = 1 << first
        tpw[d] = 1 << lanes[0][2] if lanes else 1
        wpc[d] = 1 << warps[0][2] if warps else 1
    order = _merged_order([r[0] for r in runs["lanes"]], [r[0] for r in runs["warps"]], rank)
    if order is None:
        return None
    result = Blocked(tuple(spt), tuple(tpw), tuple(wpc), order)
    # a Blocked layout numbers lane ids along `order`: check each id bit lands where it should
    return result if _flat_bits(result, dst_shape) == moved else None


def _merged_order(lane_dims, warp_dims, rank: int) -> tuple[int, ...] | None:
    """A dim order in which the lane ids' dims and the warp ids' dims each come as listed (dims
    without ids last), or None where the two lists disagree."""
    after = {d: set() for d in range(rank)}  # d -> dims that must come after it
    for seq in (lane_dims, warp_dims):
        for a, b in zip(seq, seq[1:]):
            after[a].add(b)
    used = list(dict.fromkeys(list(lane_dims) + list(warp_dims)))
    order = []
    while len(order) < len(used):
        ready = [d for d in used if d not in order and not any(d in after[e] for e in used if e not in order)]
        if not ready:
            return None
        order.append(ready[0])
    return tuple(order + [d for d in range(rank) if d not in order])


def _flat(idx, shape) -> int:
    flat = 0
    for i, n in zip(idx, shape):
        flat = flat * n + i
    return flat


def _unflat(flat: int, shape) -> tuple[int, ...]:
    out = []
    for n in reversed(shape):
        out.append(flat % n)
        flat //= n
    return tuple(reversed(out))


def _linear_derived(op, source_layout, num_warps: int):
    """derived_layout through the layouts' bits: any linear source (a wgmma accumulator included),
    the result as simple a layout as holds the same elements in the same threads."""
    src_shape, dst_shape = tuple(op.operands[0].type.shape), tuple(op.results[0].type.shape)
    if op.name == "cat" or any(n & (n - 1) for n in src_shape + dst_shape):
        return None
    lin = as_linear(source_layout, src_shape, num_warps)
    if lin is None:
        return None
    if op.name == "reshape":
        move = lambda v: _unflat(_flat(v, src_shape), dst_shape)  # noqa: E731
        regs, lanes, warps = ([move(v) for v in vs] for vs in (lin.regs, lin.lanes, lin.warps))
    elif op.name == "permute":
        perm = tuple(op.attrs["order"])
        move = lambda v: tuple(v[d] for d in perm)  # noqa: E731
        regs, lanes, warps = ([move(v) for v in vs] for vs in (lin.regs, lin.lanes, lin.warps))
    elif op.name == "join":
        regs = [(0,) * lin.rank + (1,)] + [v + (0,) for v in lin.regs]
        lanes, warps = ([v + (0,) for v in vs] for vs in (lin.lanes, lin.warps))
    else:  # split: the pair must be one register bit of each thread
        last = lin.rank - 1
        pair = [b for b, v in enumerate(lin.regs) if v[last]]
        if last == 0 or len(pair) != 1 or any(v[last] for v in lin.lanes + lin.warps):
            return None
        regs = [v[:last] for b, v in enumerate(lin.regs) if b != pair[0]]
        lanes, warps = ([v[:last] for v in vs] for vs in (lin.lanes, lin.warps))
    return _simplest(Linear(tuple(regs), tuple(lanes), tuple(warps)), dst_shape, num_warps)


def _simplest(lin: Linear, shape, num_warps: int):
    """A Blocked or wgmma layout holding what `lin` holds in every thread, else `lin` itself where
    base_terms can read it, else None."""
    logs = [n.bit_length() - 1 for n in shape]
    low = [sum(logs[d + 1:]) for d in range(len(shape))]
    flat_bit = lambda v: next(low[d] + n.bit_length() - 1 for d, n in enumerate(v) if n)  # noqa: E731
    blocked = _blocked_for_bits([flat_bit(v) for v in lin.lanes], [flat_bit(v) for v in lin.warps], shape)
    candidates = [blocked] + ([wgmma_layout(shape, num_warps)] if len(shape) == 2 else [])
    for layout in candidates:
        other = as_linear(layout, shape, num_warps) if layout is not None else None
        if other is not None and other.lanes == lin.lanes and other.warps == lin.warps and \
                set(other.regs) == set(lin.regs):
            return layout
    try:
        for d in range(len(shape)):
            lin.base_terms(shape, d)
    except ValueError:
        return None
    return lin


def _source_index(name: str, attrs: tuple, which: int, src_shapes, dst_shape):
    """(operand, index in it) of the element at a result index."""
    if name == "reshape":
        return lambda idx: (0, _unflat(_flat(idx, dst_shape), src_shapes[0]))
    if name == "permute":
        perm = attrs

        def index(idx):
            src = [0] * len(perm)
            for i, d in enumerate(perm):
                src[d] = idx[i]
            return 0, tuple(src)
        return index
    if name == "join":
        return lambda idx: (idx[-1], tuple(idx[:-1]))
    if name == "split":
        return lambda idx: (0, tuple(idx) + (which,))
    if name == "cat":  # along dim 0
        first = src_shapes[0][0]
        return lambda idx: (0, tuple(idx)) if idx[0] < first else (1, (idx[0] - first,) + tuple(idx[1:]))
    raise ValueError(name)


def _linear(layout, shape, num_warps: int) -> bool:
    """Is every element of `shape` held by one thread, once, with the thread's base index made of
    disjoint bits of its id? (kiln.ir.layout.as_linear)"""
    if isinstance(layout, Blocked):
        return _flat_bits(layout, shape) is not None
    return as_linear(layout, shape, num_warps) is not None


def _threads_to_check(sources, result, num_warps: int) -> list[int]:
    """Where every layout is linear, a renaming that holds for thread 0 and for each thread whose
    id is a single bit holds for all of them (their bases are XORs of those threads'); else all."""
    threads = 32 * num_warps
    if all(_linear(layout, shape, num_warps) for layout, shape in (*sources, result)):
        return [0] + [1 << b for b in range(threads.bit_length() - 1)]
    return list(range(threads))


def _elements(layout, shape, tids, num_warps: int) -> list[list[tuple[int, ...]]]:
    """Per thread of `tids`, the logical index of each of its registers."""
    bases = thread_bases(layout, shape, num_warps, max(tids) + 1)
    offsets = layout.offsets(shape)
    return [[tuple((b + o) % n for b, o, n in zip(bases[t], off, shape)) for off in offsets] for t in tids]


@functools.lru_cache(maxsize=2048)
def _moves(name: str, attrs: tuple, which: int, sources: tuple, result: tuple, num_warps: int):
    layout, shape = result
    index = _source_index(name, attrs, which, [s for _, s in sources], shape)
    tids = _threads_to_check(sources, result, num_warps)
    held = [_elements(lay, s, tids, num_warps) for lay, s in sources]
    wanted = _elements(layout, shape, tids, num_warps)
    moves = None
    for t, elements in enumerate(wanted):
        where = {}
        for k, per_thread in enumerate(held):
            for i, e in enumerate(per_thread[t]):
                where.setdefault((k, e), i)
        got = []
        for e in elements:
            source = index(e)
            i = where.get(source)
            if i is None:
                return None
            got.append((source[0], i))
        got = tuple(got)
        if moves is None:
            moves = got
        elif got != moves:
            return None  # lowering renames registers alike in every thread
    return moves


def register_moves(op, num_warps: int, which: int = 0) -> tuple[tuple[int, int], ...] | None:
    """Per register of `op`'s result `which`, (operand, register of that operand) it is, alike in
    every thread, for a reshape, permute, join or split whose types carry their layouts; None
    where its elements have to change threads (or the op is none of these)."""
    if op.name not in RENAMING_OPS:
        return None
    result = op.results[which]
    values = list(op.operands) + [result]
    if not all(isinstance(v.type, block_type) and v.type.encoding is not None for v in values):
        return None
    attrs = tuple(op.attrs["order"]) if op.name == "permute" else ()
    sources = tuple((v.type.encoding, tuple(v.type.shape)) for v in op.operands)
    moves = _moves(op.name, attrs, which, sources, (result.type.encoding, tuple(result.type.shape)), num_warps)
    if moves is None and op.name == "reshape" and op.attrs.get("can_reorder"):
        held = registers_held(*sources[0], num_warps)
        if held is not None and held == registers_held(result.type.encoding, tuple(result.type.shape), num_warps):
            return tuple((0, k) for k in range(held))  # each thread's elements, in some other order: allowed
    return moves


@functools.lru_cache(maxsize=1024)
def registers_held(layout, shape, num_warps: int) -> int | None:
    """The registers each thread holds in `layout` over `shape` where every element is in exactly one
    register of one thread, else None (a layout that repeats elements across threads or registers).
    Two such layouts with the same count make a `reshape(..., can_reorder=True)` a renaming: thread
    t's k-th register of the result is its k-th of the operand (Triton picks such a layout too)."""
    idx = thread_indices(layout, shape, num_warps)
    flat = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), shape).ravel()
    if flat.size != int(np.prod(shape)) or np.unique(flat).size != flat.size:
        return None
    return idx.shape[1]


def moves_no_data(op, num_warps: int) -> bool:
    """Is `op` a renaming of registers for every result (no shared memory, no barrier)?"""
    return op.name in RENAMING_OPS and all(register_moves(op, num_warps, i) is not None for i in range(len(op.results)))
