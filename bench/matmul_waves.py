"""Tutorial 03's matmul at fixed configs on grids of one to a few waves: the pointer kernel
(`matmul_kernel`) and the host-descriptor one (`matmul_descriptor_kernel`), fp16, kiln against
Triton, each library in a fresh process with fresh caches. Where a kernel's grid barely fills the
GPU, how many CTAs share an SM (shared memory per CTA) decides more than the kernel's code; where
M is under the tile (decode-sized M), how a library reads the rows past M does (kiln: TMA boxes
that reach past the tensor; Triton: cp.async of tutorial 03's wrapped rows, `% M`).

    python bench/matmul_waves.py [--sizes 64x8192x8192,...] [--configs 128/64/64/4/4,...] [--out DIR]

Per size, config and kernel: TFLOP/s (do_bench median, best of two), whether the result equals a
float32 torch matmul within fp16 rounding, and kiln / Triton. kiln runs with split-K off
(KILN_SPLIT_K=0): this compares the tile kernels as written; bench/autotune_first_call.py covers
split-K. Writes DIR/<date>-<gpu>-matmul-waves.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import child_rows  # noqa: E402

SIZES = ",".join([f"{m}x8192x8192" for m in (16, 32, 64, 192, 256, 512, 1024)] + ["4096x4096x4096", "8192x8192x8192"])
CONFIGS = "128/64/64/4/4,64/128/64/4/4,128/32/64/4/4"

CHILD = child_rows.LIBRARY_PREAMBLE + """
import importlib
TensorDescriptor = importlib.import_module(triton.__name__ + ".tools.tensor_descriptor").TensorDescriptor
rows = []
for size in sys.argv[3].split(","):
    M, N, K = map(int, size.split("x"))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    want = a.float() @ b.float()
    for config in sys.argv[4].split(","):
        bm, bn, bk, stages, warps = map(int, config.split("/"))
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_stages=stages, num_warps=warps)
        descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
                 TensorDescriptor.from_tensor(c, [bm, bn]))
        kernels = {
            "pointer": lambda: lib.matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                       b.stride(1), c.stride(0), c.stride(1), **meta),
            "descriptor": lambda: lib.matmul_descriptor_kernel[grid](*descs, M, N, K, **meta),
        }
        for kind, run in kernels.items():
            c.zero_()
            run()
            close = bool(torch.allclose(c.float(), want, atol=0.05 * K ** 0.5 / 8, rtol=0.01))
            ms = min(triton.testing.do_bench(run, warmup=50, rep=200) for _ in range(2))
            rows.append({"size": size, "config": config, "kernel": kind, "tflops": 2 * M * N * K / ms * 1e-9,
                         "close": close})
print("ROWS " + json.dumps(rows))
"""


def run_library(library: str, sizes: str, configs: str, timeout: float) -> list:
    env = {k: v for k, v in os.environ.items() if k != "KILN_DROPIN"}
    env["KILN_SPLIT_K"] = "0"
    return child_rows.run(CHILD, [HERE, library, sizes, configs], env, timeout, library)[0]


def table(kiln_rows: list, triton_rows: list) -> str:
    lines = ["#### tutorial 03's matmul, fp16, fixed configs (BM/BN/BK/stages/warps): TFLOP/s", "",
             "| M x N x K | config | kernel | kiln | Triton | kiln / Triton | equal to torch |",
             "|---|---|---|---:|---:|---:|---|"]
    for ours, theirs in zip(kiln_rows, triton_rows):
        close = "yes" if ours["close"] and theirs["close"] else "NO"
        lines.append(f"| {ours['size']} | {ours['config']} | {ours['kernel']} | {ours['tflops']:.0f} | "
                     f"{theirs['tflops']:.0f} | {ours['tflops'] / theirs['tflops']:.2f} | {close} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--timeout", type=float, default=280)
    ap.add_argument("--out")
    args = ap.parse_args()
    results = {lib: run_library(lib, args.sizes, args.configs, args.timeout) for lib in ("kiln", "triton")}
    text = table(results["kiln"], results["triton"])
    print(text)
    if args.out:
        import results_file
        results_file.save_today(args.out, "matmul-waves", results, text)


if __name__ == "__main__":
    main()
