"""A loop's rings are planned before lowering sizes the layout conversions' scratch; where the
first lowering goes past the SM's shared memory, the compile plans the rings again with room for
that scratch (kiln.codegen.compiler). Where the rings are at their fewest stages already, the
overflow alone would not shrink them: the room is at least the scratch's own bytes, and a plan that
cannot leave it is no plan (the loop runs without rings) rather than a kernel past the limit.

The kernel: an e5m2 x e2m1 `dot_scaled` whose decoded A (128x256 bf16) converts to wgmma's
register layout through 66 KB of scratch beside two 64 KB slots of decoded B (upstream's
test_mxfp8_mxfp4_matmul_tma at 128x128x256: 233,472 bytes, 1 KB past the H200's 232,448)."""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.occupancy import max_shared_per_cta

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


@kiln.jit
def _mx_matmul(a_ptr, b_ptr, out_ptr, a_scale_ptr, b_scale_ptr, M, N, K, scale_stride, a_row_stride, a_col_stride,
               out_row_stride, out_col_stride, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               STAGES: tl.constexpr):
    pid = tl.program_id(0)
    rows_m = tl.cdiv(M, BM)
    pm, pn = pid % rows_m, pid // rows_m
    rm = (pm * BM + tl.arange(0, BM)) % M
    rn = (pn * BN + tl.arange(0, BN)) % N
    a_ptrs = a_ptr + rm[:, None] * a_row_stride + tl.arange(0, BK)[None, :] * a_col_stride
    a_scales = a_scale_ptr + rm[:, None] * scale_stride + tl.arange(0, BK // 32)[None, :]
    b_scales = b_scale_ptr + rn[:, None] * scale_stride + tl.arange(0, BK // 32)[None, :]
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K // 2], strides=[K // 2, 1], block_shape=[BN, BK // 2])
    acc = tl.zeros((BM, BN), out_ptr.dtype.element_ty)
    b_col = 0
    for _ in tl.range(0, tl.cdiv(K, BK), num_stages=STAGES):
        a = tl.load(a_ptrs)
        b = b_desc.load([pn * BN, b_col])
        acc = tl.dot_scaled(a, tl.load(a_scales), "e5m2", b.T, tl.load(b_scales), "e2m1", acc)
        a_ptrs += BK * a_col_stride
        b_col += BK // 2
        a_scales += BK // 32
        b_scales += BK // 32
    tl.store(out_ptr + rm[:, None] * out_row_stride + rn[None, :] * out_col_stride, acc)


def _operands(m, n, k, rng):
    a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e5m2)
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    b = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    a_scale = rng.integers(124, 130, (m, k // 32)).astype(np.uint8)
    b_scale = rng.integers(124, 130, (n, k // 32)).astype(np.uint8)
    return a, b, codes, a_scale, b_scale


def _args(a, b, out, a_scale, b_scale, bm, bn, bk, stages):
    (m, k), n = a.shape, b.shape[0]
    return (a, b, out, a_scale, b_scale, m, n, k, k // 32, k, 1, n, 1, bm, bn, bk, stages)


def test_the_rings_leave_the_conversions_scratch_room():
    rng = np.random.default_rng(5)
    a, b, _, a_scale, b_scale = _operands(1024, 512, 256, rng)
    args = _args(kiln.reinterpret(a.view(np.uint8), tl.float8e5), b, np.zeros((1024, 512), np.float32),
                 a_scale, b_scale, 128, 128, 256, 3)
    compiled = _mx_matmul.warmup(*args, grid=(1,), target="sm_90a")
    assert compiled.metadata.shared <= max_shared_per_cta(90)


@pytest.mark.gpu
def test_the_replanned_kernel_computes_the_scaled_product(cuda_torch):
    torch = cuda_torch
    rng = np.random.default_rng(7)
    m, n, k = 256, 256, 256
    a, b, codes, a_scale, b_scale = _operands(m, n, k, rng)
    out = torch.zeros(m, n, device="cuda")
    kiln.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    dev = lambda x: torch.from_numpy(x).cuda()  # noqa: E731
    args = _args(dev(a.view(np.uint8)).view(torch.float8_e5m2), dev(b), out, dev(a_scale), dev(b_scale), 128, 128,
                 256, 3)
    _mx_matmul[(4,)](*args)
    factor = lambda s: np.repeat(2.0 ** (s.astype(np.float64) - 127), 32, axis=1)  # noqa: E731
    lhs = (a.astype(np.float32) * factor(a_scale)).astype(ml_dtypes.bfloat16).astype(np.float64)
    rhs = (E2M1[codes] * factor(b_scale)).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(out.cpu().numpy(), lhs @ rhs.T, rtol=1e-4, atol=1e-3)
