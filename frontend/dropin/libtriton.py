"""`triton._C.libtriton` under the drop-in: what Triton's tutorials and benchmarks take from its C++
extension, which is the cuBLAS baseline they compare against, and the IR context that
`ASTSource.make_ir` takes (its module is kiln.ttir_module's tree: PyTorch walks it to learn which
tensors a user's kernel writes).

    from triton._C.libtriton import nvidia
    cublas = nvidia.cublas.CublasLt(torch.empty(32 << 20, device="cuda", dtype=torch.uint8))
    cublas.matmul(a, b, c)          # c = a @ b.T: a (M, K), b (N, K), c (M, N), row-major

kiln has no C++ extension of its own; the matmul goes to cuBLASLt through PyTorch, which links it:
fp16 and bf16 through `torch.matmul` (cuBLAS's GEMM, which PyTorch runs on cuBLASLt where it can),
fp8 (e4m3 / e5m2) through `torch._scaled_mm` (cuBLASLt's fp8 GEMM) with unit scales, e4m3 with cuBLASLt's
fast accumulation as Triton's binding asks for it (Hopper's fp8 wgmma sums as a Triton fp8 dot does, so a
kernel's fp8 result matches the baseline to the bit, not to one fp8 step). The workspace
is kept as Triton's is, for the caller's sake; PyTorch manages cuBLAS's own. (Its block-scaled
matmuls are Blackwell's, which kiln does not target.)
"""
from __future__ import annotations

import sys
import types

from .jit import native_specialize_impl  # noqa: F401  (Triton's launcher keys arguments with it)


class CublasLt:
    """cuBLASLt's matmul, as Triton's `nvidia.cublas.CublasLt` offers it."""

    def __init__(self, workspace):
        self.workspace = workspace

    def matmul(self, a, b, c) -> None:
        """c = a @ b.T (b given as (N, K), as cuBLAS's TN layout takes it); c is written in place."""
        import torch

        _check(a, b, c)
        if _is_fp8(a.dtype):
            one = torch.ones((), device=a.device, dtype=torch.float32)
            c.copy_(torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=c.dtype,
                                     use_fast_accum=a.dtype == torch.float8_e4m3fn))
        elif a.dtype == c.dtype:
            torch.matmul(a, b.T, out=c)
        else:
            c.copy_(torch.matmul(a, b.T))


def _is_fp8(dtype) -> bool:
    import torch
    return any(dtype == getattr(torch, name, None) for name in ("float8_e4m3fn", "float8_e5m2"))


def _check(a, b, c) -> None:
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2:
        raise ValueError(f"CublasLt.matmul: 2-D operands, got {a.dim()}-D, {b.dim()}-D and {c.dim()}-D")
    (m, k), (n, k2) = a.shape, b.shape
    if k != k2 or tuple(c.shape) != (m, n):
        raise ValueError(f"CublasLt.matmul: a {tuple(a.shape)}, b {tuple(b.shape)} (N, K) and c {tuple(c.shape)} "
                         "do not make c = a @ b.T")
    if a.dtype != b.dtype:
        raise ValueError(f"CublasLt.matmul: a is {a.dtype} but b is {b.dtype}")


nvidia = types.SimpleNamespace(cublas=types.SimpleNamespace(CublasLt=CublasLt))


class context:  # noqa: N801 - the binding's name
    """An MLIR context as `make_ir` takes one: kiln builds its IR without one."""


def load_dialects(context) -> None:
    """Triton registers its MLIR dialects in the context; kiln's IR needs none."""


ir = types.SimpleNamespace(context=context, load_dialects=load_dialects)

libtriton = sys.modules[__name__]  # `triton._C` and `triton._C.libtriton` are this one module
