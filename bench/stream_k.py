"""Stream-K matmul (bench/kernels.py `stream_k_matmul_kernel`: tutorial 09's persistent matmul whose last,
partial wave of tiles is shared out k-step by k-step over every program) on kiln and on upstream Triton,
beside both libraries' persistent and tile kernels and cuBLAS, each autotuned over tutorial 03's 16-bit
configs. At 4096³ the 128x256 tile gives 512 tiles, 3.9 waves of 132 SMs: the last wave leaves 16 SMs idle,
which is what stream-K takes back.

    python bench/stream_k.py [--check] [--dtypes fp16,bf16] [--shapes 4096,8192,8192x14336x4096] [--out DIR]

--check first compares every config of the stream-K kernel with torch on odd shapes, twice each (the
second launch reads the counts the first left zeroed).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from matmul import CONFIGS, DTYPES, launcher  # noqa: E402
from persistent import parse_shape, persistent_launcher  # noqa: E402
from run import fastest, interleaved, load_kernels, settle_clocks, triton_cdiv  # noqa: E402

CONFIGS_16 = CONFIGS[:8]  # the tutorial's configs for 16-bit inputs
KERNELS = ("stream-K", "persistent", "tiles")


def stream_k_launcher(lib, a, b, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = b.shape[1]
    programs = min(torch.cuda.get_device_properties(a.device).multi_processor_count,
                   triton_cdiv(M, bm) * triton_cdiv(N, bn))
    tail, slots = lib.stream_k_slots(M, N, K, bm, bn, bk, programs)
    partial = torch.empty(tail, slots, bm, bn, device=a.device, dtype=torch.float32)
    arrived = torch.zeros(tail, device=a.device, dtype=torch.int32)  # the kernel leaves it zeroed

    def go():
        lib.stream_k_matmul_kernel[(programs,)](
            a, b, c, partial, arrived, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
            c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, NUM_SMS=programs, num_warps=warps,
            num_stages=stages)
    return go


LAUNCHERS = {"stream-K": stream_k_launcher, "persistent": persistent_launcher, "tiles": launcher}


def check(libs, dtypes):
    failures = 0
    for dtype in dtypes:
        for M, N, K in [(1000, 776, 520), (512, 2048, 1024), (4096, 4096, 320)]:
            a = torch.randn(M, K, device="cuda").to(DTYPES[dtype])
            b = torch.randn(K, N, device="cuda").to(DTYPES[dtype])
            ref = a.float() @ b.float()
            for flavour, lib in libs.items():
                for cfg in CONFIGS_16:
                    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
                    try:
                        go = stream_k_launcher(lib, a, b, c, cfg)
                        for _ in range(2):
                            c.fill_(float("nan"))
                            go()
                        torch.cuda.synchronize()
                    except Exception as e:  # out of resources and the like: the autotuner skips it too
                        print(f"check {flavour} {dtype} {cfg} {M}x{N}x{K}: {type(e).__name__}: {str(e)[:100]}")
                        continue
                    err = (c.float() - ref).abs().max().item()
                    ok = err <= 0.02 * ref.abs().max().item()
                    failures += not ok
                    print(f"check {flavour} {dtype} {cfg} {M}x{N}x{K}: max error {err:.3g} {'ok' if ok else 'WRONG'}")
    return failures


def run(libs, dtypes, shapes, rounds=3):
    rows = []
    for dtype in dtypes:
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda").to(DTYPES[dtype])
            b = torch.randn(K, N, device="cuda").to(DTYPES[dtype])
            c = torch.empty(M, N, device="cuda", dtype=torch.float16)
            picked = {f"{name} {kernel}": fastest(lambda cfg, lib=lib, kernel=kernel: LAUNCHERS[kernel](lib, a, b, c, cfg),
                                                  CONFIGS_16)
                      for name, lib in libs.items() for kernel in KERNELS}
            fns = {name: LAUNCHERS[name.split(" ", 1)[1]](libs[name.split()[0]], a, b, c, got[1])
                   for name, got in picked.items() if got}
            out = torch.empty(M, N, device="cuda", dtype=a.dtype)
            fns["cublas"] = lambda: torch.matmul(a, b, out=out)
            row = {"dtype": dtype, "shape": f"{M}x{N}x{K}",
                   "configs": {name: got[1] for name, got in picked.items() if got}}
            for name, ms in interleaved(fns, rounds).items():
                row[name] = 2 * M * N * K / (ms * 1e-3) / 1e12
            print(row)
            rows.append(row)
    return rows


def table(rows) -> str:
    names = [f"{lib} {kernel}" for kernel in KERNELS for lib in ("kiln", "triton")] + ["cublas"]
    lines = ["| dtype | M x N x K | " + " | ".join(names) + " | kiln stream-K / cuBLAS | kiln stream-K / persistent | "
             "kiln stream-K config |", "|---|---|" + "---:|" * (len(names) + 2) + "---|"]
    for r in rows:
        got = {n: r.get(n, 0) for n in names}
        ratio = lambda x, y: f"{x / y:.2f}" if y else "-"  # noqa: E731
        lines.append(f"| {r['dtype']} | {r['shape']} | " + " | ".join(f"{got[n]:.0f}" for n in names) +
                     f" | {ratio(got['kiln stream-K'], got['cublas'])} | "
                     f"{ratio(got['kiln stream-K'], got['kiln persistent'])} | {r['configs'].get('kiln stream-K')} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--shapes", default="4096,8192,8192x14336x4096")
    parser.add_argument("--out")
    args = parser.parse_args()
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    dtypes = args.dtypes.split(",")
    if args.check and check(libs, dtypes):
        sys.exit("some configs computed wrong results")
    settle_clocks()
    rows = run(libs, dtypes, [parse_shape(s) for s in args.shapes.split(",")])
    text = (f"## stream-K matmul (tutorial 09's persistent form, its last wave shared by k-steps) on "
            f"{torch.cuda.get_device_name()} (TFLOP/s; persistent = tutorial 09's, tiles = tutorial 03's)\n\n"
            f"{table(rows)}\n")
    print(text)
    if args.out:
        results_file.save_today(args.out, "stream-k", rows, text)


if __name__ == "__main__":
    main()
