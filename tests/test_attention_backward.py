"""FlashAttention-2 backward (bench/kernels.py): the interpreter against NumPy, the dK/dV
and dQ loops pipelined onto wgmma for sm_90a (IR text and PTX), and on the GPU against
PyTorch's autograd of SDPA.

Each of the backward's loops reads one loaded tile twice, once as is and once through
tl.trans (dK/dV: Q^T and dO; dQ: K^T): the tile is copied once through a ring and both
dots read it, the second through a transposed view."""
import re

import numpy as np
import pytest

from kiln.codegen import compile as compile_ir, nvjitlink
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function

from bench_support import bench_kernels
from test_codegen_gpu_stage import pipelined


kernels = bench_kernels()


def reference(q, k, v, do, scale, causal):
    """O and the gradients of Q, K, V in float32, written out in NumPy."""
    q, k, v, do = (x.astype(np.float32) for x in (q, k, v, do))
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    ds = p * (do @ np.swapaxes(v, -1, -2) - (o * do).sum(-1, keepdims=True))
    return o, ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, np.swapaxes(p, -1, -2) @ do


def _strides(x):
    return [s // x.itemsize for s in x.strides] if isinstance(x, np.ndarray) else list(x.stride())


def run_attention(k, q, kk, v, do, o, lse, grads, causal, fwd=(32, 32), narrow=16, wide=64, **options):
    """Forward, then the three backward launches, on any arrays `k` (a kernels module) takes."""
    z, h, n, d = q.shape
    scale = d ** -0.5
    strides = [s for x in (q, kk, v, o) for s in _strides(x)]
    k.attention_fwd_kernel[(n // fwd[0], z * h)](q, kk, v, o, lse, scale, *strides, h, n, HEAD_DIM=d,
                                                 BLOCK_M=fwd[0], BLOCK_N=fwd[1], CAUSAL=causal, **options)
    delta = lse * 0
    dq, dk, dv = grads
    k.attention_bwd_preprocess_kernel[(n // 32, z * h)](o, do, delta, n, HEAD_DIM=d, BLOCK_M=32)
    k.attention_bwd_dkdv_kernel[(n // wide, z * h)](q, kk, v, do, dk, dv, lse, delta, scale, n, HEAD_DIM=d,
                                                     BLOCK_M=narrow, BLOCK_N=wide, CAUSAL=causal, **options)
    k.attention_bwd_dq_kernel[(n // wide, z * h)](q, kk, v, do, dq, lse, delta, scale, n, HEAD_DIM=d,
                                                   BLOCK_M=wide, BLOCK_N=narrow, CAUSAL=causal, **options)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_numpy_in_the_interpreter(causal):
    rng = np.random.default_rng(1)
    shape = (1, 2, 128, 32)
    q, k, v, do = (rng.standard_normal(shape).astype(np.float16) for _ in range(4))
    o = np.full_like(q, np.nan)
    lse = np.zeros(shape[:3], np.float32)
    grads = [np.full_like(q, np.nan) for _ in range(3)]
    run_attention(kernels, q, k, v, do, o, lse, grads, causal)
    want = reference(q, k, v, do, shape[-1] ** -0.5, causal)
    for got, w in zip([o] + grads, want):
        np.testing.assert_allclose(got.astype(np.float32), w, atol=2e-2, rtol=2e-2)


def _dkdv_ir(causal=False):
    x, f = np.zeros((4, 64), np.float16), np.zeros(4, np.float32)
    k = kernels.attention_bwd_dkdv_kernel.warmup(x, x, x, x, x, x, f, f, 0.1, 1024, HEAD_DIM=64, BLOCK_M=32,
                                                  BLOCK_N=128, CAUSAL=causal, num_warps=4, num_stages=3,
                                                  grid=(1,), target="sm_90a")
    return k.asm["kir"]


def test_dkdv_loop_copies_each_tile_once_and_reads_it_transposed_too():
    fn, _ = pipelined(_dkdv_ir(), num_warps=4, num_stages=3)
    text = print_function(fn, locs=False)
    assert print_function(parse_function(text), locs=False) == text
    loop = next(op for op in fn.walk() if op.name == "for")
    before = fn.body.ops[:fn.body.ops.index(loop)]
    # K and V stored once (K-major); Q^T (head dim contiguous) and dO: one ring each
    assert [str(op.operands[1].type) for op in before if op.name == "local_store"] == \
        ["smem<128x64xfp16:swizzle128:order1.0>"] * 2
    rings = [str(op.results[0].type) for op in before if op.name == "local_alloc"][2:]
    # Q^T and dO; then M and Delta, each a ring of one-row tiles (the vectors P^T and dS^T are made from)
    assert rings == ["smem<4x64x32xfp16:swizzle128:order0.1>", "smem<4x32x64xfp16:swizzle128:order1.0>"] + \
        ["smem<4x1x32xfp32:swizzle0:order1.0>"] * 2
    body = loop.regions[0].ops
    dots = [op for op in body if op.name == "warp_group_dot"]
    assert len(dots) == 4 and not [op for op in fn.walk() if op.name in ("dot", "permute")]
    q_tile, do_tile = dots[0].operands[1], dots[1].operands[1]
    assert q_tile.defining_op.name == do_tile.defining_op.name == "local_index"
    # dP^T = V dO^T and dK += dS^T Q read the same tiles through transposed views
    assert dots[2].operands[1].defining_op.name == "local_trans" and dots[2].operands[1].defining_op.operands[0] is do_tile
    assert dots[3].operands[1].defining_op.operands[0] is q_tile
    assert str(dots[3].operands[1].type) == "smem<32x64xfp16:swizzle128:order1.0>"
    # P^T and dS^T are A from registers; dV and dK stay in flight to the next iteration
    assert [d.operands[0].defining_op.name for d in dots[1::2]] == ["cast", "cast"]
    waits = [op.attrs["pending"] for op in body if op.name == "warp_group_dot_wait"]
    assert waits == [0, 1, 0, 1]
    assert sum(op.name == "async_copy" for op in body) == 4  # one copy per ring per iteration
    # no global load left in the loop: M and Delta read back from their rings, each just before its use
    assert not [op for op in body if op.name == "load"]
    vectors = [k for k, op in enumerate(body) if op.name == "local_load"]
    assert [str(body[k].results[0].type) for k in vectors] == ["<32xfp32>"] * 2
    assert all(any(u is body[k].results[0] for u in body[k + 1].operands) for k in vectors)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_loops_lower_to_wgmma_without_local_memory(causal):
    for kernel, shape in ((kernels.attention_bwd_dkdv_kernel, (64, 128)), (kernels.attention_bwd_dq_kernel, (128, 64))):
        x, f = np.zeros((4, 64), np.float16), np.zeros(4, np.float32)
        args = (x,) * (6 if kernel is kernels.attention_bwd_dkdv_kernel else 5) + (f, f, 0.1, 1024)
        kir = kernel.warmup(*args, HEAD_DIM=64, BLOCK_M=shape[0], BLOCK_N=shape[1], CAUSAL=causal,
                            num_warps=8, num_stages=3, grid=(1,), target="sm_90a").asm["kir"]
        compiled = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 8, "num_stages": 3}, check=True)
        ptx = compiled.ptx
        # the tiles by TMA (pointer_tma: each head's base, K^T's and Q^T's boxes transposed, unmasked)
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx and "mma.sync" not in ptx
        # a transposed read of a 16-bit tile: wgmma's trans-b flag set on some dot
        assert re.search(r"wgmma\.mma_async[^;]*, 1;", ptx)
        assert "ld.local" not in ptx and "st.local" not in ptx and compiled.n_spills == 0
        _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
        assert "C751" not in info


try:
    import torch
except ImportError:
    torch = None


def _compiles_for_hopper() -> bool:
    """Kernels here are built for sm_90a (a Hopper, and no KILN_TARGET naming an older target)."""
    from kiln.runtime.cuda_driver import compile_target
    return compile_target(torch.cuda.current_device()) == "sm_90a"


@pytest.mark.gpu
@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("cfg", [(32, 128, 3, 4), (64, 128, 2, 8), (64, 64, 3, 4), (32, 64, 2, 4),
                                 (32, 64, 3, 4)])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_backward_on_the_gpu_matches_autograd(dtype, cfg, dim, causal, monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "0")
    narrow, wide, stages, warps = cfg
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    shape = (2, 3, 256, dim)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch_dtype) for _ in range(4))
    o = torch.full_like(q, float("nan"))
    lse = torch.empty(shape[:3], device="cuda", dtype=torch.float32)
    grads = [torch.full_like(q, float("nan")) for _ in range(3)]
    run_attention(kernels, q, k, v, do, o, lse, grads, causal, fwd=(64, 64), narrow=narrow, wide=wide,
                  num_warps=warps, num_stages=stages)
    qr, kr, vr = (x.float().requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=dim ** -0.5)
    want = torch.autograd.grad(out, (qr, kr, vr), do.float())
    tol = 3e-2 if dtype == "fp16" else 8e-2
    torch.testing.assert_close(o.float(), out.detach(), atol=tol, rtol=tol)
    for got, w in zip(grads, want):
        torch.testing.assert_close(got.float(), w, atol=tol, rtol=tol)
    if _compiles_for_hopper():
        args = (q, k, v, do, grads[1], grads[2], lse, lse, 0.1, shape[2])
        ptx = kernels.attention_bwd_dkdv_kernel.warmup(*args, HEAD_DIM=dim, BLOCK_M=narrow, BLOCK_N=wide,
                                                       CAUSAL=causal, num_warps=warps, num_stages=stages,
                                                       grid=(1,)).asm["ptx"]
        assert "wgmma.mma_async" in ptx


def _check_dkdv_on_the_emulator(kir, n, d, wide):
    """dK and dV of the dK/dV kernel run on the CPU emulator, against the loop written out in
    NumPy for arbitrary row statistics M and Delta: the largest error."""
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(7)
    q, k, v, do = (rng.standard_normal((n, d)).astype(np.float16) for _ in range(4))
    m, delta = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dk, dv = np.zeros((n, d), np.float16), np.zeros((n, d), np.float16)
    scale = d ** -0.5
    run_on_cpu(parse_function(kir), (n // wide, 1), [q, k, v, do, dk, dv, m, delta, scale, n], num_warps=4)
    q32, k32, v32, do32 = (x.astype(np.float32) for x in (q, k, v, do))
    p_t = np.exp2(k32 @ q32.T * scale * 1.44269504 - m[None, :])  # keys by queries
    ds_t = p_t * (v32 @ do32.T - delta[None, :])
    want_dv, want_dk = p_t @ do32, ds_t @ q32 * scale
    return float(max(np.abs(dv.astype(np.float32) - want_dv).max() / np.abs(want_dv).max(),
                     np.abs(dk.astype(np.float32) - want_dk).max() / np.abs(want_dk).max()))


def test_dkdv_loop_reads_its_row_statistics_from_rings_on_the_emulator():
    """M and Delta, loaded in the loop to make P^T and dS^T (register A operands), come through
    rings of one-row tiles, copied ahead with the tiles (mma.sync's rings here: the portable build
    the emulator runs), not loaded in the iteration."""
    from test_codegen_emulate import in_child
    n, d, narrow, wide = 128, 32, 16, 64
    x, f = np.zeros((n, d), np.float16), np.zeros(n, np.float32)
    kir = kernels.attention_bwd_dkdv_kernel.warmup(x, x, x, x, x, x, f, f, 0.1, n, HEAD_DIM=d, BLOCK_M=narrow,
                                                    BLOCK_N=wide, CAUSAL=False, num_warps=4, num_stages=2,
                                                    grid=(1,), target="sm_80").asm["kir"]
    text = compile_ir(parse_function(kir), "sm_80", {"num_warps": 4, "num_stages": 2}, link=False).kir
    loop = text[text.index(" = for "):]
    assert loop.count("mma_dot") == 4 and " = load " not in loop
    assert loop.count("= local_load") == 2 and text.count(f"smem<2x1x{narrow}xfp32") == 2
    assert in_child(_check_dkdv_on_the_emulator, kir, n, d, wide) < 2e-2


def test_dkdv_copies_each_row_statistic_once_not_once_per_thread_holding_it():
    """M's and Delta's rows (32 floats here) are fewer than the 128 threads copying them: the
    threads their copy layout replicates them over skip the copy (racecheck saw the duplicates'
    cp.async writes to one shared address as WAW hazards), so each copy sits in a block that
    the owner mask branches into."""
    x, f = np.zeros((256, 64), np.float16), np.zeros(256, np.float32)
    llir = kernels.attention_bwd_dkdv_kernel.warmup(x, x, x, x, x, x, f, f, 0.1, 256, HEAD_DIM=64, BLOCK_M=32,
                                                     BLOCK_N=128, CAUSAL=False, num_warps=4, num_stages=3,
                                                     grid=(1,), target="sm_90a").asm["llir"]
    blocks = re.findall(r"^([\w.$-]+):.*\n((?:.+\n)*)", llir, re.M)
    copy = r"cp\.async\.ca\.shared\.global \[\$0\+\d+\], \[\$1\], 4"
    holding = [name for name, body in blocks for _ in re.findall(copy, body)]
    assert len(holding) >= 6  # M and Delta, each ahead of the loop, in it, and the prologue's
    assert all(name.endswith(".if") for name in holding), holding
