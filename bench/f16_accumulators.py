"""`tl.dot(..., out_dtype=tl.float16)`: a matmul summed in fp16 accumulators, on kiln and on upstream
Triton, same source (bench/kernels.py `f16_acc_matmul_kernel`, C = A @ B^T, fp16 or e4m3 inputs)
and inputs. Both put the sum in the tensor cores' fp16 accumulators (wgmma `.f16`), rounded after
every instruction; this prints whether kiln's result equals Triton's bit for bit, each one's error
against the exact sum, and their speed (TFLOP/s, the same configs tried for each, the fastest kept).

    python bench/f16_accumulators.py [--size 4096] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from run import fastest, interleaved, load_kernels  # noqa: E402

# (BLOCK_M, BLOCK_N, num_warps); BLOCK_K 64 for fp16, 128 for fp8; 3 stages
CONFIGS = [(128, 128, 8), (128, 256, 8), (128, 128, 4), (64, 128, 4)]


def launcher(lib, a, b, c, cfg):
    bm, bn, warps = cfg
    M, K = a.shape
    N = b.shape[0]
    bk = 128 if a.element_size() == 1 else 64

    def go():
        lib.f16_acc_matmul_kernel[(M // bm, N // bn)](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                      num_warps=warps, num_stages=3)
    return go


def run(libs, size, dtype):
    gen = torch.Generator().manual_seed(7)
    scale = 0.5 if dtype == torch.float16 else 1.0  # sums of `size` products stay inside fp16's range
    a = (torch.randn(size, size, generator=gen) * scale).to(dtype)
    b = (torch.randn(size, size, generator=gen) * scale).to(dtype)
    exact = a.double() @ b.double().T
    peak = exact.abs().max().item()
    ad, bd = a.cuda(), b.cuda()
    row = {"dtype": str(dtype).replace("torch.", ""), "size": size}
    outs, timed = {}, {}
    for name, lib in libs.items():
        best = fastest(lambda cfg: launcher(lib, ad, bd, torch.empty(size, size, dtype=torch.float16, device="cuda"),
                                            cfg), CONFIGS)
        c = torch.zeros(size, size, dtype=torch.float16, device="cuda")
        launcher(lib, ad, bd, c, best[1])()
        outs[name] = c.cpu()
        err = (outs[name].double() - exact).abs() / peak
        row[name] = {"config": list(best[1]), "max_error": err.max().item(), "mean_error": err.mean().item()}
        timed[name] = launcher(lib, ad, bd, torch.empty(size, size, dtype=torch.float16, device="cuda"), best[1])
    once = (a.float() @ b.float().T).half()  # summed in fp32, rounded once: what fp16 accumulators are not
    row["fp32_once_max_error"] = ((once.double() - exact).abs() / peak).max().item()
    ms = interleaved(timed)
    for name in libs:
        row[name]["tflops"] = 2 * size ** 3 / ms[name] * 1e-9
    row["bitwise_equal"] = bool(torch.equal(outs["kiln"], outs["triton"]))
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--out")
    args = parser.parse_args()
    libs = {flavour: load_kernels(flavour) for flavour in ("kiln", "triton")}
    rows = [run(libs, args.size, dtype) for dtype in (torch.float16, torch.float8_e4m3fn)]
    gpu = torch.cuda.get_device_name()
    lines = [f"## matmul summed in fp16 accumulators (out_dtype=float16), {gpu}, {datetime.date.today().isoformat()}",
             "", f"M = N = K = {args.size}, randn inputs, C = A @ B^T in fp16; error relative to max |C|", "",
             "| inputs | kiln TFLOP/s | Triton TFLOP/s | kiln / Triton | kiln == Triton | kiln max error | "
             "Triton max error | fp32 summed, rounded once | configs kiln / Triton |",
             "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        k, t = r["kiln"], r["triton"]
        lines.append(f"| {r['dtype']} | {k['tflops']:.0f} | {t['tflops']:.0f} | {k['tflops'] / t['tflops']:.2f} | "
                     f"{r['bitwise_equal']} | {k['max_error']:.2e} | {t['max_error']:.2e} | "
                     f"{r['fp32_once_max_error']:.2e} | {k['config']} / {t['config']} |")
    results_file.report(args.out, "f16-accumulators", lines, rows)


if __name__ == "__main__":
    main()
