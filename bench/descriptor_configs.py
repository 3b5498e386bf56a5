"""Tutorial 03's matmul at fixed configs through pointers (`matmul_kernel`), host descriptors
(`matmul_descriptor_kernel`, B [K, N]; `matmul_descriptor_bt_kernel`, tutorial 09's B [N, K] read
transposed) and descriptors the kernel makes (`matmul_device_descriptor_kernel`): kiln against Triton
on the same sources, cuBLAS beside them, each result checked against torch.

    python bench/descriptor_configs.py [--dtypes fp16,bf16] [--sizes 4096,8192] [--configs 128/256/64/3/8,...]
        [--kernels pointer,tma,tma_bt,device] [--libs kiln,triton]

Configs are BM/BN/BK/stages/warps; sizes N (N³) or MxNxK. TFLOP/s, one do_bench median each.
"""
from __future__ import annotations

import argparse

import torch

from matmul import DTYPES
from run import bench, load_kernels, settle_clocks, tflops_cell, triton_cdiv
from tma import descriptor_class

CONFIGS = "128/256/64/3/8,128/256/128/3/8"


def launch(lib, flavour, kernel, a, b, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = c.shape[1]
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)
    D = descriptor_class(flavour)
    if kernel == "pointer":
        return lambda: lib.matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                               c.stride(0), c.stride(1), **meta)
    if kernel == "tma":
        descs = D.from_tensor(a, [bm, bk]), D.from_tensor(b, [bk, bn]), D.from_tensor(c, [bm, bn])
        return lambda: lib.matmul_descriptor_kernel[grid](*descs, M, N, K, **meta)
    if kernel == "tma_bt":
        bt = b.T.contiguous()
        descs = D.from_tensor(a, [bm, bk]), D.from_tensor(bt, [bn, bk]), D.from_tensor(c, [bm, bn])
        return lambda: lib.matmul_descriptor_bt_kernel[grid](*descs, M, N, K, **meta)
    return lambda: lib.matmul_device_descriptor_kernel[grid](a, b, c, M, N, K, **meta)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--kernels", default="pointer,tma,tma_bt,device")
    ap.add_argument("--libs", default="kiln,triton")
    args = ap.parse_args()
    libs = {name: load_kernels(name) for name in args.libs.split(",")}
    import triton
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    settle_clocks()
    print("| dtype | M x N x K | kernel | config | " + " | ".join(f"{n} TFLOP/s" for n in libs)
          + " | cuBLAS TFLOP/s | equal to torch |")
    print("|---|---|---|---|" + "---:|" * (len(libs) + 1) + "---|")
    for dtype in args.dtypes.split(","):
        for size in args.sizes.split(","):
            M, N, K = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
            a = torch.randn(M, K, device="cuda").to(DTYPES[dtype])
            b = torch.randn(K, N, device="cuda").to(DTYPES[dtype])
            want = a @ b
            flops = 2 * M * N * K
            cublas = flops / bench(lambda: a @ b) * 1e-9
            for kernel in args.kernels.split(","):
                for config in args.configs.split(","):
                    cfg = tuple(int(x) for x in config.split("/"))
                    cells, equal = [], []
                    for flavour, lib in libs.items():
                        c = torch.empty(M, N, device="cuda", dtype=a.dtype)
                        go = launch(lib, flavour, kernel, a, b, c, cfg)
                        cell, ok = tflops_cell(go, flops,
                                               lambda: torch.allclose(c.float(), want.float(), atol=0.5, rtol=2e-2))
                        cells.append(cell)
                        equal += [] if ok is None else [ok]
                    print(f"| {dtype} | {M}x{N}x{K} | {kernel} | {config} | " + " | ".join(cells)
                          + f" | {cublas:.0f} | {all(equal)} |", flush=True)


if __name__ == "__main__":
    main()
