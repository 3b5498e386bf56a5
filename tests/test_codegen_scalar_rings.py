"""A scalar loaded in a pipelined dot loop that a register A is computed from (a per-step scale,
`(a * s).to(fp16)`) comes through a ring of its own, tiles of one (`smem<Sx1x1xfp32>`), copied ahead with
the loop's tiles and read back as a scalar (`local_load ... : fp32`, every thread reading the word).
Carried one iteration ahead in a register instead, it arrived behind the ring copies in flight and the move
that carried it waited for it (fla's fwd_h: 11% of its stalls, H100). fla's last gate, a scalar a staged
operand is computed from, is tests/test_codegen_storing_recurrence.py's. So do the scalars and vectors that
scale a dot's product on its way into the accumulator (a block-scaled GEMM's `dot(a, b) * a_scale[:, None] *
b_scale`), which were loaded in the iteration and waited for beside the dot."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def step_scaled_matmul(a_ptr, b_ptr, s_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = sum over K steps of (a_k * s_k).to(fp16) @ b_k: each step's A scaled by a scalar of its own."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        s = tl.load(s_ptr + k // BK)
        acc = tl.dot((a * s).to(tl.float16), b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


BM, BN, BK, K = 64, 64, 32, 160


def _args():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((BM, K)).astype(np.float32)
    b = (rng.standard_normal((K, BN)) / 4).astype(np.float16)
    s = rng.uniform(0.5, 2.0, K // BK).astype(np.float32)
    return a, b, s, np.zeros((BM, BN), np.float32)


def _want(a, b, s):
    scaled = (a * np.repeat(s, BK)[None, :]).astype(np.float16).astype(np.float32)
    return scaled @ b.astype(np.float32)


def _built_loop(num_warps):
    from kiln.codegen import compile
    warm = step_scaled_matmul.warmup(*_args(), K, BM=BM, BN=BN, BK=BK, grid=(1,), target="sm_90a")
    kir = compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps, "num_stages": 3},
                  link=False).kir
    return kir, kir[kir.index(" = for "):]


@pytest.mark.parametrize("num_warps", [4, 8])
def test_the_step_s_scale_comes_through_a_ring_of_tiles_of_one(num_warps):
    kir, loop = _built_loop(num_warps)
    assert "warp_group_dot" in loop
    assert " = load " not in loop  # the scale neither loaded in the iteration nor carried
    assert re.search(r"= local_load %\d+ : fp32 ", loop)
    assert re.search(r"= local_alloc[^\n]*: smem<\dx1x1xfp32:", kir)


def _emulated(num_warps):
    from kiln.codegen.emulate import run_on_cpu
    a, b, s, c = _args()
    kernel = step_scaled_matmul.warmup(a, b, s, c, K, BM=BM, BN=BN, BK=BK, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [a, b, s, c, K], num_warps=num_warps, options={"num_stages": 3})
    return a, b, s, c


@pytest.mark.parametrize("num_warps", [2, 4])
def test_the_step_scaled_matmul_matches_numpy(num_warps):
    a, b, s, c = in_child(_emulated, num_warps, timeout=600)
    np.testing.assert_allclose(c, _want(a, b, s), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [4, 8])
@pytest.mark.parametrize("num_stages", [2, 3])
def test_the_step_scaled_matmul_on_the_gpu(num_warps, num_stages, cuda_torch):
    torch = cuda_torch
    a, b, s, c = (torch.from_numpy(x).cuda() for x in _args())
    step_scaled_matmul[(1,)](a, b, s, c, K, BM=BM, BN=BN, BK=BK, num_warps=num_warps, num_stages=num_stages)
    want = _want(*(x.cpu().numpy() for x in (a, b, s)))
    np.testing.assert_allclose(c.cpu().numpy(), want, rtol=2e-2, atol=2e-2)


@kiln.jit
def block_scaled(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """acc += (a_k @ b_k) * sa_k[:, None] * sb_k: each step's product scaled by a row vector and a scalar."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        sa = tl.load(sa_ptr + (k // BK) * BM + rm)
        sb = tl.load(sb_ptr + k // BK)
        acc += tl.dot(a, b) * sa[:, None] * sb
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _block_scaled_args():
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((BM, K)) / 4).astype(np.float16)
    b = (rng.standard_normal((K, BN)) / 4).astype(np.float16)
    sa = rng.uniform(0.5, 2.0, (K // BK, BM)).astype(np.float32)
    sb = rng.uniform(0.5, 2.0, K // BK).astype(np.float32)
    return a, b, sa, sb, np.zeros((BM, BN), np.float32)


def _block_scaled_want(a, b, sa, sb):
    want = np.zeros((BM, BN), np.float32)
    for i in range(K // BK):
        part = a[:, i * BK:(i + 1) * BK].astype(np.float32) @ b[i * BK:(i + 1) * BK].astype(np.float32)
        want += part * sa[i][:, None] * sb[i]
    return want


@pytest.mark.parametrize("num_warps", [4, 8])
def test_a_products_scales_come_through_rings_and_are_read_after_its_wait(num_warps):
    from kiln.codegen import compile
    warm = block_scaled.warmup(*_block_scaled_args(), K, BM=BM, BN=BN, BK=BK, grid=(1,), target="sm_90a")
    kir = compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps, "num_stages": 3},
                  link=False).kir
    loop = kir[kir.index(" = for "):]
    assert " = load " not in loop
    lines = loop.splitlines()
    wait = next(i for i, line in enumerate(lines) if "warp_group_dot_wait" in line)
    scale_reads = [i for i, line in enumerate(lines) if re.search(r"= local_load %\d+ : (fp32|<64xfp32)", line)]
    assert len(scale_reads) == 2 and min(scale_reads) > wait, loop  # beside the product, after its wait
    for ring in (r"smem<\dx1x64xfp32:", r"smem<\dx1x1xfp32:"):
        assert re.search(r"= local_alloc[^\n]*: " + ring, kir)


def _block_scaled_emulated(num_warps):
    from kiln.codegen.emulate import run_on_cpu
    a, b, sa, sb, c = _block_scaled_args()
    kernel = block_scaled.warmup(a, b, sa, sb, c, K, BM=BM, BN=BN, BK=BK, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [a, b, sa, sb, c, K], num_warps=num_warps, options={"num_stages": 3})
    return (a, b, sa, sb), c


@pytest.mark.parametrize("num_warps", [2, 4])
def test_the_block_scaled_loop_matches_numpy(num_warps):
    inputs, c = in_child(_block_scaled_emulated, num_warps, timeout=600)
    np.testing.assert_allclose(c, _block_scaled_want(*inputs), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [4, 8])
@pytest.mark.parametrize("num_stages", [2, 3])
def test_the_block_scaled_loop_on_the_gpu(num_warps, num_stages, cuda_torch):
    torch = cuda_torch
    a, b, sa, sb, c = (torch.from_numpy(x).cuda() for x in _block_scaled_args())
    block_scaled[(1,)](a, b, sa, sb, c, K, BM=BM, BN=BN, BK=BK, num_warps=num_warps, num_stages=num_stages)
    want = _block_scaled_want(*(x.cpu().numpy() for x in (a, b, sa, sb)))
    np.testing.assert_allclose(c.cpu().numpy(), want, rtol=2e-2, atol=2e-2)
