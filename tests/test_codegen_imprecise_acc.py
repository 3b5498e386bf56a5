"""`tl.dot(..., max_num_imprecise_acc=n)` on fp8: where n is at most the dot's K, each run of n of
k is summed from zero by the tensor cores, awaited, and added to the accumulator in fp32, as
Triton does on Hopper (its "partial accumulator"); otherwise, and for other types, the whole K
goes into one accumulator. The PTX is checked here; the GPU test checks the values (bench/kernels.py's
`fp8_matmul_kernel`; bench/imprecise_acc.py compares its errors with Triton's)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import nvjitlink
from kiln.codegen.target import parse_target

from bench_support import bench_kernels, needs_cuda


_fp8_matmul = bench_kernels().fp8_matmul_kernel  # C = A @ B^T, A [M, K] and B [N, K] (K-major)


def _compiled(imprecise, dtype=tl.float8e4nv, bm=64, bn=64, bk=128):
    store = np.uint8 if dtype.is_fp8() else np.float16
    a = kiln.reinterpret(np.zeros((bm, 512), store), dtype) if dtype.is_fp8() else np.zeros((bm, 512), store)
    b = kiln.reinterpret(np.zeros((bn, 512), store), dtype) if dtype.is_fp8() else np.zeros((bn, 512), store)
    return _fp8_matmul.warmup(a, b, np.zeros((bm, bn), np.float32), bm, bn, 512, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                              IMPRECISE=imprecise, num_warps=4, num_stages=3, grid=(1,), target="sm_90a")


def _adds(ptx: str) -> int:
    # contractible, as every fp32 add of a default build: `add.f32` (upstream's test counts these), not `add.rn.f32`
    return len(re.findall(r"\badd\.f32\b", ptx))


@pytest.mark.parametrize("imprecise,runs", [(32, 4), (64, 2), (128, 1)])
def test_each_run_of_k_is_its_own_accumulator_added_in_fp32(imprecise, runs):
    plain, partial = _compiled(0).asm["ptx"], _compiled(imprecise).asm["ptx"]
    regs = 64 * 64 // 128  # accumulator registers per thread
    assert _adds(plain) == 0 and _adds(partial) == runs * regs
    count = lambda text, what: len(re.findall(what, text))  # noqa: E731
    assert count(partial, r"wgmma\.mma_async") == count(plain, r"wgmma\.mma_async")  # the same k-steps
    assert count(partial, r"wgmma\.commit_group") == count(plain, r"wgmma\.commit_group") + runs - 1
    _, info = nvjitlink.link_cubin(partial, parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info)


def test_a_16_bit_dot_keeps_one_accumulator():
    assert _adds(_compiled(32, dtype=tl.float16).asm["ptx"]) == 0


def test_a_bound_past_the_dots_k_is_refused_as_triton_refuses_it():
    with pytest.raises(kiln.CompilationError, match=r"max_num_imprecise_acc \(256\) must be <= K \(128\)"):
        _compiled(256, bk=128)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("imprecise", [0, 32, 128])
def test_partial_accumulators_on_the_gpu_sum_what_numpy_sums(imprecise):
    """Small integers whose every partial sum fp32 and the tensor cores both hold exactly: the
    partial accumulators (registers tied through each wait) must give the sum to the last bit."""
    import torch
    rng = np.random.default_rng(11)
    a = torch.tensor(rng.integers(-4, 5, (64, 512)), dtype=torch.float32)
    b = torch.tensor(rng.integers(-4, 5, (64, 512)), dtype=torch.float32)
    c = torch.zeros(64, 64, device="cuda")
    _fp8_matmul[(1, 1)](a.to(torch.float8_e4m3fn).cuda(), b.to(torch.float8_e4m3fn).cuda(), c, 64, 64, 512,
                        BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, IMPRECISE=imprecise, num_warps=4, num_stages=3)
    torch.testing.assert_close(c.cpu(), a @ b.T, rtol=0, atol=0)


def test_the_bound_reaches_the_pipelined_dot():
    from kiln.codegen import compile as compile_ir
    from kiln.ir import parse_function
    kir = compile_ir(parse_function(_compiled(32).asm["kir"]), "sm_90a", {"num_warps": 4, "num_stages": 3},
                     link=False).kir
    assert re.search(r"warp_group_dot .*\{max_num_imprecise_acc = 32\}", kir)
