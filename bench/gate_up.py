"""A SwiGLU MLP's gate and up projections fused in one kernel (bench/kernels.py `gate_up_kernel`:
silu(x @ wg) * (x @ wu), one x tile feeding two dots), on kiln and on upstream Triton, each autotuned
over the same configs as Triton's autotuner would, against PyTorch eager (two cuBLAS matmuls, then
silu and the product).

    python bench/gate_up.py [--check] [--sizes 4096x14336x4096,8192x14336x4096] [--out DIR]

A size is MxNxK: M tokens, N the intermediate width, K the model width (Llama-3 8B's MLP: N 14336,
K 4096). TFLOP/s count both products (4 M N K). --check first compares every config with torch at
ragged shapes (M and N no multiples of the tile, K no multiple of BLOCK_K).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from matmul import parse_sizes, shape_of  # noqa: E402
from run import fastest, interleaved, load_kernels, triton_cdiv  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps): two fp32 accumulators of BLOCK_M x BLOCK_N
CONFIGS = [(128, 128, 64, 3, 8), (128, 128, 64, 4, 8), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
           (128, 128, 32, 4, 8), (64, 64, 64, 4, 4), (128, 64, 32, 4, 4), (256, 64, 64, 3, 8)]


def operands(M, N, K):
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    wg = (torch.randn(K, N, device="cuda") / K ** 0.5).half()
    wu = (torch.randn(K, N, device="cuda") / K ** 0.5).half()
    return x, wg, wu


def launcher(lib, x, wg, wu, out, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = x.shape
    N = wg.shape[1]
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)

    def go():
        lib.gate_up_kernel[grid](x, wg, wu, out, M, N, K, x.stride(0), wg.stride(0), out.stride(0), BLOCK_M=bm,
                                 BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    return go


def eager(x, wg, wu):
    return torch.nn.functional.silu(x @ wg) * (x @ wu)


def check(libs) -> int:
    failures = 0
    for M, N, K in [(200, 328, 100), (512, 256, 1024), (17, 136, 296)]:
        x, wg, wu = operands(M, N, K)
        want = torch.nn.functional.silu(x.float() @ wg.float()) * (x.float() @ wu.float())
        for cfg in CONFIGS:
            for name, lib in libs.items():
                out = torch.full((M, N), 7.0, device="cuda", dtype=torch.float16)
                try:
                    launcher(lib, x, wg, wu, out, cfg)()
                    torch.cuda.synchronize()
                except Exception as e:  # OutOfResources and the like
                    print(f"  {name} {cfg} {M}x{N}x{K}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                if not torch.allclose(out.float(), want, rtol=2e-2, atol=5e-2):
                    failures += 1
                    print(f"  MISMATCH {name} {cfg} {M}x{N}x{K}: max error {(out.float() - want).abs().max().item():.3g}")
    print(f"check: {failures} mismatches")
    return failures


def run(libs, sizes, rounds=3):
    rows = []
    for size in sizes:
        M, N, K = shape_of(size)
        x, wg, wu = operands(M, N, K)
        out = torch.empty(M, N, device="cuda", dtype=torch.float16)
        picked = {name: fastest(lambda cfg, lib=lib: launcher(lib, x, wg, wu, out, cfg), CONFIGS)
                  for name, lib in libs.items()}
        fns = {name: launcher(libs[name], x, wg, wu, out, got[1]) for name, got in picked.items() if got}
        fns["torch"] = lambda: eager(x, wg, wu)
        row = {"size": size}
        for name, ms in interleaved(fns, rounds).items():
            row[name] = 4 * M * N * K / (ms * 1e-3) / 1e12
        row["configs"] = {name: got[1] for name, got in picked.items() if got}
        print(row, flush=True)
        rows.append(row)
    return rows


def table(rows) -> str:
    lines = ["| size | kiln TFLOP/s | Triton TFLOP/s | PyTorch TFLOP/s | kiln / Triton | kiln / PyTorch | kiln config | Triton config |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        k, t, p = r.get("kiln", 0), r.get("triton", 0), r.get("torch", 0)
        lines.append(f"| {r['size']} | {k:.0f} | {t:.0f} | {p:.0f} | {k / t if t else 0:.2f} | {k / p if p else 0:.2f} | "
                     f"{r['configs'].get('kiln')} | {r['configs'].get('triton')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--sizes", default="4096x14336x4096,8192x14336x4096")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = {name: load_kernels(name) for name in args.libs.split(",")}
    if args.check and check(libs):
        sys.exit(1)
    rows = run(libs, parse_sizes(args.sizes))
    text = table(rows)
    print(text)
    if args.out:
        results_file.save_today(args.out, "gate-up", rows, text)


if __name__ == "__main__":
    main()
