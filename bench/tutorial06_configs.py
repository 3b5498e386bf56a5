"""Tutorial 06's own forward, unchanged, at fixed configs: `_attn_fwd` (the 3.6 source that
`scripts/upstream_tutorials.py extract` writes) called as its Hopper `warp_specialize=True` path
calls it — plain tensors, the kernel making its descriptors (`tl.make_tensor_descriptor`) — so the
rows it advances in its loop (`offsetk_y += BLOCK_N`) are what kiln must read by TMA. Its
autotuner is bypassed: every library runs the same configs, each in a process of its own (kiln
through the drop-in, `KILN_DROPIN=1`; Triton as installed), checked against SDPA first.

    python bench/tutorial06_configs.py --tutorial .scratch/tutorials/3.6/06-fused-attention.py \\
        [--libs kiln,triton] [--dims 64,128] [--ctx 16384] [--causal] [--fp8] [--configs 128x128x2x8,...] [--out DIR]

Z=4, H=32, fp16; TFLOP/s count the forward's two matmuls (4 Z H N^2 D, halved when causal).
A config whose output is off by more than 0.05 (or NaN) is reported, not timed. `--fp8`: the
tutorial's fp8 forward (e5m2 operands, V stored transposed per head, O in fp8), checked by the
error's norm (under 0.1 of the reference's); its V^T descriptor spans Z * H * N_CTX columns at
a column offset head * HEAD_DIM * N_CTX, so a head's V rows past that extent read as zeros in
every library, and the reference zeroes the same rows.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402

CONFIGS = "128x128x2x8,128x128x3x8,128x64x2x4,128x64x3x4,64x64x3x4"
Z, H = 4, 32


def parse_configs(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in c.split("x")) for c in text.split(",") if c]


def run_one(args) -> list[dict]:
    """This process's library on every (D, N, config): rows of TFLOP/s and the max error."""
    import torch
    import triton
    spec = importlib.util.spec_from_file_location("tutorial06", args.tutorial)
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)
    kernel = tutorial._attn_fwd.fn  # under the autotuner: the configs are ours
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    rows = []
    for dim in map(int, args.dims.split(",")):
        for n_ctx in map(int, args.ctx.split(",")):
            q, k, v, want = operands(torch, dim, n_ctx, args.fp8, args.causal)
            for bm, bn, stages, warps in parse_configs(args.configs):
                if bn > dim:  # the tutorial's static_assert(BLOCK_N <= HEAD_DIM)
                    continue
                o = torch.empty_like(q)
                m = torch.empty((Z, H, n_ctx), device="cuda", dtype=torch.float32)
                grid = (triton.cdiv(n_ctx, bm), Z * H, 1)

                def go():
                    kernel[grid](0.5, m, Z, H, q, k, v, o, N_CTX=n_ctx, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn,
                                 FP8_OUTPUT=args.fp8, STAGE=3 if args.causal else 1, warp_specialize=True,
                                 IS_HOPPER=True, num_warps=warps, num_stages=stages)
                row = dict(D=dim, N_CTX=n_ctx, config=[bm, bn, stages, warps])
                try:
                    go()
                    torch.cuda.synchronize()
                except Exception as e:  # a library that cannot build a config: reported in its row
                    rows.append(dict(row, error=f"{type(e).__name__}: {str(e)[:160]}"))
                    continue
                if args.fp8:  # e5m2 keeps 2 bits of mantissa: the error's size, not each element's
                    err = ((o.float() - want).norm() / want.norm()).item()
                    wrong = not err < 0.1
                else:
                    err = (o.float() - want).abs().max().item()
                    wrong = not err <= 0.05
                if wrong:
                    rows.append(dict(row, error=f"{'relative' if args.fp8 else 'max'} error {err:.3g}"))
                    continue
                ms = triton.testing.do_bench(go)
                flops = 4 * Z * H * n_ctx * n_ctx * dim * (0.5 if args.causal else 1)
                rows.append(dict(row, tflops=round(flops / ms * 1e-9, 1), max_error=err))
                print(f"  {args.one} D{dim} N{n_ctx} {(bm, bn, stages, warps)}: {rows[-1]['tflops']} TFLOP/s",
                      file=sys.stderr, flush=True)
    return rows


def operands(torch, dim, n_ctx, fp8, causal, device="cuda"):
    """q, k, v as the tutorial's benchmark makes them, and the reference output (float32)."""
    q, k, v = (torch.randn((Z, H, n_ctx, dim), dtype=torch.float16, device=device) for _ in range(3))
    if fp8:
        q, k = q.to(torch.float8_e5m2), k.to(torch.float8_e5m2)
        v = v.permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2).to(torch.float8_e5m2)  # [Z][H][D][N] in memory
        # head g's row n is descriptor column g * D * N + n: read only below Z * H * N columns
        heads = torch.arange(Z * H, device=device).view(Z, H, 1) * dim * n_ctx
        seen = (heads + torch.arange(n_ctx, device=device)) < Z * H * n_ctx
        inputs = (q.float(), k.float(), v.float() * seen[..., None])
    else:
        inputs = (q, k, v)
    want = torch.nn.functional.scaled_dot_product_attention(*inputs, is_causal=causal, scale=0.5)
    return q, k, v, want.float()


def run_library(lib: str, argv: list[str]) -> list[dict]:
    env = dict(os.environ)
    env.pop("KILN_DROPIN", None)
    if lib == "kiln":
        env["KILN_DROPIN"] = "1"  # `import triton` is kiln's drop-in
    done = subprocess.run([sys.executable, __file__, *argv, "--one", lib], env=env, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{lib}'s run failed ({done.returncode})")
    return json.loads(done.stdout.splitlines()[-1])


def table(results: dict[str, list[dict]], causal: bool, fp8: bool = False) -> list[str]:
    libs = list(results)
    by_key = {lib: {(r["D"], r["N_CTX"], tuple(r["config"])): r for r in rows} for lib, rows in results.items()}
    keys = sorted({key for rows in by_key.values() for key in rows})
    lines = ["| D | N_CTX | config | " + " | ".join(f"{lib} TFLOP/s" for lib in libs)
             + (" | kiln / triton |" if libs == ["kiln", "triton"] else " |"),
             "|---:|---:|---|" + "---:|" * (len(libs) + (libs == ["kiln", "triton"]))]
    for key in keys:
        cells = [by_key[lib].get(key, {}) for lib in libs]
        shown = [str(c.get("tflops", c.get("error", "-"))) for c in cells]
        ratio = ""
        if libs == ["kiln", "triton"]:
            a, b = (c.get("tflops") for c in cells)
            ratio = f" {a / b:.2f} |" if a and b else " - |"
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(shown) + " |" + ratio)
    kind = "fp8 e5m2" if fp8 else "fp16"
    return [f"### tutorial 06's forward at fixed configs, its own descriptors, causal={causal} (Z{Z} H{H} {kind})", ""] \
        + lines


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tutorial", required=True, help="06-fused-attention.py as extracted from upstream")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--ctx", default="16384")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="the tutorial's fp8 forward")
    ap.add_argument("--configs", default=CONFIGS, help="BMxBNxSTAGESxWARPS,...")
    ap.add_argument("--out")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child: one library, its rows as JSON on stdout
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args)))
        return
    passed = list(argv if argv is not None else sys.argv[1:])
    results = {lib: run_library(lib, passed) for lib in args.libs.split(",")}
    rows = [dict(r, lib=lib) for lib, lib_rows in results.items() for r in lib_rows]
    kind = "tutorial06-configs" + ("-fp8" if args.fp8 else "")
    results_file.report(args.out, kind, table(results, args.causal, args.fp8), rows)


if __name__ == "__main__":
    main()
