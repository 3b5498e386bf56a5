"""A small vector carried across an inner loop (a column maximum of each tile's accumulator, carried by
a persistent kernel's tile loop across its K loop) arrives in a slice of the accumulator's layout, which
repeats it across threads: 64 registers a thread for a 128x256 wgmma tile, held through the K loop beside
the accumulator. It is carried once per thread instead, its yield converted once a tile (layouts
`compact`): triton_kernels' persistent matmul spilled 840 bytes for its absmax, none since. Checked as IR,
emulated on the CPU against NumPy, and on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function

from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def tiles_and_column_absmax(a_ptr, b_ptr, c_ptr, colmax_ptr, TILES: tl.constexpr, K: tl.constexpr,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C[t] = A[t] @ B for each row tile t; colmax = max over every tile of |C| per column."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    colmax = tl.zeros([BN], tl.float32)
    for t in range(0, TILES):
        acc = tl.zeros([BM, BN], tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + (t * BM + rm)[:, None] * K + (k + rk)[None, :])
            acc = tl.dot(a, tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :]), acc)
        tl.store(c_ptr + (t * BM + rm)[:, None] * BN + rn[None, :], acc)
        colmax = tl.maximum(colmax, tl.max(tl.abs(acc), 0))
    tl.store(colmax_ptr + rn, colmax)


def _args(bm, bn, tiles=2, k=64):
    rng = np.random.default_rng(8)
    a = rng.integers(-3, 4, (tiles * bm, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, bn)).astype(np.float16)
    return a, b, np.zeros((tiles * bm, bn), np.float32), np.zeros(bn, np.float32)


def _check(a, b, c, colmax):
    want = a.astype(np.float64) @ b
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(colmax, np.abs(want).max(0))


def test_the_column_maximum_is_carried_once_per_thread():
    warm = tiles_and_column_absmax.warmup(*_args(128, 256), TILES=2, K=64, BM=128, BN=256, BK=32, grid=(1,),
                                          target="sm_90a", num_warps=8)
    kir = compile_ir(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 8}, link=False).kir
    tile_loop = next(line for line in kir.splitlines() if " = for " in line and "<256xfp32" in line)
    assert "<256xfp32:blocked:spt1:" in tile_loop and "slice" not in tile_loop


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_the_tiles_and_their_column_maximum_emulated(target):
    _check(*warmed_and_emulated(tiles_and_column_absmax, _args(64, 64), target, 4, TILES=2, K=64, BM=64, BN=64,
                                BK=32))


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps, bm, bn", [(4, 64, 64), (8, 128, 256)])
def test_the_tiles_and_their_column_maximum_on_the_gpu(num_warps, bm, bn, cuda_torch):
    torch = cuda_torch
    args = [torch.from_numpy(x).cuda() for x in _args(bm, bn)]
    tiles_and_column_absmax[(1,)](*args, TILES=2, K=64, BM=bm, BN=bn, BK=32, num_warps=num_warps)
    _check(*(x.cpu().numpy() for x in args))
