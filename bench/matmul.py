"""Tensor-core matmul: Triton's tutorial-03 kernel (bench/kernels.py `matmul_kernel`) on
kiln and on upstream Triton, each autotuned over the tutorial's configs, against cuBLAS.

    python bench/matmul.py [--quick] [--check] [--dtypes fp16,bf16,fp8,tf32] [--sizes 2048,4096,3000x5000x1000] [--out DIR]

A size is N (an N³ matmul) or MxNxK.

--check first runs every config on odd shapes (K not a multiple of BLOCK_K, M and N not
multiples of the tile) and compares with torch. Autotuning is done here as Triton's
autotuner does it: every config timed with do_bench, the fastest kept per library and
shape. fp8 (e4m3) takes B transposed (K-major), as the tutorial does, and so does tf32 (fp32
inputs at tl.dot's default precision, against cuBLAS with TF32 allowed: nn.Linear's x @ W.T).
Prints a markdown
table of TFLOP/s and ratios and writes DIR/<date>-<gpu>-matmul.json when --out is given.
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

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps): the configs of Triton's tutorial 03
# for CUDA; the last eight are the ones it adds for fp8.
CONFIGS = [
    (128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2),
    (128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (256, 64, 128, 4, 4), (64, 256, 128, 4, 4),
    (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4),
]
QUICK = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4), (64, 256, 32, 4, 4)]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn, "tf32": torch.float32}
K_MAJOR_B = ("fp8", "tf32")  # wgmma reads only K-major tiles of these (tf32: fp32 data, tl.dot's default precision)


def operands(dtype, M, N, K):
    a = torch.randn(M, K, device="cuda").to(DTYPES[dtype])
    if dtype in K_MAJOR_B:
        b = torch.randn(N, K, device="cuda").to(DTYPES[dtype]).T  # K-major, as the tutorial for fp8
    else:
        b = torch.randn(K, N, device="cuda").to(DTYPES[dtype])
    return a, b


def launcher(lib, a, b, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = b.shape[1]
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)

    def go():
        lib.matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                num_warps=warps, num_stages=stages)
    return go


def reference(a, b):
    return (a.float() @ b.float())


def check(libs, dtypes, configs):
    failures = []
    for dtype in dtypes:
        for (M, N, K) in [(256, 512, 192), (200, 328, 100), (512, 256, 1024), (200, 328, 296)]:
            a, b = operands(dtype, M, N, K)
            want = reference(a, b)
            for cfg in configs:
                for name, lib in libs.items():
                    c = torch.zeros(M, N, device="cuda", dtype=torch.float16)
                    try:
                        launcher(lib, a, b, c, cfg)()
                        torch.cuda.synchronize()
                    except Exception as e:  # OutOfResources and the like
                        print(f"  {name} {dtype} {cfg} {M}x{N}x{K}: {type(e).__name__}: {str(e)[:120]}")
                        continue
                    err = (c.float() - want).abs().max().item()
                    ok = torch.allclose(c.float(), want, rtol=3e-2, atol=0.5 if dtype != "fp8" else 2.0)
                    if not ok:
                        failures.append((name, dtype, cfg, (M, N, K), err))
                        print(f"  MISMATCH {name} {dtype} {cfg} {M}x{N}x{K}: max error {err:.3g}")
    print(f"check: {len(failures)} mismatches")
    return failures


def shape_of(size) -> tuple[int, int, int]:
    """(M, N, K) of a size: N for N³, or "MxNxK"."""
    if isinstance(size, int):
        return size, size, size
    m, n, k = (int(d) for d in size.split("x"))
    return m, n, k


def parse_sizes(text: str) -> list:
    return [int(s) if s.isdigit() else s for s in text.split(",")]


def run(libs, dtypes, sizes, configs, rounds=3):
    rows = []
    for dtype in dtypes:
        for s in sizes:
            M, N, K = shape_of(s)
            a, b = operands(dtype, M, N, K)
            c = torch.empty(M, N, device="cuda", dtype=torch.float16)
            picked = {name: fastest(lambda cfg, lib=lib: launcher(lib, a, b, c, cfg), configs)
                      for name, lib in libs.items()}
            fns = {name: launcher(libs[name], a, b, c, got[1]) for name, got in picked.items() if got}
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"  # cuBLAS's tf32 against tl.dot's
            if dtype != "fp8":
                out = torch.empty(M, N, device="cuda", dtype=a.dtype)
                fns["cublas"] = lambda: torch.matmul(a, b, out=out)
            else:
                scale = torch.ones((), device="cuda")
                fns["cublas"] = lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.float16)
            rows.append(timed_row(dtype, s, fns, picked, rounds))
    return rows


def timed_row(dtype, size, fns, picked, rounds):
    """TFLOP/s of each of `fns` (a matmul of `size`, shape_of) timed in turns, with the configs `picked`."""
    row = {"dtype": dtype, "size": size}
    M, N, K = shape_of(size)
    for name, ms in interleaved(fns, rounds).items():
        row[name] = 2 * M * N * K / (ms * 1e-3) / 1e12
    row["configs"] = {name: got[1] for name, got in picked.items() if got}
    print(json.dumps(row))
    return row


def table(rows) -> str:
    lines = ["| dtype | size | kiln TFLOP/s | Triton TFLOP/s | cuBLAS TFLOP/s | kiln / Triton | kiln / cuBLAS | kiln config |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        k, t, c = r.get("kiln", 0), r.get("triton", 0), r.get("cublas", 0)
        lines.append(f"| {r['dtype']} | {r['size']} | {k:.0f} | {t:.0f} | {c:.0f} | {k / t if t else 0:.2f} | "
                     f"{k / c if c else 0:.2f} | {r['configs'].get('kiln')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--dtypes", default="fp16,bf16,fp8,tf32")
    ap.add_argument("--sizes", default="2048,4096,8192")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = {name: load_kernels(name) for name in args.libs.split(",")}
    dtypes = args.dtypes.split(",")
    configs = QUICK if args.quick else CONFIGS
    if args.check:
        check(libs, dtypes, configs)
    rows = run(libs, dtypes, parse_sizes(args.sizes), configs)
    text = table(rows)
    print(text)
    if args.out:
        results_file.save_today(args.out, "matmul", rows, text)


if __name__ == "__main__":
    main()
