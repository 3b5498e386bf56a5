"""A tile read back from shared memory only to be stored into a tile whose inner dim is the other one:
wgmma reads 8-bit and 32-bit operands K-major only, so smem_plan stages a B whose memory runs along N (an fp8,
int8 or tf32 `x @ W`, W row-major) by `local_load` from its ring and `local_store` into a K-major tile every
iteration. Stored from the ring load's own registers (16 bytes of a row a thread) that is one store an element
(byte stores for 8-bit tiles: 128 a thread for a 128x128 tile, and the dot waited on them; fp8 128x128x128 ran
at 190 TFLOP/s on an H100). Here the pair is one copy by warps, each a block at a time.

8-bit elements, blocks of 32 source rows by 16 bytes (sm_90: stmatrix):
  ldmatrix.x4.trans  four 8x8 matrices of 16-bit pairs: lane l addresses source row `source_row(l)`
                     of the block (16 bytes); lane (p, q) = (l / 4, l % 4) gets, of each matrix, columns
                     2p and 2p + 1 of two rows that `source_row` makes consecutive: matrices 2c and
                     2c + 1 hold rows 16c + 4q .. 16c + 4q + 3 between them;
  prmt (x4)          those four bytes of column 2p, and of column 2p + 1, gathered into one word each
                     (`selectors(l)`: which of the pair holds the lower rows, which column goes where);
  stmatrix.x4        each word stored at its column's row of the destination: bytes 16c + 4q .. + 3,
                     matrix 2c + slot's row p being column `destination_column` (2p or 2p + 1).
Each matrix's eight rows lie in distinct rows mod 8 of their tile, so in a tile swizzled by 128-byte rows
the eight 16-byte rows fall in eight distinct bank groups (no conflicts), both ways.

32-bit elements, blocks of 16 source rows by 32 elements: lane l holds a 4x4 square (`word_square(l)`),
read as four 16-byte rows of the source and written as four 16-byte rows of the destination (a transpose
of registers, nothing moved); a quarter warp's eight loads, and its eight stores, fall in distinct 16-byte
units of tiles swizzled by 128-byte rows (smem_plan swizzles the ring the loads read).

The lane functions take plain ints (the tests check the exchanges with them) or `Lane` values (IR, the
same formulas).
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.ops import OPS

from .types import I32, SHARED_PTR

BLOCK = (32, 16)  # 8-bit: (rows along the destination's inner dim, bytes along the source's) a warp copies at once
WORD_BLOCK = (16, 32)  # 32-bit: the same in elements


def source_row(lane):
    """Row (along the destination's inner dim, 0..31) of the block whose 16 bytes `lane` addresses:
    matrix m = lane / 8, its row r = lane % 8, which lane quad q = r / 2 receives (rows 2q and 2q + 1)."""
    r, matrix = lane & 7, lane >> 3
    q = r >> 1
    return 16 * (matrix >> 1) + 4 * q + 2 * ((matrix & 1) ^ (q >> 1)) + (r & 1)


def destination_column(lane):
    """Column (along the source's inner dim, 0..15) of the block whose destination row `lane` addresses
    for stmatrix (matrix lane / 8, row r = lane % 8): 2r or 2r + 1, taken so that a matrix's rows are
    eight distinct ones mod 8 (slot = matrix % 2)."""
    r, slot = lane & 7, (lane >> 3) & 1
    return 2 * r + (slot ^ (r >> 2))


def destination_row(lane):
    """Row of the block where `lane`'s stmatrix row starts (16 bytes: matrices 2 and 3 hold rows 16..31)."""
    return 16 * (lane >> 4)


def column_selectors(lane):
    """The prmt selectors that gather, from words a (matrix 2c) and b (2c + 1) of `lane`'s ldmatrix.trans at
    `source_row`, the four rows' bytes of column 2p (bytes 0 and 2 of each) and of column 2p + 1 (1 and 3),
    the word holding the lower rows first (b where q >= 2)."""
    even = 0x6420 ^ (((lane & 3) >> 1) * 0x4444)  # a0 a2 b0 b2, or b0 b2 a0 a2
    return even, even + 0x1111  # +0x1111: the odd column's bytes


def selectors(lane):
    """The prmt selectors of `lane`'s words for slots 0 and 1 of each pair of matrices (`column_selectors`);
    where p >= 4, slot 0 takes the odd column (see destination_column)."""
    even, odd = column_selectors(lane)
    odd_first = lane >> 4
    return even + 0x1111 * odd_first, even + 0x1111 * (odd_first ^ 1)


def ldmatrix_x4_trans(b, address):
    """The four words `ldmatrix.x4.trans` gives this lane, each lane addressing one row (`address`, an i32
    shared address) of the four 8x8 matrices of 16-bit pairs."""
    load = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([I32] * 4), [I32]),
                        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r",
                        side_effect=True)
    got = b.call(load, [address], attrs=("convergent",))
    return [b.extract_value(got, i) for i in range(4)]


def word_square(lane):
    """(row, column) of the block where `lane`'s 4x4 square of 32-bit elements starts: square row
    r = (lane / 2) % 4, square column (2r + lane % 2 + 2g) % 8 for quarter g = lane / 8. A quarter's eight
    squares then lie in eight distinct (row mod 8, 16-byte unit) pairs both ways: each of its loads and each
    of its stores hits eight distinct units of a tile swizzled by 128-byte rows."""
    return 4 * ((lane >> 1) & 3), 4 * ((lane + 2 * (lane >> 3)) & 7)


class Lane:
    """An i32 IR value that the lane formulas above can compute with."""

    def __init__(self, b, v):
        self.b, self.v = b, v

    def _of(self, other):
        return other.v if isinstance(other, Lane) else ir.Constant(I32, other)

    def __and__(self, o):
        return Lane(self.b, self.b.and_(self.v, self._of(o)))

    def __xor__(self, o):
        return Lane(self.b, self.b.xor(self.v, self._of(o)))

    def __rshift__(self, o):
        return Lane(self.b, self.b.lshr(self.v, self._of(o)))

    def __add__(self, o):
        return Lane(self.b, self.b.add(self.v, self._of(o)))

    __radd__ = __add__

    def __mul__(self, o):
        return Lane(self.b, self.b.mul(self.v, self._of(o)))

    __rmul__ = __mul__

    def __rxor__(self, o):
        return self.__xor__(o)


def copies(fn, num_warps: int) -> dict:
    """{id(local_load): local_store} for each pair this module copies: the load's value read by that
    store alone, nothing with effects between them, 2-D tiles of 1- or 4-byte elements, one's inner dim the
    other's outer, whole blocks of them, as many for each warp."""
    uses = {}
    for op in fn.walk():
        for v in op.operands:
            uses[v] = uses.get(v, 0) + 1
    found = {}
    for op in fn.walk():
        if op.name != "local_load" or uses.get(op.results[0]) != 1:
            continue
        ops = op.parent.ops
        following = next((o for o in ops[ops.index(op) + 1:] if OPS[o.name].side_effects or o.regions), None)
        if following is not None and following.name == "local_store" and following.operands[0] is op.results[0] \
                and _transposable(op.operands[0].type, following.operands[1].type, num_warps):
            found[id(op)] = following
    return found


def _block(t):
    return {1: BLOCK, 4: WORD_BLOCK}.get(t.element_ty.itemsize)


def _transposable(src, dst, num_warps) -> bool:
    block = _block(src)
    if len(src.shape) != 2 or src.shape != dst.shape or block is None \
            or dst.element_ty.itemsize != src.element_ty.itemsize:
        return False
    inner = dst.order[0]
    rows, cols = divmod(src.shape[inner], block[0]), divmod(src.shape[1 - inner], block[1])
    return src.order[0] == 1 - inner and not rows[1] and not cols[1] and rows[0] * cols[0] % num_warps == 0


def usable(lw, t) -> bool:
    """Can this build copy such pairs of tile type `t` so (8-bit ones by stmatrix: sm_90 on; every warp of the
    CTA taking part)?"""
    return not lw.ctx.portable and (t.element_ty.itemsize == 4 or lw.ctx.target.capability >= 90) \
        and lw.partition.replica is None and lw.partition.threads == 32 * lw.num_warps


def copy(lw, src, dst, offset_of):
    """Copy tile value `src` into `dst` (their types as `copies` checked), each warp its share of the
    blocks; `offset_of(tile type, (i32, i32))` is a logical index's byte offset in a tile."""
    t, u = src.type, dst.type
    inner = u.order[0]  # the destination's inner dim: the blocks' rows run along it
    block = _block(t)
    rows, cols = t.shape[inner] // block[0], t.shape[1 - inner] // block[1]
    src_base, dst_base = (lw.b.ptrtoint(lw.scalar(v), I32) for v in (src, dst))
    lane = Lane(lw.entry, lw.lane)
    corners = []
    for k in range(rows * cols // lw.num_warps):
        index = lw.b.add(lw.warp, lw.i32(k * lw.num_warps))
        corners.append((lw.b.mul(lw.b.udiv(index, lw.i32(cols)), lw.i32(block[0])),
                        lw.b.mul(lw.b.urem(index, lw.i32(cols)), lw.i32(block[1]))))

    def at(destination, row, col):  # the byte address of (row along the destination's inner dim, column)
        base, tile = (dst_base, u) if destination else (src_base, t)
        return lw.b.add(base, offset_of(tile, (row, col) if inner == 0 else (col, row)))

    (_copy_bytes if t.element_ty.itemsize == 1 else _copy_words)(lw, lane, corners, at)


def _copy_bytes(lw, lane, corners, at):
    b = lw.b
    first_row, dst_row, dst_col = (f(lane).v for f in (source_row, destination_row, destination_column))
    select = [s.v for s in selectors(lane)]
    store = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [I32] * 5),
                         "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}",
                         side_effect=True)
    prmt = lw.intrinsic("llvm.nvvm.prmt", I32, [I32, I32, I32])
    for row0, col0 in corners:
        words = ldmatrix_x4_trans(b, at(False, b.add(row0, first_row), col0))
        out = [b.call(prmt, [words[2 * c], words[2 * c + 1], select[slot]]) for c in range(2) for slot in range(2)]
        b.call(store, [at(True, b.add(row0, dst_row), b.add(col0, dst_col))] + out, attrs=("convergent",))


def _copy_words(lw, lane, corners, at):
    b = lw.b
    row, col = (v.v for v in word_square(lane))
    quad = ir.VectorType(I32, 4)
    for row0, col0 in corners:
        r, c = b.add(row0, row), b.add(col0, col)
        rows = [b.load(b.inttoptr(at(False, b.add(r, lw.i32(i)), c), SHARED_PTR), typ=quad, align=16) for i in range(4)]
        for j in range(4):
            column = ir.Constant(quad, ir.Undefined)
            for i in range(4):
                column = b.insert_element(column, b.extract_element(rows[i], lw.i32(j)), lw.i32(i))
            b.store(column, b.inttoptr(at(True, r, b.add(c, lw.i32(j))), SHARED_PTR), align=16)
