"""Two Inductor-shaped kernels whose loads carry eviction hints (bench/inductor_kernels.py: the GELU
chain's bias load `evict_last`; the looped RMSNorm's two passes over each row, `evict_last` then
`evict_first`), kiln against Triton in one process, GB/s, the libraries taking turns (bench/run.py's
`interleaved`, median of 7). For an A/B of how kiln lowers the hints, run it once per variant of the
tree, each with a cache of its own and no daemon (a daemon's workers keep the code they imported):

    KILN_DAEMON=off KILN_CACHE_DIR=/tmp/kc-a python bench/eviction_hints.py
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_source  # noqa: E402
import run  # noqa: E402

ROWS = (8192, 32768)
WIDTH = 4096  # the kernels' row length (written into their index math)


def main() -> None:
    run.ROUNDS = 7
    libs = {name: kernel_source.load("inductor_kernels.py", name) for name in ("kiln", "triton")}
    for rows in ROWS:
        n = rows * WIDTH
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(WIDTH, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        inv = torch.empty(rows, device="cuda", dtype=torch.float32)
        cases = {
            # reads x and the bias, writes y
            "pointwise GELU chain": {lib: (lambda m=m: m.triton_poi_fused_add_erf_mul_sigmoid_tanh_0[(n // 1024,)](
                x, bias, y, n, XBLOCK=1024, num_warps=4, num_stages=1)) for lib, m in libs.items()},
            # reads x twice (its second pass should find the row in L2), writes y
            "looped RMSNorm": {lib: (lambda m=m: m.triton_red_fused_mean_mul_pow_rsqrt_2[(rows,)](
                inv, x, bias, y, rows, WIDTH, XBLOCK=1, RBLOCK=2048, num_warps=8, num_stages=1))
                for lib, m in libs.items()},
        }
        for name, fns in cases.items():
            ms = run.interleaved(fns)
            gbs = {lib: 3 * n * 2 / t * 1e-6 for lib, t in ms.items()}  # three bf16 passes over x's size
            print(f"{name} {rows}x{WIDTH} bf16: kiln {gbs['kiln']:.0f} GB/s, Triton {gbs['triton']:.0f} GB/s, "
                  f"kiln / Triton {gbs['kiln'] / gbs['triton']:.3f}", flush=True)


if __name__ == "__main__":
    main()
