"""kiln against PyTorch and upstream Triton, in one run on one GPU.

    python bench/run.py [--quick] [--out DIR]
    python bench/run.py --part 1 --out DIR; python bench/run.py --part 2 --out DIR   # two calls
    python bench/run.py --merge DIR/<date>-<gpu>-part1.json DIR/<date>-<gpu>-part2.json --out DIR

Writes DIR/<date>-<gpu>.json, a markdown table next to it and a PNG plot, and prints the
table. Bandwidth figures count bytes read plus bytes written; every timing is the median
of `do_bench` (Triton's: CUDA events, L2 flushed before each run), the same for all three,
and each size reports the median over 3 rounds in which the three take turns (for the
memory-bound kernels the fastest of 9 such rounds: their few-microsecond timings fall in two
modes between calls, see MEMORY_ROUNDS).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import kernel_source  # bench/'s own (run as a script or from a sibling)
import results_file

HERE = os.path.dirname(os.path.abspath(__file__))


def load_kernels(flavour: str):
    """bench/kernels.py compiled by kiln, or by Triton with its imports rewritten."""
    return kernel_source.load("kernels.py", flavour)


def fixed_config_args(shapes: str, configs: str):
    """(arguments, {library: its bench/kernels.py}) of a script timing kernels at fixed configs: `--shapes`,
    `--configs` (comma-separated, these defaults) and `--libs` (kiln,triton)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=shapes)
    ap.add_argument("--configs", default=configs)
    ap.add_argument("--libs", default="kiln,triton")
    args = ap.parse_args()
    return args, {name: load_kernels(name) for name in args.libs.split(",")}


def bench(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


ROUNDS = 3  # --rounds
# Kernels of a few microseconds (vector add at 1-4M elements, softmax and layer norm at small N)
# time in two modes from one do_bench call to the next, for every library alike, ~0.7 µs apart
# whatever the kernel (H200, 2026-11-24, 15 calls each: vector add 1M 7.94 or 8.64 µs for kiln,
# 7.97 or 8.67 for Triton; softmax 512 columns 9.06 or 9.70 kiln, 9.18 or 9.89 Triton), while
# CUDA-graph replay and ncu time each kernel alike from launch to launch
# (bench/results/2026-11-24-NVIDIA_H200-bimodal.md). A median over rounds lands in either mode,
# as chance has it per library, so the memory-bound sections take the fastest of 9 rounds' medians.
MEMORY_ROUNDS = 9  # --memory-rounds


def interleaved(fns: dict, rounds: int | None = None, pick=statistics.median) -> dict:
    """`pick` (the median; `min` for MEMORY_ROUNDS) over ROUNDS rounds of each callable's do_bench
    median ms, the callables taking turns, so that drift in the machine (clocks, temperature)
    falls on all of them alike; who goes first changes every round, so that no place in the
    order favours one of them."""
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds or ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(bench(fns[name]))
    return {name: pick(t) for name, t in times.items()}


def memory_bound(fns: dict) -> dict:
    """The fastest of MEMORY_ROUNDS rounds' medians (see MEMORY_ROUNDS)."""
    return interleaved(fns, MEMORY_ROUNDS, pick=min)


def settle_clocks(seconds: float = 3.0) -> None:
    """Keep the GPU busy for a few seconds before the first figure, so that the first sizes
    are not timed while an idle GPU's clocks ramp up."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def fastest(make, configs):
    """(best ms, its config) over `configs`, as Triton's autotuner picks: `make(cfg)` is the
    config's launch; one that fails to launch (out of resources and the like) is skipped."""
    best = None
    for cfg in configs:
        go = make(cfg)
        try:
            go()
            torch.cuda.synchronize()
        except Exception:
            continue
        ms = bench(go)
        if best is None or ms < best[0]:
            best = (ms, cfg)
    return best


def tflops_cell(go, flops, check):
    """(a table cell, `check()` after the first run) for launch `go`: its TFLOP/s, or `failed (Error)` where
    the config does not build or launch (out of resources and the like; `check` then None)."""
    try:
        go()
        torch.cuda.synchronize()
    except Exception as e:
        return f"failed ({type(e).__name__})", None
    ok = check()
    return f"{flops / bench(go) * 1e-9:.0f}", ok


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def vector_add(libs, sizes):
    rows = []
    for n in sizes:
        x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        out = torch.empty_like(x)
        grid = (triton_cdiv(n, 1024),)
        fns = {}
        for name, k in libs.items():
            fns[name] = lambda k=k: k.add_kernel[grid](x, y, out, n, BLOCK=1024)
            fns[name]()
            torch.testing.assert_close(out, x + y)
        fns["torch"] = lambda: torch.add(x, y, out=out)
        rows.append({"size": n, **{name: gbps(3 * 4 * n, ms) for name, ms in memory_bound(fns).items()}})
    return rows


def softmax(libs, cols_list, rows_n=4096):
    rows = []
    for n in cols_list:
        x = torch.randn(rows_n, n, device="cuda")
        out = torch.empty_like(x)
        block = next_pow2(n)
        warps = 4 if block <= 1024 else 8 if block <= 4096 else 16
        fns, regs = {}, {}
        for name, k in libs.items():
            def go(k=k):
                return k.softmax_kernel[(rows_n,)](out, x, x.stride(0), out.stride(0), n, BLOCK=block, num_warps=warps)
            regs[name] = go().n_regs
            torch.testing.assert_close(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
            fns[name] = go
        fns["torch"] = lambda: torch.softmax(x, 1)
        rows.append({"size": n, **{name: gbps(2 * 4 * x.numel(), ms) for name, ms in memory_bound(fns).items()},
                     "regs": regs})
    return rows


def layer_norm(libs, cols_list, rows_n=4096):
    rows = []
    for n in cols_list:
        x = torch.randn(rows_n, n, device="cuda", dtype=torch.float16)
        w = torch.rand(n, device="cuda", dtype=torch.float16)
        b = torch.rand(n, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        mean = torch.empty(rows_n, device="cuda")
        rstd = torch.empty(rows_n, device="cuda")
        block = min(65536 // 2, next_pow2(n))
        warps = min(max(block // 256, 1), 8)
        fns, regs = {}, {}
        for name, k in libs.items():
            def go(k=k):
                return k.layer_norm_kernel[(rows_n,)](x, y, w, b, mean, rstd, x.stride(0), n, 1e-5, BLOCK=block,
                                                      num_warps=warps)
            regs[name] = go().n_regs
            ref = torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)
            torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)
            fns[name] = go
        fns["torch"] = lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)
        rows.append({"size": n, **{name: gbps(2 * 2 * x.numel(), ms) for name, ms in memory_bound(fns).items()},
                     "regs": regs})
    return rows


def rotary(libs, tokens_list, heads=32, dim=128, rows_per_program=32):
    """Rotary embedding of interleaved pairs (bench/kernels.py), fp16 x [tokens, heads, dim] with fp32
    cos and sin per token, against LLaMA's reference form in PyTorch (complex multiply)."""
    rows = []
    for tokens in tokens_list:
        x = torch.randn(tokens, heads, dim, device="cuda", dtype=torch.float16)
        angles = torch.rand(tokens, dim // 2, device="cuda") * 6.3
        cos, sin = torch.cos(angles), torch.sin(angles)
        freqs = torch.polar(torch.ones_like(angles), angles)[:, None, :]
        out = torch.empty_like(x)

        def reference():
            pairs = torch.view_as_complex(x.float().reshape(tokens, heads, dim // 2, 2))
            return torch.view_as_real(pairs * freqs).flatten(2).to(x.dtype)
        n_rows = tokens * heads
        grid = (triton_cdiv(n_rows, rows_per_program),)
        fns = {}
        for name, k in libs.items():
            fns[name] = lambda k=k: k.rotary_interleaved_kernel[grid](x, cos, sin, out, n_rows, HEADS=heads, D=dim,
                                                                     ROWS=rows_per_program)
            fns[name]()
            torch.testing.assert_close(out, reference(), rtol=1e-2, atol=1e-2)
        fns["torch"] = reference
        moved = 2 * x.numel() * 2 + 2 * cos.numel() * 4
        rows.append({"size": tokens, **{name: gbps(moved, ms) for name, ms in memory_bound(fns).items()}})
    return rows


def matmul(libs, sizes, dtypes=("fp16", "bf16", "fp8", "tf32")):
    """Tutorial 03's kernel autotuned over its configs, against cuBLAS (bench/matmul.py)."""
    import matmul as tutorial
    return tutorial.run(libs, list(dtypes), sizes, tutorial.CONFIGS, rounds=ROUNDS)


# Sizes that are not multiples of 16: multiples of 8 (a 16-byte aligned fp16 row, which kiln's
# divisibility-by-8 specialization lets a kernel copy with TMA or load 16 bytes at a time), and odd ones
ODD_SHAPES = ["3000x5000x1000", "3001x5001x1001"]
# A transformer MLP's projections (8192 tokens, hidden 4096, intermediate 14336): up and down
LLM_SHAPES = ["8192x14336x4096", "8192x4096x14336"]
ODD_COLUMNS = [1000, 3000]


def attention(libs, dims, contexts):
    """A FlashAttention-2 forward and backward, one kernel source autotuned by each library,
    against PyTorch SDPA (bench/attention.py)."""
    import attention as fa
    return fa.run(libs, dims, contexts, fa.CONFIGS, rounds=ROUNDS) + \
        fa.run(libs, dims, contexts, fa.BWD_CONFIGS, rounds=ROUNDS, mode="bwd")


def launch_overhead(libs, repeat=2000, rounds=7):
    """Host time of one launch of a tiny kernel, in µs (the GPU work is negligible).

    The libraries take turns, round after round, and each keeps its best round, so that
    noise from the machine falls on all of them alike.
    """
    x = torch.rand(16, device="cuda")
    y = torch.empty_like(x)
    launches = {name: (lambda k=k: k.tiny_kernel[(1,)](x, y, 16, 2.0, BLOCK=16)) for name, k in libs.items()}
    launches["torch"] = lambda: torch.mul(x, 2.0, out=y)
    best = {name: float("inf") for name in launches}
    for _ in range(rounds):
        for name, launch in launches.items():
            launch()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(repeat):
                launch()
            best[name] = min(best[name], (time.perf_counter() - t0) / repeat * 1e6)
            torch.cuda.synchronize()
    return best


FIRST_CALL = r"""
import os, sys, time
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
flavour = sys.argv[1]
sys.path.insert(0, sys.argv[2])
t0 = time.perf_counter()
k = __import__(flavour + "_kernels")
x = torch.rand(4096, device="cuda"); y = torch.empty_like(x)
t1 = time.perf_counter()
k.add_kernel[(4,)](x, x, y, 4096, BLOCK=1024)
torch.cuda.synchronize()
t2 = time.perf_counter()
assert torch.equal(y, x + x)
print(t2 - t1)
"""


def _first_call(flavour, folder, env):
    out = subprocess.run([sys.executable, "-c", FIRST_CALL, flavour, folder], env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def first_call(kernel_dirs):
    """Seconds from the first launch to its completion in a fresh process.

    Triton: cold and warm cache. kiln: cold in-process (KILN_DAEMON=off), cold through a
    warm node daemon (started beforehand, as on a node where jobs already ran), and warm
    cache (a hit in the node cache, read directly).
    """
    row = {}
    cache = tempfile.mkdtemp(prefix="kiln-bench-cache-triton-")
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    row["triton"] = {"cold_s": _first_call("triton", kernel_dirs["triton"], env),
                     "warm_s": _first_call("triton", kernel_dirs["triton"], env)}
    cache = tempfile.mkdtemp(prefix="kiln-bench-cache-local-")
    env = dict(os.environ, KILN_CACHE_DIR=cache, KILN_DAEMON="off")
    kiln = {"cold_in_process_s": _first_call("kiln", kernel_dirs["kiln"], env)}
    cache = tempfile.mkdtemp(prefix="kiln-bench-cache-daemon-")
    runtime = tempfile.mkdtemp(prefix="kr-", dir="/tmp")
    env = dict(os.environ, KILN_CACHE_DIR=cache, KILN_RUNTIME_DIR=runtime)
    env.pop("KILN_DAEMON", None)
    daemon = [sys.executable, "-m", "kiln.daemon", "daemon"]
    subprocess.run(daemon + ["start"], env=env, check=True, capture_output=True, timeout=120)
    try:
        kiln["cold_warm_daemon_s"] = _first_call("kiln", kernel_dirs["kiln"], env)
        kiln["warm_s"] = _first_call("kiln", kernel_dirs["kiln"], env)
    finally:
        subprocess.run(daemon + ["stop"], env=env, capture_output=True, timeout=120)
    row["kiln"] = kiln
    return row


def triton_cdiv(a, b):
    return (a + b - 1) // b


def next_pow2(n):
    return 1 << (n - 1).bit_length()


def ratio_table(title, unit, rows, higher_is_better=True):
    regs = all("regs" in r for r in rows)
    lines = [f"### {title}", "", f"| size | kiln {unit} | Triton {unit} | PyTorch {unit} | kiln / Triton |"
             + (" registers kiln / Triton |" if regs else ""), "|---:|---:|---:|---:|---:|" + ("---:|" if regs else "")]
    for r in rows:
        ratio = r["kiln"] / r["triton"] if higher_is_better else r["triton"] / r["kiln"]
        lines.append(f"| {r['size']} | {r['kiln']:.0f} | {r['triton']:.0f} | {r['torch']:.0f} | {ratio:.2f} |"
                     + (f" {r['regs']['kiln']} / {r['regs']['triton']} |" if regs else ""))
    return "\n".join(lines) + "\n"


def matmul_table(rows) -> str:
    import matmul as tutorial
    return tutorial.table(rows)


def attention_table(rows) -> str:
    import attention as fa
    return fa.table(rows)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [("vector_add", "vector add fp32 (GB/s)", True), ("softmax", "softmax fp32, 4096 rows (GB/s)", False),
              ("layer_norm", "layer norm fwd fp16, 4096 rows (GB/s)", False)]
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.5))
    for ax, (key, title, logx) in zip(axes, panels):
        rows = results[key]
        for lib in ("kiln", "triton", "torch"):
            ax.plot([r["size"] for r in rows], [r[lib] for r in rows], marker="o", label=lib)
        ax.set_xscale("log", base=2)
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
    ax = axes[3]
    curves = sorted({(r.get("mode", "fwd"), r["dim"], r["causal"]) for r in results["attention"]})
    for mode, dim, causal in curves:
        rows = [r for r in results["attention"] if (r.get("mode", "fwd"), r["dim"], r["causal"]) == (mode, dim, causal)]
        ax.plot([r["n_ctx"] for r in rows], [r["kiln"] / r["triton"] for r in rows], marker="o",
                linestyle="-" if mode == "fwd" else "--", label=f"{mode} D{dim}{' causal' if causal else ''}")
    ax.set_xscale("log", base=2)
    ax.set_title("attention fp16: kiln / Triton")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.suptitle(f"kiln vs Triton vs PyTorch on {results['gpu']} ({results['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def attention_fp8(libs, dims, contexts):
    """Tutorial 06's fp8 forward (host descriptors, e5m2, V transposed) beside the same forward in
    fp16, each autotuned by each library (bench/attention.py's modes `host` and `fp8`)."""
    import attention as fa
    return fa.run(libs, dims, contexts, fa.CONFIGS, rounds=ROUNDS, mode="host") + \
        fa.run(libs, dims, contexts, fa.CONFIGS, rounds=ROUNDS, mode="fp8")


def sections(libs, quick: bool) -> dict:
    """name -> the measurement it makes, in the order the tables print."""
    q = quick
    return {
        "vector_add": lambda: vector_add(libs, [1 << p for p in ((20, 24, 27) if q else range(20, 28))]),
        "softmax": lambda: softmax(libs, [256, 1024, 4096, 16384] if q else [256, 512, 1024, 2048, 4096, 8192, 16384]),
        "layer_norm": lambda: layer_norm(libs, [1024, 4096, 8192] if q else [1024, 2048, 4096, 8192]),
        "softmax_odd": lambda: softmax(libs, ODD_COLUMNS[:1] if q else ODD_COLUMNS),
        "rotary": lambda: rotary(libs, [16384] if q else [4096, 16384, 65536]),
        "matmul": lambda: matmul(libs, [4096] if q else [2048, 4096, 8192]),
        "matmul_shapes": lambda: matmul(libs, ODD_SHAPES[:1] if q else ODD_SHAPES, ["fp16"]),
        "matmul_llm": lambda: matmul(libs, LLM_SHAPES[:1] if q else LLM_SHAPES, ["fp16", "bf16"]),
        "attention": lambda: attention(libs, [64, 128], [4096] if q else [1024, 4096, 16384]),
        "attention_fp8": lambda: attention_fp8(libs, [64, 128], [4096] if q else [4096, 16384]),
        "launch_us": lambda: launch_overhead(libs),
        "first_call_s": lambda: first_call({n: os.path.dirname(m.__file__) for n, m in libs.items()}),
    }


# what `--part 1` and `--part 2` measure: two device calls of about 300 s each where the whole run
# is one of about 600 s
PARTS = {1: ["vector_add", "softmax", "layer_norm", "softmax_odd", "rotary", "matmul", "matmul_shapes",
            "matmul_llm"],
         2: ["attention", "attention_fp8", "launch_us", "first_call_s"]}


def markdown(results: dict) -> str:
    """The tables of whichever sections `results` holds."""
    md = [f"## kiln vs Triton {results['triton_version']} vs PyTorch {results['torch']} on {results['gpu']}, "
          f"{results['date']}", ""]
    memory = [("vector_add", "vector add fp32 (GB/s)"), ("softmax", "fused softmax fp32, 4096 rows × N (GB/s)"),
              ("layer_norm", "layer norm forward fp16, 4096 rows × N (GB/s)"),
              ("softmax_odd", "fused softmax fp32, 4096 rows × N, N not a multiple of 16 (GB/s)"),
              ("rotary", "rotary embedding of interleaved pairs, fp16, N tokens × 32 heads × 128 (GB/s)")]
    md += [ratio_table(title, "GB/s", results[key]) for key, title in memory if key in results]
    tables = [("matmul", "matmul, N³, tutorial 03's kernel autotuned over its configs (TFLOP/s)", matmul_table),
              ("matmul_shapes", "matmul, shapes that are not multiples of 16, tutorial 03's kernel autotuned over its "
                                "configs (TFLOP/s)", matmul_table),
              ("matmul_llm", "matmul, an MLP's projections (M x N x K), tutorial 03's kernel autotuned over its "
                             "configs (TFLOP/s)", matmul_table),
              ("attention", "attention forward and backward fp16, Z=4 H=32, one FlashAttention-2 kernel source "
                            "autotuned by each library (TFLOP/s)", attention_table),
              ("attention_fp8", "attention forward on host descriptors, fp16 (`host`) and fp8 e5m2 (`fp8`; its SDPA "
                                "column is fp16's), Z=4 H=32, one kernel source autotuned by each library (TFLOP/s)",
               attention_table)]
    md += [f"#### {title}\n\n{table(results[key])}\n" for key, title, table in tables if key in results]
    if "launch_us" in results:
        lu = results["launch_us"]
        md.append(f"### launch of a tiny kernel (host µs per launch)\n\nkiln {lu['kiln']:.1f} · Triton "
                  f"{lu['triton']:.1f} · PyTorch {lu['torch']:.1f} · kiln / Triton {lu['kiln'] / lu['triton']:.2f}\n")
    if "first_call_s" in results:
        k, t = results["first_call_s"]["kiln"], results["first_call_s"]["triton"]
        md.append("### first call in a fresh process (s, after imports)\n\n"
                  "| | cold cache | cold cache, warm daemon | warm cache |\n|---|---:|---:|---:|\n"
                  f"| kiln | {k['cold_in_process_s']:.3f} | {k['cold_warm_daemon_s']:.3f} | {k['warm_s']:.3f} |\n"
                  f"| Triton | {t['cold_s']:.3f} | | {t['warm_s']:.3f} |\n"
                  f"| Triton / kiln | {t['cold_s'] / k['cold_in_process_s']:.1f}x | "
                  f"{t['cold_s'] / k['cold_warm_daemon_s']:.1f}x | {t['warm_s'] / k['warm_s']:.1f}x |\n")
    return "\n".join(md)


def merge(paths: list[str]) -> dict:
    """One result from the JSON of several partial runs (`--part`) of one GPU and library versions."""
    parts = []
    for path in paths:
        with open(path) as f:
            parts.append(json.load(f))
    for key in ("gpu", "triton_version", "torch"):
        if len({p[key] for p in parts}) != 1:
            raise SystemExit(f"the runs differ in {key}: {[p[key] for p in parts]}")
    merged = {}
    for part in parts:
        merged.update(part)
    for rows in merged.values():  # a config is a tuple in the tables, a list in JSON
        for row in rows if isinstance(rows, list) else ():
            if isinstance(row, dict) and isinstance(row.get("configs"), dict):
                row["configs"] = {lib: tuple(c) if isinstance(c, list) else c for lib, c in row["configs"].items()}
    merged["date"] = max(p["date"] for p in parts)
    return merged


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer sizes")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--rounds", type=int, default=3, help="turns each library takes per size (median)")
    parser.add_argument("--memory-rounds", type=int, default=9,
                        help="the same for vector add, softmax and layer norm")
    parser.add_argument("--no-plot", action="store_true", help="no .png beside the tables")
    parser.add_argument("--part", type=int, choices=sorted(PARTS),
                        help="only these sections, written as <date>-<gpu>-part<N>: the whole run in two calls")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="write the tables of these partial runs' JSON as one run (no GPU needed)")
    parser.add_argument("--only", nargs="*", help="run only these sections, with fewer sizes (vector_add softmax "
                                                   "layer_norm softmax_odd rotary matmul matmul_shapes matmul_llm "
                                                   "attention "
                                                   "attention_fp8 launch_us first_call_s); writes no files")
    args = parser.parse_args()
    if args.merge:
        results = merge(args.merge)
        text = markdown(results)
        results_file.save(args.out, results_file.stem(results["date"], results["gpu"]), results, text)
        print(text)
        return
    global ROUNDS, MEMORY_ROUNDS
    ROUNDS, MEMORY_ROUNDS = args.rounds, args.memory_rounds
    os.makedirs(args.out, exist_ok=True)

    libs = {"kiln": load_kernels("kiln"), "triton": load_kernels("triton")}
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    import triton
    results = {"gpu": gpu, "date": date, "torch": torch.__version__, "triton_version": triton.__version__}
    settle_clocks()
    measure = sections(libs, args.quick or bool(args.only))
    if args.only:
        for name in args.only:
            print(name, json.dumps(measure[name](), indent=1))
        return
    for name in PARTS[args.part] if args.part else measure:
        results[name] = measure[name]()
    slug = results_file.stem(date, gpu, f"part{args.part}" if args.part else "")
    text = markdown(results)
    path = results_file.save(args.out, slug, results, text)
    print(text, flush=True)
    if not args.no_plot and not args.part:  # last: matplotlib's first import on a fresh machine builds its font cache
        plot(results, path + ".png")


if __name__ == "__main__":
    main()
