"""Triton 3.6's tutorial 09 matmuls (bench/kernels.py: its naive kernel is tutorial 03's `matmul_kernel`;
`persistent_matmul_kernel`; the TMA kernel `matmul_descriptor_bt_kernel`; `tma_persistent_matmul_kernel`;
`descriptor_persistent_matmul_kernel`), each autotuned by kiln and by upstream Triton over the tutorial's
24 configs (BLOCK_M 128, BLOCK_N 128 / 256, BLOCK_K 64 / 128, 2-4 stages, 4 / 8 warps), against cuBLAS.
The TMA kernels read B stored [N, K], as the tutorial does; the others B [K, N].

    python bench/tutorial09.py [--check] [--kernels tma,tma_persistent,...] [--dtypes fp16,bf16]
                               [--shapes 4096,8192,8192x14336x4096] [--out DIR]

--check first compares every config of every kernel with torch on odd shapes. Each library compiles
24 configs a kernel and dtype: on a fresh machine the whole run takes longer than one device call, so
`--kernels` and `--dtypes` split it.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from matmul import launcher  # noqa: E402
from persistent import check, parse_shape, persistent_launcher, run  # noqa: E402
from run import load_kernels, settle_clocks, triton_cdiv  # noqa: E402
from tma import descriptor_class  # noqa: E402

CONFIGS_09 = [(128, bn, bk, stages, warps) for bn in (128, 256) for bk in (64, 128) for stages in (2, 3, 4)
              for warps in (4, 8)]
_STORED_BY_N: list = []  # [B [K, N], the same B stored [N, K]], made once per operand


def _by_n(b):
    # Held by identity, not address: B kept alive here cannot be freed and its address reused by the next
    # operand, whose launches would otherwise read the old one transposed.
    if not _STORED_BY_N or _STORED_BY_N[0] is not b:
        _STORED_BY_N[:] = [b, b.T.contiguous()]
    return _STORED_BY_N[1]


def _launch_shape(a, c, cfg, persistent):
    """(grid, meta) of a launch: a program a tile, or, persistent, one a SM looping over the tiles."""
    bm, bn, bk, stages, warps = cfg
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    tiles = triton_cdiv(a.shape[0], bm) * triton_cdiv(c.shape[1], bn)
    if not persistent:
        return (tiles,), meta
    meta["NUM_SMS"] = torch.cuda.get_device_properties(a.device).multi_processor_count
    return (min(meta["NUM_SMS"], tiles),), meta


def descriptor_launcher(persistent):
    def make(lib, a, b, c, cfg):
        D = descriptor_class(lib.__name__.split("_")[0])  # (bench/kernel_source names it <flavour>_kernels)
        bt = _by_n(b)
        bm, bn, bk = cfg[:3]
        descs = D.from_tensor(a, [bm, bk]), D.from_tensor(bt, [bn, bk]), D.from_tensor(c, [bm, bn])
        kernel = lib.tma_persistent_matmul_kernel if persistent else lib.matmul_descriptor_bt_kernel
        grid, meta = _launch_shape(a, c, cfg, persistent)
        return lambda: kernel[grid](*descs, a.shape[0], c.shape[1], a.shape[1], **meta)
    return make


def device_descriptor_launcher(lib, a, b, c, cfg):
    bt = _by_n(b)
    grid, meta = _launch_shape(a, c, cfg, True)
    return lambda: lib.descriptor_persistent_matmul_kernel[grid](a, bt, c, a.shape[0], c.shape[1], a.shape[1], **meta)


LAUNCHERS = {"naive": launcher, "persistent": persistent_launcher, "tma": descriptor_launcher(False),
             "tma_persistent": descriptor_launcher(True), "descriptor_persistent": device_descriptor_launcher}


def table(rows, kernels) -> str:
    lines = ["| dtype | M x N x K | kernel | kiln | Triton | cuBLAS | kiln / Triton | kiln / cuBLAS | kiln config | "
             "equal to torch |", "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        for kernel in kernels:
            kiln, triton, cublas = r.get(f"kiln {kernel}", 0), r.get(f"triton {kernel}", 0), r["cublas"]
            ratio = lambda x, y: f"{x / y:.2f}" if x and y else "-"  # noqa: E731
            lines.append(f"| {r['dtype']} | {r['shape']} | {kernel} | {kiln:.0f} | {triton:.0f} | {cublas:.0f} | "
                         f"{ratio(kiln, triton)} | {ratio(kiln, cublas)} | {r['configs'].get(f'kiln {kernel}')} | "
                         f"{'no' if any(name.endswith(' ' + kernel) for name in r['wrong']) else 'yes'} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--kernels", default=",".join(LAUNCHERS))
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--shapes", default="4096,8192,8192x14336x4096")
    parser.add_argument("--out")
    args = parser.parse_args()
    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    import triton
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    kernels = args.kernels.split(",")
    dtypes = args.dtypes.split(",")
    launchers = {k: LAUNCHERS[k] for k in kernels}
    if args.check and any(check(libs, dtypes, make, configs=CONFIGS_09) for make in launchers.values()):
        sys.exit("some configs computed wrong results")
    settle_clocks()
    rows = run(libs, dtypes, [parse_shape(s) for s in args.shapes.split(",")], launchers=launchers,
               configs=CONFIGS_09)
    text = (f"## Triton 3.6's tutorial 09 matmuls on {torch.cuda.get_device_name()}, each library autotuned over "
            f"the tutorial's configs (TFLOP/s)\n\n{table(rows, kernels)}\n")
    print(text)
    if args.out:
        results_file.save_today(args.out, "tutorial09", rows, text)


if __name__ == "__main__":
    main()
