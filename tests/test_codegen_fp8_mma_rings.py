"""fp8 dots in a pipelined loop on mma.sync where the target's PTX has no fp8 mma.sync (kiln writes PTX
8.0; on Hopper the hardware has none either: kernels of fewer than 4 warps, dots of fewer rows than
wgmma's): their 8-bit tiles come through cp.async rings and ldmatrix, and each fragment is converted
to fp16 in registers (`cvt.rn.f16x2.e4m3x2`) for fp16 mma.sync, k permuted alike in A and B, as
Triton does. Before, fp8_dot_upcast cast the loaded blocks to fp16 with no ring at all: tutorial 03's
fp8 kernel at 64x128x128 on two warps spilled 3,496 bytes (Triton 28). CPU (PTX) and the GPU
against torch."""
import re

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def fp8_matmul(A, B, C, M, N, K, stride_am, stride_bk, stride_bn, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, ACC_F16: tl.constexpr):
    """C = A @ B, A [M, K] row-major, B [K, N] at (stride_bk, stride_bn); every edge masked.
    ACC_F16: out_dtype=float16 (fp16 sums, Triton's tensor-core fp16 accumulators)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float16 if ACC_F16 else tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        a = tl.load(A + rm[:, None] * stride_am + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc, out_dtype=tl.float16 if ACC_F16 else tl.float32)
    tl.store(C + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


M, N, K = 100, 72, 288  # edges past the last blocks of M and N, and K past its last full step
FORMATS = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
# (BM, BN, BK, warps, stages): one warp, two, and 16 rows on 4 warps (no wgmma)
CONFIGS = [(16, 64, 128, 1, 3), (64, 64, 64, 2, 3), (16, 64, 64, 4, 3)]


def _warm(config, target, a_fmt="e4m3", b_fmt="e4m3", k_major_b=True, acc_f16=False):
    bm, bn, bk, warps, stages = config
    a = np.zeros((M, K), FORMATS[a_fmt])
    b = np.zeros((N, K), FORMATS[b_fmt]).T if k_major_b else np.zeros((K, N), FORMATS[b_fmt])
    strides = (1, K) if k_major_b else (N, 1)
    return fp8_matmul.warmup(a, b, np.zeros((M, N), np.float16), M, N, K, K, *strides, N, BM=bm, BN=bn, BK=bk,
                             ACC_F16=acc_f16, num_warps=warps, num_stages=stages, grid=(1, 1), target=target)


@pytest.mark.parametrize("config", CONFIGS)
def test_fp8_tiles_come_through_rings_and_are_upcast_as_fragments(config):
    ptx = _warm(config, "sm_90a", "e4m3", "e5m2").asm["ptx"]
    assert re.search(r"cp\.async\.c[ag]\.shared\.global", ptx)  # the 8-bit tiles' rings
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "cvt.rn.f16x2.e4m3x2" in ptx and "cvt.rn.f16x2.e5m2x2" in ptx  # each operand from its own format
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "m16n8k32" not in ptx
    assert "wgmma" not in ptx


def test_the_two_warp_tile_no_longer_spills():
    k = _warm(CONFIGS[1], "sm_90a")
    assert k.metadata["n_spills"] == 0


def test_fp16_sums_stay_in_fp16_accumulators():
    ptx = _warm(CONFIGS[1], "sm_90a", acc_f16=True).asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16" in ptx


def test_sm_89_runs_fp8_mma_sync_itself():
    """Ada's PTX (8.4) has fp8 mma.sync, and its tensor cores run it."""
    ptx = _warm(CONFIGS[1], "sm_89", "e4m3", "e5m2").asm["ptx"]
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32" in ptx and "cvt.rn.f16x2.e" not in ptx


def test_sm_80_casts_the_blocks_as_before():
    """No fp8 conversion in hardware before sm_89: the blocks are cast (fp8_dot_upcast), no fp8 ring."""
    ptx = _warm(CONFIGS[1], "sm_80", "e5m2", "e5m2").asm["ptx"]
    assert "cvt.rn.f16x2.e" not in ptx and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx


def run_on_gpu(config, torch, a_fmt="e4m3", b_fmt="e4m3", k_major_b=True, acc_f16=False):
    """The kernel at `config` against the same product of the fp8 values in float64 (every product exact)."""
    bm, bn, bk, warps, stages = config
    dtypes = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(M, K, device="cuda", generator=gen).to(dtypes[a_fmt])
    b = (torch.randn(N, K, device="cuda", generator=gen).to(dtypes[b_fmt]).T if k_major_b else
         torch.randn(K, N, device="cuda", generator=gen).to(dtypes[b_fmt]))
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    grid = (-(-M // bm), -(-N // bn))
    fp8_matmul[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), b.stride(1), c.stride(0), BM=bm, BN=bn, BK=bk,
                     ACC_F16=acc_f16, num_warps=warps, num_stages=stages)
    want = a.double() @ b.double()
    tol = 0.1 if acc_f16 else 0.02  # fp16 sums round at every step
    torch.testing.assert_close(c.double(), want, atol=tol, rtol=0.01)


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("formats", [("e4m3", "e4m3"), ("e5m2", "e4m3")])
def test_fp8_rings_match_torch_on_the_gpu(config, formats, cuda_torch):
    if cuda_torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 tensors need sm_89 or later")
    run_on_gpu(config, cuda_torch, *formats)


@pytest.mark.gpu
def test_an_n_major_b_and_fp16_sums_match_torch_on_the_gpu(cuda_torch):
    if cuda_torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 tensors need sm_89 or later")
    run_on_gpu(CONFIGS[1], cuda_torch, k_major_b=False)
    run_on_gpu(CONFIGS[1], cuda_torch, acc_f16=True)
