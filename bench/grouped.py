"""Grouped GEMM through descriptors the kernel makes from addresses and sizes it reads from
memory (bench/kernels.py `grouped_matmul_kernel`, the shape of Triton's tutorial 08 TMA
kernel): kiln (which writes the TMA maps in the kernel, `tensormap_create`) against
upstream Triton on the same source, and PyTorch running the group's matmuls one by one.

    python bench/grouped.py [--check] [--sizes 1024,2048,4096] [--out DIR]

Each group is four N x N x N fp16 problems; the programs (one per SM) walk all their tiles.
Both libraries take the maps' global scratch from the same allocator (torch.empty) unless
--kiln-scratch pool.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from run import fastest, interleaved, load_kernels, settle_clocks  # noqa: E402
from tma import give_triton_an_allocator  # noqa: E402

CONFIGS = [(128, 128, 64, 3, 8), (128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (64, 128, 64, 4, 4)]  # BM, BN, BK, stages, warps
GROUP = 4


def problems(shapes):
    a = [torch.randn(m, k, device="cuda", dtype=torch.float16) for m, _, k in shapes]
    b = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _, n, k in shapes]
    c = [torch.empty(m, n, device="cuda", dtype=torch.float16) for m, n, _ in shapes]
    table = [torch.tensor([t.data_ptr() for t in ts], device="cuda", dtype=torch.int64) for ts in (a, b, c)]
    sizes = torch.tensor([v for s in shapes for v in s], device="cuda", dtype=torch.int32)
    return a, b, c, table, sizes


def launcher(lib, table, sizes, n_groups, cfg):
    bm, bn, bk, stages, warps = cfg
    grid = (torch.cuda.get_device_properties(0).multi_processor_count,)

    def go():
        lib.grouped_matmul_kernel[grid](*table, sizes, n_groups, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                        num_warps=warps, num_stages=stages)
    return go


def check(libs):
    shapes = [(1000, 776, 520), (256, 384, 136), (64, 64, 0), (777, 1024, 2048)]  # edges, an empty K
    a, b, c, table, sizes = problems(shapes)
    failures = 0
    for name, lib in libs.items():
        for cfg in CONFIGS:
            for t in c:
                t.fill_(float("nan"))
            launcher(lib, table, sizes, len(shapes), cfg)()
            torch.cuda.synchronize()
            # against the fp32 product: the fp16 result's own rounding (|C| ~ 45 at K = 2048: 0.03 a step)
            err = max(((x.float() @ y.float().T) - z.float()).abs().max().item() / max(1.0, (x.float() @ y.float().T)
                      .abs().max().item()) for x, y, z in zip(a, b, c))
            failures += not err <= 2e-3
            print(f"check {name} {cfg}: max relative error {err:.3g} {'ok' if err <= 2e-3 else 'WRONG'}")
    return failures


def run(libs, sizes, rounds=3):
    rows = []
    for s in sizes:
        shapes = [(s, s, s)] * GROUP
        a, b, c, table, sizes_t = problems(shapes)
        picked = {name: fastest(lambda cfg, lib=lib: launcher(lib, table, sizes_t, GROUP, cfg), CONFIGS)
                  for name, lib in libs.items()}
        fns = {name: launcher(libs[name], table, sizes_t, GROUP, got[1]) for name, got in picked.items() if got}
        fns["torch"] = lambda: [torch.matmul(x, y.T, out=z) for x, y, z in zip(a, b, c)]
        ms = interleaved(fns, rounds)
        flops = 2 * GROUP * s ** 3
        row = {"size": s, **{name: flops / (t * 1e-3) / 1e12 for name, t in ms.items()},
               "configs": {name: list(got[1]) for name, got in picked.items() if got}}
        rows.append(row)
        print(row, flush=True)
    return rows


def table(rows) -> str:
    lines = ["| N (4 problems N x N x N) | kiln | Triton | PyTorch (4 matmuls) | kiln / Triton | kiln config | Triton config |",
             "|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        k, t, p = (r.get(n, 0) for n in ("kiln", "triton", "torch"))
        lines.append(f"| {r['size']} | {k:.0f} | {t:.0f} | {p:.0f} | {k / t if t else 0:.2f} | "
                     f"{tuple(r['configs'].get('kiln', ()))} | {tuple(r['configs'].get('triton', ()))} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--out")
    ap.add_argument("--kiln-scratch", choices=("torch", "pool"), default="torch",
                    help="kiln's global scratch: the allocator Triton gets (torch.empty), or kiln's own (the driver's pool)")
    args = ap.parse_args()
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    give_triton_an_allocator()
    if args.kiln_scratch == "torch":
        import kiln
        kiln.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    if args.check and check(libs):
        sys.exit("grouped GEMM results differ from torch")
    settle_clocks()
    rows = run(libs, [int(s) for s in args.sizes.split(",")])
    text = f"#### grouped GEMM fp16, TFLOP/s ({torch.cuda.get_device_name()})\n\n" + table(rows)
    print(text)
    if args.out:
        results_file.save_today(args.out, "grouped", rows, text)


if __name__ == "__main__":
    main()
