"""`stmatrix` (sm_90): a warp stores four 8x8 matrices of 16-bit elements in one instruction, from
registers laid out as mma's and wgmma's accumulators hold them (lane l: row l/4, columns 2(l%4) and
2(l%4) + 1 of each matrix, a 32-bit register of two elements per matrix), each lane giving the
shared address of one matrix row (lane l: matrix l/8, row l%8; 16 contiguous bytes). `ldmatrix`
(sm_75 on) reads the same fragments back; with `.trans` from a tile whose 16 contiguous bytes run
down a matrix's column instead.

A 16-bit accumulator (a matmul's `acc.to(fp16)`) goes to shared memory this way on its way out:
into the scratch tile of a conversion, or into a tile a TMA store copies. One instruction instead
of four 4-byte stores, as Triton stores it (upstream's tensor-descriptor tests look for it). A block
read back in that layout where elements came one 16-bit load each (from a tile whose memory runs down
its columns: the A of a wgmma the loop computes from `tl.load(q_t_ptrs)`, fla's `b_q * scale`) takes one
ldmatrix.x4 per four matrices, where each element took a load and an address register (fla's
chunk_bwd_kernel_dh loop: 32 loop-invariant addresses, 140 registers where Triton's build holds 90).
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from kiln.ir import layout as lay

from .types import GENERIC_PTR, I8, I32, SHARED_PTR, VOID


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


def readable(lw, layout, shape, across_rows: bool):
    """`quads` where a block in `layout` may be read by ldmatrix from a tile whose 16-byte units run
    along the block's columns, or down its rows (`across_rows`, `.trans`: each matrix's corner row on
    an 8-row bound there too), else None. 16-bit elements are the caller's to check, and that each
    unit of the tile is 16 contiguous bytes."""
    groups = quads(layout, tuple(shape), lw.num_warps)
    if groups is None or not across_rows:
        return groups
    idx = lay.thread_indices(layout, tuple(shape), lw.num_warps)
    lanes = np.arange(32 * lw.num_warps) % 32
    first_rows = idx[:, [group[2 * m] for group in groups for m in range(4)], 0]
    return groups if ((first_rows - (lanes // 4)[:, None]) % 8 == 0).all() else None


def load(lw, indices, groups, elem_ty, address_of, layout, shape, across_rows: bool) -> list:
    """The registers of a block in `layout` (`indices`: their logical (row, col) values), each group
    read by one ldmatrix.x4 (`.trans` `across_rows`); `address_of(row, col)` is an element's shared
    pointer, from which 8 elements along the tile's rows or columns are 16 contiguous bytes."""
    b = lw.b
    matrix, (row, col) = b.lshr(lw.lane, lw.i32(3)), _lane_address(lw, across_rows)
    regs = [None] * len(indices)
    steps = {}
    pair_ty = ir.VectorType(elem_ty, 2)
    for group, (dr, dc) in _corner_steps(layout, shape, groups):
        if (dr, dc) not in steps:
            steps[dr, dc] = (b.add(row, _pick(lw, matrix, list(dr))), b.add(col, _pick(lw, matrix, list(dc))))
        r0, c0 = indices[group[0]]
        address = address_of(b.add(r0, steps[dr, dc][0]), b.add(c0, steps[dr, dc][1]))
        for m, word in enumerate(ldmatrix(lw, address, 0, 4, trans=across_rows)):
            pair = b.bitcast(word, pair_ty)
            regs[group[2 * m]] = b.extract_element(pair, lw.i32(0))
            regs[group[2 * m + 1]] = b.extract_element(pair, lw.i32(1))
    return regs


def _lane_address(lw, across_rows: bool):
    """(rows, columns) from this thread's first element of matrix 0 to the element whose address its lane
    gives an ldmatrix or stmatrix: lane l gives its matrix's row l%8 (`across_rows`, `.trans`: column l%8),
    and its own first element lies (l/4, 2(l%4)) past that matrix's corner."""
    b, lane = lw.b, lw.lane
    step, back = b.and_(lane, lw.i32(7)), b.lshr(lane, lw.i32(2))
    cols_back = b.shl(b.and_(lane, lw.i32(3)), lw.i32(1))
    if across_rows:
        return b.sub(lw.i32(0), back), b.sub(step, cols_back)
    return b.sub(step, back), b.sub(lw.i32(0), cols_back)


def _corner_steps(layout, shape, groups):
    """Each group with its four matrices' corners less the first's (rows, columns): the same for
    every thread, since each matrix is the same 8x8 block of the warp's fragment."""
    offsets = layout.offsets(tuple(shape))
    for group in groups:
        origin = offsets[group[0]]
        yield group, (tuple(offsets[group[2 * m]][0] - origin[0] for m in range(4)),
                      tuple(offsets[group[2 * m]][1] - origin[1] for m in range(4)))


def ldmatrix(lw, ptr, step, count, trans=False):
    """`count` 8x8 b16 matrices from shared memory: word i of lane (g, t) is row g,
    columns 2t and 2t+1 of matrix i, whose rows lanes 8i..8i+7 address (`ptr` plus `step`
    bytes; with `trans`: column g, rows 2t and 2t+1). The step is the instruction's
    immediate and the address a 32-bit shared one: a few registers for every load."""
    suffix = ".trans" if trans else ""
    if lw.ctx.portable:  # the emulator gathers the rows from every lane's address
        fn = lw.intrinsic(f"emu_ldmatrix{suffix.replace('.', '_')}_x{count}", VOID, [GENERIC_PTR, SHARED_PTR])
        buf = lw.entry.alloca(ir.ArrayType(I32, 4))
        buf.type = GENERIC_PTR
        lw.b.call(fn, [buf, lw.b.gep(ptr, [lw.i32(step)], source_etype=I8) if step else ptr])
        return [lw.b.load(lw.b.gep(buf, [lw.i32(i)], source_etype=I32), typ=I32) for i in range(count)]
    outs = ", ".join(f"${i}" for i in range(count))
    text = f"ldmatrix.sync.aligned.m8n8.x{count}{suffix}.shared.b16 {{{outs}}}, [${count}+{step}];"
    fty = ir.FunctionType(ir.LiteralStructType([I32] * count), [I32])
    got = lw.b.call(ir.InlineAsm(fty, text, ",".join(["=r"] * count + ["r"]), side_effect=True),
                    [lw.b.ptrtoint(ptr, I32)])
    return [lw.b.extract_value(got, i) for i in range(count)]


def store(lw, regs, indices, groups, elem_ty, address_of, layout, shape):
    """Each group's registers (`indices`: their logical (row, col) values) stored by one stmatrix.x4;
    `address_of(row, col)` (i32 values) is the shared address of an element, whose row of 8 must be
    16 contiguous bytes there."""
    b = lw.b
    # lane l addresses row l%8 of matrix l/8; matrix m's first element is a constant step from matrix 0's
    # (the register offsets), so only matrix 0's index is read
    matrix, (row, col) = b.lshr(lw.lane, lw.i32(3)), _lane_address(lw, across_rows=False)
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [I32] * 5),
                       "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}",
                       side_effect=True)
    pair_ty = ir.VectorType(elem_ty, 2)
    steps = {}
    for group, (dr, dc) in _corner_steps(layout, shape, groups):
        if (dr, dc) not in steps:
            steps[dr, dc] = (b.add(row, _pick(lw, matrix, list(dr))), b.add(col, _pick(lw, matrix, list(dc))))
        r0, c0 = indices[group[0]]
        address = address_of(b.add(r0, steps[dr, dc][0]), b.add(c0, steps[dr, dc][1]))
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
