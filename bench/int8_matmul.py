"""int8 matmul into int32 (W8A8, `torch._int_mm`'s work) at the shapes of decoding and small batches:
tutorial 03's matmul on int8 inputs (bench/kernels.py `int8_matmul_kernel`), kiln with and without
its split-K build (`KILN_SPLIT_K=0`) and upstream Triton, each autotuned over CONFIGS, against
cuBLAS through `torch._int_mm`. B is K-major ([N, K] stored, seen transposed), as wgmma reads 8-bit
tiles and as `torch._int_mm` takes it.

    python bench/int8_matmul.py [--sizes 128x4096x4096,...] [--libs kiln,kiln-unsplit,triton] [--out DIR]

Every library's fastest config is first checked against a CPU int64 product (exact, or the row
says so), then the fastest configs are timed in interleaved rounds. Prints a markdown table;
DIR/<date>-<gpu>-int8-matmul.json with --out.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from run import fastest, interleaved, load_kernels  # noqa: E402
from warp_specialize import launcher  # noqa: E402  (tutorial 03's launch of a kernel, a config)

# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps): tutorial 03's 8-bit configs
CONFIGS = [(128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (256, 64, 128, 4, 4), (64, 256, 128, 4, 4),
           (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4)]
SIZES = "128x4096x4096,64x8192x8192,128x8192x8192,256x4096x14336,4096x4096x4096"


def libraries(names):
    """{name: the kernel}; kiln-unsplit is kiln's kernel launched with KILN_SPLIT_K=0 (read when
    a kernel is first launched on a device, so set around its autotuning)."""
    libs = {}
    for name in names:
        libs[name] = load_kernels("triton" if name == "triton" else "kiln").int8_matmul_kernel
    return libs


def unsplit(name, fn):
    """`fn` run with KILN_SPLIT_K=0 where `name` asks for it."""
    def run(*args):
        if name != "kiln-unsplit":
            return fn(*args)
        os.environ["KILN_SPLIT_K"] = "0"
        try:
            return fn(*args)
        finally:
            os.environ.pop("KILN_SPLIT_K")
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--libs", default="kiln,kiln-unsplit,triton")
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = libraries(args.libs.split(","))
    rows = []
    for size in args.sizes.split(","):
        M, N, K = (int(x) for x in size.split("x"))
        a = torch.randint(-128, 128, (M, K), dtype=torch.int8, device="cuda")
        b = torch.randint(-128, 128, (N, K), dtype=torch.int8, device="cuda").T
        want = (a.cpu().long() @ b.cpu().long()).int()  # |sums| < 2**31 at these K: no wrap
        c = torch.empty(M, N, device="cuda", dtype=torch.int32)
        picked = {name: unsplit(name, fastest)(lambda cfg, k=kernel: launcher(k, a, b, c, cfg), CONFIGS)
                  for name, kernel in libs.items()}
        fns, exact = {}, {}
        for name, got in picked.items():
            if got:
                go = launcher(libs[name], a, b, c, got[1])
                c.zero_()
                unsplit(name, go)()
                exact[name] = bool(torch.equal(c.cpu(), want))
                fns[name] = go  # the kernel is loaded: its build stays chosen without the setting
        fns["cuBLAS"] = lambda: torch._int_mm(a, b)
        ms = interleaved(fns)
        tops = {name: 2 * M * N * K / t / 1e9 for name, t in ms.items()}
        rows.append({"size": size, "tops": tops, "exact": exact,
                     "configs": {n: list(got[1]) for n, got in picked.items() if got}})
        print(size, {n: round(t) for n, t in tops.items()}, "exact:", exact, flush=True)
    names = [*libs, "cuBLAS"]
    lines = ["| size | " + " | ".join(f"{n} TOPS" for n in names) + " | kiln / kiln-unsplit | kiln / cuBLAS | "
             "kiln / Triton | kiln config | exact |", "|---|" + "---:|" * (len(names) + 3) + "---|---|"]
    for r in rows:
        t = r["tops"]
        ratio = lambda x, y: f"{t[x] / t[y]:.2f}" if x in t and y in t else "-"
        lines.append(f"| {r['size']} | " + " | ".join(f"{t[n]:.0f}" if n in t else "-" for n in names) +
                     f" | {ratio('kiln', 'kiln-unsplit')} | {ratio('kiln', 'cuBLAS')} | {ratio('kiln', 'triton')} | "
                     f"{tuple(r['configs'].get('kiln', ()))} | {all(r['exact'].values())} |")
    print("\n".join(lines))
    if args.out:
        results_file.save_today(args.out, "int8-matmul", {"rows": rows}, "\n".join(lines))
    return 0 if all(all(r["exact"].values()) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
