"""A tile a loop loads for a dot and also reads otherwise (fla's `b_k`, multiplied and scaled by its
gates) comes through the dot's ring all the same: the other uses read it back from the ring's tile
(`local_load`), as Triton reads a pipelined load's shared buffer; before, the dot lost its ring and the
loop its pipelining (smem_plan._unshared_loads). Built for sm_90a (wgmma at 64 rows, mma.sync below)
and checked as IR; emulated (mma.sync on cp.async rings) against NumPy."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def dot_and_row_sums(a_ptr, b_ptr, c_ptr, s_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows, cols, ks = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    sums = tl.zeros((BM,), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * BN + cols[None, :])
        acc = tl.dot(a, b, acc)
        sums += tl.sum(a.to(tl.float32) * a.to(tl.float32), axis=1)  # a read besides the dot
    tl.store(c_ptr + rows[:, None] * BN + cols[None, :], acc)
    tl.store(s_ptr + rows, sums)


K_TOTAL = 160


def _args(bm, rng=None):
    rng = rng or np.random.default_rng(0)
    a = rng.standard_normal((bm, K_TOTAL)).astype(np.float16)
    b = rng.standard_normal((K_TOTAL, 64)).astype(np.float16)
    return a, b, np.zeros((bm, 64), np.float32), np.zeros(bm, np.float32)


def _loop(bm, num_warps):
    from kiln.codegen import compile
    warm = dot_and_row_sums.warmup(*_args(bm), K_TOTAL, BM=bm, BN=64, BK=32, grid=(1,), target="sm_90a")
    kir = compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps, "num_stages": 3},
                  link=False).kir
    return kir[kir.index(" = for "):]


@pytest.mark.parametrize("bm, num_warps, dot", [(64, 4, "warp_group_dot"), (32, 4, "mma_dot"), (32, 2, "mma_dot")])
def test_a_tile_read_besides_its_dot_comes_through_the_ring(bm, num_warps, dot):
    loop = _loop(bm, num_warps)
    assert f"= {dot} " in loop
    assert "local_load" in loop and " = load " not in loop  # both tiles copied ahead, A read back


def _emulated(bm, num_warps):
    from kiln.codegen.emulate import run_on_cpu
    a, b, c, s = _args(bm, np.random.default_rng(7))
    warm = dot_and_row_sums.warmup(a, b, c, s, K_TOTAL, BM=bm, BN=64, BK=32, grid=(1,), target="sm_90a")
    run_on_cpu(warm.ir, (1,), [a, b, c, s, K_TOTAL], num_warps=num_warps, options={"num_stages": 3})
    return a, b, c, s


@pytest.mark.parametrize("bm, num_warps", [(32, 2), (64, 4)])
def test_the_read_back_loop_matches_numpy(bm, num_warps):
    a, b, c, s = in_child(_emulated, bm, num_warps, timeout=300)
    a32 = a.astype(np.float32)
    np.testing.assert_allclose(c, a32 @ b.astype(np.float32), rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(s, (a32 * a32).sum(1), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("bm, num_warps", [(32, 2), (32, 4), (64, 4), (64, 8)])
def test_the_read_back_loop_on_the_gpu(bm, num_warps, cuda_torch):
    torch = cuda_torch
    a, b, c, s = (torch.from_numpy(x).cuda() for x in _args(bm))
    dot_and_row_sums[(1,)](a, b, c, s, K_TOTAL, BM=bm, BN=64, BK=32, num_warps=num_warps, num_stages=3)
    a32 = a.float()
    torch.testing.assert_close(c, a32 @ b.float(), rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(s, (a32 * a32).sum(1), rtol=1e-4, atol=1e-3)
