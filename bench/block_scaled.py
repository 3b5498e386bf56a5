"""A block-scaled fp8 GEMM (bench/kernels.py's `block_scaled_matmul_kernel`: e4m3 A and B, fp32 scales per
row and 128 columns of A and per 128 x 128 block of B, each K step's product scaled before it is summed,
the form serving engines run for block-quantized weights) at fixed configs, kiln against Triton, each
library in a fresh process with fresh caches:

    python bench/block_scaled.py [--sizes 64x7168x2048,...] [--configs 128/128/128/3/4,...] [--out DIR]

Per size and config (BM/BN/BK/stages/warps): TFLOP/s (do_bench median, best of two), whether the result
equals the dequantized inputs' float32 product within fp8's rounding, and kiln / Triton. The scales are
loaded in the K loop; kiln copies them into rings beside the tiles (smem_plan._scaling_products).
Writes DIR/<date>-<gpu>-block-scaled.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import child_rows  # noqa: E402

SIZES = ",".join(f"{m}x7168x2048" for m in (64, 256, 1024, 4096)) + ",4096x4096x7168"
CONFIGS = "64/128/128/3/4,128/128/128/3/4"

CHILD = child_rows.LIBRARY_PREAMBLE + """
rows = []
for size in sys.argv[3].split(","):
    M, N, K = map(int, size.split("x"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda", generator=gen).to(torch.float8_e4m3fn)  # a weight, N x K
    a_scale = torch.rand(M, K // 128, device="cuda", generator=gen) + 0.5
    b_scale = torch.rand(N // 128, K // 128, device="cuda", generator=gen) + 0.5
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    a_deq = a.float() * a_scale.repeat_interleave(128, dim=1)
    b_deq = b.float() * b_scale.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    want = a_deq @ b_deq.T
    for config in sys.argv[4].split(","):
        bm, bn, bk, stages, warps = map(int, config.split("/"))
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        run = lambda: lib.block_scaled_matmul_kernel[grid](
            a, b, c, a_scale, b_scale, M, N, K, a.stride(0), b.stride(0), c.stride(0), a_scale.stride(0),
            b_scale.stride(0), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SCALE_BLOCK=128, num_stages=stages,
            num_warps=warps)
        row = {"size": size, "config": config}
        rows.append(row)
        c.zero_()
        try:
            run()
        except Exception as e:
            row.update(tflops=None, close=False, error=f"{type(e).__name__}: {str(e)[:200]}")
            continue
        row["close"] = bool(torch.allclose(c.float(), want, atol=0.02 * want.abs().max().item(), rtol=0.02))
        ms = min(triton.testing.do_bench(run, warmup=50, rep=200) for _ in range(2))
        row["tflops"] = 2 * M * N * K / ms * 1e-9
print("ROWS " + json.dumps(rows))
"""


def run_library(library: str, sizes: str, configs: str, timeout: float) -> list:
    env = {k: v for k, v in os.environ.items() if k != "KILN_DROPIN"}
    return child_rows.run(CHILD, [HERE, library, sizes, configs], env, timeout, library)[0]


def _figure(tflops) -> str:
    return "failed" if tflops is None else f"{tflops:.0f}"


def table(kiln_rows: list, triton_rows: list) -> str:
    lines = ["#### block-scaled fp8 GEMM (e4m3, 128-wide scale blocks), fixed configs (BM/BN/BK/stages/warps): TFLOP/s",
             "", "| M x N x K | config | kiln | Triton | kiln / Triton | equal to the dequantized product |",
             "|---|---|---:|---:|---:|---|"]
    for ours, theirs in zip(kiln_rows, triton_rows):
        kiln, triton = ours["tflops"], theirs["tflops"]
        ratio = "" if kiln is None or triton is None else f"{kiln / triton:.2f}"
        close = "yes" if ours["close"] and (triton is None or theirs["close"]) else "NO"
        lines.append(f"| {ours['size']} | {ours['config']} | {_figure(kiln)} | {_figure(triton)} | {ratio} | {close} |")
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
        results_file.save_today(args.out, "block-scaled", results, text)


if __name__ == "__main__":
    main()
