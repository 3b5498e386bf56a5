"""Registers against bandwidth: layer norm (bench/kernels.py) with and without a register cap.

    python bench/occupancy_probe.py

For each row width: kiln as compiled, kiln with `maxnreg` caps, and Triton, each with its
register count (the driver's) and GB/s (do_bench median), in one run on one GPU. It tells
whether a kernel is held back by registers limiting the CTAs resident on an SM.
"""
from __future__ import annotations

import torch

from run import bench, gbps, load_kernels, next_pow2

ROWS = 4096


def main():
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    print(f"{'N':>6} {'variant':>14} {'regs':>5} {'GB/s':>7}")
    for n in (1024, 2048, 4096):
        x = torch.randn(ROWS, n, device="cuda", dtype=torch.float16)
        w, b = torch.rand(n, device="cuda", dtype=torch.float16), torch.rand(n, device="cuda", dtype=torch.float16)
        y, mean, rstd = torch.empty_like(x), torch.empty(ROWS, device="cuda"), torch.empty(ROWS, device="cuda")
        block = next_pow2(n)
        warps = min(max(block // 256, 1), 8)
        variants = [("kiln", "kiln", {}), ("kiln maxnreg40", "kiln", {"maxnreg": 40}),
                    ("kiln maxnreg32", "kiln", {"maxnreg": 32}), ("triton", "triton", {})]
        for label, lib, extra in variants:
            kernel = libs[lib].layer_norm_kernel

            def go():
                return kernel[(ROWS,)](x, y, w, b, mean, rstd, x.stride(0), n, 1e-5, BLOCK=block, num_warps=warps,
                                       **extra)
            compiled = go()
            ref = torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)
            torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)
            print(f"{n:>6} {label:>14} {compiled.n_regs:>5} {gbps(4 * x.numel(), bench(go)):>7.0f}")


if __name__ == "__main__":
    main()
