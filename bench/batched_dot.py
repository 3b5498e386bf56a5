"""A batched tl.dot (3-D: BT batches a program, bench/kernels.py's `batched_dot_kernel`) at fixed configs,
kiln against Triton on the same source and torch.bmm (cuBLAS); fp16 in, fp32 sums, fp16 out.

    python bench/batched_dot.py [--shapes 1024x64x64x512,...] [--configs 2/64/64/32/4,...] [--libs kiln,triton]

Shapes are batches x M x N x K; configs BT/BM/BN/BK/warps[/stages] (3 stages unless given). Figures go to
bench/results/.
"""
from __future__ import annotations

import torch

from run import bench, fixed_config_args, tflops_cell

SHAPES = "1024x64x64x512,4096x32x32x256,256x128x128x1024"
CONFIGS = "2/64/64/32/4,4/32/32/32/4,8/16/32/32/4,1/64/64/32/4"


def main():
    args, libs = fixed_config_args(SHAPES, CONFIGS)
    print("| batches x M x N x K | config | " + " | ".join(f"{n} TFLOP/s" for n in libs)
          + " | torch.bmm TFLOP/s | equal to bmm |")
    print("|---|---|" + "---:|" * (len(libs) + 1) + "---|")
    for shape in args.shapes.split(","):
        z, m, n, k = map(int, shape.split("x"))
        a = torch.randn(z, m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(z, k, n, device="cuda", dtype=torch.float16)
        want = torch.bmm(a, b)
        flops = 2 * z * m * n * k
        bmm = flops / bench(lambda: torch.bmm(a, b)) * 1e-9
        for config in args.configs.split(","):
            bt, bm, bn, bk, warps, stages = (list(map(int, config.split("/"))) + [3])[:6]
            if z % bt or m % bm or n % bn or k % bk:
                continue
            cells, equal = [], []
            for lib in libs.values():
                c = torch.empty(z, m, n, device="cuda", dtype=torch.float16)
                run = lambda: lib.batched_dot_kernel[(z // bt, m // bm, n // bn)](
                    a, b, c, m, n, k, BT=bt, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages)
                cell, ok = tflops_cell(run, flops,
                                       lambda: torch.allclose(c.float(), want.float(), atol=2e-2, rtol=2e-2))
                cells.append(cell)
                equal += [] if ok is None else [ok]
            print(f"| {shape} | {config} | " + " | ".join(cells) + f" | {bmm:.0f} | {all(equal)} |", flush=True)


if __name__ == "__main__":
    main()
