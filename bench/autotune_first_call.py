"""The first call of an autotuned GEMM at small M: tutorial 03's matmul (bench/kernels.py) under the
library's own autotuner over the tutorial's 16 configs, in a fresh process with fresh caches, with
kiln (split-K on, its default for its own kernels: kiln.autotune builds each few-program config's
split build beside the configs' builds), kiln with KILN_SPLIT_K=0, and Triton 3.6.

    python bench/autotune_first_call.py [--sizes 128x4096x4096,...] [--out DIR]

Per shape and flavour: the first call's seconds (compiles and timing every config), the tuned
kernel's TFLOP/s (do_bench median, the faster of two), the config it chose, and whether its
result equals a float32 torch matmul within fp16 rounding. Writes DIR/<date>-<gpu>-autotune-first-call.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import child_rows  # noqa: E402

SIZES = "128x4096x4096,64x8192x8192,4096x4096x4096"
FLAVOURS = {"kiln": ("kiln", {}), "kiln, KILN_SPLIT_K=0": ("kiln", {"KILN_SPLIT_K": "0"}), "Triton": ("triton", {})}

CHILD = child_rows.LIBRARY_PREAMBLE + """
from matmul import CONFIGS
do_bench = triton.testing.do_bench
configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
           for bm, bn, bk, s, w in CONFIGS]
rows = []
for size in sys.argv[3].split(","):
    M, N, K = map(int, size.split("x"))
    tuned = triton.autotune(configs=configs, key=["M", "N", "K"])(lib.matmul_kernel)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    run = lambda: tuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                              c.stride(0), c.stride(1))
    torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    ms = min(do_bench(run) for _ in range(2))  # the first timing after tuning read low for both libraries
    close = bool(torch.allclose(c.float(), a.float() @ b.float(), atol=0.05 * K ** 0.5 / 8, rtol=0.01))
    rows.append({"size": size, "first_call_s": first, "tflops": 2 * M * N * K / ms * 1e-9,
                 "config": str(tuned.best_config), "close": close})
print("ROWS " + json.dumps(rows))
"""


def run_flavour(library: str, extra_env: dict, sizes: str, timeout: float) -> list:
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_SPLIT_K", "KILN_DROPIN")}
    env.update(extra_env)
    return child_rows.run(CHILD, [HERE, library, sizes], env, timeout, f"{library} {extra_env}")[0]


def table(results: dict) -> str:
    names = list(results)
    lines = ["#### tutorial 03's matmul, fp16, autotuned over its 16 configs: the first call (s) and the tuned "
             "kernel (TFLOP/s)", "",
             "| M x N x K | " + " | ".join(f"{n}: first call s / TFLOP/s" for n in names) + " | equal to torch |",
             "|---|" + "---:|" * len(names) + "---|"]
    for i, row in enumerate(results[names[0]]):
        cells = [f"{results[n][i]['first_call_s']:.1f} / {results[n][i]['tflops']:.0f}" for n in names]
        close = all(results[n][i]["close"] for n in names)
        lines.append(f"| {row['size']} | " + " | ".join(cells) + f" | {'yes' if close else 'NO'} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--timeout", type=float, default=280)
    ap.add_argument("--out")
    args = ap.parse_args()
    results = {name: run_flavour(library, env, args.sizes, args.timeout)
               for name, (library, env) in FLAVOURS.items()}
    text = table(results)
    print(text)
    for name, rows in results.items():
        print(f"{name}: " + "; ".join(f"{r['size']} {r['config']}" for r in rows))
    if args.out:
        import results_file
        results_file.save_today(args.out, "autotune-first-call", results, text)


if __name__ == "__main__":
    main()
