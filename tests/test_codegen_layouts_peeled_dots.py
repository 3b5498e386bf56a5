"""A wgmma loop with dots of its accumulator's shape outside it (its first and last steps peeled off, as a
hand-pipelined attention loop has): the loop keeps wgmma's layout for what it computes, and the dots outside
run on mma.sync (the layouts pass; dot_staging picks the engine from the result's layout). Before, the dot
after the loop took the shape's preference and the loop's elementwise work moved through shared memory every
iteration, and the dot before it was laid out as wgmma's accumulator and ran on FMAs; a row statistic carried
beside the accumulator, whose start the first step's dot laid out, kept that layout in the loop."""
import os
import re
import sys

import numpy as np

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir

from test_codegen_emulate import in_child

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import kernels  # noqa: E402  (bench's attention_ahead_fwd_kernel: this pattern, written as users write it)


@kiln.jit
def _peeled(A, B, C, R, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = the K steps' products, each earlier one halved once per later step: the first step before the
    loop, the last after it. R = the rows' largest value of C at any step before the last (a row statistic
    carried beside the accumulator, started from the first step's)."""
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = A + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = B + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
    top = tl.max(acc, 1)
    best = tl.full([BM], -float("inf"), tl.float32)
    for k in range(BK, K - BK, BK):
        best = tl.maximum(best, top)
        acc = tl.dot(tl.load(a_ptrs + k), tl.load(b_ptrs + k * stride_bk), acc * 0.5)
        top = tl.max(acc, 1)
    last = tl.dot(tl.load(a_ptrs + (K - BK)), tl.load(b_ptrs + (K - BK) * stride_bk))
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :], acc * 0.5 + last)
    tl.store(R + offs_m, tl.maximum(best, top))


def _build():
    x = np.zeros((16, 16), np.float16)
    f = np.zeros((16, 16), np.float32)
    return _peeled.warmup(x, x, f, f, 256, 256, 64, 64, BM=64, BN=64, BK=32, num_warps=4, num_stages=3,
                          grid=(1,), target="sm_90a")


def test_the_loop_keeps_the_wgmma_layout_and_the_peeled_dots_run_on_mma():
    kir = compile_ir(_build().ir, "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False).kir
    body = _loop_of(kir)
    assert "warp_group_dot" in body
    assert not re.search(r"convert_layout [^\n]*scratch", body), body  # nothing moves through shared memory
    outside = re.findall(r"= dot [^\n]*\{engine = \"(\w+)\"", kir)
    assert outside == ["mma", "mma"]


def _run():
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(3)
    k = 256
    a = rng.standard_normal((64, k)).astype(np.float16)
    b = rng.standard_normal((k, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    r = np.full(64, np.nan, np.float32)
    run_on_cpu(_build().ir, (1,), [a, b, c, r, k, k, 64, 64], num_warps=4)
    return c, r, a, b


def test_the_peeled_loop_computes_its_sum_on_the_emulator():
    c, r, a, b = in_child(_run)
    want, best = np.zeros((64, 64)), np.full(64, -np.inf)
    for k in range(0, a.shape[1], 32):
        if k:
            best = np.maximum(best, want.max(1))
        want = want * 0.5 + a[:, k:k + 32].astype(np.float64) @ b[k:k + 32].astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(r, best, rtol=1e-3, atol=1e-2)


def _loop_of(kir):
    body = kir[kir.index(" = for "):]
    return body[:body.index("\n  }\n")]


def _ahead(n, dim, block_m, block_n, warps, **flags):
    """bench's attention_ahead_fwd_kernel built for sm_90a (`flags`: its LATE_MAX)."""
    q = np.zeros((1, 1, n, dim), np.float16)
    lse = np.zeros((1, 1, n), np.float32)
    strides = (n * dim, n * dim, dim, 1)
    return kernels.attention_ahead_fwd_kernel.warmup(q, q, q, q, lse, 0.125, *(strides * 4), 1, n, HEAD_DIM=dim,
                                                     BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=3,
                                                     grid=(1,), target="sm_90a", **flags)


def test_the_hand_pipelined_attention_forward_keeps_its_loop_in_wgmma_layouts():
    """Bench's forward with the next key block's scores issued before this block's softmax, in 128x64 blocks on
    8 warps: its loop's softmax stays in wgmma's layout, its row statistics in its slices, and the dots before
    and after the loop run on mma.sync (D128: the first scores were laid out as wgmma's and ran on FMAs; D64: P V
    after the loop has the scores' shape and laid the loop out for mma.sync)."""
    for dim in (128, 64):
        kir = compile_ir(_ahead(4096, dim, 128, 64, 8).ir, "sm_90a", {"num_warps": 8, "num_stages": 3},
                         link=False).kir
        loop = _loop_of(kir)
        assert loop.count("warp_group_dot ") == 2
        assert not re.search(r"convert_layout [^\n]*scratch", loop), loop
        assert re.findall(r"= dot [^\n]*\{engine = \"(\w+)\"", kir) == ["mma", "mma"]


def _run_ahead(n):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 1, n, 64)).astype(np.float16) for _ in range(3))
    out = np.full_like(q, np.nan)
    lse = np.full((1, 1, n), np.nan, np.float32)
    strides = [n * 64, n * 64, 64]  # z, h, row: the head dim's stride (1) and H (1) are specialized away
    run_on_cpu(_ahead(n, 64, 64, 64, 4).ir, (n // 64, 1), [q, k, v, out, lse, 0.125] + strides * 4 + [n],
               num_warps=4)
    return out[0, 0], q[0, 0], k[0, 0], v[0, 0]


def test_the_hand_pipelined_attention_forward_on_the_emulator():
    """Three key blocks: the first block's scores before the loop, one iteration, the last P @ V after it."""
    out, q, k, v = in_child(_run_ahead, 192)
    scores = q.astype(np.float64) @ k.astype(np.float64).T * 0.125
    p = np.exp(scores - scores.max(1, keepdims=True))
    np.testing.assert_allclose(out, p / p.sum(1, keepdims=True) @ v.astype(np.float64), atol=2e-3)
