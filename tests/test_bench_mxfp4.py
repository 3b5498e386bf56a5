"""bench/dot_formats.py's mxfp4 section: its kernel (bench/kernels.py `mxfp4_weight_matmul_kernel`, a weight-only
mxfp4 layer through tl.dot_scaled) gives the exact product of its inputs as the bench builds them, here in the
interpreter, and compiles for Hopper on the tensor cores."""
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from bench_support import bench_kernels  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "bench"))
import dot_formats  # noqa: E402


def _inputs(m, n, k):
    torch.manual_seed(3)
    a = torch.randn(m, k).bfloat16()
    packed, scales, values = dot_formats.mxfp4_weights(n, k)
    return a, packed, scales, a.double() @ values.T


def test_the_kernel_gives_the_exact_product():
    a, packed, scales, exact = _inputs(32, 32, 128)
    c = torch.zeros(32, 32)
    bench_kernels().mxfp4_weight_matmul_kernel[(1, 1)](a, packed, scales, c, 32, 32, 128, BLOCK_M=32, BLOCK_N=32,
                                                       BLOCK_K=64)
    np.testing.assert_allclose(c.double().numpy(), exact.numpy(), rtol=1e-5, atol=1e-5 * exact.abs().max().item())


def test_the_kernel_runs_on_wgmma():
    a, packed, scales, _ = _inputs(128, 128, 256)
    built = bench_kernels().mxfp4_weight_matmul_kernel.warmup(a, packed, scales, torch.zeros(128, 128), 128, 128, 256,
                                                              BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=8,
                                                              num_stages=3, grid=(1, 1), target="sm_90a")
    assert "wgmma.mma_async.sync.aligned" in built.asm["ptx"] and "mma.sync" not in built.asm["ptx"]
