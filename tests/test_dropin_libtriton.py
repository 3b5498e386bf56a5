"""`triton._C.libtriton` under the drop-in: the cuBLAS matmul Triton's tutorials compare against."""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from kiln.dropin import doctor, libtriton  # noqa: E402


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
