"""Row sums and row maxima of an fp32 matrix by kernels that reduce each step's block inside their
loop and fold it into a carried value (bench/loop_reduction_kernels.py), kiln against upstream Triton
(each picking its fastest of the same configs, as Triton's autotuner would) and PyTorch
(`x.sum(1)`, `x.amax(1)`), GB/s of the matrix read. kiln folds the blocks in the loop and reduces once
after it (the `reduce_after_loop` pass); Triton's OptimizeThreadLocality reduces within each thread in
the loop and across threads after it.

    python bench/loop_reductions.py [--sizes 4096x16384,16384x4096,256x262144] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_source  # noqa: E402
import results_file  # noqa: E402
from run import fastest, interleaved, triton_cdiv  # noqa: E402

CONFIGS = [(1, 1024, 4), (1, 2048, 8), (2, 512, 4), (4, 256, 4), (8, 256, 4), (16, 128, 4), (32, 128, 4)]
KINDS = {"sum": ("row_sums_kernel", lambda x: x.sum(1)), "max": ("row_maxes_kernel", lambda x: x.amax(1))}


def launcher(lib, kind, x, out, cfg):
    bm, bn, warps = cfg
    kernel = getattr(lib, KINDS[kind][0])
    grid = (triton_cdiv(x.shape[0], bm),)
    return lambda: kernel[grid](x, out, x.shape[0], x.shape[1], x.stride(0), BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)


def run(libs, sizes, rounds=3):
    rows = []
    for size in sizes:
        m, n = (int(v) for v in size.split("x"))
        x = torch.randn(m, n, device="cuda")
        for kind, (_, eager) in KINDS.items():
            want = eager(x)
            out = torch.empty(m, device="cuda")
            picked = {}
            for name, lib in libs.items():
                picked[name] = fastest(lambda cfg, lib=lib: launcher(lib, kind, x, out, cfg), CONFIGS)
                launcher(lib, kind, x, out, picked[name][1])()
                torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-3)
            fns = {name: launcher(libs[name], kind, x, out, got[1]) for name, got in picked.items()}
            fns["torch"] = lambda: eager(x)
            row = {"size": size, "kind": kind, "configs": {name: got[1] for name, got in picked.items()}}
            for name, ms in interleaved(fns, rounds).items():
                row[name] = m * n * 4 / (ms * 1e-3) / 1e9
            print(row, flush=True)
            rows.append(row)
    return rows


def table(rows) -> list[str]:
    lines = ["| reduction | rows x cols | kiln GB/s | Triton GB/s | PyTorch GB/s | kiln / Triton | kiln config | Triton config |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        k, t, p = r.get("kiln", 0), r.get("triton", 0), r.get("torch", 0)
        lines.append(f"| {r['kind']} | {r['size']} | {k:.0f} | {t:.0f} | {p:.0f} | {k / t if t else 0:.2f} | "
                     f"{r['configs'].get('kiln')} | {r['configs'].get('triton')} |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096x16384,16384x4096,256x262144")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = {name: kernel_source.load("loop_reduction_kernels.py", name) for name in args.libs.split(",")}
    rows = run(libs, args.sizes.split(","))
    results_file.report(args.out, "loop-reductions", table(rows), rows)


if __name__ == "__main__":
    main()
