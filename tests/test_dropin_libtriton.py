"""`triton._C.libtriton` under the drop-in: the cuBLAS matmul Triton's tutorials compare against."""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from kiln.dropin import doctor, libtriton  # noqa: E402

from bench_support import bench_kernels  # noqa: E402


def operands(m, n, k, dtype):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)
    return a, b, torch.empty(m, n, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_is_a_times_b_transposed_in_place(dtype):
    a, b, c = operands(33, 17, 64, dtype)
    cublas = libtriton.nvidia.cublas.CublasLt(torch.empty(1 << 20, dtype=torch.uint8))
    out = c
    cublas.matmul(a, b, c)
    assert c is out
    torch.testing.assert_close(c.float(), a.float() @ b.float().T, rtol=2e-2, atol=2e-1)


def test_mismatched_operands_are_a_clear_error():
    cublas = libtriton.nvidia.cublas.CublasLt(None)
    a, b, c = operands(8, 4, 16, torch.float32)
    with pytest.raises(ValueError, match=r"b \(4, 16\) \(N, K\)"):
        cublas.matmul(a, b, torch.empty(8, 5))
    with pytest.raises(ValueError, match="a is torch.float32 but b is torch.bfloat16"):
        cublas.matmul(a, b.bfloat16(), c)


@pytest.mark.skipif(doctor.installed_hook() is None, reason="kiln's drop-in hook is not installed here")
def test_tutorials_import_it_unchanged():
    code = ("from triton._C.libtriton import nvidia; import triton.profiler.viewer as v; "
            "print(nvidia.cublas.CublasLt.__module__, v.__name__)")
    out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "KILN_DROPIN": "1"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["kiln.dropin.libtriton", "kiln.profiler.viewer"]


@pytest.mark.gpu
def test_the_e4m3_baseline_sums_as_an_fp8_dot_does(cuda_torch):
    """Triton's binding asks cuBLASLt for fast accumulation on e4m3, which sums as Hopper's fp8 wgmma
    sums a Triton fp8 dot: a kernel's result rounded to e4m3 matches the baseline within upstream's
    tolerance (3%), where one e4m3 step is 6-12% of a value. Without it 0.8% of the values differ by
    a step at K 512 (0.5% past 3%); with it none do (H200, 2026-12-03: the fp32 sums bit-equal)."""
    g = torch.Generator().manual_seed(42)
    a = torch.randn(256, 512, generator=g).to(torch.float8_e4m3fn).cuda()
    b = torch.randn(256, 512, generator=g).to(torch.float8_e4m3fn).cuda()
    summed = torch.empty(256, 256, device="cuda")
    bench_kernels().fp8_matmul_kernel[(2, 2)](a, b, summed, 256, 256, 512, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                               IMPRECISE=0, num_warps=4, num_stages=3)
    baseline = torch.empty(256, 256, device="cuda", dtype=torch.float8_e4m3fn)
    libtriton.nvidia.cublas.CublasLt(torch.empty(32 << 20, device="cuda", dtype=torch.uint8)).matmul(a, b, baseline)
    torch.testing.assert_close(baseline.half(), summed.to(torch.float8_e4m3fn).half(), atol=0.03, rtol=0.03)
