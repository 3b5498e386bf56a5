"""Where a block broadcast from a much smaller one meets a block computed otherwise, the small one moves
(codegen/passes/layouts.py `_grown_broadcast`): a group-scaled weight tile (a mx dequantization: 4x256 scales
broadcast over 4x32x256 factors) keeps the tile's layout, and a pointer tile built from a column of gathered row
pointers takes the layout its copies read it in. Before, each converted the big block through shared memory
every iteration (128 KB: triton_kernels' bf16 x mxfp4 matmul), which also left no room for the wgmma rings.
Checked as IR at sm_90a, emulated on the CPU against NumPy, and on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.compiler import _options, lower_to_llvm
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def gathered_rows_matmul(x_ptr, rows_ptr, w_ptr, out_ptr, K, stride_xm, stride_wk,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """out = x[rows] @ w."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    rows = tl.load(rows_ptr + rm)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + rk[None, :]
    w_ptrs = w_ptr + rk[:, None] * stride_wk + rn[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(x_ptrs), tl.load(w_ptrs))
        x_ptrs += BK
        w_ptrs += BK * stride_wk
    tl.store(out_ptr + rm[:, None] * BN + rn[None, :], acc)


@kiln.jit
def group_scaled_matmul(x_ptr, w_ptr, s_ptr, out_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """out = x @ (w * s repeated over each group of 32 rows of k)."""
    rm, rn, rk, rg = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK), tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(x_ptr + rm[:, None] * K + k + rk[None, :])
        w = tl.load(w_ptr + (k + rk[:, None]) * BN + rn[None, :])
        s = tl.load(s_ptr + (k // 32 + rg[:, None]) * BN + rn[None, :])
        w = (s[:, None, :] * w.to(tl.float32).reshape(BK // 32, 32, BN)).reshape(BK, BN)
        acc += tl.dot(x, w.to(tl.float16))
    tl.store(out_ptr + rm[:, None] * BN + rn[None, :], acc)


def _gathered_args(bm, bn, k):
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, (2 * bm, k)).astype(np.float16)
    rows = rng.permutation(2 * bm)[:bm].astype(np.int32)
    w = rng.integers(-2, 3, (k, bn)).astype(np.float16)
    return x, rows, w, np.zeros((bm, bn), np.float32), k, k, bn


def _scaled_args(bm, bn, k):
    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, (bm, k)).astype(np.float16)
    w = rng.integers(-2, 3, (k, bn)).astype(np.float16)
    s = (2.0 ** rng.integers(-2, 3, (k // 32, bn))).astype(np.float32)
    return x, w, s, np.zeros((bm, bn), np.float32), k


def _scaled_want(x, w, s):
    return x.astype(np.float64) @ (w.astype(np.float64) * np.repeat(s, 32, axis=0))


def _gpu_ir(kernel, args, **constexprs):
    warm = kernel.warmup(*args, grid=(1,), target="sm_90a", num_warps=8, **constexprs)
    return lower_to_llvm(parse_function(warm.asm["kir"]), parse_target("sm_90a"), _options({"num_warps": 8}))[0]


def _converted(text: str, block: str) -> list:
    return [line for line in text.splitlines() if " = convert_layout " in line and f": <{block}" in line]


def test_gathered_rows_pointers_are_laid_out_for_their_copies():
    text = _gpu_ir(gathered_rows_matmul, _gathered_args(128, 128, 256), BM=128, BN=128, BK=64)
    assert not _converted(text, "128x64xptr<fp16>")  # was: every iteration, 64 KB
    assert _converted(text, "128x1xptr<fp16>")  # the column of row pointers, once
    assert "warp_group_dot" in text


def test_group_scales_move_not_the_scaled_tile():
    text = _gpu_ir(group_scaled_matmul, _scaled_args(128, 128, 256), BM=128, BN=128, BK=128)
    assert not _converted(text, "4x32x128xfp32")
    assert "warp_group_dot" in text  # was: mma.sync, the rings' room taken by that conversion


def test_the_products_are_numpy_s_emulated():
    x, rows, w, out, *_ = warmed_and_emulated(gathered_rows_matmul, _gathered_args(64, 64, 128), "sm_90a", 4,
                                               BM=64, BN=64, BK=32)
    np.testing.assert_array_equal(out, x[rows].astype(np.float32) @ w.astype(np.float32))
    x, w, s, out, _ = warmed_and_emulated(group_scaled_matmul, _scaled_args(64, 64, 128), "sm_90a", 4,
                                          BM=64, BN=64, BK=64)
    np.testing.assert_array_equal(out, _scaled_want(x, w, s).astype(np.float32))


@pytest.mark.gpu
def test_the_products_are_torch_s_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    cuda = [torch.from_numpy(a).cuda() if isinstance(a, np.ndarray) else a for a in _gathered_args(128, 128, 512)]
    gathered_rows_matmul[(1,)](*cuda, BM=128, BN=128, BK=64, num_warps=8)
    x, rows, w, out = cuda[:4]
    torch.testing.assert_close(out, x[rows.long()].float() @ w.float(), rtol=0, atol=0)
    args = _scaled_args(128, 128, 512)
    cuda = [torch.from_numpy(a).cuda() if isinstance(a, np.ndarray) else a for a in args]
    group_scaled_matmul[(1,)](*cuda, BM=128, BN=128, BK=128, num_warps=8)
    torch.testing.assert_close(cuda[3].cpu(), torch.from_numpy(_scaled_want(*args[:3]).astype(np.float32)),
                               rtol=0, atol=0)
