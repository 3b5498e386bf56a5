"""Sustained matmul throughput beside the SM clock and board power it ran at.

Under a long matmul the H200 sits at its power cap, so each kernel runs at the clock its
energy per cycle allows: a kernel can lose to another by doing less per cycle or by drawing
more power per cycle. This runs each kernel back to back for a few seconds while
nvidia-smi samples clock and power, and reports TFLOP/s, MHz, W and TFLOP/s per GHz
(work per cycle, clock factored out), for tutorial 03's kernel (pointers), the same through
host TensorDescriptors (TMA), tutorial 09's persistent form, each on kiln and Triton, and cuBLAS.

    python bench/power.py [--dtypes bf16,fp16] [--size 4096] [--config 128,256,64,3,8] [--seconds 2] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from matmul import DTYPES, launcher  # noqa: E402
from persistent import persistent_launcher  # noqa: E402
from run import load_kernels  # noqa: E402
from tma import descriptor_launcher  # noqa: E402


def sampled(fn, seconds: float):
    """(ms per call, mean SM MHz, mean W) of `fn` run back to back for `seconds`; the first
    third of the samples (clocks still settling) is dropped."""
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls, t0 = 0, time.time()
        start.record()
        while time.time() - t0 < seconds:
            for _ in range(50):
                fn()
            calls += 50
            torch.cuda.synchronize()
        end.record()
        torch.cuda.synchronize()
    finally:
        smi.terminate()
    samples = [[float(x) for x in line.split(",")] for line in smi.stdout.read().splitlines() if line.count(",") == 1]
    samples = samples[len(samples) // 3:] or [[0.0, 0.0]]
    mhz = sum(s[0] for s in samples) / len(samples)
    watts = sum(s[1] for s in samples) / len(samples)
    return start.elapsed_time(end) / calls, mhz, watts


def kernels(libs, a, b, c, cfg):
    fns = {}
    for flavour, lib in libs.items():
        fns[f"{flavour} pointers"] = launcher(lib, a, b, c, cfg)
        fns[f"{flavour} TMA"] = descriptor_launcher(lib, flavour, a, b, c, cfg)
        fns[f"{flavour} persistent"] = persistent_launcher(lib, a, b, c, cfg)
    out = torch.empty_like(a)
    fns["cuBLAS"] = lambda: torch.matmul(a, b, out=out)
    return fns


def run(libs, dtypes, size, cfg, seconds, rounds=2):
    rows = []
    for dtype in dtypes:
        a = torch.randn(size, size, device="cuda").to(DTYPES[dtype])
        b = torch.randn(size, size, device="cuda").to(DTYPES[dtype])
        c = torch.empty(size, size, device="cuda", dtype=torch.float16)
        fns = kernels(libs, a, b, c, cfg)
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        got = {name: [] for name in fns}
        for _ in range(rounds):  # kernels take turns, so heat and clocks drift over all of them alike
            for name, fn in fns.items():
                got[name].append(sampled(fn, seconds))
                time.sleep(1.0)
        for name, runs in got.items():
            ms, mhz, watts = (sorted(x[i] for x in runs)[len(runs) // 2] for i in range(3))
            tflops = 2 * size ** 3 / (ms * 1e-3) / 1e12
            rows.append({"dtype": dtype, "kernel": name, "tflops": tflops, "mhz": mhz, "watts": watts,
                         "tflops_per_ghz": tflops / mhz * 1e3 if mhz else 0.0})
            print(rows[-1], flush=True)
    return rows


def table(rows, size, cfg) -> str:
    lines = [f"## sustained matmul {size}³ at the power cap on {torch.cuda.get_device_name()} (config {cfg})", "",
             "| dtype | kernel | TFLOP/s | SM MHz | W | TFLOP/s per GHz |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['kernel']} | {r['tflops']:.0f} | {r['mhz']:.0f} | {r['watts']:.0f} | "
                     f"{r['tflops_per_ghz']:.0f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--config", default="128,256,64,3,8", help="BLOCK_M,BLOCK_N,BLOCK_K,stages,warps")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--out")
    args = parser.parse_args()
    cfg = tuple(int(x) for x in args.config.split(","))
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    rows = run(libs, args.dtypes.split(","), args.size, cfg, args.seconds)
    text = table(rows, args.size, cfg)
    print(text)
    if args.out:
        results_file.save_today(args.out, "power", rows, text)


if __name__ == "__main__":
    main()
