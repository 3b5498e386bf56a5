"""bench/kernels.py's block-scaled fp8 GEMM (bench/block_scaled.py times it on a GPU) built for sm_90a on the
CPU: fp8 wgmma on rings, its per-step scales (a row vector of A's, a scalar of B's block) on rings of their
own, read back after the product's wait, nothing loaded from global memory in the K loop."""
import re

import pytest

from bench_support import bench_kernels


def test_the_block_scaled_gemm_copies_its_scales_with_its_tiles():
    torch = pytest.importorskip("torch")
    from kiln.codegen import compile
    from kiln.ir import parse_function
    lib = bench_kernels()
    M, N, K = 256, 256, 512
    a = torch.zeros(M, K).to(torch.float8_e4m3fn)
    b = torch.zeros(N, K).to(torch.float8_e4m3fn)
    c = torch.zeros(M, N, dtype=torch.float16)
    a_scale, b_scale = torch.zeros(M, K // 128), torch.zeros(N // 128, K // 128)
    warm = lib.block_scaled_matmul_kernel.warmup(
        a, b, c, a_scale, b_scale, M, N, K, K, K, N, K // 128, K // 128, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128,
        GROUP_M=8, SCALE_BLOCK=128, num_warps=4, num_stages=3, grid=(1,), target="sm_90a")
    built = compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 4, "num_stages": 3})
    loop = built.kir[built.kir.index(" = for "):]
    assert " = load " not in loop
    assert re.search(r"= local_load %\d+ : <128xfp32:slice1:wgmma", loop)
    assert re.search(r"= local_load %\d+ : fp32 ", loop)
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in built.ptx and built.n_spills == 0
