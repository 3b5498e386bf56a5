"""Two dots of one accumulator shape on different engines: QK^T on wgmma (its operands' rows are
16-byte aligned) and P @ V on mma.sync (V's row stride is not a multiple of 16 elements, so no
cp.async ring or TMA box reads it). Each accumulator keeps its own engine's layout; the layout pass
once gave both the shape's last preference, and the compile failed with "warp_group_dot needs the
wgmma accumulator layout"."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def _scores_then_values(q_ptr, k_ptr, v_ptr, out_ptr, v_stride, N: tl.constexpr, M: tl.constexpr,
                        D: tl.constexpr, BN: tl.constexpr):
    offs_m, offs_d, offs_n = tl.arange(0, M), tl.arange(0, D), tl.arange(0, BN)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    acc = tl.zeros([M, D], tl.float32)
    for start in range(0, N, BN):
        k = tl.load(k_ptr + offs_d[:, None] + (start + offs_n[None, :]) * D)  # K^T: D x BN
        s = tl.dot(q, k)  # M x BN, the same shape as acc when BN == D
        p = tl.exp(s - tl.max(s, 1)[:, None])
        v = tl.load(v_ptr + (start + offs_n[:, None]) * v_stride + offs_d[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc)
    tl.store(out_ptr + offs_m[:, None] * D + offs_d[None, :], acc)


M, D, BN, N = 128, 64, 64, 256
V_STRIDE = D + 4  # 136 bytes: 8-byte aligned rows, not 16 (nor a multiple of 8 elements, which kiln specializes on)


def reference(q, k, v):
    acc = np.zeros((M, D), np.float32)
    for start in range(0, N, BN):
        s = q.astype(np.float32) @ k[start:start + BN].astype(np.float32).T
        p = np.exp(s - s.max(axis=1, keepdims=True)).astype(np.float16).astype(np.float32)
        acc += p @ v[start:start + BN, :D].astype(np.float32)
    return acc


@pytest.mark.parametrize("num_warps", [4, 8])
def test_wgmma_and_mma_sync_dots_of_one_shape_compile_for_sm90a(num_warps):
    half = np.zeros((64, 64), np.float16)
    kernel = _scores_then_values.warmup(half, half, half, np.zeros((64, 64), np.float32), V_STRIDE, N=N, M=M, D=D,
                                        BN=BN, num_warps=num_warps, num_stages=3, grid=(1,), target="sm_90a")
    ptx = kernel.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "mma.sync" in ptx


def test_the_same_kernel_on_the_interpreter_matches_numpy(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    rng = np.random.default_rng(0)
    q = (rng.standard_normal((M, D)) * 0.1).astype(np.float16)
    k = (rng.standard_normal((N, D)) * 0.1).astype(np.float16)
    v = rng.standard_normal((N, V_STRIDE)).astype(np.float16)
    out = np.zeros((M, D), np.float32)
    _scores_then_values[(1,)](q, k, v, out, V_STRIDE, N=N, M=M, D=D, BN=BN)  # no GPU here: the interpreter
    np.testing.assert_allclose(out, reference(q, k, v), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_wgmma_and_mma_sync_dots_of_one_shape_on_the_gpu_match_numpy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper GPU (wgmma)")
    rng = np.random.default_rng(0)
    q = (rng.standard_normal((M, D)) * 0.1).astype(np.float16)
    k = (rng.standard_normal((N, D)) * 0.1).astype(np.float16)
    v = rng.standard_normal((N, V_STRIDE)).astype(np.float16)
    out = torch.zeros((M, D), dtype=torch.float32, device="cuda")
    _scores_then_values[(1,)](torch.from_numpy(q).cuda(), torch.from_numpy(k).cuda(), torch.from_numpy(v).cuda(), out,
                              V_STRIDE, N=N, M=M, D=D, BN=BN, num_warps=4, num_stages=3)
    np.testing.assert_allclose(out.cpu().numpy(), reference(q, k, v), rtol=2e-2, atol=2e-2)
