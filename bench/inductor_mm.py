"""torch.compile's own GEMMs (at small M; batched with --batch): `a @ b` under
mode="max-autotune-no-cudagraphs", where Inductor writes its mm template and autotunes it, with
kiln's drop-in (KILN_DROPIN=1) and with Triton, against cuBLAS (torch.mm). The template's launches
at small M have too few programs to fill the GPU: the drop-in runs them as written, as Triton does,
unless KILN_SPLIT_K=1 (split-K, kiln.codegen.passes.split_k: then each config's split build compiles
at its first timed launch; bench/results/*inductor-mm-session47.md).

    python bench/inductor_mm.py [--sizes 128x4096x4096,...] [--dtype float16|bfloat16] [--batch B] [--out DIR]

`--batch B`: torch.bmm of B matrices of each size instead (Inductor's bmm template, whose K loop counts down).

Each flavour runs in a fresh process with fresh cache directories and PyTorch's defaults (no
Inductor setting). Per shape: the first call's seconds (Inductor's compile and autotuning), the
compiled GEMM's TFLOP/s (do_bench, median: at these sizes mostly the compiled call's host time), whether
its result equals cuBLAS's within fp16 rounding, and for kiln the cluster sizes its launches took; and
Inductor's own autotuning log (every choice's time, its benchmarking and precompiling seconds).
Writes DIR/<date>-<gpu>-inductor-mm.{json,md} (`--batch`: -inductor-bmm).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import child_rows  # noqa: E402

SIZES = "128x4096x4096,64x8192x8192,128x14336x4096,256x4096x14336"

CHILD = """
import json, sys, time
import torch
from triton.testing import do_bench
clusters = []
if sys.argv[1] == "kiln":
    from kiln.runtime import launcher
    sized = launcher.cluster_ctas
    launcher.cluster_ctas = lambda *args: clusters.append(sized(*args)) or clusters[-1]
dtype = getattr(torch, sys.argv[2])
batch = int(sys.argv[4])  # 0: a @ b of matrices; else torch.bmm of `batch` of them (Inductor's bmm template)
reference = torch.bmm if batch else torch.mm
lead = (batch,) if batch else ()
rows = []
for size in sys.argv[3].split(","):
    M, N, K = map(int, size.split("x"))
    a = torch.randn(*lead, M, K, device="cuda", dtype=dtype)
    b = torch.randn(*lead, K, N, device="cuda", dtype=dtype)
    mm = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")
    torch.cuda.synchronize()
    start = time.perf_counter()
    c = mm(a, b)
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    clusters.clear()
    ms = do_bench(lambda: mm(a, b))
    ref_ms = do_bench(lambda: reference(a, b))
    want = reference(a, b)
    flop = 2 * max(batch, 1) * M * N * K
    rows.append({"size": size, "batch": batch, "first_call_s": first, "ms": ms, "cublas_ms": ref_ms,
                 "tflops": flop / ms * 1e-9, "cublas_tflops": flop / ref_ms * 1e-9,
                 "close": bool(torch.allclose(c.float(), want.float(), atol=0.05 * K ** 0.5 / 8, rtol=0.01)),
                 "clusters": sorted(set(clusters))})
    torch._dynamo.reset()
print("ROWS " + json.dumps(rows))
"""


def run_flavour(flavour: str, dtype: str, sizes: str, batch: int, timeout: float) -> dict:
    # PyTorch's defaults: an inherited thread limit (TORCHINDUCTOR_COMPILE_THREADS) would tune a flavour down
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_DROPIN", "TORCHINDUCTOR_COMPILE_THREADS")}
    if flavour == "kiln":
        env["KILN_DROPIN"] = "1"
    rows, out = child_rows.run(CHILD, [flavour, dtype, sizes, batch], env, timeout, flavour,
                               caches=("TRITON_CACHE_DIR", "KILN_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"))
    # Inductor's autotuning tables (every choice's time) and any warning, for the record
    log = [ln for ln in out.stderr.splitlines() if "AUTOTUNE" in ln or "ms " in ln or "Warning" in ln]
    return {"rows": rows, "log": log}


def table(kiln_rows: list, triton_rows: list, dtype: str, batch: int = 0) -> str:
    what = f"`a @ b` of {batch} batched matrices, {dtype}: Inductor's bmm template" if batch else \
        f"`a @ b`, {dtype}: Inductor's mm template"
    lines = [f"#### torch.compile(max-autotune-no-cudagraphs) of {what} (TFLOP/s)",
             "", "| M x N x K | kiln | Triton | cuBLAS | kiln / Triton | kiln / cuBLAS | kiln clusters | "
             "first call s kiln / Triton | equal to cuBLAS |", "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for k, t in zip(kiln_rows, triton_rows):
        lines.append(f"| {k['size']} | {k['tflops']:.0f} | {t['tflops']:.0f} | {k['cublas_tflops']:.0f} | "
                     f"{k['tflops'] / t['tflops']:.2f} | {k['tflops'] / k['cublas_tflops']:.2f} | "
                     f"{k['clusters'] or '-'} | {k['first_call_s']:.1f} / {t['first_call_s']:.1f} | "
                     f"{'yes' if k['close'] and t['close'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--batch", type=int, default=0, help="a batch of this many matrices (torch.bmm), 0: none")
    ap.add_argument("--timeout", type=float, default=280)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = {flavour: run_flavour(flavour, args.dtype, args.sizes, args.batch, args.timeout)
            for flavour in ("kiln", "triton")}
    text = table(rows["kiln"]["rows"], rows["triton"]["rows"], args.dtype, args.batch)
    for flavour in rows:
        print(f"## {flavour}'s autotuning\n" + "\n".join(rows[flavour]["log"]))
    print(text)
    if args.out:
        import results_file
        results_file.save_today(args.out, "inductor-bmm" if args.batch else "inductor-mm", rows, text)


if __name__ == "__main__":
    main()
