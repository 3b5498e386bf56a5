"""Registers against bandwidth: kiln's occupancy register cap (kiln.codegen.occupancy) on and off.

    python bench/occupancy_probe.py [--rounds 3]

For layer norm and softmax (bench/kernels.py, the sizes of bench/run.py): kiln as compiled
(capped where the cap raises CTAs per SM), kiln with the cap turned off (`maxnreg=255`),
and Triton, each with its register count (the driver's) and the median GB/s over rounds
in which the variants take turns, so that drift in the machine falls on all of them alike.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from run import bench, gbps, load_kernels, next_pow2

ROWS = 4096
VARIANTS = [("kiln", "kiln", {}), ("kiln uncapped", "kiln", {"maxnreg": 255}), ("triton", "triton", {})]


def layer_norm_cases(libs):
    for n in (1024, 2048, 4096, 8192):
        x = torch.randn(ROWS, n, device="cuda", dtype=torch.float16)
        w, b = torch.rand(n, device="cuda", dtype=torch.float16), torch.rand(n, device="cuda", dtype=torch.float16)
        y, mean, rstd = torch.empty_like(x), torch.empty(ROWS, device="cuda"), torch.empty(ROWS, device="cuda")
        block = min(65536 // 2, next_pow2(n))
        warps = min(max(block // 256, 1), 8)

        def make(lib, extra, x=x, w=w, b=b, y=y, mean=mean, rstd=rstd, n=n, block=block, warps=warps):
            kernel = libs[lib].layer_norm_kernel
            return lambda: kernel[(ROWS,)](x, y, w, b, mean, rstd, x.stride(0), n, 1e-5, BLOCK=block,
                                           num_warps=warps, **extra)

        def check(y=y, x=x, n=n, w=w, b=b):
            torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), rtol=1e-2, atol=1e-2)
        yield f"layer norm {n}", 4 * x.numel(), make, check


def softmax_cases(libs):
    for n in (1024, 2048, 4096, 8192, 16384):
        x = torch.randn(ROWS, n, device="cuda")
        out = torch.empty_like(x)
        block = next_pow2(n)
        warps = 4 if block <= 1024 else 8 if block <= 4096 else 16

        def make(lib, extra, x=x, out=out, n=n, block=block, warps=warps):
            kernel = libs[lib].softmax_kernel
            return lambda: kernel[(ROWS,)](out, x, x.stride(0), out.stride(0), n, BLOCK=block, num_warps=warps,
                                           **extra)

        def check(out=out, x=x):
            torch.testing.assert_close(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
        yield f"softmax {n}", 8 * x.numel(), make, check


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    print(f"{'case':>18} {'variant':>14} {'regs':>5} {'GB/s':>7} {'/ triton':>9}")
    for cases in (layer_norm_cases(libs), softmax_cases(libs)):
        for label, nbytes, make, check in cases:
            launches, regs, speeds = {}, {}, {}
            for name, lib, extra in VARIANTS:
                launches[name] = make(lib, extra)
                regs[name] = launches[name]().n_regs
                check()
                speeds[name] = []
            for _ in range(args.rounds):
                for name, go in launches.items():
                    speeds[name].append(gbps(nbytes, bench(go)))
            triton = statistics.median(speeds["triton"])
            for name in launches:
                speed = statistics.median(speeds[name])
                print(f"{label:>18} {name:>14} {regs[name]:>5} {speed:>7.0f} {speed / triton:>9.3f}")


if __name__ == "__main__":
    main()
