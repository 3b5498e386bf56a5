"""16-bit accumulators go to shared memory by stmatrix on sm_90 (codegen/lower/stmatrix.py): through a
conversion's scratch tile (a matmul's `acc.to(fp16)` before its stores) and into the tile a TMA store
copies (tests/test_codegen_device_tma.py), four 8x8 matrices an instruction, as Triton stores them;
sm_80 and other layouts store elements as before."""

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.lower import stmatrix
from kiln.ir.layout import Blocked, blocked_for, mma_layout, wgmma_layout

import tile_banks
from tile_banks import most_words_a_bank


@pytest.mark.parametrize("shape, warps", [((128, 128), 4), ((128, 256), 8), ((64, 64), 4), ((256, 64), 8)])
def test_wgmma_accumulators_are_stmatrix_fragments(shape, warps):
    layout = wgmma_layout(shape, warps)
    groups = stmatrix.quads(layout, shape, warps)
    offsets = layout.offsets(shape)
    assert groups is not None and sorted(r for g in groups for r in g) == list(range(len(offsets)))
    for g in groups:  # wgmma's own order: (g, c), (g + 8, c), (g, c + 8), (g + 8, c + 8), each as two columns
        r, c = offsets[g[0]]
        assert [offsets[i] for i in g] == [(r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1),
                                           (r, c + 8), (r, c + 9), (r + 8, c + 8), (r + 8, c + 9)]


@pytest.mark.parametrize("shape, warps", [((128, 128), 8), ((64, 64), 4), ((32, 32), 4)])
def test_mma_accumulators_are_stmatrix_fragments_with_their_rows_permuted(shape, warps):
    layout = mma_layout(shape, warps)
    groups = stmatrix.quads(layout, shape, warps)
    assert groups is not None
    offsets = layout.offsets(shape)
    for g in groups:  # each matrix: two adjacent columns of 8 rows one 8-row repetition apart
        assert all(offsets[g[2 * m + 1]] == (offsets[g[2 * m]][0], offsets[g[2 * m]][1] + 1) for m in range(4))


@pytest.mark.parametrize("layout, shape", [
    (blocked_for((128, 128), (1, 0), 8, 4), (128, 128)),  # 8 columns a thread: no lane holds a fragment
    (Blocked((1, 2), (4, 8), (4, 1), (1, 0)), (64, 64)),  # pairs of columns, lanes not 4 a row
    (Blocked((2, 1), (8, 4), (4, 1), (0, 1)), (64, 64)),  # pairs along rows
])
def test_other_layouts_are_not(layout, shape):
    assert stmatrix.quads(layout, shape, 4) is None


@kiln.jit
def matmul_to_half(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(A + rm[:, None] * K + (k + rk)[None, :]), tl.load(B + (k + rk)[:, None] * BN + rn[None, :]))
    tl.store(C + rm[:, None] * BN + rn[None, :], acc.to(tl.float16))


def _pointer_build(target, warps, stages=3, bm=128, bn=128):
    a, b, c = np.zeros((bm, 256), np.float16), np.zeros((256, bn), np.float16), np.zeros((bm, bn), np.float16)
    return matmul_to_half.warmup(a, b, c, 256, BM=bm, BN=bn, BK=64, num_warps=warps, num_stages=stages, grid=(1,),
                                 target=target)


@pytest.mark.parametrize("warps, stages", [(4, 3), (8, 3), (8, 1)])  # wgmma's layout; 1 stage: mma.sync's
def test_a_half_accumulator_leaves_through_stmatrix_on_hopper(warps, stages):
    ptx = _pointer_build("sm_90a", warps, stages).asm["ptx"]
    # each thread's share of the 128x128 block, 8 elements (four matrices' two each) an instruction
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 128 * 128 // (32 * warps) // 8
    assert "st.shared.b32" not in ptx and "st.shared.v2.b16" not in ptx


def test_ampere_stores_elements():
    ptx = _pointer_build("sm_80", 4).asm["ptx"]
    assert "stmatrix.sync" not in ptx and "st.shared" in ptx  # (the .file line names this file)


@pytest.mark.parametrize("cols, swizzle", [(32, 64), (16, 32)])
def test_a_conversion_s_narrow_rows_are_swizzled_so_a_matrix_takes_every_bank(cols, swizzle):
    """fp16 rows of 64 or 32 bytes: stmatrix writes a matrix's 8 rows (16 bytes each, one 16-byte chunk
    of the row) in one go. Unswizzled they share 4 banks four or two at a time (fla's fwd_h: its states'
    conversions, 64-byte rows); the conversion's swizzled tile gives every row its own banks, and a
    reader's 16-byte runs of one row stay whole."""
    from kiln.codegen.lower.shared import swizzled_scratch
    from kiln.ir.types import block_type, float16, shared_type
    t = block_type(float16, [64, cols])
    tile = swizzled_scratch(t, (64, cols))
    assert tile is not None and tile.swizzle == swizzle
    chunks = cols * 2 // 16

    def matrix(first_row, chunk):
        return [(first_row + r, chunk * 8, 16) for r in range(8)]
    assert max(most_words_a_bank(tile, matrix(r, c)) for r in range(0, 64, 8) for c in range(chunks)) == 1
    plain = shared_type(float16, [64, cols], 0, (1, 0))
    assert most_words_a_bank(plain, matrix(0, 0)) == 8 * cols * 2 // 128  # as it was: 8 rows over 128-byte banks
    assert all(tile_banks.byte_offset(tile, r, 8 * c + 7) - tile_banks.byte_offset(tile, r, 8 * c) == 14
               for r in range(64) for c in range(chunks))  # a run of 8 stays whole


def test_rows_of_the_banks_width_keep_their_padding():
    from kiln.codegen.lower.shared import swizzled_scratch
    from kiln.ir.types import block_type, float16
    assert swizzled_scratch(block_type(float16, [64, 64]), (64, 72)) is None


@pytest.mark.gpu
@pytest.mark.parametrize("warps, stages, bm, bn", [(4, 3, 128, 128), (8, 3, 128, 256), (8, 1, 128, 128),
                                                   (4, 2, 64, 64), (4, 2, 64, 32), (4, 2, 64, 16)])
def test_half_accumulators_through_stmatrix_on_the_gpu(warps, stages, bm, bn, cuda_torch):
    torch = cuda_torch
    gen = torch.Generator().manual_seed(7)
    # small integers: every sum exact, and exact in fp16
    a = torch.randint(-2, 3, (bm, 256), generator=gen).half().cuda()
    b = torch.randint(-2, 3, (256, bn), generator=gen).half().cuda()
    c = torch.empty(bm, bn, dtype=torch.float16, device="cuda")
    matmul_to_half[(1,)](a, b, c, 256, BM=bm, BN=bn, BK=64, num_warps=warps, num_stages=stages)
    assert torch.equal(c, (a.float() @ b.float()).half())
