"""Persistent matmul (bench/kernels.py `persistent_matmul_kernel`: one program per SM looping
over tiles, as Triton's tutorial 09 writes it) on kiln and on upstream Triton, each autotuned
over tutorial 03's 16-bit configs, beside both libraries' tutorial-03 kernel and cuBLAS.

    python bench/persistent.py [--check] [--dtypes fp16,bf16] [--shapes 4096,8192,8192x8192x512] [--out DIR]

--check first compares every config of both kernels with torch on odd shapes.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from matmul import CONFIGS, DTYPES, launcher  # noqa: E402
from run import fastest, interleaved, load_kernels, settle_clocks, triton_cdiv  # noqa: E402

CONFIGS_16 = CONFIGS[:8]  # the tutorial's configs for 16-bit inputs


def persistent_launcher(lib, a, b, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = b.shape[1]
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(sms, triton_cdiv(M, bm) * triton_cdiv(N, bn)),)

    def go():
        lib.persistent_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                           c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                           NUM_SMS=sms, num_warps=warps, num_stages=stages)
    return go


def check(libs, dtypes, make=None, shapes=((1000, 776, 520), (512, 2048, 1024)), launches=1, configs=CONFIGS_16):
    """Every config of `configs` (tutorial 03's 16-bit ones by default) of the kernel `make(lib, a, b, c, cfg)`
    launches (persistent_launcher by default) against torch on `shapes`, C poisoned with NaN before each of
    `launches` launches: the failures."""
    make = make or persistent_launcher
    failures = 0
    for dtype in dtypes:
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda").to(DTYPES[dtype])
            b = torch.randn(K, N, device="cuda").to(DTYPES[dtype])
            ref = a.float() @ b.float()
            for flavour, lib in libs.items():
                for cfg in configs:
                    c = torch.empty((M, N), device="cuda", dtype=torch.float16)
                    try:
                        go = make(lib, a, b, c, cfg)
                        for _ in range(launches):
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


def run(libs, dtypes, shapes, rounds=3, launchers=None, configs=CONFIGS_16):
    """Each kernel of `launchers` ({name: launcher}; the persistent and tile kernels by default) of each
    library autotuned over `configs` (tutorial 03's 16-bit ones by default), then timed against cuBLAS in
    interleaved rounds: TFLOP/s per "<library> <kernel>"."""
    launchers = launchers or {"persistent": persistent_launcher, "tiles": launcher}
    rows = []
    for dtype in dtypes:
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda").to(DTYPES[dtype])
            b = torch.randn(K, N, device="cuda").to(DTYPES[dtype])
            c = torch.empty(M, N, device="cuda", dtype=torch.float16)
            picked = {f"{name} {kernel}": fastest(lambda cfg, lib=lib, make=make: make(lib, a, b, c, cfg), configs)
                      for name, lib in libs.items() for kernel, make in launchers.items()}
            fns = {name: launchers[name.split(" ", 1)[1]](libs[name.split()[0]], a, b, c, got[1])
                   for name, got in picked.items() if got}
            out = torch.empty(M, N, device="cuda", dtype=a.dtype)
            fns["cublas"] = lambda: torch.matmul(a, b, out=out)
            row = {"dtype": dtype, "shape": f"{M}x{N}x{K}",
                   "configs": {name: got[1] for name, got in picked.items() if got}}
            for name, ms in interleaved(fns, rounds).items():
                row[name] = 2 * M * N * K / (ms * 1e-3) / 1e12
            want = a.float() @ b.float()
            row["wrong"] = [name for name, go in fns.items() if name != "cublas" and not _equal(go, c, want)]
            print(row)
            rows.append(row)
    return rows


def _equal(go, c, want) -> bool:
    """Does launch `go`, writing `c` from NaNs, compute `want` within 16-bit inputs' rounding?"""
    c.fill_(float("nan"))
    go()
    return (c.float() - want).abs().max().item() <= 0.02 * want.abs().max().item()


def table(rows) -> str:
    names = ["kiln persistent", "triton persistent", "kiln tiles", "triton tiles", "cublas"]
    lines = ["| dtype | M x N x K | " + " | ".join(names) + " | kiln / Triton persistent | kiln persistent / cuBLAS | "
             "kiln persistent config |", "|---|---|" + "---:|" * (len(names) + 2) + "---|"]
    for r in rows:
        got = [r.get(n, 0) for n in names]
        ratio = lambda x, y: f"{x / y:.2f}" if y else "-"  # noqa: E731
        lines.append(f"| {r['dtype']} | {r['shape']} | " + " | ".join(f"{v:.0f}" for v in got) +
                     f" | {ratio(got[0], got[1])} | {ratio(got[0], got[4])} | {r['configs'].get('kiln persistent')} |")
    return "\n".join(lines)


def parse_shape(text: str):
    parts = [int(p) for p in text.split("x")]
    return tuple(parts * 3) if len(parts) == 1 else tuple(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--shapes", default="4096,8192,8192x8192x512")
    parser.add_argument("--out")
    args = parser.parse_args()
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    dtypes = args.dtypes.split(",")
    if args.check and check(libs, dtypes):
        sys.exit("some configs computed wrong results")
    settle_clocks()
    rows = run(libs, dtypes, [parse_shape(s) for s in args.shapes.split(",")])
    text = (f"## persistent matmul (tutorial 09's form) on {torch.cuda.get_device_name()} (TFLOP/s; "
            f"tiles = tutorial 03's kernel)\n\n{table(rows)}\n")
    print(text)
    if args.out:
        results_file.save_today(args.out, "persistent", rows, text)


if __name__ == "__main__":
    main()
