"""Tutorial 06's forward at small N_CTX, run through the tutorial's own `attention()` (its autotuner, host
TensorDescriptors, `triton.set_allocator`): the TFLOP/s its table reports (do_bench), and apart from it the
host time of one call and the kernel's own GPU time (torch.profiler), to tell a host-bound row from a slow
kernel. Run it once under KILN_DROPIN=1 and once with the installed Triton:

    KILN_DROPIN=1 python bench/tutorial06_small_ctx.py .scratch/tutorials/3.6/06-fused-attention.py
    python bench/tutorial06_small_ctx.py .scratch/tutorials/3.6/06-fused-attention.py

The tutorial is upstream's file (scripts/upstream_tutorials.py extract), imported, not run as __main__.
Z=4 H=32 D=64 fp16; causal, and not causal with warp_specialize off and on (on Hopper `on` makes its
descriptors in the kernel). One JSON line per case.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import torch
import triton
from torch.profiler import ProfilerActivity, profile

CASES = [(True, False), (False, False), (False, True)]  # (causal, warp_specialize)
CONTEXTS = (1024, 2048)
CALLS = 50


def load_tutorial(path: str):
    spec = importlib.util.spec_from_file_location("tutorial06", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_us(fn) -> float:
    """Wall µs per call of `CALLS` calls queued on an idle GPU (no call waits for the GPU)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    per_call = (time.perf_counter() - start) / CALLS * 1e6
    torch.cuda.synchronize()
    return per_call


def kernel_us(fn, name: str = "attn") -> float | None:
    """Mean GPU µs of the kernels whose name holds `name`, over 20 calls."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if name in e.key]
    count = sum(e.count for e in events)
    return sum(e.device_time_total for e in events) / count if count else None


def main() -> None:
    tutorial = load_tutorial(sys.argv[1])
    lib = "kiln" if os.environ.get("KILN_DROPIN") == "1" else f"triton {triton.__version__}"
    for causal, warp_specialize in CASES:
        for n_ctx in CONTEXTS:
            q, k, v = (torch.randn((4, 32, n_ctx, 64), dtype=torch.float16, device="cuda") for _ in range(3))
            fn = lambda: tutorial.attention(q, k, v, causal, 1.3, warp_specialize)  # noqa: E731
            ms = triton.testing.do_bench(fn)
            flops = 4.0 * 4 * 32 * n_ctx * n_ctx * 64 * (0.5 if causal else 1)
            kernel = kernel_us(fn)
            print(json.dumps({"lib": lib, "causal": causal, "warp_specialize": warp_specialize, "n_ctx": n_ctx,
                              "tflops": round(flops / ms * 1e-9, 1), "host_us": round(host_us(fn), 1),
                              "kernel_us": None if kernel is None else round(kernel, 1),
                              "config": str(getattr(tutorial._attn_fwd, "best_config", None))}), flush=True)


if __name__ == "__main__":
    main()
