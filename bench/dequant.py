"""Weight-only int8 matmul (W8A16): bench/kernels.py `dequant_matmul_kernel` on kiln and on
upstream Triton, each autotuned over the same configs, against PyTorch dequantizing the
weights and calling cuBLAS.

    python bench/dequant.py [--check] [--sizes 4096,8192] [--libs kiln,triton] [--out DIR]

The weights are converted and scaled inside the K loop, so the dot's B operand is computed
there: kiln copies the raw weights through a cp.async ring and stores the converted tile
each iteration for the tensor cores (codegen/README, "a B operand computed in the loop").
M = N = K = size, scales per 128 rows of K. Prints a markdown table of TFLOP/s and ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from run import fastest, interleaved, load_kernels, triton_cdiv  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
CONFIGS = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 3, 8), (64, 128, 64, 4, 4),
           (128, 64, 64, 4, 4), (64, 256, 64, 3, 4)]
GROUP_K = 128


def operands(M, N, K):
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randint(-127, 128, (K, N), device="cuda", dtype=torch.int8)
    s = (torch.rand(K // GROUP_K, N, device="cuda") / 64).to(torch.float16)
    return a, w, s


def launcher(lib, a, w, s, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = w.shape[1]
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)

    def go():
        lib.dequant_matmul_kernel[grid](a, w, s, c, M, N, K, a.stride(0), w.stride(0), s.stride(0), c.stride(0),
                                        GROUP_K=GROUP_K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                        num_warps=warps, num_stages=stages)
    return go


def reference(a, w, s):
    return a.float() @ (w.half() * s.repeat_interleave(GROUP_K, 0)).float()


def check(libs):
    failures = 0
    for M, N, K in [(256, 512, 384), (200, 328, 256)]:
        a, w, s = operands(M, N, K)
        want = reference(a, w, s)
        for cfg in CONFIGS:
            for name, lib in libs.items():
                c = torch.zeros(M, N, device="cuda", dtype=torch.float16)
                launcher(lib, a, w, s, c, cfg)()
                if not torch.allclose(c.float(), want, rtol=2e-2, atol=0.5):
                    failures += 1
                    print(f"  MISMATCH {name} {cfg} {M}x{N}x{K}: max error {(c.float() - want).abs().max().item():.3g}")
    print(f"check: {failures} mismatches")


def run(libs, sizes, rounds=3):
    rows = []
    for n in sizes:
        a, w, s = operands(n, n, n)
        c = torch.empty(n, n, device="cuda", dtype=torch.float16)
        picked = {name: fastest(lambda cfg, lib=lib: launcher(lib, a, w, s, c, cfg), CONFIGS)
                  for name, lib in libs.items()}
        fns = {name: launcher(libs[name], a, w, s, c, got[1]) for name, got in picked.items() if got}
        scales = s.repeat_interleave(GROUP_K, 0)
        fns["torch"] = lambda: torch.matmul(a, w.half() * scales, out=c)
        row = {"size": n, **{name: 2 * n ** 3 / (ms * 1e-3) / 1e12 for name, ms in interleaved(fns, rounds).items()},
               "configs": {name: got[1] for name, got in picked.items() if got}}
        print(json.dumps(row))
        rows.append(row)
    return rows


def table(rows) -> str:
    lines = ["| size | kiln TFLOP/s | Triton TFLOP/s | PyTorch TFLOP/s | kiln / Triton | kiln config |",
             "|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        k, t, p = r.get("kiln", 0), r.get("triton", 0), r.get("torch", 0)
        lines.append(f"| {r['size']} | {k:.0f} | {t:.0f} | {p:.0f} | {k / t if t else 0:.2f} | {r['configs'].get('kiln')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = {name: load_kernels(name) for name in args.libs.split(",")}
    if args.check:
        check(libs)
    rows = run(libs, [int(s) for s in args.sizes.split(",")])
    text = table(rows)
    print(text)
    if args.out:
        results_file.save_today(args.out, "dequant", rows, text)


if __name__ == "__main__":
    main()
