"""A 16-bit tile read back from shared memory in an accumulator's fragment layout comes by ldmatrix
(codegen/lower/stmatrix.py): `.trans` where the tile's 16-byte units run down the fragment's rows. fla's
chunk_bwd_kernel_dh reads q^T (memory along the dot's M) as the A it scales in the loop: each thread's
32 elements came by 16-bit loads, 32 loop-invariant addresses live through the loop (140 registers at
4 warps where Triton's build holds 90); four ldmatrix.x4.trans instead. Built for sm_90a and checked as
PTX, and run on the GPU against PyTorch: that is where the new read runs (the CPU emulator's portable
build runs the dot on mma.sync, whose A fragments come by mma's own ldmatrix, so its check below covers
the kernel, not this read)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.lower import stmatrix
from kiln.ir.layout import mma_layout, wgmma_layout

from test_codegen_emulate import in_child

BK, BT, BV, T = 64, 64, 64, 256


@kiln.jit
def transposed_a_state(q_ptr, d_ptr, out_ptr, scale, T, BK: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """out = sum over chunks t of (q[t]^T * scale) @ d[t]: q is [T, BK] row-major, read as [BK, BT]."""
    ks, vs = tl.arange(0, BK), tl.arange(0, BV)
    state = tl.zeros((BK, BV), dtype=tl.float32)
    for t0 in range(0, T, BT):
        ts = t0 + tl.arange(0, BT)
        q_t = tl.load(q_ptr + ks[:, None] + ts[None, :] * BK)
        d = tl.load(d_ptr + ts[:, None] * BV + vs[None, :])
        state += tl.dot((q_t * scale).to(q_t.dtype), d)
    tl.store(out_ptr + ks[:, None] * BV + vs[None, :], state)


def _args(dtype=np.float16):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((T, BK)).astype(dtype)
    d = rng.standard_normal((T, BV)).astype(dtype)
    return q, d, np.zeros((BK, BV), np.float32)


def _reference(q, d, scale):
    return (q.astype(np.float32) * scale).astype(np.float16).astype(np.float32).T @ d.astype(np.float32)


def _ptx(num_warps):
    return transposed_a_state.warmup(*_args(), 0.5, T, BK=BK, BT=BT, BV=BV, num_warps=num_warps, num_stages=2,
                                     grid=(1,), target="sm_90a").asm["ptx"]


@pytest.mark.parametrize("num_warps", [4, 8])
def test_a_transposed_a_fragment_is_read_by_ldmatrix_trans(num_warps):
    ptx = _ptx(num_warps)
    assert "wgmma.mma_async" in ptx
    # a warp's 16 rows of A by 64 columns: 16 matrices, four to an instruction
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 4
    assert "ld.shared.b16" not in ptx and "ld.shared.u16" not in ptx


@pytest.mark.parametrize("shape, warps", [((64, 64), 4), ((128, 128), 8), ((64, 128), 4)])
def test_accumulator_fragments_are_readable_down_their_rows(shape, warps):
    class Lowering:
        num_warps = warps
    for layout in (wgmma_layout(shape, warps), mma_layout(shape, warps)):
        groups = stmatrix.readable(Lowering, layout, shape, across_rows=True)
        assert groups is not None and groups == stmatrix.quads(layout, shape, warps)


def _emulated(num_warps):
    from kiln.codegen.emulate import run_on_cpu
    q, d, out = _args()
    kernel = transposed_a_state.warmup(q, d, out, 0.5, T, BK=BK, BT=BT, BV=BV, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [q, d, out, 0.5, T], num_warps=num_warps, options={"num_stages": 2})
    return q, d, out


@pytest.mark.parametrize("num_warps", [4])
def test_the_kernel_matches_numpy_emulated(num_warps):
    q, d, out = in_child(_emulated, num_warps, timeout=600)
    np.testing.assert_allclose(out, _reference(q, d, 0.5), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [4, 8])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_kernel_on_the_gpu(num_warps, dtype, cuda_torch):
    torch = cuda_torch
    q, d, _ = _args(np.float32)
    qt, dt = (torch.from_numpy(x).cuda().to(getattr(torch, dtype)) for x in (q, d))
    out = torch.zeros(BK, BV, device="cuda")
    transposed_a_state[(1,)](qt, dt, out, 0.5, T, BK=BK, BT=BT, BV=BV, num_warps=num_warps, num_stages=2)
    want = (qt.float() * 0.5).to(qt.dtype).float().T @ dt.float()
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
