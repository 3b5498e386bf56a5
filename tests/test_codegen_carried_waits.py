"""A dot result carried to the next iteration and read there by other ops than a dot (a hand-pipelined
attention's scores, issued one key block ahead) is awaited before that read, leaving in flight the dots the
iteration issued before it (smem_pipeline._await_before_reads): its group is older than theirs, and wgmma
groups retire in order. Before, that wait left none pending, so the next block's scores, just issued,
were awaited before this block's softmax instead of running under it."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir

from test_codegen_emulate import in_child
from test_codegen_layouts_peeled_dots import _ahead as _bench_forward, _loop_of


@kiln.jit
def _ahead(A, B, C, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = the sum over K steps of exp2 of each step's product scaled down, each step's product issued an
    iteration before its exp2 is taken."""
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = A + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = B + offs_k[:, None] * stride_bk + offs_n[None, :]
    scores = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(BK, K, BK):
        following = tl.dot(tl.load(a_ptrs + k), tl.load(b_ptrs + k * stride_bk))
        acc += tl.math.exp2(scores * 0.125)
        scores = following
    acc += tl.math.exp2(scores * 0.125)
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :], acc)


def _build():
    x = np.zeros((16, 16), np.float16)
    f = np.zeros((16, 16), np.float32)
    return _ahead.warmup(x, x, f, 256, 256, 64, 64, BM=64, BN=64, BK=32, num_warps=4, num_stages=3,
                         grid=(1,), target="sm_90a")


def _loop():
    return _loop_of(compile_ir(_build().ir, "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False).kir)


def test_the_carried_scores_are_awaited_with_the_next_ones_left_in_flight():
    loop = _loop()
    issued = re.search(r"(%\d+) = warp_group_dot ", loop)
    assert issued
    waits = re.findall(r"= warp_group_dot_wait (%\d+) \{pending = (\d+)\}", loop)
    carried = [(v, int(p)) for v, p in waits if v != issued.group(1)]
    assert carried == [(carried[0][0], 1)], waits  # after the next scores' issue, before the exp2
    assert loop.index(issued.group(0)) < loop.index(f"warp_group_dot_wait {carried[0][0]}")


def _run():
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(9)
    a = rng.standard_normal((64, 256)).astype(np.float16)
    b = rng.standard_normal((256, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    run_on_cpu(_build().ir, (1,), [a, b, c, 256, 256, 64, 64], num_warps=4)
    return c, a, b


def _want(a, b):
    return sum(np.exp2(a[:, k:k + 32].astype(np.float64) @ b[k:k + 32].astype(np.float64) * 0.125)
               for k in range(0, 256, 32))


def test_bench_forward_with_the_row_maximum_taken_late_keeps_the_next_scores_in_flight():
    """bench's attention_ahead_fwd_kernel with LATE_MAX: the scores carried, their row maximum where their
    softmax starts; D128 in 128x64 blocks on 8 warps."""
    built = _bench_forward(4096, 128, 128, 64, 8, LATE_MAX=True)
    loop = _loop_of(compile_ir(built.ir, "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False).kir)
    assert re.search(r"= warp_group_dot_wait %\d+ \{pending = 1\}", loop), loop
    assert not re.search(r"convert_layout [^\n]*scratch", loop), loop


def test_the_sum_on_the_emulator():
    c, a, b = in_child(_run)
    np.testing.assert_allclose(c, _want(a, b), rtol=1e-3)


@pytest.mark.gpu
def test_the_sum_on_the_gpu(cuda_torch):
    """The wait that leaves the next scores in flight: right on the GPU (the emulator runs dots at once)."""
    torch = cuda_torch
    a = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 64, device="cuda", dtype=torch.float16)
    c = torch.full((64, 64), float("nan"), device="cuda")
    _ahead[(1,)](a, b, c, 256, 256, 64, 64, BM=64, BN=64, BK=32, num_warps=4, num_stages=3)
    np.testing.assert_allclose(c.cpu().numpy(), _want(a.cpu().numpy(), b.cpu().numpy()), rtol=1e-3)
