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
from matmul import launcher  # noqa: E402
from persistent import check, parse_shape, persistent_launcher, run as run_kernels  # noqa: E402
from run import load_kernels, settle_clocks, triton_cdiv  # noqa: E402

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


def table(rows) -> str:
    names = [f"{lib} {kernel}" for kernel in LAUNCHERS for lib in ("kiln", "triton")] + ["cublas"]
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
    odd = [(1000, 776, 520), (512, 2048, 1024), (4096, 4096, 320)]
    # twice per config: the second launch reads the counts the first left zeroed
    if args.check and check(libs, dtypes, stream_k_launcher, odd, launches=2):
        sys.exit("some configs computed wrong results")
    settle_clocks()
    rows = run_kernels(libs, dtypes, [parse_shape(s) for s in args.shapes.split(",")], launchers=LAUNCHERS)
    text = (f"## stream-K matmul (tutorial 09's persistent form, its last wave shared by k-steps) on "
            f"{torch.cuda.get_device_name()} (TFLOP/s; persistent = tutorial 09's, tiles = tutorial 03's)\n\n"
            f"{table(rows)}\n")
    print(text)
    if args.out:
        results_file.save_today(args.out, "stream-k", rows, text)


if __name__ == "__main__":
    main()
