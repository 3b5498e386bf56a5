"""Dots whose operands are not plain fp16: fp32 at each of Triton's NVIDIA input precisions (tf32,
the split tf32x3 / bf16x3 / bf16x6, ieee), fp8 with each operand in its own format (e4m3 x e5m2
beside e4m3 x e4m3) and an fp16 A the loop computes from its load, on kiln and on upstream Triton,
same source (bench/kernels.py `precision_matmul_kernel`, `fp8_matmul_kernel`,
`scaled_a_matmul_kernel`, `mx_weight_matmul_kernel`: bf16 activations times mxfp4 or mxfp8 weights
through tl.dot_scaled) and inputs. Prints each one's speed (TFLOP/s, the
same configs tried for each, the fastest kept), its error against the exact sum and whether kiln's
result equals Triton's bit for bit.

    python bench/dot_formats.py [--size 4096] [--only fp32,fp8,computed_a,mxfp4,mxfp8] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime
import functools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from run import fastest, interleaved, load_kernels  # noqa: E402

PRECISIONS = ["tf32", "tf32x3", "bf16x3", "bf16x6", "ieee"]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps), 3 stages; BLOCK_K counts elements (fp32: 32, fp8: 128)
FP32_CONFIGS = [(128, 128, 32, 8), (128, 128, 32, 4), (128, 256, 32, 8), (64, 128, 32, 4)]
FP8_CONFIGS = [(128, 128, 128, 8), (128, 256, 128, 8), (128, 128, 128, 4), (64, 128, 128, 4)]
FP16_CONFIGS = [(128, 128, 64, 8), (128, 256, 64, 8), (128, 128, 64, 4), (64, 128, 64, 4)]


def fp32_launcher(lib, a, b, c, precision, cfg):
    bm, bn, bk, warps = cfg
    M, K = a.shape
    N = b.shape[1]

    def go():
        lib.precision_matmul_kernel[(M // bm, N // bn)](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                        PRECISION=precision, num_warps=warps, num_stages=3)
    return go


def fp8_launcher(lib, a, b, c, cfg):
    bm, bn, bk, warps = cfg
    M, K = a.shape
    N = b.shape[0]

    def go():
        lib.fp8_matmul_kernel[(M // bm, N // bn)](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IMPRECISE=0,
                                                  num_warps=warps, num_stages=3)
    return go


def compare(libs, make, exact, configs, flops):
    """Each library's fastest config, its error relative to max |exact| and its TFLOP/s (timed in
    turns), and whether the two results are equal bit for bit. `make(lib, c, cfg)` is a launch."""
    peak = exact.abs().max().item()
    row, outs, timed = {}, {}, {}
    for name, lib in libs.items():
        best = fastest(lambda cfg: make(lib, torch.empty(exact.shape, device="cuda"), cfg), configs)
        c = torch.zeros(exact.shape, device="cuda")
        make(lib, c, best[1])()
        outs[name] = c.cpu()
        err = (outs[name].double() - exact).abs() / peak
        row[name] = {"config": list(best[1]), "max_error": err.max().item(), "mean_error": err.mean().item()}
        timed[name] = make(lib, torch.empty(exact.shape, device="cuda"), best[1])
    ms = interleaved(timed)
    for name in libs:
        row[name]["tflops"] = flops / ms[name] * 1e-9
    row["bitwise_equal"] = bool(torch.equal(outs["kiln"], outs["triton"]))
    return row


def fp32_rows(libs, size):
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(size, size, generator=gen)
    b = torch.randn(size, size, generator=gen)
    exact = a.double() @ b.double()
    ad, bd = a.cuda(), b.cuda()
    rows = []
    for precision in PRECISIONS:
        row = compare(libs, lambda lib, c, cfg: fp32_launcher(lib, ad, bd, c, precision, cfg), exact, FP32_CONFIGS,
                      2 * size ** 3)
        rows.append({"operands": f"fp32 {precision}", **row})
    return rows


def fp8_rows(libs, size):
    gen = torch.Generator().manual_seed(13)
    a = torch.randn(size, size, generator=gen).to(torch.float8_e4m3fn)
    ad = a.cuda()
    rows = []
    for b_type in (torch.float8_e4m3fn, torch.float8_e5m2):
        b = torch.randn(size, size, generator=gen).to(b_type)
        exact = a.double() @ b.double().T
        bd = b.cuda()
        row = compare(libs, lambda lib, c, cfg: fp8_launcher(lib, ad, bd, c, cfg), exact, FP8_CONFIGS, 2 * size ** 3)
        rows.append({"operands": f"e4m3 x {'e4m3' if b_type == torch.float8_e4m3fn else 'e5m2'}", **row})
    # B [K, N] row-major: wgmma reads 8-bit tiles K-major only, so B is transposed on its way to shared memory
    b = torch.randn(size, size, generator=gen).to(torch.float8_e4m3fn)
    exact = a.double() @ b.double()
    bd = b.cuda()
    row = compare(libs, lambda lib, c, cfg: fp32_launcher(lib, ad, bd, c, None, cfg), exact, FP8_CONFIGS, 2 * size ** 3)
    rows.append({"operands": "e4m3 x e4m3, B N-major", **row})
    return rows


def computed_a_rows(libs, size):
    """A computed in the loop from its load ((A * 0.5) in fp16, A fp32 or fp16), B fp16 [K, N]."""
    gen = torch.Generator().manual_seed(17)
    b = torch.randn(size, size, generator=gen).half()
    bd = b.cuda()
    rows = []
    for a_type in (torch.float32, torch.float16):
        a = torch.randn(size, size, generator=gen).to(a_type)
        exact = (a.double() * 0.5).half().double() @ b.double()
        ad = a.cuda()

        def make(lib, c, cfg):
            bm, bn, bk, warps = cfg

            def go():
                lib.scaled_a_matmul_kernel[(size // bm, size // bn)](ad, bd, c, size, size, size, SCALE=0.5,
                                                                      BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                                      num_warps=warps, num_stages=3)
            return go
        row = compare(libs, make, exact, FP16_CONFIGS, 2 * size ** 3)
        rows.append({"operands": f"(A {str(a_type).replace('torch.', '')} * 0.5) fp16 x fp16", **row})
    return rows


MX_CONFIGS = [(128, 128, 128, 8), (128, 256, 128, 8), (128, 128, 128, 4), (64, 128, 128, 4)]
MX_NAMES = {"e2m1": "mxfp4", "e4m3": "mxfp8"}


def mx_weights(n, k, fmt="e2m1"):
    """(the weights' bytes: e2m1 codes packed two a byte along K [n, k/2] or e4m3 ones [n, k]; e8m0 scales
    [n, k/32]; the weights' values [n, k]), from torch's generator (kiln.tools.mxfp, Triton's triton.tools.mxfp)."""
    from kiln.tools.mxfp import MXFP4Tensor, MXScaleTensor
    scales = MXScaleTensor(size=(n, k // 32)).random(2.0 ** -7, 2.0 ** 7)
    if fmt == "e2m1":
        codes = MXFP4Tensor(size=(n, k)).random()
        data, weights = codes.to_packed_tensor(dim=1), codes.to(torch.float32)
    else:
        fp8 = torch.randn(n, k).to(torch.float8_e4m3fn)
        data, weights = fp8.view(torch.uint8), fp8.float()
    values = weights.double() * torch.repeat_interleave(scales.to(torch.float32).double(), 32, dim=1)
    return data, scales.data, values


def mx_rows(libs, size, fmt):
    """A weight-only MX layer: bf16 activations [M, K] times e2m1 or e4m3 weights [N, K] with e8m0 scales."""
    torch.manual_seed(19)
    a = torch.randn(size, size).bfloat16()
    data, scales, values = mx_weights(size, size, fmt)
    exact = a.double() @ values.T  # every scaled weight is exact in bf16, as the dot reads it
    ad, wd, sd = a.cuda(), data.cuda(), scales.cuda()

    def make(lib, c, cfg):
        bm, bn, bk, warps = cfg

        def go():
            lib.mx_weight_matmul_kernel[(size // bm, size // bn)](ad, wd, sd, c, size, size, size, BLOCK_M=bm,
                                                                   BLOCK_N=bn, BLOCK_K=bk, FORMAT=fmt,
                                                                   num_warps=warps, num_stages=3)
        return go
    return [{"operands": f"bf16 x {MX_NAMES[fmt]} ({fmt}, e8m0 scales)", **compare(libs, make, exact, MX_CONFIGS,
                                                                                   2 * size ** 3)}]


SECTIONS = {"fp32": fp32_rows, "fp8": fp8_rows, "computed_a": computed_a_rows,
            "mxfp4": functools.partial(mx_rows, fmt="e2m1"), "mxfp8": functools.partial(mx_rows, fmt="e4m3")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--only", help=f"comma-separated sections of {sorted(SECTIONS)} (default: all)")
    parser.add_argument("--out")
    args = parser.parse_args()
    libs = {flavour: load_kernels(flavour) for flavour in ("kiln", "triton")}
    names = args.only.split(",") if args.only else list(SECTIONS)
    rows = [row for name in names for row in SECTIONS[name](libs, args.size)]
    gpu = torch.cuda.get_device_name()
    lines = [f"## dots by operand format, {gpu}, {datetime.date.today().isoformat()}", "",
             f"M = N = K = {args.size}, randn inputs, fp32 C (fp32: A @ B, fp8: A @ B^T unless N-major); error relative to "
             "max |C|", "",
             "| operands | kiln TFLOP/s | Triton TFLOP/s | kiln / Triton | kiln == Triton | kiln max error | "
             "Triton max error | configs kiln / Triton |",
             "|---|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        k, t = r["kiln"], r["triton"]
        lines.append(f"| {r['operands']} | {k['tflops']:.0f} | {t['tflops']:.0f} | {k['tflops'] / t['tflops']:.2f} | "
                     f"{r['bitwise_equal']} | {k['max_error']:.2e} | {t['max_error']:.2e} | "
                     f"{k['config']} / {t['config']} |")
    results_file.report(args.out, "dot-formats", lines, rows)


if __name__ == "__main__":
    main()
