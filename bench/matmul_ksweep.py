"""Where a tile's time goes: M = N = 4096 at several K, tutorial 03's kernel at one config
(128x256x64, 3 stages, 8 warps) on kiln and on Triton, and cuBLAS, timed in turns.

    python bench/matmul_ksweep.py [--out DIR]

T(K) is about waves x (fixed + K/BLOCK_K x per_iteration): the fixed part (the pipeline filling
before the first dot, the epilogue after the last) is what a persistent kernel would overlap with
the next tile's loads; the slope is the main loop. Prints one JSON row per (dtype, K), in µs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matmul  # noqa: E402
from run import interleaved, load_kernels, settle_clocks  # noqa: E402

CONFIG = (128, 256, 64, 3, 8)
KS = (64, 128, 256, 512, 1024, 4096)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = {name: load_kernels(name) for name in ("kiln", "triton")}
    settle_clocks()
    rows = []
    for dtype in ("fp16", "bf16"):
        for k in KS:
            a = torch.randn(4096, k, device="cuda").to(matmul.DTYPES[dtype])
            b = torch.randn(k, 4096, device="cuda").to(matmul.DTYPES[dtype])
            c = torch.empty(4096, 4096, device="cuda", dtype=torch.float16)
            out = torch.empty(4096, 4096, device="cuda", dtype=a.dtype)
            fns = {name: matmul.launcher(lib, a, b, c, CONFIG) for name, lib in libs.items()}
            fns["cublas"] = lambda: torch.matmul(a, b, out=out)
            row = {"dtype": dtype, "K": k, **{n: round(ms * 1000, 2) for n, ms in interleaved(fns, 5).items()}}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        with open(os.path.join(args.out, "matmul-ksweep.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
