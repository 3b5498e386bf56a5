"""Tutorial 03's matmul at fixed configs on grids of one to a few waves: the pointer kernel
(`matmul_kernel`) and the host-descriptor one (`matmul_descriptor_kernel`), fp16 (or bf16, or tf32:
fp32 inputs with B K-major as `x @ W.T`, pointer kernel only; or fp8: e4m3 inputs so, fp16 out, against
cuBLAS's `torch._scaled_mm`), kiln against Triton and cuBLAS, each
library in a fresh process with fresh caches. Where a kernel's grid barely fills the
GPU, how many CTAs share an SM (shared memory per CTA) decides more than the kernel's code; where
M is under the tile (decode-sized M), how a library reads the rows past M does (kiln: TMA boxes
that reach past the tensor; Triton: cp.async of tutorial 03's wrapped rows, `% M`).

    python bench/matmul_waves.py [--sizes 64x8192x8192,...] [--configs 128/64/64/4/4,...] [--dtype tf32]
                                 [--b-major n] [--out DIR]

Per size, config and kernel: TFLOP/s (do_bench median, best of two), whether the result equals a
float32 torch matmul within the inputs' rounding, kiln / Triton and kiln / cuBLAS (torch.matmul,
TF32 allowed for tf32). kiln runs with split-K off
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
dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "fp8": torch.float8_e4m3fn}[sys.argv[5]]
# wgmma reads 32- and 8-bit B K-major only: a weight's transpose, as bench/matmul.py's, unless asked N-major
k_major_b = dtype in (torch.float32, torch.float8_e4m3fn) and sys.argv[6] != "n"
out_dtype = torch.float16 if dtype == torch.float8_e4m3fn else dtype
torch.backends.cuda.matmul.allow_tf32 = sys.argv[5] == "tf32"  # cuBLAS's tf32 against tl.dot's default
rows = []
for size in sys.argv[3].split(","):
    M, N, K = map(int, size.split("x"))
    a = torch.randn(M, K, device="cuda").to(dtype)
    b = torch.randn(N, K, device="cuda").to(dtype).T if k_major_b else torch.randn(K, N, device="cuda").to(dtype)
    c = torch.empty(M, N, device="cuda", dtype=out_dtype)
    want = a.float() @ b.float()
    one = torch.ones((), device="cuda")
    if out_dtype != dtype:  # fp8: cuBLAS's _scaled_mm, which takes B column-major only
        b_cols = b if b.stride(0) == 1 else b.T.contiguous().T
        cublas = lambda: torch._scaled_mm(a, b_cols, one, one, out_dtype=out_dtype)
    else:
        cublas = lambda: torch.matmul(a, b)
    cublas_ms = min(triton.testing.do_bench(cublas, warmup=50, rep=200) for _ in range(2))
    for config in sys.argv[4].split(","):
        bm, bn, bk, stages, warps = map(int, config.split("/"))
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_stages=stages, num_warps=warps)
        descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
                 TensorDescriptor.from_tensor(c, [bm, bn])) if b.stride(1) == 1 else None
        kernels = {
            "pointer": lambda: lib.matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                       b.stride(1), c.stride(0), c.stride(1), **meta),
        }
        if b.stride(1) == 1:  # a descriptor's last dim is contiguous
            kernels["descriptor"] = lambda: lib.matmul_descriptor_kernel[grid](*descs, M, N, K, **meta)
        for kind, run in kernels.items():
            row = {"size": size, "config": config, "kernel": kind, "cublas_tflops": 2 * M * N * K / cublas_ms * 1e-9}
            rows.append(row)
            c.zero_()
            try:
                run()
            except Exception as e:  # a config past a library's shared memory (fp32 tiles are twice fp16's)
                row.update(tflops=None, close=False, error=f"{type(e).__name__}: {str(e)[:200]}")
                continue
            row["close"] = bool(torch.allclose(c.float(), want, atol=0.05 * K ** 0.5 / 8, rtol=0.01))
            ms = min(triton.testing.do_bench(run, warmup=50, rep=200) for _ in range(2))
            row["tflops"] = 2 * M * N * K / ms * 1e-9
print("ROWS " + json.dumps(rows))
"""


def run_library(library: str, sizes: str, configs: str, dtype: str, timeout: float, b_major: str = "auto") -> list:
    env = {k: v for k, v in os.environ.items() if k != "KILN_DROPIN"}
    env["KILN_SPLIT_K"] = "0"
    return child_rows.run(CHILD, [HERE, library, sizes, configs, dtype, b_major], env, timeout, library)[0]


def _figure(tflops) -> str:
    return "failed" if tflops is None else f"{tflops:.0f}"


def _ratio(ours, theirs) -> str:
    return "" if ours is None or theirs is None else f"{ours / theirs:.2f}"


def table(kiln_rows: list, triton_rows: list, dtype: str) -> str:
    lines = [f"#### tutorial 03's matmul, {dtype}, fixed configs (BM/BN/BK/stages/warps): TFLOP/s", "",
             "| M x N x K | config | kernel | kiln | Triton | cuBLAS | kiln / Triton | kiln / cuBLAS | equal to torch |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for ours, theirs in zip(kiln_rows, triton_rows or [None] * len(kiln_rows)):  # None: Triton not run
        # a library that could not run the config (Triton past its shared memory) has no say
        close = "yes" if ours["close"] and (theirs is None or theirs["tflops"] is None or theirs["close"]) else "NO"
        cublas = ours["cublas_tflops"]  # measured in kiln's process, beside its kernels
        kiln, triton = ours["tflops"], theirs and theirs["tflops"]
        lines.append(f"| {ours['size']} | {ours['config']} | {ours['kernel']} | {_figure(kiln)} | "
                     f"{'not run' if theirs is None else _figure(triton)} | {cublas:.0f} | {_ratio(kiln, triton)} | "
                     f"{_ratio(kiln, cublas)} | {close} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16", "tf32", "fp8"))
    ap.add_argument("--libs", default="kiln,triton", choices=("kiln,triton", "kiln"))
    ap.add_argument("--b-major", default="auto", choices=("auto", "n"),
                    help="n: B row-major [K, N] for tf32 and fp8 too (x @ W), where auto gives them K-major B")
    ap.add_argument("--timeout", type=float, default=280)
    ap.add_argument("--out")
    args = ap.parse_args()
    results = {lib: run_library(lib, args.sizes, args.configs, args.dtype, args.timeout, args.b_major)
               for lib in args.libs.split(",")}
    what = args.dtype + (", B N-major" if args.b_major == "n" else "")
    text = table(results["kiln"], results.get("triton"), what)
    print(text)
    if args.out:
        import results_file
        name = "matmul-waves" + ("" if args.dtype == "fp16" else f"-{args.dtype}") + ("-b-n-major" if args.b_major == "n" else "")
        results_file.save_today(args.out, name, results, text)


if __name__ == "__main__":
    main()
