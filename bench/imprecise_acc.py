"""How far an fp8 matmul's fp32 result is from the exact sum with and without Triton's partial
accumulators (`tl.dot(..., max_num_imprecise_acc=n)`), on kiln and on upstream Triton, same source
(bench/kernels.py `fp8_matmul_kernel`) and inputs. Hopper's tensor cores keep fewer bits of an fp8
sum than fp32 has; summing runs of n of k apart and adding them in fp32 trades registers for bits.

    python bench/imprecise_acc.py [--k 8192] [--out DIR]

Prints, per n, each library's largest and mean error relative to the largest exact |C|, and
whether kiln's result equals Triton's bit for bit.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_source  # noqa: E402
import results_file  # noqa: E402


def run(libs, m, n, k, imprecise_values):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    exact = a.double() @ b.double().T
    scale = exact.abs().max().item()
    rows = []
    for imprecise in imprecise_values:
        outs = {}
        for name, lib in libs.items():
            c = torch.empty(m, n, device="cuda")
            lib.fp8_matmul_kernel[(m // 128, n // 128)](a.cuda(), b.cuda(), c, m, n, k, BLOCK_M=128, BLOCK_N=128,
                                                        BLOCK_K=128, IMPRECISE=imprecise, num_warps=8, num_stages=3)
            outs[name] = c.cpu()
        row = {"max_num_imprecise_acc": imprecise or "default"}
        for name, c in outs.items():
            err = (c.double() - exact).abs() / scale
            row[name] = {"max": err.max().item(), "mean": err.mean().item()}
        row["bitwise_equal"] = bool(torch.equal(outs["kiln"], outs["triton"]))
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=512)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--out")
    args = parser.parse_args()
    libs = {flavour: kernel_source.load("kernels.py", flavour) for flavour in ("kiln", "triton")}
    rows = run(libs, args.m, args.m, args.k, [0, 128, 32])
    gpu = torch.cuda.get_device_name()
    lines = [f"## fp8 matmul error against the exact sum, {gpu}, {datetime.date.today().isoformat()}", "",
             f"M = N = {args.m}, K = {args.k}, e4m3 randn inputs, 128x128x128 tiles, error relative to max |C|", "",
             "| max_num_imprecise_acc | kiln max | kiln mean | Triton max | Triton mean | kiln == Triton |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['max_num_imprecise_acc']} | {r['kiln']['max']:.2e} | {r['kiln']['mean']:.2e} | "
                     f"{r['triton']['max']:.2e} | {r['triton']['mean']:.2e} | {r['bitwise_equal']} |")
    results_file.report(args.out, "imprecise-acc", lines, rows)


if __name__ == "__main__":
    main()
