"""Loops with a constant step below zero (`range(K, 0, -BLOCK_K)`, as Inductor's bmm template counts
its K loop down), built as Triton builds them: the loop counts up from the end to the start and the
loop variable is start - (counter - end). The values it takes are Python's; on Hopper a GEMM whose K
loop counts down is pipelined onto the tensor cores as one counting up is."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import nvjitlink
from kiln.codegen.passes.rewrite import const_int
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function


@kiln.jit
def _visited(out_ptr, start, end, STEP: tl.constexpr, START: tl.constexpr, END: tl.constexpr,
             RUNTIME: tl.constexpr):
    count = 0
    total = 0
    if RUNTIME:
        for v in tl.range(start, end, STEP):
            tl.store(out_ptr + count, v)
            count += 1
            total += v
    else:
        for v in range(START, END, STEP):
            tl.store(out_ptr + count, v)
            count += 1
            total += v
    tl.store(out_ptr + 62, total)
    tl.store(out_ptr + 63, count)


@pytest.mark.parametrize("runtime", [False, True])
@pytest.mark.parametrize("start, end, step", [(10, 0, -3), (10, 0, -1), (7, -5, -4), (64, 0, -64), (100, 1, -33),
                                              (0, 10, -2), (5, 5, -1)])
def test_a_descending_loop_visits_pythons_values(start, end, step, runtime):
    out = np.full(64, -999, np.int32)
    _visited[(1,)](out, start, end, STEP=step, START=start, END=end, RUNTIME=runtime)
    want = list(range(start, end, step))
    assert out[63] == len(want) and out[:len(want)].tolist() == want and out[62] == sum(want)


def test_the_loop_op_counts_up():
    out = np.zeros(64, np.int32)
    kernel = _visited.warmup(out, 0, 0, STEP=-3, START=10, END=0, RUNTIME=False, grid=(1,))
    ir = kernel.ir
    fn = parse_function(ir if isinstance(ir, str) else print_function(ir))
    loop = next(op for op in fn.walk() if op.name == "for")
    assert const_int(loop.operands[2]) == 3


@kiln.jit
def _batched_gemm_counting_down(a_ptr, b_ptr, c_ptr, M, N, K, stride_ab, stride_bb, stride_cb,
                                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr):
    """One BM x BN tile of batch program_id(1) of A @ B (row-major, A M x K, B K x N), its K loop counting
    down with masks on what is left of K when K is not a multiple of BK."""
    batch = tl.program_id(1)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + batch * stride_ab + (rm % M)[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + batch * stride_bb + rk[:, None] * N + (rn % N)[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(K, 0, -BK):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=rk[None, :] < k, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BK
        b_ptrs += BK * N
    c_ptrs = c_ptr + batch * stride_cb + rm[:, None] * N + rn[None, :]
    tl.store(c_ptrs, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("even_k", [True, False])
def test_a_gemm_counting_down_runs_on_wgmma_from_copy_rings_on_hopper(even_k):
    x = np.zeros((64, 64), np.float16)
    kernel = _batched_gemm_counting_down.warmup(x, x, x, 128, 128, 1024, 1 << 17, 1 << 17, 1 << 14, BM=128, BN=128,
                                                BK=64, EVEN_K=even_k, num_warps=4, num_stages=3, grid=(1, 1),
                                                target="sm_90a")
    ptx = kernel.asm["ptx"]
    assert "wgmma.mma_async" in ptx and ("cp.async.cg" in ptx or "cp.async.bulk.tensor" in ptx)
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info)


@pytest.mark.gpu
@pytest.mark.parametrize("K", [1024, 1000])
def test_a_gemm_counting_down_matches_torch_on_the_gpu(K, cuda_torch):
    torch = cuda_torch
    B, M, N = 3, 200, 128
    a = torch.randn(B, M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(B, K, N, device="cuda", dtype=torch.float16)
    c = torch.zeros(B, M, N, device="cuda", dtype=torch.float16)
    _batched_gemm_counting_down[((M + 127) // 128, B)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0),
                                                       BM=128, BN=128, BK=64, EVEN_K=K % 64 == 0, num_warps=4,
                                                       num_stages=3)
    torch.testing.assert_close(c.float(), torch.bmm(a.float(), b.float()), atol=0.05 * K ** 0.5, rtol=0.01)
