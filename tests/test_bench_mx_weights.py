"""bench/dot_formats.py's mxfp4 and mxfp8 sections: their kernel (bench/kernels.py `mx_weight_matmul_kernel`, a
weight-only MX layer through tl.dot_scaled, e2m1 or e4m3 weights) gives the exact product of its inputs as the bench
builds them, in the interpreter, in the emulator and on the GPU, and compiles for Hopper on the tensor cores with
its decoded weights stored 16 bytes at a time."""
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from bench_support import bench_kernels  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "bench"))
import dot_formats  # noqa: E402


FORMATS = ["e2m1", "e4m3"]


def _inputs(m, n, k, fmt):
    torch.manual_seed(3)
    a = torch.randn(m, k).bfloat16()
    weights, scales, values = dot_formats.mx_weights(n, k, fmt)
    return a, weights, scales, a.double() @ values.T


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_kernel_gives_the_exact_product(fmt):
    a, packed, scales, exact = _inputs(32, 32, 128, fmt)
    c = torch.zeros(32, 32)
    bench_kernels().mx_weight_matmul_kernel[(1, 1)](a, packed, scales, c, 32, 32, 128, BLOCK_M=32, BLOCK_N=32,
                                                    BLOCK_K=64, FORMAT=fmt)
    np.testing.assert_allclose(c.double().numpy(), exact.numpy(), rtol=1e-5, atol=1e-5 * exact.abs().max().item())


def _hopper_build(fmt):
    a, weights, scales, _ = _inputs(128, 128, 256, fmt)
    return bench_kernels().mx_weight_matmul_kernel.warmup(a, weights, scales, torch.zeros(128, 128), 128, 128, 256,
                                                          BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, FORMAT=fmt,
                                                          num_warps=8, num_stages=3, grid=(1, 1), target="sm_90a")


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_kernel_runs_on_wgmma(fmt):
    ptx = _hopper_build(fmt).asm["ptx"]
    assert "wgmma.mma_async.sync.aligned" in ptx and "mma.sync" not in ptx


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_staged_weights_go_to_a_k_major_tile_in_16_byte_stores(fmt):
    # the weights are contiguous along K and each thread holds a run of K after decoding: an N-major tile
    # would take them one bf16 at a time (64 st.shared.b16 a thread a step at 128x128x128 on 8 warps)
    from kiln.ir import parse_function
    from kiln.codegen.pipeline import PassContext, run_passes
    from kiln.codegen.target import parse_target
    built = _hopper_build(fmt)
    fn = parse_function(built.asm["kir"])
    run_passes(fn, PassContext(parse_target("sm_90a"), 8, 3))
    [store] = [op for op in fn.walk() if op.name == "local_store"]
    assert tuple(store.operands[1].type.order) == (0, 1)  # B [K, N] with K innermost
    ptx = built.asm["ptx"]
    assert "st.shared.v4.b32" in ptx and "st.shared.b16" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("block_n, warps", [(128, 8), (128, 4), (64, 4)])
def test_the_kernel_gives_the_exact_product_on_the_gpu(fmt, block_n, warps, cuda_torch):
    a, packed, scales, exact = _inputs(256, 256, 512, fmt)
    c = cuda_torch.zeros(256, 256, device="cuda")
    bench_kernels().mx_weight_matmul_kernel[(2, 256 // block_n)](
        a.cuda(), packed.cuda(), scales.cuda(), c, 256, 256, 512, BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=128,
        FORMAT=fmt, num_warps=warps)
    np.testing.assert_allclose(c.cpu().double().numpy(), exact.numpy(), rtol=1e-5, atol=1e-5 * exact.abs().max().item())


def _emulated(a_bits, packed, scales, fmt, block, warps):
    """The kernel's sm_80 build (sm_89 for e4m3, Triton's first with it; mma.sync, its weights staged in the loop as
    on Hopper) in kiln's CPU emulator.
    NumPy only in here: a child forked from a process whose torch ran threads may hang in torch."""
    import ml_dtypes
    from kiln.codegen.emulate import run_on_cpu
    from kiln.ir import parse_function
    m = n = 2 * block
    c = np.zeros((m, n), np.float32)
    built = bench_kernels().mx_weight_matmul_kernel.warmup(a_bits.view(ml_dtypes.bfloat16), packed, scales, c, m, n,
                                                           256, BLOCK_M=block, BLOCK_N=block, BLOCK_K=64, FORMAT=fmt,
                                                           num_warps=warps, grid=(2, 2),
                                                           target="sm_80" if fmt == "e2m1" else "sm_89")
    run_on_cpu(parse_function(built.asm["kir"]), (2, 2), [a_bits, packed, scales, c, m, n, 256], num_warps=warps)
    return c


@pytest.mark.parametrize("fmt, block, warps", [("e2m1", 32, 4), ("e2m1", 64, 4), ("e4m3", 32, 4)])
def test_the_staged_weights_are_read_as_stored_in_the_emulator(fmt, block, warps):
    from test_codegen_emulate import in_child
    a, packed, scales, exact = _inputs(2 * block, 2 * block, 256, fmt)
    got = in_child(_emulated, a.view(torch.int16).numpy(), packed.numpy(), scales.numpy(), fmt, block, warps,
                   timeout=300)
    want = exact.numpy()
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
