"""A transposed product's operands: C = A @ B run as C^T = B^T A^T, where B is an 8- or 32-bit tile whose
rows run along N (`x @ W`, W row-major; wgmma reads such a tile K-major only). B^T is the instruction's
A, read from B's tile into registers in its fragment's order; A's K-major tile is the instruction's B
(smem_plan._transposed_dots chooses such dots, `transposed_wgmma_layout` is their accumulator's layout).

Warp w's fragment covers columns n0 .. n0 + 15 of B, n0 = 16w (plus 16 x num_warps a repetition), and
its row g is column n0 + 2g, row g + 8 column n0 + 2g + 1, so a lane's two rows are neighbours in memory:

  32-bit  lane (g, t): a0 a1 = B[k + t, n0 + 2g .. + 1] and a2 a3 = B[k + t + 4, ...], two 8-byte loads;
  8-bit   ldmatrix.x4.trans at rows `tile_transpose.source_row(lane)` of the 32-row k-step, 16 bytes from
          n0: lane (g, t) gets, of each matrix, the bytes of columns n0 + 2g and n0 + 2g + 1 in two
          consecutive rows, and matrices 2c and 2c + 1 hold rows 16c + 4t .. 16c + 4t + 3 between them
          (the lower two in 2c where t < 2); one prmt a column (`tile_transpose.column_selectors`) gathers
          its four rows into a word: a0 (row g: column 2g) and a1 (row g + 8: column 2g + 1) of the first
          16 rows, a2 a3 of the rest.

The accumulator's registers come out in the instruction's order; `native_order` maps them to the layout's.
"""
from __future__ import annotations

import llvmlite.ir as ir

from . import tile_transpose
from .types import I32

def native_order(layout, shape, instr_n: int, n_rows: int, n_cols: int) -> list[int]:
    """For each accumulator register in the instructions' order (row repetition mi, column repetition ni,
    then d[4j + r]: 8-column chunk j, row g + 8 (r / 2), column 2t + r % 2 of C^T), its index in
    `layout`'s registers (whose offsets are C's (row, column) from the thread's base)."""
    where = {offset: i for i, offset in enumerate(layout.offsets(shape))}
    rows_per_rep = 16 * layout.warps_per_cta[1]
    order = []
    for mi in range(n_rows):
        for ni in range(n_cols):
            for j in range(instr_n // 8):
                for r in range(4):
                    order.append(where[(ni * instr_n + 8 * j + r % 2, mi * rows_per_rep + r // 2)])
    return order


class Fragments:
    """B^T's fragments for one dot, loaded on first use: `get(mi, k0)` is the four words of row
    repetition `mi` (16 x num_warps columns of B apart) at k `k0` (a multiple of the k-step)."""

    def __init__(self, lw, tile, offset_of, num_warps: int):
        self.lw, self.t, self.offset_of = lw, tile.type, offset_of
        self.base = lw.b.ptrtoint(lw.scalar(tile), I32)
        self.rows_per_rep = 16 * num_warps
        entry, lane = lw.entry, lw.lane  # (the lane's part of each address, computed once)
        self.g, self.t_lane = entry.lshr(lane, lw.i32(2)), entry.and_(lane, lw.i32(3))
        self.n0 = entry.mul(lw.uniform_warp, lw.i32(16))
        self.got = {}
        if self.t.element_ty.itemsize == 1:
            lane_v = tile_transpose.Lane(entry, lane)
            self.first_row = tile_transpose.source_row(lane_v).v
            even, odd = tile_transpose.column_selectors(lane_v)
            self.select = (even.v, odd.v)

    def get(self, mi: int, k0: int) -> list:
        key = (mi, k0)
        if key not in self.got:
            word = self._bytes if self.t.element_ty.itemsize == 1 else self._words
            self.got[key] = word(self.lw.b.add(self.n0, self.lw.i32(mi * self.rows_per_rep)), k0)
        return self.got[key]

    def _at(self, k, n):
        return self.lw.b.add(self.base, self.offset_of(self.t, (k, n)))

    def _words(self, n0, k0):
        b, lw = self.lw.b, self.lw
        n = b.add(n0, b.shl(self.g, lw.i32(1)))
        pair = ir.VectorType(I32, 2)
        out = []
        for half in (0, 4):
            k = b.add(self.t_lane, lw.i32(k0 + half))
            ptr = b.inttoptr(self._at(k, n), ir.PointerType(pair, addrspace=3))
            got = b.load(ptr, typ=pair, align=8)
            out += [b.extract_element(got, lw.i32(i)) for i in range(2)]
        return out

    def _bytes(self, n0, k0):
        b, lw = self.lw.b, self.lw
        words = tile_transpose.ldmatrix_x4_trans(b, self._at(b.add(self.first_row, lw.i32(k0)), n0))
        prmt = lw.intrinsic("llvm.nvvm.prmt", I32, [I32, I32, I32])
        return [b.call(prmt, [words[2 * c], words[2 * c + 1], self.select[column]])
                for c in range(2) for column in range(2)]
