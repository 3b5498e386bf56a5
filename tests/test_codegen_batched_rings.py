"""A batched `tl.dot` ([B, M, K] x [B, K, N]) in a loop reads its operands from cp.async rings of batched
tiles (each batch's 2-D tile after the last's), as Triton pipelines its batched MMAv2 dots: `mma_dot` on
3-D shared tiles, the copies S - 1 iterations ahead, no register round trip through a staging tile."""
import re

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl
from bench_support import needs_cuda
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function
from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def batched_matmul(X, Y, Z, K, KV, BT: tl.constexpr, M: tl.constexpr, N: tl.constexpr, BK: tl.constexpr,
                   B_TRANSPOSED: tl.constexpr, INTS: tl.constexpr, A_TRANSPOSED: tl.constexpr = False):
    """Z[b] = X[b, :, :KV] @ Y[b, :KV] over [BT, M, K] x [BT, K, N] (Y stored [BT, N, K] where B_TRANSPOSED, X
    [BT, K, M] where A_TRANSPOSED), in steps of BK, the last one masked where BK does not divide KV."""
    rb, rm = tl.arange(0, BT)[:, None, None], tl.arange(0, M)[None, :, None]
    rn = tl.arange(0, N)[None, None, :]
    acc = tl.zeros((BT, M, N), dtype=tl.int32 if INTS else tl.float32)
    for k0 in range(0, KV, BK):
        rk = k0 + tl.arange(0, BK)
        if A_TRANSPOSED:
            x = tl.permute(tl.load(X + rb * K * M + rk[None, :, None] * M + tl.arange(0, M)[None, None, :],
                                   mask=rk[None, :, None] < KV, other=0), (0, 2, 1))
        else:
            x = tl.load(X + rb * M * K + rm * K + rk[None, None, :], mask=rk[None, None, :] < KV, other=0)
        if B_TRANSPOSED:
            y = tl.permute(tl.load(Y + rb * N * K + tl.arange(0, N)[None, :, None] * K + rk[None, None, :],
                                   mask=rk[None, None, :] < KV, other=0), (0, 2, 1))
        else:
            y = tl.load(Y + rb * K * N + rk[None, :, None] * N + rn, mask=rk[None, :, None] < KV, other=0)
        acc = tl.dot(x, y, acc)
    tl.store(Z + rb * M * N + rm * N + rn, acc)


def _arrays(bt, m, n, k, dtype, b_transposed, seed=0):
    """Small integers: every product and sum exact in every type, so the results equal NumPy's."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (bt, m, k)).astype(dtype)
    y = rng.integers(-3, 4, (bt, n, k) if b_transposed else (bt, k, n)).astype(dtype)
    return x, y, np.zeros((bt, m, n), np.int32 if dtype == np.int8 else np.float32)


def _want(x, y, kv, b_transposed):
    y = y.astype(np.int64)
    y = np.swapaxes(y, -1, -2) if b_transposed else y
    return np.matmul(x.astype(np.int64)[:, :, :kv], y[:, :kv])


def _constexprs(bt, m, n, bk, dtype, b_transposed):
    return dict(BT=bt, M=m, N=n, BK=bk, B_TRANSPOSED=b_transposed, INTS=dtype == np.int8)


def _planned(bt, m, n, k, kv, bk, dtype, warps, target, b_transposed, portable=False) -> str:
    kernel = batched_matmul.warmup(*_arrays(bt, m, n, k, dtype, b_transposed), k, kv, grid=(1,), target=target,
                                   num_warps=warps, **_constexprs(bt, m, n, bk, dtype, b_transposed))
    fn = parse_function(kernel.asm["kir"])
    run_passes(fn, PassContext(parse_target(target), warps, 3, portable=portable))
    return str(fn), kernel


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_a_batched_dot_in_a_loop_reads_rings_of_batched_tiles(target, b_transposed):
    ir, kernel = _planned(8, 16, 32, 80, 80, 32, np.float16, 4, target, b_transposed)
    # three slots of the 8 batches' 16x32 A tiles and 32x32 B tiles (B^T's as loaded: 32 rows of N)
    assert re.search(r"local_alloc .* smem<3x8x16x32xfp16:swizzle64:order1\.0>", ir)
    assert re.search(r"local_alloc .* smem<3x8x32x32xfp16:swizzle64:order1\.0>", ir)
    assert ir.count("mma_dot") == 1 and ("local_trans" in ir) == b_transposed
    assert re.search(r"mma_dot .* : <8x16x32xfp32", ir)
    ptx = kernel.asm["ptx"]
    loop = ptx[ptx.index("mma.sync") - 4000:ptx.rindex("mma.sync")]
    assert "cp.async" in ptx and "st.shared" not in loop and kernel.n_spills == 0
    # a warp's two batches: per batch and k-step an x4 of A and two x4 of B (.trans where B is N-major)
    assert ptx.count("mma.sync") == 2 * 4 * 2
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == (0 if b_transposed else 8)


def test_a_batched_operand_no_ring_can_copy_stays_staged():
    """int8 B stored [K, N]: a ring would hold it N-major, which ldmatrix cannot transpose for 8-bit elements;
    the dot keeps its staged operands (transposed as they are stored)."""
    ir, _ = _planned(4, 32, 16, 96, 96, 32, np.int8, 4, "sm_80", False)
    assert "mma_dot" not in ir and "async_copy" not in ir and 'engine = "mma"' in ir


def test_a_batched_a_read_transposed_on_the_emulator_equals_numpys():
    """A stored [B, K, M]: its ring holds each batch's tile M-major, read by ldmatrix.trans."""
    rng = np.random.default_rng(1)
    x, y = rng.integers(-3, 4, (4, 96, 32)).astype(np.float16), rng.integers(-3, 4, (4, 96, 16)).astype(np.float16)
    z = np.zeros((4, 32, 16), np.float32)
    constexprs = dict(BT=4, M=32, N=16, BK=32, B_TRANSPOSED=False, INTS=False, A_TRANSPOSED=True)
    warm = batched_matmul.warmup(x, y, z, 96, 90, grid=(1,), target="sm_80", num_warps=4, **constexprs)
    fn = parse_function(warm.asm["kir"])
    run_passes(fn, PassContext(parse_target("sm_80"), 4, 3, portable=True))
    assert re.search(r"local_alloc .* smem<3x4x32x32xfp16:swizzle64:order1\.0>", str(fn)) and "local_trans" in str(fn)
    got = warmed_and_emulated(batched_matmul, (x, y, z, 96, 90), "sm_80", 4, **constexprs)
    want = np.matmul(np.swapaxes(x.astype(np.int64), -1, -2)[:, :, :90], y.astype(np.int64)[:, :90])
    np.testing.assert_array_equal(got[2], want)


@pytest.mark.parametrize("bt, m, n, k, kv, bk, dtype, warps, target, b_transposed", [
    (8, 16, 32, 80, 80, 32, np.float16, 4, "sm_90a", False),  # the last step half masked, a mask bit a copy
    (8, 16, 32, 80, 70, 32, np.float16, 4, "sm_80", False),  # 70 of 80: a prefix of A's runs, src-size copies
    (8, 16, 32, 80, 70, 32, np.float16, 4, "sm_80", True),
    (2, 64, 32, 96, 96, 32, ml_dtypes.bfloat16, 1, "sm_80", False),  # one warp over both batches
    (4, 16, 8, 48, 40, 16, np.float32, 2, "sm_90a", True),  # tf32, K-major B
    (4, 32, 16, 96, 96, 32, np.int8, 4, "sm_80", True),
    (2, 32, 32, 80, 80, 32, ml_dtypes.float8_e4m3fn, 4, "sm_89", True),
    (2, 16, 8, 48, 48, 16, np.float16, 4, "sm_90a", True),  # two warps a batch, each the whole tile
])
def test_batched_rings_on_the_emulator_equal_numpys(bt, m, n, k, kv, bk, dtype, warps, target, b_transposed):
    ir, _ = _planned(bt, m, n, k, kv, bk, dtype, warps, target, b_transposed, portable=True)
    assert "mma_dot" in ir and "async_copy" in ir  # (the emulator's build takes the rings too)
    assert ("prefix_run" in ir) == (kv % 8 != 0 and dtype == np.float16)
    args = _arrays(bt, m, n, k, dtype, b_transposed)
    got = warmed_and_emulated(batched_matmul, (*args, k, kv), target, warps,
                              **_constexprs(bt, m, n, bk, dtype, b_transposed))
    np.testing.assert_array_equal(got[2], _want(*args[:2], kv, b_transposed))


GPU_CONFIGS = [  # (bt, m, n, k, kv, bk, dtype, warps, b_transposed)
    (8, 16, 32, 80, 80, 32, "float16", 4, False), (8, 16, 32, 80, 70, 32, "float16", 4, True),
    (2, 64, 32, 96, 96, 32, "bfloat16", 1, False), (4, 16, 8, 48, 40, 16, "float32", 2, True),
    (4, 32, 16, 96, 96, 32, "int8", 4, True), (2, 32, 32, 80, 80, 32, "float8_e4m3fn", 4, True),
]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("bt, m, n, k, kv, bk, dtype, warps, b_transposed", GPU_CONFIGS)
def test_batched_rings_on_the_gpu(bt, m, n, k, kv, bk, dtype, warps, b_transposed):
    import torch
    np_type = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "int8": np.int8,
               "float8_e4m3fn": ml_dtypes.float8_e4m3fn}[dtype]
    x, y, z = _arrays(bt, m, n, k, np_type, b_transposed)
    on_gpu = [torch.from_numpy(v.astype(np.float32)).to(getattr(torch, dtype)).cuda() for v in (x, y)]
    out = torch.from_numpy(z).cuda()
    batched_matmul[(1,)](*on_gpu, out, k, kv, num_warps=warps, **_constexprs(bt, m, n, bk, np_type, b_transposed))
    np.testing.assert_array_equal(out.cpu().numpy(), _want(x, y, kv, b_transposed))
