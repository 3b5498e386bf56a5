"""SASS instruction mix of bench's tensor-core kernels at the configs bench/run.py's autotuning picks on
the H200: registers, spills, shared memory, and the instructions of each kernel's main loop (the
shortest loop around its wgmmas), from kiln's cubins via cuobjdump. No GPU needed: an instruction a
loop saves shows here before any device time is spent (fp8 attention's P packing: 347 -> 299).

    python bench/sass_mix.py [--only matmul,attention_fp8,...] [--out DIR]

cuobjdump: the one `knobs.nvidia.cuobjdump` finds (kiln's test extra installs NVIDIA's wheel).
"""
import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels  # noqa: E402
from kiln.tools.disasm import get_sass  # noqa: E402
from kiln.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
from sass_loops import main_loop, opcode  # noqa: E402

Z, H, N = 4, 32, 4096


def _e5m2(array):
    import kiln
    import kiln.language as tl
    return kiln.reinterpret(array, tl.float8e5)


def matmul():
    x = np.zeros((16, 16), np.float16)  # only dtypes and alignment reach the compile key
    s = 4096
    return kernels.matmul_kernel.warmup(x, x, x, s, s, s, s, 1, s, 1, s, 1, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64,
                                        GROUP_M=8, num_warps=8, num_stages=3, target="sm_90a")


def _attention_host(dim, bm, bn, warps, fp8=False):
    rows = np.zeros((Z * H * N, dim), np.uint8 if fp8 else np.float16)
    if fp8:
        vt = _e5m2(np.zeros((Z * H * dim, N), np.uint8))
        rows = _e5m2(rows)
        descs = [TensorDescriptor.from_tensor(rows, [bm, dim]), TensorDescriptor.from_tensor(rows, [bn, dim]),
                 TensorDescriptor.from_tensor(vt, [dim, bn]), TensorDescriptor.from_tensor(rows, [bm, dim])]
        kernel = kernels.attention_host_descriptor_fp8_fwd_kernel
    else:
        descs = [TensorDescriptor.from_tensor(rows, [b, dim]) for b in (bm, bn, bn, bm)]
        kernel = kernels.attention_host_descriptor_fwd_kernel
    return kernel.warmup(*descs, np.zeros(64, np.float32), 0.125, N, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn,
                         CAUSAL=False, num_warps=warps, num_stages=3, grid=(1,), target="sm_90a")


def _attention_bwd(which, dim, narrow, wide, warps):
    half, f32 = np.zeros((64, 64), np.float16), np.zeros(64, np.float32)
    tuning = dict(HEAD_DIM=dim, CAUSAL=False, num_warps=warps, num_stages=3, grid=(1,), target="sm_90a")
    if which == "dkdv":
        return kernels.attention_bwd_dkdv_kernel.warmup(half, half, half, half, half, half, f32, f32, 0.125, N,
                                                        BLOCK_M=narrow, BLOCK_N=wide, **tuning)
    return kernels.attention_bwd_dq_kernel.warmup(half, half, half, half, half, f32, f32, 0.125, N, BLOCK_M=wide,
                                                  BLOCK_N=narrow, **tuning)


# name -> the build, as bench/run.py's autotuning picked it on the H200 (2026-12-03)
BUILDS = {
    "matmul": matmul,
    "attention_d64": lambda: _attention_host(64, 64, 64, 4),
    "attention_d128": lambda: _attention_host(128, 128, 64, 8),
    "attention_fp8_d64": lambda: _attention_host(64, 64, 64, 4, fp8=True),
    "attention_fp8_d128": lambda: _attention_host(128, 128, 128, 8, fp8=True),
    "attention_bwd_dkdv_d64": lambda: _attention_bwd("dkdv", 64, 64, 64, 4),
    "attention_bwd_dq_d64": lambda: _attention_bwd("dq", 64, 64, 64, 4),
    "attention_bwd_dkdv_d128": lambda: _attention_bwd("dkdv", 128, 64, 128, 8),
    "attention_bwd_dq_d128": lambda: _attention_bwd("dq", 128, 64, 128, 8),
}


def report(name: str, kernel) -> str:
    loop = main_loop(get_sass(kernel.asm["cubin"]))
    mix = collections.Counter(opcode(text) for text in loop)
    meta = kernel.metadata
    return (f"{name}: {meta['n_regs']} registers, {meta['n_spills']} bytes spilled, {meta['shared']} bytes shared; "
            f"main loop {len(loop)} instructions\n  " + ", ".join(f"{op} {n}" for op, n in mix.most_common()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated names of: " + ", ".join(BUILDS))
    ap.add_argument("--out")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(BUILDS)
    text = "\n".join(report(name, BUILDS[name]()) for name in names)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sass-mix.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
