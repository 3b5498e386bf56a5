"""What the tests that run bench/'s kernels share: bench/kernels.py loaded as kiln's kernels, and the
skip mark of their GPU cases (the GPU tier: `pytest -m gpu`)."""
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


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not _cuda(), reason="needs PyTorch and a CUDA GPU")
