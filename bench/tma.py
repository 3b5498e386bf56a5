"""Matmul through host TensorDescriptors (bench/kernels.py `matmul_descriptor_kernel`) and
through descriptors the kernel makes (`matmul_device_descriptor_kernel`, tutorial 09's
`tl.make_tensor_descriptor`): kiln (TMA copies on Hopper) against upstream Triton on the same
sources, each autotuned over tutorial 03's 16-bit configs, with kiln's pointer kernel
(`matmul_kernel`) and cuBLAS beside them.

    python bench/tma.py [--check] [--dtypes fp16,bf16] [--sizes 4096,8192] [--out DIR]

--check first compares every config's result with torch on odd shapes (the last boxes
reach past the tensors: TMA must read zeros there and drop the stores).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from matmul import CONFIGS, DTYPES, launcher, timed_row  # noqa: E402
from run import fastest, load_kernels, settle_clocks, triton_cdiv  # noqa: E402

CONFIGS_16 = CONFIGS[:8]  # the tutorial's configs for 16-bit inputs


def descriptor_class(flavour):
    if flavour == "triton":
        from triton.tools.tensor_descriptor import TensorDescriptor
    else:
        from kiln.tools.tensor_descriptor import TensorDescriptor
    return TensorDescriptor


def descriptor_launcher(lib, flavour, a, b, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = b.shape[1]
    D = descriptor_class(flavour)
    descs = D.from_tensor(a, [bm, bk]), D.from_tensor(b, [bk, bn]), D.from_tensor(c, [bm, bn])
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)

    def go():
        lib.matmul_descriptor_kernel[grid](*descs, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                           num_warps=warps, num_stages=stages)
    return go


def device_launcher(lib, flavour, a, b, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = b.shape[1]
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)

    def go():
        lib.matmul_device_descriptor_kernel[grid](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                                  num_warps=warps, num_stages=stages)
    return go


LAUNCHERS = {"tma": descriptor_launcher, "device": device_launcher}


def give_triton_an_allocator():
    """Triton writes the descriptors a kernel makes to global scratch from this allocator."""
    import triton
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def check(libs, dtypes):
    failures = 0
    for dtype in dtypes:
        M, N, K = 1000, 776, 520  # 16-byte rows, none a multiple of the tiles
        a = torch.randn(M, K, device="cuda").to(DTYPES[dtype])
        b = torch.randn(K, N, device="cuda").to(DTYPES[dtype])
        ref = (a.float() @ b.float()).to(DTYPES[dtype])
        for flavour, lib in libs.items():
            for kind, make in LAUNCHERS.items():
                for cfg in CONFIGS_16:
                    c = torch.full((M, N), float("nan"), device="cuda", dtype=DTYPES[dtype])
                    make(lib, flavour, a, b, c, cfg)()
                    err = (c.float() - ref.float()).abs().max().item()
                    ok = err <= 0.05 * ref.float().abs().max().item()
                    failures += not ok
                    print(f"check {flavour} {kind} {dtype} {cfg}: max error {err:.3g} {'ok' if ok else 'WRONG'}")
    return failures


def run(libs, dtypes, sizes, rounds=3):
    rows = []
    for dtype in dtypes:
        for s in sizes:
            a = torch.randn(s, s, device="cuda").to(DTYPES[dtype])
            b = torch.randn(s, s, device="cuda").to(DTYPES[dtype])
            c = torch.empty(s, s, device="cuda", dtype=DTYPES[dtype])
            picked = {f"{name} {kind}": fastest(lambda cfg, lib=lib, name=name, make=make: make(lib, name, a, b, c, cfg),
                                                CONFIGS_16)
                      for name, lib in libs.items() for kind, make in LAUNCHERS.items()}
            picked["kiln pointers"] = fastest(lambda cfg: launcher(libs["kiln"], a, b, c, cfg), CONFIGS_16)
            fns = {name: (LAUNCHERS[name.split()[1]](libs[name.split()[0]], name.split()[0], a, b, c, got[1])
                          if name.split()[1] in LAUNCHERS else launcher(libs["kiln"], a, b, c, got[1]))
                   for name, got in picked.items() if got}
            out = torch.empty_like(c)
            fns["cublas"] = lambda: torch.matmul(a, b, out=out)
            rows.append(timed_row(dtype, s, fns, picked, rounds))
    return rows


def table(rows) -> str:
    lines = ["| dtype | size | kiln TMA | Triton TMA | kiln device | Triton device | kiln pointers | cuBLAS | "
             "kiln TMA / Triton TMA | kiln device / Triton device | kiln TMA / cuBLAS | kiln device / cuBLAS |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratio = lambda x, y: f"{x / y if y else 0:.2f}"  # noqa: E731
    for r in rows:
        k, t, kd, td, p, c = (r.get(n, 0) for n in ("kiln tma", "triton tma", "kiln device", "triton device",
                                                    "kiln pointers", "cublas"))
        lines.append(f"| {r['dtype']} | {r['size']} | {k:.0f} | {t:.0f} | {kd:.0f} | {td:.0f} | {p:.0f} | {c:.0f} | "
                     f"{ratio(k, t)} | {ratio(kd, td)} | {ratio(k, c)} | {ratio(kd, c)} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--out")
    args = parser.parse_args()
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    give_triton_an_allocator()
    dtypes = args.dtypes.split(",")
    if args.check and check(libs, dtypes):
        sys.exit("some configs computed wrong results")
    settle_clocks()
    rows = run(libs, dtypes, [int(s) for s in args.sizes.split(",")])
    text = f"## matmul through host TensorDescriptors (TMA) and descriptors made in the kernel (device) on {torch.cuda.get_device_name()} (TFLOP/s)\n\n{table(rows)}\n"
    print(text)
    if args.out:
        results_file.save_today(args.out, "tma", rows, text)


if __name__ == "__main__":
    main()
