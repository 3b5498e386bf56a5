"""`dot` on tensor cores: `mma.sync.aligned.m16n8k16` for fp16/bf16 operands,
`m16n8k32` for int8 (int32 accumulators) and, from sm_89 on, fp8 (e4m3, e5m2), and
`m16n8k8` for fp32 at tf32 precision.

A and fp16/bf16 B are staged row-major in shared memory as they come (rows padded by 16
bytes so the fragment loads of one warp hit different banks), so each thread stores whole
16-byte vectors; every k-step (32 bytes of k) each thread loads its A fragments
(`ldmatrix.x4` per 16-row pair) and B fragments (`ldmatrix.x4.trans` per two 8-column
tiles: the transpose happens in the load) and issues one mma per (row pair, column tile).
int8, fp8 and fp32 B are transposed while staged instead, since `ldmatrix` transposes 16-bit
elements only. A k-step is 32 bytes of k for every type, and one `ldmatrix` row 16 bytes:
an 8-bit or tf32 fragment word holds the same bytes of the same rows, so all share one
addressing (tf32's words are whole fp32 elements, which the tensor cores read as tf32). The accumulator layout is `layout.mma_layout`; its docstring explains the row mapping.

`mma_dot` reads A and B from the swizzled ring tiles of smem_pipeline instead, with the
same fragment loads: only the byte offset of an element differs (`wgmma.tile_offset`), and
a tile stored with M or N innermost is read by `ldmatrix.trans` (16-bit types only).
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import block_type, float16, float32, int32, scalar_of

from kiln.ir.layout import Blocked, is_mma_layout

from ..analysis.dots import fp8_fragments_upcast, mma_f16_accumulators, mma_staging
from .context import LoweringError
from .elementwise import cast_value
from .fp8 import f16_pair
from .memory import plain_store
from .reduce import shuffle
from .shared import elem_bytes, flats_of, store_elements
from .stmatrix import ldmatrix
from .types import F32, I8, I32, VOID, GENERIC_PTR, half_words, reg_type, word_halves
from .wgmma import constant_step, tile_offset

_KIND = {"fp16": "f16", "bf16": "bf16", "int8": "s8", "fp32": "tf32", "fp8e4nv": "e4m3", "fp8e5": "e5m2"}
_SHAPE = {"s8": "m16n8k32", "tf32": "m16n8k8", "e4m3": "m16n8k32", "e5m2": "m16n8k32"}  # else m16n8k16


class _Operand:
    """Where a dot operand's fragments come from: shared memory at `base` (an i8 pointer),
    element (i, j) of the operand ([M, K] for A, [K, N] for B) `offset((i, j))` bytes in
    (an i32), stored in 16-byte runs along K (`k_inner`) or along M / N. `tile`: the tile
    value, where its fragments may be reused (kiln.codegen.lower.fragment_reuse). `step(frm,
    to)`: the bytes from element frm to element to where they are the same for every pair of
    indices that far apart (`wgmma.constant_step`), else None; None: no such steps known."""

    def __init__(self, base, offset, k_inner, tile=None, step=None):
        self.base, self.offset, self.k_inner, self.tile, self.step = base, offset, k_inner, tile, step

    def ptr(self, lw, idx):
        return lw.b.gep(self.base, [self.offset(idx)], source_etype=I8)

    def near(self, lw, idx, known, bases):
        """(address, bytes): `ptr(idx)` as the address of an element loaded before and a constant:
        `known` is idx's compile-time part (what it adds to a thread's own indices, the same for
        every load that passes `bases`, the (known, address) pairs computed so far), or `bases`
        None. Loads then share a few addresses with immediate offsets instead of each keeping its
        own (a one-warp tf32 32x128x32 tile read B through 32 offsets, live through the loop, and
        spilled 1.6 KB)."""
        if self.step is None or bases is None:
            return self.ptr(lw, idx), 0
        for frm, address in bases:
            step = self.step(frm, known)
            if step is not None:
                return address, step
        address = self.ptr(lw, idx)
        bases.append((known, address))
        return address, 0

    def ptr_near(self, lw, idx, known, bases):
        address, step = self.near(lw, idx, known, bases)
        return lw.b.gep(address, [lw.i32(step)], source_etype=I8) if step else address


def lower_mma(lw, op):
    """A dot whose operands are in registers: both are staged to shared memory first (where the
    dot_staging pass put them: `staging`, or the scratch area)."""
    a, b, acc = op.operands
    out = op.results[0]
    if not is_mma_layout(lw.layout(out), out.type.shape, lw.num_warps):
        raise LoweringError(f"an mma dot needs an mma.sync accumulator layout, not {lw.layout(out)}")
    half = reg_type(a.type)
    size = scalar_of(a.type).itemsize
    a_stride, b_stride, trans_b, a_bytes, staged = mma_staging(op)
    base = _staging_buffer(lw, op, staged)

    K, N = b.type.shape[-2:]

    def transposed(idx):  # B^T's rows (a batched dot's: each batch's N after the last's) padded to b_stride
        n = idx[-1] if len(idx) == 2 else lw.b.add(lw.b.mul(idx[0], lw.i32(N)), idx[2])
        return ((lw.b.add(lw.b.mul(n, lw.i32(b_stride)), idx[-2]),), (1,))
    _store_rows(lw, base, half, a, a_stride)
    if trans_b:
        _store_rows(lw, base, half, b, b_stride, a_bytes)
    else:
        store_elements(lw, base, half, lw.regs(b), flats_of(lw, lw.layout(b), b.type.shape, transposed), a_bytes)
    lw.barrier()

    def padded(stride, at=0, swap=False):
        def offset(idx):
            row, col = (idx[1], idx[0]) if swap else idx
            return lw.b.add(lw.b.mul(lw.b.add(lw.b.mul(row, lw.i32(stride)), col), lw.i32(size)), lw.i32(at))
        return offset
    a_src = _Operand(base, padded(a_stride), k_inner=True)
    b_src = _Operand(base, padded(b_stride, a_bytes, swap=not trans_b), k_inner=not trans_b)  # B^T: rows are columns
    if len(out.type.shape) == 3:  # a batch's tiles lie these many bytes after the last batch's
        M = a.type.shape[1]
        _run(lw, op, a_src, b_src, (M * a_stride * size, (K if trans_b else N) * b_stride * size))
    else:
        _run(lw, op, a_src, b_src)


def lower_mma_dot(lw, op):
    """`mma_dot`: B read from a shared tile (smem_pipeline's rings) as it is stored, A from
    one too or from registers; a tf32 B at one warp from registers too (shared_dot_operands)."""
    a, b = op.operands[:2]
    out = op.results[0]
    layout = lw.layout(out)
    if not is_mma_layout(layout, out.type.shape, lw.num_warps):
        raise LoweringError(f"mma_dot needs an mma.sync accumulator layout, not {layout}")
    def reused(tile):
        return tile if len(tile.type.shape) == 2 and lw.fragments.reusable(tile) else None
    if isinstance(b.type, block_type):
        if lw.num_warps != 1 or lw.layout(b) != layout:
            raise LoweringError("mma_dot reads B from registers at one warp, in its accumulator's layout")
        b_src = None
    else:
        b_src = _Operand(lw.scalar(b), lambda idx: tile_offset(lw, b.type, idx), k_inner=b.type.order[0] == 0,
                         tile=reused(b), step=lambda frm, to: constant_step(b.type, frm, to))
    if isinstance(a.type, block_type):
        if layout.warps_per_cta[1] != 1 or lw.layout(a) != layout:
            raise LoweringError("mma_dot reads A from registers in its accumulator's layout, whole rows per warp")
        a_src = None
    else:
        a_src = _Operand(lw.scalar(a), lambda idx: tile_offset(lw, a.type, idx), k_inner=a.type.order[0] == 1,
                         tile=reused(a), step=lambda frm, to: constant_step(a.type, frm, to))
    size = a.type.scalar.itemsize
    if size != 2 and a_src is not None and b_src is not None and \
            not (a_src.k_inner and (b_src.k_inner or size == 4)):
        raise LoweringError("ldmatrix transposes 16-bit elements only: 8- and 32-bit tiles must be K-major "
                            "(a 32-bit B may be N-major: read an element a register)")
    batched = len(out.type.shape) == 3  # batched tiles: each batch's 2-D tile after the last's
    _run(lw, op, a_src, b_src, (a.type.tile_bytes, b.type.tile_bytes) if batched else None)


def _run(lw, op, a_src, b_src, batch_bytes=None):
    """Per 32 bytes of k, each thread's A fragments (`ldmatrix.x4` per 16-row pair, or its
    own registers where `a_src` is None) and B fragments (`ldmatrix.x4` per two 8-column
    tiles; `.trans` where the operand is not stored K-major; shuffled from registers where
    `b_src` is None), then one mma per (row pair, column tile). A batched dot's (`batch_bytes`:
    the bytes from one batch's A and B tiles to the next's) runs so per batch a thread holds."""
    a, b, acc = op.operands
    out = op.results[0]
    layout = lw.layout(out)
    s_in, s_out = a.type.scalar, out.type.scalar  # a is a block or a shared tile
    f16_acc = mma_f16_accumulators(lw.ctx, s_in, s_out)
    if s_in.name in ("fp8e4nv", "fp8e5") and fp8_fragments_upcast(lw.ctx):
        f16_acc = s_out.name == "fp16"  # fp8 fragments upcast run on fp16 mma.sync, which keeps an fp16 dot's
    s_acc = int32 if s_in.is_int() else float16 if f16_acc else float32
    values = [cast_value(lw, r, s_out, s_acc) for r in lw.regs(acc, layout)]
    offsets = layout.offsets(out.type.shape)
    indices = lw.indices(layout, out.type.shape)
    # what addresses a fragment besides the tile: the accumulator's layout and shape give the rows and columns
    addressed = (layout, tuple(out.type.shape))
    if batch_bytes is None:
        _run_tiles(lw, op, a_src, b_src, offsets, indices, values, f16_acc, addressed)
    else:
        for batch in sorted({o[0] for o in offsets}):
            picked = [i for i, o in enumerate(offsets) if o[0] == batch]
            at = indices[picked[0]][0]  # the batch this thread holds there
            a_at, b_at = (_Operand(lw.b.gep(src.base, [lw.b.mul(at, lw.i32(step))], source_etype=I8), src.offset,
                                   src.k_inner, step=src.step) for src, step in zip((a_src, b_src), batch_bytes))
            mine = [values[i] for i in picked]
            _run_tiles(lw, op, a_at, b_at, [offsets[i][1:] for i in picked], [indices[i][1:] for i in picked], mine,
                       f16_acc, (*addressed, batch))
            for i, v in zip(picked, mine):
                values[i] = v
    lw.bind(out, [cast_value(lw, v, s_acc, s_out) for v in values], layout)


def _run_tiles(lw, op, a_src, b_src, offsets, indices, values, f16_acc, addressed):
    """_run over one batch: `offsets` and `indices` the accumulator registers' 2-D ones, `values` their
    accumulators (replaced by the sums); `addressed`: what addresses a fragment besides its tile."""
    a, b = op.operands[:2]
    K = a.type.shape[-1]
    s_in = a.type.scalar
    kinds = (_KIND[s_in.name], _KIND[b.type.scalar.name])  # e4m3 x e5m2 differ
    formats = (s_in.name, b.type.scalar.name)
    upcast = s_in.name in ("fp8e4nv", "fp8e5") and fp8_fragments_upcast(lw.ctx)
    half_step = 16 // s_in.itemsize  # elements in 16 bytes: one ldmatrix row, half a k-step

    # group the accumulator registers into mma tiles: (row pair, column tile) -> 4 registers
    rows = sorted({o[0] for o in offsets})
    col_tiles = sorted({o[1] - o[1] % 2 for o in offsets})
    where = {o: i for i, o in enumerate(offsets)}
    tiles = []
    for p in range(0, len(rows), 2):
        for c in col_tiles:
            regs = [where[(rows[p], c)], where[(rows[p], c + 1)], where[(rows[p + 1], c)], where[(rows[p + 1], c + 1)]]
            tiles.append((p // 2, c, regs))
    row_of = {o[0]: idx[0] for o, idx in zip(offsets, indices)}
    col_of = {o[1]: idx[1] for o, idx in zip(offsets, indices)}
    g = lw.b.udiv(lw.lane, lw.i32(4))
    t = lw.b.urem(lw.lane, lw.i32(4))
    # the first row of each 8-row half of a pair (this lane's row is that + g), and the
    # first column of each 8-column tile (this lane's columns are that + 2t, + 2t + 1)
    pair_rows = [(lw.b.sub(row_of[rows[p]], g), lw.b.sub(row_of[rows[p + 1]], g)) for p in range(0, len(rows), 2)]
    first_cols = {c: lw.b.sub(col_of[c], lw.b.mul(t, lw.i32(2))) for c in col_tiles}

    q = lw.b.and_(lw.lane, lw.i32(7))  # ldmatrix: lane i gives row i % 8 of matrix i // 8
    j = lw.b.lshr(lw.lane, lw.i32(3))
    low_bit = lw.b.and_(j, lw.i32(1))
    high_bit = lw.b.lshr(j, lw.i32(1))
    in_registers = _a_in_registers(lw, a, rows) if a_src is None else None
    # tf32 A from registers: a thread holds columns 2t, 2t + 1 of each 8-column k-step, which the mma reads
    # as its k = t and t + 4 (the sum is the same over k permuted); B's fragments take the same k
    permuted = in_registers is not None and s_in.itemsize == 4
    # the addresses computed so far, which later ones may add a constant to (_Operand.near); an ldmatrix's
    # lanes address rows or columns picked between a pair's two halves, which then must lie as far apart in
    # every pair for the picked index's own part to be one
    a_bases = [] if _even_pairs(rows) else None
    b_bases = [] if _even_pairs(col_tiles) else None
    by_element_bases = []
    for k0 in range(0, K, 2 * half_step):
        if in_registers is not None:
            a_frag = {pair: in_registers(pair, k0) for pair in range(len(pair_rows))}
        else:
            a_frag = {pair: _loaded(lw, a_src, ("a", pair, k0, addressed),
                                    lambda pair=pair, r0=r0, r1=r1: _a_fragment(
                                        lw, a_src, r0, r1, k0, half_step, q, low_bit, high_bit,
                                        (rows[2 * pair], k0), a_bases))
                      for pair, (r0, r1) in enumerate(pair_rows)}
        if b_src is None:
            b_frag = lw.fragments.get((b, "b registers", k0, permuted),
                                      lambda: _b_from_registers(lw, b, k0, col_tiles, g, t, permuted))
        elif permuted or (s_in.itemsize == 4 and not b_src.k_inner):
            b_frag = _loaded(lw, b_src, ("b by element", k0, permuted, addressed),
                             lambda: _b_fragments_by_element(lw, b_src, k0, first_cols, g, t, permuted,
                                                             by_element_bases))
        else:
            b_frag = _loaded(lw, b_src, ("b", k0, addressed),
                             lambda: _b_fragments(lw, b_src, k0, first_cols, col_tiles, half_step, q, low_bit,
                                                  high_bit, b_bases))
        if upcast:
            _upcast_mmas(lw, formats, a_frag, b_frag, tiles, values, f16_acc)
            continue
        for pair, c, regs in tiles:
            got = _mma(lw, kinds, a_frag[pair], b_frag[c], [values[i] for i in regs], f16_acc)
            for i, v in zip(regs, got):
                values[i] = v


def _f16_words(lw, word, fmt):
    """A word of four fp8 codes (of format `fmt`) -> two f16x2 words: codes 0-1, then 2-3."""
    low = lw.b.trunc(word, ir.IntType(16))
    high = lw.b.trunc(lw.b.lshr(word, lw.i32(16)), ir.IntType(16))
    return f16_pair(lw, low, fmt), f16_pair(lw, high, fmt)


def _upcast_mmas(lw, formats, a_frag, b_frag, tiles, values, f16_acc):
    """A 32-k step of 8-bit fragments as two 16-k steps of fp16 mma.sync, into `values`: A's fragments
    upcast once for every column tile, each B fragment where its mmas read it."""
    a16 = {pair: _upcast_a(lw, frag, formats[0]) for pair, frag in a_frag.items()}
    for c, frag in b_frag.items():
        b16 = _upcast_b(lw, frag, formats[1])
        for pair, _, regs in (tile for tile in tiles if tile[1] == c):
            acc = [values[r] for r in regs]
            for half in range(2):  # k 0-15 of the step, then 16-31
                acc = _mma(lw, ("f16", "f16"), a16[pair][half], b16[half], acc, f16_acc)
            for r, v in zip(regs, acc):
                values[r] = v


def _upcast_a(lw, frag, fmt):
    """An 8-bit A fragment of a 32-k step (rows g, g + 8 of k 4t..4t+3, then of k 16 + 4t..) as the
    fp16 A fragments of two 16-k steps. The fp16 mma reads lane (g, t)'s halves as k 2t, 2t + 1,
    2t + 8, 2t + 9: here k 4t..4t+3 (of each 16), the same for B, so the sum runs over k permuted."""
    words = [_f16_words(lw, w, fmt) for w in frag]
    return [[words[0 + h][0], words[1 + h][0], words[0 + h][1], words[1 + h][1]] for h in (0, 2)]


def _upcast_b(lw, frag, fmt):
    """An 8-bit B fragment (k 4t..4t+3 of column g, then k 16 + 4t..) as two fp16 ones, k permuted as A."""
    return [list(_f16_words(lw, w, fmt)) for w in frag]


def _loaded(lw, src, what, load):
    """`load()`, or what it gave a dot before on the same tile and addressing."""
    return load() if src.tile is None else lw.fragments.get((src.tile, *what), load)


def _a_in_registers(lw, a, rows):
    """A 16-bit A held in an mma layout with whole rows per warp (its columns k = 2t, 2t+1
    of every 8-column tile): `(pair, k0) -> ` the four fragment words of that row pair and
    k-step, each two of its own registers (rows g and g + 8, k k0 + 2t and k0 + 8 + 2t).
    A 32-bit (tf32) A: its registers one a word, rows g and g + 8 of k k0 + 2t, then of
    k0 + 2t + 1 (the mma's k t and t + 4: B's fragments are read with k permuted alike)."""
    layout = lw.layout(a)
    regs = lw.regs(a, layout)
    where = {o: i for i, o in enumerate(layout.offsets(a.type.shape))}
    if scalar_of(a.type).itemsize == 4:
        def own(row, col):
            return lw.b.bitcast(regs[where[(row, col)]], I32)
        return lambda p, k0: [own(rows[2 * p], k0), own(rows[2 * p + 1], k0),
                              own(rows[2 * p], k0 + 1), own(rows[2 * p + 1], k0 + 1)]

    def word(row, col):
        pair = ir.Constant(ir.VectorType(regs[0].type, 2), ir.Undefined)
        pair = lw.b.insert_element(pair, regs[where[(row, col)]], lw.i32(0))
        pair = lw.b.insert_element(pair, regs[where[(row, col + 1)]], lw.i32(1))
        return lw.b.bitcast(pair, I32)

    def fragment(p, k0):
        r0, r1 = rows[2 * p], rows[2 * p + 1]
        return [word(r0, k0), word(r1, k0), word(r0, k0 + 8), word(r1, k0 + 8)]
    return fragment


def _even_pairs(firsts) -> bool:
    """Do the ldmatrix.x4 pairs (A's row pairs, B's pairs of column tiles) of these first rows or columns
    all hold two the same distance apart?"""
    pairs = [firsts[i:i + 2] for i in range(0, len(firsts), 2)]
    return all(len(p) == 2 for p in pairs) and len({p[1] - p[0] for p in pairs}) == 1


def _a_fragment(lw, src, r0, r1, k0, half_step, q, low_bit, high_bit, known, bases):
    """A's four registers for the row pair whose halves start at rows r0 and r1: matrix i
    of the `ldmatrix.x4` is rows (r0, r1)[i % 2] + 0..7, k k0 + half_step * (i // 2) + 0..7;
    lane (g, t) then holds row g, k 2t and 2t + 1 of each (the mma's A fragment). Stored
    M-major, lanes address k rows and `.trans` transposes. `known`, `bases`: _Operand.near."""
    b = lw.b
    first = b.select(b.trunc(low_bit, ir.IntType(1)), r1, r0)
    k = b.add(b.mul(high_bit, lw.i32(half_step)), lw.i32(k0))
    if src.k_inner:
        return ldmatrix(lw, *src.near(lw, (b.add(first, q), k), known, bases), 4)
    return ldmatrix(lw, *src.near(lw, (first, b.add(k, q)), known, bases), 4, trans=True)


def _b_fragments(lw, src, k0, first_cols, col_tiles, half_step, q, low_bit, high_bit, bases):
    """B's two registers per 8-column tile, two tiles per `ldmatrix.x4`: matrix i is k
    k0 + half_step * (i % 2) + 0..7 of column tile i // 2 of the pair; lane (g, t) gets
    B[k 2t, 2t + 1][column g] of each (the mma's B fragment). Stored N-major ([k][n]),
    lanes address k rows and `.trans` transposes; stored K-major, they address columns.
    `bases`: _Operand.near (the pair's first tile and k0 are what an address knows)."""
    b = lw.b
    k = b.add(b.mul(low_bit, lw.i32(half_step)), lw.i32(k0))
    second = b.trunc(high_bit, ir.IntType(1))
    frags = {}
    for i in range(0, len(col_tiles), 2):
        pair = col_tiles[i:i + 2]
        n = b.select(second, first_cols[pair[1]], first_cols[pair[0]]) if len(pair) == 2 else first_cols[pair[0]]
        if src.k_inner:
            regs = ldmatrix(lw, *src.near(lw, (k, b.add(n, q)), (k0, pair[0]), bases), 2 * len(pair))
        else:
            regs = ldmatrix(lw, *src.near(lw, (b.add(k, q), n), (k0, pair[0]), bases), 2 * len(pair), trans=True)
        for m, c in enumerate(pair):
            frags[c] = regs[2 * m:2 * m + 2]
    return frags


def _b_fragments_by_element(lw, src, k0, first_cols, g, t, permuted, bases):
    """tf32 B's two registers per 8-column tile where ldmatrix cannot load them: B[k0 + t][column g]
    and B[k0 + t + 4][column g] (the mma's k t and t + 4) from an N-major tile (ldmatrix transposes
    16-bit elements only), a load each; or, with k permuted as an A from registers has it, B[k0 + 2t]
    and B[k0 + 2t + 1], one 8-byte load from a K-major tile. Column tile c's columns are the
    thread's own plus c (lw.indices), so the loads' addresses differ by what k0, the row and c add
    (`bases`: see _Operand.ptr_near)."""
    b = lw.b
    first_row, row_steps = (b.mul(t, lw.i32(2)), (0, 1)) if permuted else (t, (0, 4))
    rows = [first_row, b.add(first_row, lw.i32(row_steps[1]))]
    frags = {}
    for c, first in first_cols.items():
        n = b.add(first, g)
        if permuted and src.k_inner:
            pair = b.load(src.ptr(lw, (b.add(rows[0], lw.i32(k0)), n)), typ=ir.VectorType(I32, 2), align=8)
            frags[c] = [b.extract_element(pair, lw.i32(i)) for i in range(2)]
        else:
            frags[c] = [b.load(src.ptr_near(lw, (b.add(row, lw.i32(k0)), n), (k0 + step, c), bases), typ=I32, align=4)
                        for row, step in zip(rows, row_steps)]
    return frags


def _b_from_registers(lw, b, k0, col_tiles, g, t, permuted):
    """tf32 B's two registers per 8-column tile gathered from a B in the accumulator's layout at one warp:
    lane (g, t) needs B[k0 + t][n0 + g] and B[k0 + t + 4][n0 + g] (k permuted: k0 + 2t and k0 + 2t + 1),
    which lane 4 (row % 8) + g / 2 holds, in its register of column n0 + g % 2 (of rows k0 + 0..7).
    That register depends on the reader's g, so both are shuffled and the reader picks: four shuffles."""
    layout = lw.layout(b)
    regs = lw.regs(b, layout)
    where = {o: i for i, o in enumerate(layout.offsets(b.type.shape))}
    bld = lw.b
    half = bld.lshr(g, lw.i32(1))
    odd = bld.trunc(g, ir.IntType(1))
    rows = (bld.mul(t, lw.i32(2)), bld.add(bld.mul(t, lw.i32(2)), lw.i32(1))) if permuted else \
        (t, bld.add(t, lw.i32(4)))
    frags = {}
    for n0 in col_tiles:
        words = []
        for row in rows:
            lane = bld.add(bld.mul(row, lw.i32(4)), half)
            even_col, odd_col = (shuffle(lw, regs[where[(k0, n0 + p)]], "idx", lane, 0x1F) for p in (0, 1))
            words.append(bld.bitcast(bld.select(odd, odd_col, even_col), I32))
        frags[n0] = words
    return frags


def _staging_buffer(lw, op, staged):
    """Where this dot stages its operands: its own buffer of the two (`staging`), alternating per
    execution, or the transient scratch area (after a barrier)."""
    if "staging" not in op.attrs:
        return lw.smem(staged)
    offset, size = op.attrs["staging"]
    turn = lw.entry.alloca(I32)
    lw.entry.store(lw.i32(0), turn)
    now = lw.b.load(turn, typ=I32)
    lw.b.store(lw.b.xor(now, lw.i32(1)), turn)
    start = lw.b.add(lw.i32(offset), lw.b.mul(now, lw.i32(size)))
    return lw.b.gep(lw.smem_array(), [start], source_etype=I8)


def _store_rows(lw, base, elem_ty, value, stride, byte_offset=0):
    """A 2-D operand into shared memory row-major with `stride` elements per row (a batched
    dot's 3-D one: each batch's rows after the last's).

    A thread's consecutive elements along a row go out as one vector store of up to 16
    bytes: its run of `size_per_thread` columns starts at a multiple of the run, and the
    row stride is a multiple of 16 bytes, so the vector is aligned. (Left to LLVM, the
    stores split at the first element whose alignment it cannot prove.)"""
    layout, shape = lw.layout(value), value.type.shape
    regs, size = lw.regs(value), elem_bytes(elem_ty)
    inner = len(shape) - 1
    run = 1
    if isinstance(layout, Blocked) and layout.order[0] == inner and (stride * size) % 16 == 0:
        run = min(layout.size_per_thread[inner], shape[inner], 16 // size)
        run &= -run  # the largest power of two that divides it
    offsets, indices = layout.offsets(shape), lw.indices(layout, shape)
    i = 0
    while i < len(regs):
        n = run if offsets[i][-1] % run == 0 and offsets[i:i + run] == [
            (*offsets[i][:-1], offsets[i][-1] + e) for e in range(run)] else 1
        *outer, col = indices[i]
        row = outer[0] if len(outer) == 1 else lw.b.add(lw.b.mul(outer[0], lw.i32(shape[1])), outer[1])
        flat = lw.b.add(lw.b.mul(row, lw.i32(stride)), col)
        plain_store(lw, lw.smem_ptr(base, elem_ty, flat, byte_offset), regs[i:i + n], elem_ty, size)
        i += n


def _emulated(kinds) -> str:
    """The CPU emulator's name for an mma of operand kinds `kinds` (A's, B's)."""
    return "_".join(kinds[:1] if kinds[0] == kinds[1] else kinds)


def _mma(lw, kinds, a, b, c, f16_acc=False):
    """One mma.sync on fragments `a` and `b` (of PTX kinds `kinds`: A's, B's) into this lane's four
    accumulator values `c` (rows g, g, g + 8, g + 8); fp16 accumulators travel as two f16x2 words."""
    if f16_acc:
        return word_halves(lw, _mma_words(lw, kinds, a, b, half_words(lw, c)))
    kind = kinds[0]
    acc = I32 if kind == "s8" else F32
    if lw.ctx.portable:  # the CPU emulator implements the warp-wide product
        fn = lw.intrinsic(f"emu_mma_{_emulated(kinds)}", VOID, [GENERIC_PTR] + [I32] * 6 + [acc] * 4)
        buf = lw.entry.alloca(ir.ArrayType(acc, 4))
        buf.type = GENERIC_PTR
        lw.b.call(fn, [buf] + a + b + c)
        return [lw.b.load(lw.b.gep(buf, [lw.i32(i)], source_etype=acc), typ=acc) for i in range(4)]
    d = "s32" if kind == "s8" else "f32"
    # int8 sums saturate at int32's limits, as Triton's mma.sync (its wgmma wraps, and so does kiln's)
    sat = "satfinite." if kind == "s8" else ""
    text = (f"mma.sync.aligned.{_SHAPE.get(kind, 'm16n8k16')}.row.col.{sat}{d}.{kinds[0]}.{kinds[1]}.{d} "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
    con = "r" if kind == "s8" else "f"
    cons = ",".join([f"={con}"] * 4 + ["r"] * 6 + ["0", "1", "2", "3"])
    fty = ir.FunctionType(ir.LiteralStructType([acc] * 4), [I32] * 6 + [acc] * 4)
    got = lw.b.call(ir.InlineAsm(fty, text, cons), a + b + c)
    return [lw.b.extract_value(got, i) for i in range(4)]


def _mma_words(lw, kinds, a, b, c):
    """mma.sync with fp16 accumulators: `c` and the result are two f16x2 words (i32)."""
    if lw.ctx.portable:
        fn = lw.intrinsic(f"emu_mma_{_emulated(kinds)}_f16", VOID, [GENERIC_PTR] + [I32] * 8)
        buf = lw.entry.alloca(ir.ArrayType(I32, 2))
        buf.type = GENERIC_PTR
        lw.b.call(fn, [buf] + a + b + c)
        return [lw.b.load(lw.b.gep(buf, [lw.i32(i)], source_etype=I32), typ=I32) for i in range(2)]
    text = (f"mma.sync.aligned.{_SHAPE.get(kinds[0], 'm16n8k16')}.row.col.f16.{kinds[0]}.{kinds[1]}.f16 "
            "{$0, $1}, {$2, $3, $4, $5}, {$6, $7}, {$8, $9};")
    cons = ",".join(["=r"] * 2 + ["r"] * 6 + ["0", "1"])
    fty = ir.FunctionType(ir.LiteralStructType([I32] * 2), [I32] * 8)
    got = lw.b.call(ir.InlineAsm(fty, text, cons), a + b + c)
    return [lw.b.extract_value(got, i) for i in range(2)]
