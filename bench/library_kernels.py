"""Which kernels the libraries kiln is measured against run, and one library's matmul to profile.

    python bench/library_kernels.py names               # cuBLAS's kernels at issue 32's matmul shapes, SDPA's
                                                        # forward and backward (name, grid, block, registers)
    python bench/library_kernels.py matmul LIB DTYPE MxNxK   # LIB kiln, triton or cublas: a few launches, for ncu:

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters \\
        -k regex:'matmul_kernel|nvjet|gemm' --launch-skip 2 --launch-count 1 \\
        python bench/library_kernels.py matmul kiln fp16 4096x4096x4096

kiln and Triton run tutorial 03's kernel at the config bench/matmul.py picks at these shapes (128x256x64, 3 stages,
8 warps). What session 66 found with it (H200): bench/results/2026-12-03-NVIDIA_H200-session66.md.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matmul import launcher, operands, shape_of  # noqa: E402

SHAPES = ["4096x4096x4096", "8192x8192x8192", "8192x14336x4096", "8192x4096x14336"]
CONFIG = (128, 256, 64, 3, 8)


def profiled_kernels(fn) -> list[dict]:
    """The GPU kernels one call of `fn` launches, as torch.profiler records them."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    os.unlink(path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return [{"name": e["name"], "grid": e.get("args", {}).get("grid"), "block": e.get("args", {}).get("block"),
             "registers": e.get("args", {}).get("registers per thread"), "us": e.get("dur")} for e in kernels]


def cublas(a, b):
    out = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=a.dtype)
    return lambda: torch.matmul(a, b, out=out)


def names() -> None:
    for dtype in ("fp16", "bf16"):
        for size in SHAPES:
            for k in profiled_kernels(cublas(*operands(dtype, *shape_of(size)))):
                print(json.dumps({"library": "cublas", "dtype": dtype, "size": size, **k}), flush=True)
    import torch.nn.functional as F
    for dim in (64, 128):
        for causal in (False, True):
            q, k, v = (torch.randn(4, 32, 4096, dim, device="cuda", dtype=torch.float16, requires_grad=True)
                       for _ in range(3))
            grad = torch.randn(4, 32, 4096, dim, device="cuda", dtype=torch.float16)
            step = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)  # noqa: E731
            for kernel in profiled_kernels(step):
                print(json.dumps({"library": "sdpa", "D": dim, "causal": causal, **kernel}), flush=True)


def matmul(library: str, dtype: str, size: str, launches: int = 5) -> None:
    a, b = operands(dtype, *shape_of(size))
    if library == "cublas":
        go = cublas(a, b)
    else:
        from run import load_kernels
        c = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=torch.float16)
        go = launcher(load_kernels(library), a, b, c, CONFIG)
    for _ in range(launches):
        go()
    torch.cuda.synchronize()


if __name__ == "__main__":
    if sys.argv[1:2] == ["names"]:
        names()
    elif sys.argv[1:2] == ["matmul"] and len(sys.argv) == 5:
        matmul(*sys.argv[2:5])
    else:
        raise SystemExit(__doc__)
