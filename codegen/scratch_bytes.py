"""The scratch bytes an op's lowering writes to shared memory's transient area: scratch_barriers
plans the area from them and lowering lays its writes out by them, so both import these counts
from here, below both (reductions and scans across warps, layout conversions).
"""
from __future__ import annotations

import functools

import numpy as np

from kiln.ir import layout as lay
from kiln.ir.types import scalar_of

BANKS, BANK_BYTES = 32, 4
ROW_PAD_BYTES = 16  # keeps every row 16-byte aligned, so vector accesses stay vectors


def scalar_bytes(t) -> int:
    """Bytes of one element of (block) type `t` as a register holds it: 8 for a pointer, a byte at
    least (a bool)."""
    s = scalar_of(t)
    return 8 if s.is_ptr() else max(1, s.primitive_bitwidth // 8)


def cross_warp_sizes(warps: int, out_numel: int, elem_sizes) -> list[int]:
    """Scratch bytes per reduced value: a slot for each warp's partial result of each output
    element, 8 bytes at least (so that 64-bit values stay aligned)."""
    return [warps * out_numel * max(8, n) for n in elem_sizes]


def reduce_scratch_bytes(op) -> int:
    """Bytes a `reduce` writes to the scratch area: 0 where its axis stays inside each warp."""
    src = op.operands[0]
    layout, shape, axis = src.type.encoding, tuple(src.type.shape), op.attrs["axis"]
    warps = layout.warp_axis(shape, axis).distinct
    return _slots_bytes(op, shape, axis, warps) if warps > 1 else 0


def _slots_bytes(op, shape, axis, slots: int) -> int:
    """cross_warp_sizes of all of `op`'s values, `slots` per element of the result."""
    numel = 1
    for d in shape[:axis] + shape[axis + 1:]:
        numel *= d
    return sum(cross_warp_sizes(slots, numel, [scalar_bytes(v.type) for v in op.operands]))


def scan_scratch_bytes(op) -> int:
    """Bytes a `scan` writes to the scratch area: each warp's total per repetition of the
    layout tile along the axis and output element; 0 where the axis stays inside each warp.
    A scan runs in its operand's layout (the layouts pass gives it the shape's preferred one)."""
    src = op.operands[0]
    axis, shape = op.attrs["axis"], tuple(src.type.shape)
    layout = src.type.encoding
    if layout is None:
        return 0  # no layout chosen yet: not planned
    warps = layout.warp_axis(shape, axis).distinct
    if warps == 1:
        return 0
    tile = scan_tile(layout, shape, axis)
    reps = len({off[axis] // tile for off in layout.offsets(shape)})
    return _slots_bytes(op, shape, axis, reps * warps)


def scan_tile(layout, shape, axis):
    lanes, warps = layout.lane_axis(shape, axis), layout.warp_axis(shape, axis)
    spt = len({o[axis] for o in layout.offsets(shape)}) // max(1, scan_reps(layout, shape, axis))
    return spt * lanes.count * warps.count


def scan_reps(layout, shape, axis):
    parent, d = layout, axis
    while isinstance(parent, lay.Slice):
        shape, d = parent.parent_shape(shape), parent.parent_dim(d)
        parent = parent.parent
    return max(1, shape[d] // parent.tile(d))


def stored_shape(src, dst, shape, es: int, num_warps: int) -> tuple:
    """The scratch tile of a conversion: rows `row_pad` elements apart beyond their length."""
    return shape[:-1] + (shape[-1] + row_pad(src, dst, shape, es, num_warps),)


def conversion_bytes(t, dst, num_warps: int) -> int:
    """Scratch bytes of converting a block of type `t` (its encoding) to layout `dst`."""
    es = scalar_bytes(t)
    total = es
    for n in stored_shape(t.encoding, dst, tuple(t.shape), es, num_warps):
        total *= n
    return total


@functools.lru_cache(maxsize=1024)
def row_pad(src, dst, shape, es: int, num_warps: int) -> int:
    """Elements of padding after each row of a conversion's scratch tile: 16 bytes where
    that makes fewer shared-memory wavefronts than none (rows whose length is a multiple
    of the 128-byte bank period all start in bank 0, so an accumulator layout, writing 8
    rows at once, conflicts 8 ways), else 0."""
    if len(shape) < 2 or (shape[-1] * es) % (BANKS * BANK_BYTES) or ROW_PAD_BYTES % es:
        return 0
    pad = ROW_PAD_BYTES // es
    if wavefronts(src, dst, shape, es, pad, num_warps) < wavefronts(src, dst, shape, es, 0, num_warps):
        return pad
    return 0


def wavefronts(src, dst, shape, es: int, pad: int, num_warps: int) -> int:
    """Shared-memory wavefronts of warp 0 writing `src` and reading `dst` with rows padded by
    `pad` elements: per register, the most distinct 4-byte words any one bank serves."""
    row = shape[-1] + pad
    total = 0
    for layout in (src, dst):
        idx = _warp0_indices(layout, shape, num_warps)  # [thread, register, dim]
        flat = np.zeros(idx.shape[:2], np.int64)
        for d in range(len(shape) - 1):
            flat = flat * shape[d] + idx[:, :, d]
        words = np.sort((flat * row + idx[:, :, -1]) * es // BANK_BYTES, axis=0)  # each register's column
        distinct = np.ones(words.shape, bool)
        distinct[1:] = words[1:] != words[:-1]
        registers = np.broadcast_to(np.arange(words.shape[1]), words.shape)
        served = np.bincount((registers * BANKS + words % BANKS)[distinct], minlength=words.shape[1] * BANKS)
        total += int(served.reshape(words.shape[1], BANKS).max(axis=1).sum())
    return total


@functools.lru_cache(maxsize=256)
def _warp0_indices(layout, shape, num_warps: int) -> np.ndarray:
    """The logical indices of warp 0's registers, [thread, register, dim] (read-only: cached)."""
    idx = lay.thread_indices(layout, shape, num_warps, threads=32)
    idx.flags.writeable = False
    return idx
