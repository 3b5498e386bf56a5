"""`stmatrix` (sm_90): a warp stores four 8x8 matrices of 16-bit elements in one instruction, from
registers laid out as mma's and wgmma's accumulators hold them (lane l: row l/4, columns 2(l%4) and
2(l%4) + 1 of each matrix, a 32-bit register of two elements per matrix), each lane giving the
shared address of one matrix row (lane l: matrix l/8, row l%8; 16 contiguous bytes).

A 16-bit accumulator (a matmul's `acc.to(fp16)`) goes to shared memory this way on its way out:
into the scratch tile of a conversion, or into a tile a TMA store copies. One instruction instead
of four 4-byte stores, as Triton stores it (upstream's tensor-descriptor tests look for it).
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from kiln.ir import layout as lay

from .types import I32


def quads(layout, shape, num_warps: int):
    """A thread's registers as stmatrix takes them: [the 8 registers of one instruction, in its order
    (matrix m's two elements at 2m and 2m + 1)], or None where `layout` does not hold `shape` as
    stmatrix's fragments in every warp (16-bit elements are the caller's to check). A matrix is any
    8x8 block the warp holds that way: the accumulator layout of wgmma (rows g and g + 8 of a 16-row
    slab) and kiln's mma layout (rows g and g + 16: its row pairs permuted) alike."""
    if len(shape) != 2 or layout is None:
        return None
    offsets = [tuple(o) for o in layout.offsets(shape)]
    at = {o: i for i, o in enumerate(offsets)}
    if len(at) != len(offsets):
        return None
    pairs = []
    for i, (r, c) in enumerate(offsets):
        if c % 2 == 0:
            j = at.get((r, c + 1))
            if j is None:
                return None
            pairs.append((i, j))
    if 2 * len(pairs) != len(offsets) or len(pairs) % 4 or not _fragments(layout, shape, num_warps, pairs):
        return None
    return [[reg for pair in pairs[k:k + 4] for reg in pair] for k in range(0, len(pairs), 4)]


def _fragments(layout, shape, num_warps, pairs) -> bool:
    """Does lane l of every warp hold, in each pair, row l/4 and columns 2(l%4), 2(l%4) + 1 of an 8x8
    block whose corner is the same for the whole warp and on an 8-column bound?"""
    idx = lay.thread_indices(layout, tuple(shape), num_warps)  # [thread, register, dim]
    lanes = np.arange(32 * num_warps) % 32
    want = np.stack([lanes // 4, 2 * (lanes % 4)], axis=1)  # [thread, dim]
    for first, second in pairs:
        corner = (idx[:, first] - want).reshape(num_warps, 32, 2)
        if (corner != corner[:, :1]).any() or (corner[:, 0, 1] % 8).any():
            return False
        if (idx[:, second] != idx[:, first] + np.array([0, 1])).any():
            return False
    return True


def usable(lw, layout, shape, es: int):
    """`quads` where this build may store a block of `es`-byte elements in `layout` by stmatrix
    (16-bit elements, sm_90 on, not a portable build), else None."""
    if es != 2 or lw.ctx.portable or lw.ctx.target.capability < 90:
        return None
    return quads(layout, tuple(shape), lw.num_warps)


def store(lw, regs, indices, groups, elem_ty, address_of, layout, shape):
    """Each group's registers (`indices`: their logical (row, col) values) stored by one stmatrix.x4;
    `address_of(row, col)` (i32 values) is the shared address of an element, whose row of 8 must be
    16 contiguous bytes there."""
    b = lw.b
    lane = lw.lane
    matrix = b.lshr(lane, lw.i32(3))
    # lane l addresses row l%8 of matrix l/8: that matrix's corner is where this thread's first element
    # of it sits less the lane's own place in the fragment (l/4, 2(l%4)); matrix m's first element is
    # a constant step from matrix 0's (the register offsets), so only matrix 0's index is read
    row = b.sub(b.and_(lane, lw.i32(7)), b.lshr(lane, lw.i32(2)))
    col = b.sub(lw.i32(0), b.shl(b.and_(lane, lw.i32(3)), lw.i32(1)))
    offsets = layout.offsets(tuple(shape))
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [I32] * 5),
                       "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}",
                       side_effect=True)
    pair_ty = ir.VectorType(elem_ty, 2)
    steps = {}
    for group in groups:
        origin = offsets[group[0]]
        pattern = tuple((offsets[group[2 * m]][0] - origin[0], offsets[group[2 * m]][1] - origin[1]) for m in range(4))
        if pattern not in steps:
            steps[pattern] = (b.add(row, _pick(lw, matrix, [d[0] for d in pattern])),
                              b.add(col, _pick(lw, matrix, [d[1] for d in pattern])))
        r0, c0 = indices[group[0]]
        address = address_of(b.add(r0, steps[pattern][0]), b.add(c0, steps[pattern][1]))
        words = []
        for m in range(4):
            pair = ir.Constant(pair_ty, ir.Undefined)
            pair = b.insert_element(pair, regs[group[2 * m]], lw.i32(0))
            pair = b.insert_element(pair, regs[group[2 * m + 1]], lw.i32(1))
            words.append(b.bitcast(pair, I32))
        b.call(asm, [address] + words, attrs=("convergent",))


def _pick(lw, index, values):
    """values[index] (i32) for a small constant table: a multiply where the table is a multiple of
    its index, else selects."""
    if all(v == values[1] * m for m, v in enumerate(values)):
        return lw.b.mul(index, lw.i32(values[1])) if values[1] else lw.i32(0)
    out = lw.i32(values[0])
    for m in range(1, len(values)):
        out = lw.b.select(lw.b.icmp_unsigned("==", index, lw.i32(m)), lw.i32(values[m]), out)
    return out
