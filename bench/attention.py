"""FlashAttention-2 forward (bench/kernels.py `attention_fwd_kernel`, one kernel source) on
kiln and on upstream Triton, each autotuned over the same configs, against PyTorch SDPA.

    python bench/attention.py [--quick] [--check] [--dims 64,128] [--ctx 1024,4096,16384] [--out DIR]

Z=4, H=32, fp16, causal and not. TFLOP/s count the two matmuls (4 Z H N^2 D), halved
when causal. --check first compares every config with SDPA on small shapes. Prints a
markdown table and writes DIR/<date>-<gpu>-attention.{json,md} when --out is given.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import fastest, interleaved, load_kernels, triton_cdiv  # noqa: E402

# (BLOCK_M, BLOCK_N, num_stages, num_warps)
CONFIGS = [(128, 64, 3, 8), (128, 64, 2, 8), (128, 128, 3, 8), (128, 128, 2, 8), (128, 64, 3, 4), (64, 64, 3, 4)]
QUICK = [(128, 64, 3, 8), (128, 128, 3, 8)]
Z, H = 4, 32


def operands(n_ctx, dim, z=Z, h=H):
    return [torch.randn(z, h, n_ctx, dim, device="cuda", dtype=torch.float16) for _ in range(3)]


def launcher(lib, q, k, v, o, causal, cfg):
    bm, bn, stages, warps = cfg
    z, h, n_ctx, dim = q.shape
    grid = (triton_cdiv(n_ctx, bm), z * h)

    def go():
        lib.attention_fwd_kernel[grid](q, k, v, o, 1 / dim ** 0.5, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                                       h, n_ctx, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal,
                                       num_warps=warps, num_stages=stages)
    return go


def sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1 / q.shape[-1] ** 0.5)


def check(libs, dims, configs):
    failures = []
    for dim in dims:
        q, k, v = operands(512, dim, z=1, h=3)
        for causal in (False, True):
            want = sdpa(q, k, v, causal)
            for cfg in configs:
                for name, lib in libs.items():
                    o = torch.full_like(q, float("nan"))
                    try:
                        launcher(lib, q, k, v, o, causal, cfg)()
                        torch.cuda.synchronize()
                    except Exception as e:  # OutOfResources and the like
                        print(f"  {name} D{dim} causal={causal} {cfg}: {type(e).__name__}: {str(e)[:120]}")
                        continue
                    err = (o.float() - want.float()).abs().max().item()
                    if not torch.allclose(o.float(), want.float(), atol=2e-2, rtol=2e-2):
                        failures.append((name, dim, causal, cfg, err))
                        print(f"  MISMATCH {name} D{dim} causal={causal} {cfg}: max error {err:.3g}")
    print(f"check: {len(failures)} mismatches")
    return failures


def run(libs, dims, contexts, configs, rounds=3):
    rows = []
    for dim in dims:
        for causal in (False, True):
            for n_ctx in contexts:
                q, k, v = operands(n_ctx, dim)
                o = torch.empty_like(q)
                picked = {name: fastest(lambda cfg, lib=lib: launcher(lib, q, k, v, o, causal, cfg), configs)
                          for name, lib in libs.items()}
                fns = {name: launcher(libs[name], q, k, v, o, causal, got[1]) for name, got in picked.items() if got}
                fns["sdpa"] = lambda: sdpa(q, k, v, causal)
                flops = 4 * Z * H * n_ctx * n_ctx * dim / (2 if causal else 1)
                row = {"dim": dim, "causal": causal, "n_ctx": n_ctx}
                for name, ms in interleaved(fns, rounds).items():
                    row[name] = flops / (ms * 1e-3) / 1e12
                row["configs"] = {name: got[1] for name, got in picked.items() if got}
                rows.append(row)
                print(json.dumps(row))
    return rows


def table(rows) -> str:
    lines = ["| D | causal | N_CTX | kiln TFLOP/s | Triton TFLOP/s | SDPA TFLOP/s | kiln / Triton | kiln / SDPA | kiln config |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        k, t, s = r.get("kiln", 0), r.get("triton", 0), r.get("sdpa", 0)
        lines.append(f"| {r['dim']} | {r['causal']} | {r['n_ctx']} | {k:.0f} | {t:.0f} | {s:.0f} | "
                     f"{k / t if t else 0:.2f} | {k / s if s else 0:.2f} | {r['configs'].get('kiln')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--ctx", default="1024,4096,16384")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = {name: load_kernels(name) for name in args.libs.split(",")}
    dims = [int(d) for d in args.dims.split(",")]
    configs = QUICK if args.quick else CONFIGS
    if args.check:
        check(libs, dims, configs)
    rows = run(libs, dims, [int(s) for s in args.ctx.split(",")], configs)
    text = table(rows)
    print(text)
    if args.out:
        gpu = torch.cuda.get_device_name().replace(" ", "_")
        stem = os.path.join(args.out, f"{datetime.date.today()}-{gpu}-attention")
        with open(stem + ".json", "w") as f:
            json.dump(rows, f, indent=1)
        with open(stem + ".md", "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
