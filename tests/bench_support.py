"""What the tests that run bench/'s kernels share: bench/kernels.py loaded as kiln's kernels, its
pointer forward run against SDPA, and the skip mark of their GPU cases (the GPU tier: `pytest -m gpu`)."""
import importlib.util
import pathlib

import pytest

BENCH = pathlib.Path(__file__).parent.parent / "bench"


def bench_kernels():
    """bench/kernels.py as a module (its kernels written once for kiln and Triton)."""
    spec = importlib.util.spec_from_file_location("kiln_bench_kernels", BENCH / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_forward(torch, shape, block_m, block_n, causal, num_warps, num_stages, scale=None):
    """bench's pointer forward on random fp16 q, k, v of `shape` ([Z, H, N_CTX, D]) on the GPU:
    (the launched kernel, its output, SDPA's at the same scale)."""
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(shape[:3], device="cuda", dtype=torch.float32)
    scale = shape[3] ** -0.5 if scale is None else scale
    strides = [*q.stride(), *k.stride(), *v.stride(), *o.stride()]
    kernel = bench_kernels().attention_fwd_kernel[(shape[2] // block_m, shape[0] * shape[1])](
        q, k, v, o, lse, scale, *strides, shape[1], shape[2], HEAD_DIM=shape[3], BLOCK_M=block_m, BLOCK_N=block_n,
        CAUSAL=causal, num_warps=num_warps, num_stages=num_stages)
    return kernel, o, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not _cuda(), reason="needs PyTorch and a CUDA GPU")
