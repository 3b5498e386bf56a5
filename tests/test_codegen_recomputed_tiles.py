"""A tile stored through pointers made from a vector read from memory (a MoE scatter: each row's
destination loaded from an index array) takes those pointers in the store's layout by computing them
again there from the vector, not by converting the pointer tile through shared memory
(codegen/passes/convert_layouts.py `_recomputed`, as Triton rematerializes them): a 128x256 tile of
pointers is 256 KB, past an SM's shared memory (triton_kernels' scattered fp8 matmul). Checked as IR,
emulated on the CPU against NumPy, and on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function

from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def scattered_rows(a_ptr, b_ptr, rows_ptr, out_ptr, stride, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr):
    """out[rows[i], :] = (a b)[i, :] for rows[i] >= 0, in fp16."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.dot(tl.load(a_ptr + rm[:, None] * BK + rk[None, :]), tl.load(b_ptr + rk[:, None] * BN + rn[None, :]))
    rows = tl.load(rows_ptr + rm)
    tl.store(out_ptr + rows[:, None] * stride + rn[None, :], acc.to(tl.float16), mask=(rows >= 0)[:, None])


def _args(bm, bn, bk):
    rng = np.random.default_rng(4)
    a = rng.integers(-2, 3, (bm, bk)).astype(np.float16)
    b = rng.integers(-2, 3, (bk, bn)).astype(np.float16)
    rows = rng.permutation(2 * bm)[:bm].astype(np.int32)
    rows[::7] = -1  # rows dropped by the mask
    return a, b, rows, np.zeros((2 * bm, bn), np.float16), bn


def _want(a, b, rows, out):
    want = out.copy()
    keep = rows >= 0
    want[rows[keep]] = (a.astype(np.float64) @ b)[keep].astype(np.float16)
    return want


@pytest.mark.parametrize("target, num_warps, tile", [("sm_90a", 8, (128, 256, 32)), ("sm_90a", 4, (64, 64, 32)),
                                                     ("sm_80", 4, (64, 64, 32))])
def test_the_pointer_tile_is_computed_again_not_converted(target, num_warps, tile):
    bm, bn, bk = tile
    warm = scattered_rows.warmup(*_args(*tile), BM=bm, BN=bn, BK=bk, grid=(1,), target=target, num_warps=num_warps)
    built = compile_ir(parse_function(warm.asm["kir"]), target, {"num_warps": num_warps}, link=False)
    pointer_tiles = [line for line in built.kir.splitlines() if f": <{bm}x{bn}xptr<" in line]
    assert not any(" = convert_layout " in line and "scratch" in line for line in pointer_tiles)
    assert built.shared < bm * bn * 8  # the pointer tile's bytes: what a conversion of it took


@pytest.mark.parametrize("target, num_warps", [("sm_90a", 4), ("sm_80", 2)])
def test_the_scattered_rows_give_numpy_s_product_emulated(target, num_warps):
    a, b, rows, out, _ = warmed_and_emulated(scattered_rows, _args(64, 64, 32), target, num_warps, BM=64, BN=64, BK=32)
    np.testing.assert_array_equal(out, _want(a, b, rows, np.zeros_like(out)))


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps, tile", [(4, (64, 64, 32)), (8, (128, 256, 32))])
def test_the_scattered_rows_on_the_gpu(num_warps, tile, cuda_torch):
    torch = cuda_torch
    a, b, rows, out, stride = _args(*tile)
    want = _want(a, b, rows, out)
    a, b, rows, out = (torch.from_numpy(x).cuda() for x in (a, b, rows, out))
    scattered_rows[(1,)](a, b, rows, out, stride, BM=tile[0], BN=tile[1], BK=tile[2], num_warps=num_warps)
    np.testing.assert_array_equal(out.cpu().numpy(), want)
