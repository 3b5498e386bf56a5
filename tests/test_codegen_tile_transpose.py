"""kiln.codegen.lower.tile_transpose: a tile copied into one of the other inner dim, 8-bit ones by
ldmatrix.trans, prmt and stmatrix, 32-bit ones by 4x4 squares a thread. The lane formulas are checked by
playing the instructions' semantics (PTX ISA) on them; the builds by their PTX (ptxas: no spills); the GPU
results in test_codegen_staged_transpose (8-bit) and test_codegen_pointer_tma (tf32)."""
import numpy as np
import pytest

from kiln.codegen.lower.tile_transpose import BLOCK, WORD_BLOCK, destination_column, destination_row, selectors, \
    source_row, word_square

from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

from test_codegen_staged_transpose import _compiled


def _ldmatrix_trans_x4(rows):
    """Each lane's four words: lane (p, q) takes, of matrix m, 16-bit column p of its rows 2q and 2q + 1
    (`rows[8m + r]`: the 16 bytes lane 8m + r addressed)."""
    words = []
    for lane in range(32):
        p, q = divmod(lane, 4)
        low, high = (rows[8 * m + 2 * q] for m in range(4)), (rows[8 * m + 2 * q + 1] for m in range(4))
        words.append([int.from_bytes(bytes([lo[2 * p], lo[2 * p + 1], hi[2 * p], hi[2 * p + 1]]), "little")
                      for lo, hi in zip(low, high)])
    return words


def _prmt(a, b, selector):
    pool = a.to_bytes(4, "little") + b.to_bytes(4, "little")
    return int.from_bytes(bytes(pool[selector >> 4 * i & 7] for i in range(4)), "little")


def _stmatrix_x4(words, rows_at):
    """Bytes written by stmatrix.x4: row r of matrix m at `rows_at[8m + r]`, lane (r, q)'s word of m its
    bytes 4q .. 4q + 3."""
    written = {}
    for m in range(4):
        for r in range(8):
            for q in range(4):
                for i, byte in enumerate(words[4 * r + q][m].to_bytes(4, "little")):
                    written[(rows_at[8 * m + r], 4 * q + i)] = byte
    return written


def test_a_warps_block_lands_transposed():
    block = np.random.default_rng(3).integers(0, 256, BLOCK, dtype=np.uint8)  # [row, byte]
    loaded = _ldmatrix_trans_x4([block[source_row(lane)] for lane in range(32)])
    regrouped = []
    for lane, words in enumerate(loaded):
        slot0, slot1 = selectors(lane)
        regrouped.append([_prmt(words[2 * c], words[2 * c + 1], sel) for c in range(2) for sel in (slot0, slot1)])
    written = _stmatrix_x4(regrouped, [(destination_column(lane), destination_row(lane)) for lane in range(32)])
    out = np.zeros(BLOCK[::-1], np.int64)
    for (column, first_row), i in written:
        out[column, first_row + i] = written[(column, first_row), i]
    assert len(written) == block.size
    np.testing.assert_array_equal(out, block.T)


def test_each_matrixs_rows_lie_in_distinct_rows_mod_8():
    # a tile swizzled by 128-byte rows XORs a row's 16-byte units with its row mod 8: no bank conflicts
    for m in range(4):
        assert len({source_row(8 * m + r) % 8 for r in range(8)}) == 8
        assert len({destination_column(8 * m + r) % 8 for r in range(8)}) == 8


def test_a_warps_word_block_lands_transposed_and_its_loads_and_stores_meet_no_conflict():
    block = np.arange(np.prod(WORD_BLOCK)).reshape(WORD_BLOCK)  # [row along the destination's inner dim, column]
    out = np.full(WORD_BLOCK[::-1], -1)
    for lane in range(32):
        row, col = word_square(lane)
        squares = [block[row + i, col:col + 4] for i in range(4)]  # four 16-byte rows of the source
        for j in range(4):  # ... stored as four of the destination
            out[col + j, row:row + 4] = [squares[i][j] for i in range(4)]
    np.testing.assert_array_equal(out, block.T)
    assert sorted(word_square(lane) for lane in range(32)) == [(r, c) for r in range(0, 16, 4) for c in range(0, 32, 4)]
    for quarter in range(0, 32, 8):  # tiles of 128-byte rows (32 elements) swizzled by the row mod 8:
        squares = [word_square(lane) for lane in range(quarter, quarter + 8)]
        for k in range(4):  # load k (source row `row + k`) and store k (destination row `col + k`) of 8 lanes
            loads = {(col // 4) ^ ((row + k) % 8) for row, col in squares}
            stores = {(row // 4) ^ ((col + k) % 8) for row, col in squares}
            assert len(loads) == len(stores) == 8  # eight distinct 16-byte bank groups each way



def _copied_ring(kernel, warps, itemsize):
    """The shared type of the ring slot the copy reads: the kernel's passes run again on its IR, and its one
    2-D local_load of `itemsize`-byte elements taken."""
    fn = parse_function(kernel.asm["kir"])
    run_passes(fn, PassContext(parse_target("sm_90a"), warps, 3))
    [copy] = [op for op in fn.walk() if op.name == "local_load" and len(op.operands[0].type.shape) == 2
              and op.operands[0].type.element_ty.itemsize == itemsize]
    return copy.operands[0].type

@pytest.mark.parametrize("dtype", ["float8e4nv", "int8"])
@pytest.mark.parametrize("bm,bn,bk,warps,copies", [(128, 64, 64, 8, 1), (128, 64, 128, 8, 2), (64, 32, 128, 4, 2)])
def test_the_staged_n_major_b_is_copied_by_warps(dtype, bm, bn, bk, warps, copies):
    # (B's columns under 16 a warp: the transposed product's instructions would not fill a warpgroup)
    kernel = _compiled(dtype, "sm_90a", bm, bn, bk, warps)
    ptx = kernel.asm["ptx"]
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == copies  # bk x bn bytes, 512 a copy
    assert ptx.count("prmt.b32") >= 4 * copies and "st.shared.b8" not in ptx
    assert kernel.metadata["n_spills"] == 0
    ring = _copied_ring(kernel, warps, itemsize=1)  # swizzled like the tile it writes (rows spread over the banks)
    assert tuple(ring.order) == (1, 0) and ring.swizzle == min(128, bn)


def test_a_block_count_the_warps_do_not_share_evenly_keeps_the_byte_stores():
    ptx = _compiled("int8", "sm_90a", 128, 32, 32, 4).asm["ptx"]  # two blocks of 32 x 16 for four warps
    assert "ldmatrix" not in ptx and "st.shared.b8" in ptx


@pytest.mark.parametrize("bm,bn,bk,warps,stores", [(128, 64, 64, 8, 4), (128, 32, 64, 4, 4)])
def test_a_staged_n_major_tf32_b_is_copied_in_squares(bm, bn, bk, warps, stores):
    # tutorial 03's kernel: B 16 bytes a copy into an N-major ring, staged K-major, a 16-byte store per 4 elements
    # (B's columns under 16 a warp: not the transposed product)
    from test_codegen_pointer_tma import _mm
    a, b, c = np.zeros((256, 64), np.float32), np.zeros((64, 512), np.float32), np.zeros((256, 512), np.float16)
    kernel = _mm.warmup(a, b, c, 256, 512, 64, 64, 512, 512, BM=bm, BN=bn, BK=bk, OTHER=0.0, ROW_MASK=True,
                        MIX_ROWS=False, SHIFT=0, num_warps=warps, num_stages=3, grid=(1,), target="sm_90a")
    ptx = kernel.asm["ptx"]
    assert ".tf32.tf32" in ptx and "cp.async.ca.shared.global" not in ptx
    assert ptx.count("st.shared.v4.b32") == stores and kernel.metadata["n_spills"] == 0
    ring = _copied_ring(kernel, warps, itemsize=4)  # the squares' ring, swizzled by 128-byte rows
    assert tuple(ring.order) == (1, 0) and ring.swizzle == 128
