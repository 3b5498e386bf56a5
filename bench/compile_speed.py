"""CPU time of one kernel compile, kiln against Triton, on a machine without a GPU (both compile for
sm_90a: `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`, kiln under its drop-in).

Every measurement is a fresh process with an empty cache (kiln: its node cache, no daemon; Triton:
TRITON_CACHE_DIR), so nothing is found, only compiled:
- cold: the process's whole CPU time (its children's too: Triton's ptxas) when its first compile ends,
  interpreter start and `import triton` included: what a fresh compile worker pays;
- steady: the CPU time of the compile alone, in a process that compiled two other kernels first
  (a pointwise one and a small dot): what a warm worker pays;
- warm: the CPU time of the first compile call of a fresh process whose cache already holds the
  kernel (a process before it compiled it): what a rank's first kernel costs on a warm node.
Steady and warm start with the kernel's module loaded (its source executed, its @jit functions made),
as a job's is before its first compile, and the cycle collector just run (a full pass falling due in
the compile measured, set off by what came before, costs 10-20 ms here); cold counts all of it.
Each compile also reports its stages (kiln: frontend, passes, lowering, LLVM O3, PTX, nvJitLink
links, a standalone ptxas with its process's CPU where a kernel sets its warps' registers; Triton:
frontend, ttir, ttgir, llir, ptx, cubin) and how often kiln ran its pass list and linked. The
median of --reps processes is reported.

    python bench/compile_speed.py --triton-python /tmp/tv/bin/python [--reps 3] [--kernels a,b]

`--triton-python` is an interpreter with Triton 3.6 installed (a venv: installing it beside kiln
would shadow the drop-in); without it only kiln is measured. Figures go to bench/results/.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile

import kernel_source  # bench/'s own: the worker runs as a script from bench/

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (file, function, {parameter: type | constexpr value}, {num_warps, num_stages}); every pointer
# and i32 parameter is declared divisible by 16, as the JIT declares them for the benchmarks' shapes
# (4096 and its multiples; strides of 1 are constexprs). Without the strides' divisibility kiln's
# matmul takes the mma.sync path (no aligned rows for cp.async or TMA), not wgmma.
KERNELS = {
    "vector_add": ("kernels.py", "add_kernel",
                   {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": 1024},
                   {"num_warps": 4, "num_stages": 3}),
    "softmax_row": ("kernels.py", "softmax_kernel",
                    {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32", "out_stride": "i32", "n_cols": "i32",
                     "BLOCK": 1024}, {"num_warps": 4, "num_stages": 3}),
    "layer_norm": ("kernels.py", "layer_norm_kernel",
                   {"X": "*fp16", "Y": "*fp16", "W": "*fp16", "B": "*fp16", "Mean": "*fp32", "Rstd": "*fp32",
                    "stride": "i32", "N": "i32", "eps": "fp32", "BLOCK": 1024}, {"num_warps": 8, "num_stages": 3}),
    "matmul_128x256x64": ("kernels.py", "matmul_kernel",
                          {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                           "stride_am": "i32", "stride_ak": 1, "stride_bk": "i32", "stride_bn": 1, "stride_cm": "i32",
                           "stride_cn": 1, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
                          {"num_warps": 8, "num_stages": 3}),
    "matmul_64x64x32": ("kernels.py", "matmul_kernel",
                        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                         "stride_am": "i32", "stride_ak": 1, "stride_bk": "i32", "stride_bn": 1, "stride_cm": "i32",
                         "stride_cn": 1, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
                        {"num_warps": 4, "num_stages": 2}),
    "attention_fwd": ("kernels.py", "attention_fwd_kernel",
                      {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp16", "M": "*fp32", "sm_scale": "fp32",
                       **{f"stride_{t}{d}": "i32" for t in "qkvo" for d in "zh"},
                       "stride_qm": "i32", "stride_qd": 1, "stride_kn": "i32", "stride_kd": 1,
                       "stride_vn": "i32", "stride_vd": 1, "stride_om": "i32", "stride_od": 1,
                       "H": "i32", "N_CTX": "i32", "HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": False},
                      {"num_warps": 4, "num_stages": 3}),
    "inductor_pointwise": ("inductor_kernels.py", "triton_poi_fused_add_erf_mul_sigmoid_tanh_0",
                           {"in_ptr0": "*bf16", "in_ptr1": "*bf16", "out_ptr0": "*bf16", "xnumel": "i32",
                            "XBLOCK": 1024}, {"num_warps": 4, "num_stages": 1}),
    "inductor_persistent_reduction": ("inductor_kernels.py", "triton_per_fused__softmax_1",
                                      {"in_ptr0": "*bf16", "out_ptr2": "*bf16", "xnumel": "i32", "rnumel": "i32",
                                       "XBLOCK": 1}, {"num_warps": 8, "num_stages": 1}),
    "inductor_looped_reduction": ("inductor_kernels.py", "triton_red_fused_mean_mul_pow_rsqrt_2",
                                  {"in_out_ptr0": "*fp32", "in_ptr0": "*bf16", "in_ptr1": "*bf16", "out_ptr0": "*bf16",
                                   "xnumel": "i32", "rnumel": "i32", "XBLOCK": 1, "RBLOCK": 2048},
                                  {"num_warps": 8, "num_stages": 1}),
    "inductor_rotary": ("inductor_kernels.py", "triton_poi_fused_add_cat_mul_3",
                        {"in_ptr0": "*bf16", "in_ptr1": "*bf16", "in_ptr2": "*bf16", "out_ptr0": "*bf16",
                         "xnumel": "i32", "XBLOCK": 1024}, {"num_warps": 4, "num_stages": 1}),
    "inductor_foreach_adamw": ("inductor_kernels.py", "triton_for_fused_addcdiv_lerp_pow_sqrt_0",
                               {**{f"in_ptr{i}": "*fp32" for i in range(20)}, **{f"out_ptr{i}": "*fp32" for i in range(12)}},
                               {"num_warps": 4, "num_stages": 1}),
}
MODES = ("steady", "cold", "warm")

# compiled before a steady measurement: specializations no measured kernel has
WARMUP = [
    ("kernels.py", "add_kernel", {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": 256},
     {"num_warps": 2, "num_stages": 1}),
    ("kernels.py", "matmul_kernel",
     {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
      "stride_ak": 1, "stride_bk": "i32", "stride_bn": 1, "stride_cm": "i32", "stride_cn": 1,
      "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, {"num_warps": 4, "num_stages": 2}),
]


def cpu_ms() -> float:
    """This process's CPU time and that of its children that ended (Triton runs ptxas as one)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime)


# ---- the worker: one process, one measured compile --------------------------------------------------

_MODULES: dict = {}


def kernel_module(compiler: str, file: str):
    """bench/`file` for `compiler`, loaded once per process: a job imports its kernels' module once,
    and executing it (its @jit decorations) is not a compile."""
    if (compiler, file) not in _MODULES:
        _MODULES[compiler, file] = kernel_source.load(file, compiler)
    return _MODULES[compiler, file]


def compile_one(compiler: str, file: str, function: str, params: dict, options: dict):
    import triton  # kiln's drop-in or Triton, as the worker's environment says
    from triton.backends.compiler import GPUTarget
    fn = getattr(kernel_module(compiler, file), function)
    if sorted(params) != sorted(fn.arg_names):
        raise SystemExit(f"{function}: the spec names {sorted(params)}, the kernel {fn.arg_names}")
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):  # in the kernel's order: attrs are keyed by position
        kind = params[name]
        if isinstance(kind, str):
            signature[name] = kind
            if kind.startswith("*") or kind == "i32":
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[name], constexprs[name] = "constexpr", kind
    src = triton.compiler.ASTSource(fn, signature, constexprs, attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(options))
    if not kernel.asm.get("cubin"):
        raise SystemExit(f"{compiler} made no cubin for {function}")
    return kernel


class StageTimers:
    """CPU milliseconds and calls per stage, by wrapping the functions that do each stage."""

    def __init__(self):
        self.ms, self.calls = {}, {}

    def wrap(self, owner, attr: str, stage: str) -> None:
        inner = getattr(owner, attr)

        def timed(*args, **kwargs):
            t0 = cpu_ms()
            try:
                return inner(*args, **kwargs)
            finally:
                self.ms[stage] = self.ms.get(stage, 0.0) + cpu_ms() - t0
                self.calls[stage] = self.calls.get(stage, 0) + 1
        setattr(owner, attr, timed)

    def wrap_everywhere(self, prefix: str, function, stage: str) -> None:
        """Wrap `function` in every loaded module of `prefix` that holds it (`from x import f` copies)."""
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith(prefix):
                for attr, value in list(vars(module).items()):
                    if value is function:
                        self.wrap(module, attr, stage)


def time_kiln_stages(timers: StageTimers) -> None:
    import kiln.codegen.compiler  # noqa: F401  (loads what the wrapped names live in)
    import kiln.daemon.tiers  # noqa: F401
    from kiln.codegen import backend, nvjitlink, ptxas
    from kiln.codegen.lower import lower_function
    from kiln.codegen.pipeline import run_passes
    from kiln.ast_to_ir import build_kernel
    for function, stage in ((build_kernel, "frontend"), (run_passes, "passes"), (lower_function, "lowering"),
                            (backend.optimize, "llvm_o3"), (backend.for_emission, "llir_text"),
                            (backend.emit_ptx, "ptx"),
                            (nvjitlink.link_cubin, "nvjitlink"), (ptxas.assemble, "ptxas")):
        timers.wrap_everywhere("kiln", function, stage)


def time_triton_stages(timers: StageTimers) -> None:
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import compiler
    timers.wrap(compiler.ASTSource, "make_ir", "frontend")
    add_stages = CUDABackend.add_stages

    def timed_stages(self, stages, options, *args, **kwargs):
        add_stages(self, stages, options, *args, **kwargs)
        for name in list(stages):
            holder = type("Stage", (), {"fn": staticmethod(stages[name])})
            timers.wrap(holder, "fn", name)
            stages[name] = holder.fn
    CUDABackend.add_stages = timed_stages


def worker(args) -> None:
    kernel = KERNELS[args.kernel]
    if args.mode == "steady":
        for spec in WARMUP:
            compile_one(args.compiler, *spec)
    timers = StageTimers()
    (time_kiln_stages if args.compiler == "kiln" else time_triton_stages)(timers)
    if args.mode != "cold":  # (cold: the whole process, its imports of the module too)
        kernel_module(args.compiler, kernel[0])
        gc.collect()  # what came before leaves no collection due in the compile measured
    t0 = cpu_ms()
    compile_one(args.compiler, *kernel)
    t1 = cpu_ms()
    print(json.dumps({"cpu_ms": t1 if args.mode == "cold" else t1 - t0, "stages_ms": timers.ms,
                      "stage_calls": timers.calls}))


# ---- the driver ------------------------------------------------------------------------------------

def compiler_env(compiler: str, scratch: str) -> dict:
    """The environment of a process that compiles with `compiler` ("kiln": its drop-in, no daemon) into
    empty caches under `scratch`."""
    # bytecode written and read as a user's install has it (pip compiles it; an editable install
    # writes it on first import), whatever this shell says
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KILN_", "TRITON_")) and k != "PYTHONDONTWRITEBYTECODE"}
    if compiler == "kiln":
        env.update(KILN_DROPIN="1", KILN_DAEMON="off", KILN_CACHE_DIR=os.path.join(scratch, "kiln"),
                   KILN_RUNTIME_DIR=os.path.join(scratch, "run"))
    else:
        env.update(TRITON_CACHE_DIR=os.path.join(scratch, "triton"), TRITON_HOME=scratch)
    return env


def measure(compiler: str, python: str, kernel: str, mode: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="kiln-compile-speed-") as scratch:
        env = compiler_env(compiler, scratch)
        if mode == "warm":  # a process before this one compiled the kernel into the same cache
            _worker(python, compiler, kernel, "cold", env)
        done = _worker(python, compiler, kernel, mode, env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _worker(python: str, compiler: str, kernel: str, mode: str, env: dict):
    done = subprocess.run([python, os.path.abspath(__file__), "--worker", compiler, "--kernel", kernel,
                           "--mode", mode], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{compiler} {kernel} {mode}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done


def median_run(runs: list[dict]) -> dict:
    """The run of median CPU time (its stages are one compile's, not a mix)."""
    ordered = sorted(runs, key=lambda r: r["cpu_ms"])
    return {**ordered[len(ordered) // 2], "all_cpu_ms": [round(r["cpu_ms"], 1) for r in runs]}


def table(results: dict, compilers: list[str]) -> str:
    lines = []
    for mode in MODES:
        lines += [f"\n### {mode}: CPU ms per compile (median of the runs)\n",
                  "| kernel | " + " | ".join(compilers) + (" | kiln / Triton |" if len(compilers) == 2 else " |"),
                  "|---|" + "---:|" * (len(compilers) + (len(compilers) == 2))]
        for kernel, by in results.items():
            cells = [f"{by[c][mode]['cpu_ms']:.0f}" for c in compilers]
            if len(compilers) == 2:
                cells.append(f"**{by['kiln'][mode]['cpu_ms'] / by['triton'][mode]['cpu_ms']:.2f}**")
            lines.append(f"| {kernel} | " + " | ".join(cells) + " |")
    lines += ["\n### steady: where the CPU time goes (ms; calls where more than one)\n"]
    for kernel, by in results.items():
        for c in compilers:
            run = by[c]["steady"]
            stages = ", ".join(f"{s} {ms:.0f}" + (f" ×{run['stage_calls'][s]}" if run["stage_calls"][s] > 1 else "")
                               for s, ms in run["stages_ms"].items())
            lines.append(f"- {kernel}, {c}: {stages}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triton-python", help="an interpreter with Triton 3.6 installed (not kiln's)")
    parser.add_argument("--reps", type=int, default=3, help="processes per kernel, compiler and mode")
    parser.add_argument("--kernels", help=f"comma-separated, of: {', '.join(KERNELS)}")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="where the dated figures go")
    parser.add_argument("--worker", choices=("kiln", "triton"), help=argparse.SUPPRESS)
    parser.add_argument("--kernel", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.compiler = args.worker
        return worker(args)
    kernels = args.kernels.split(",") if args.kernels else list(KERNELS)
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernels {unknown}; known: {', '.join(KERNELS)}")
    pythons = {"kiln": sys.executable, **({"triton": args.triton_python} if args.triton_python else {})}
    for c, py in pythons.items():  # untimed: writes the bytecode of both packages and of bench/
        measure(c, py, kernels[0], "steady")
    results = {}
    for kernel in kernels:
        # the compilers take turns, rep by rep: a VM whose speed drifts over a minute (this one's Triton
        # steady figures moved 402 -> 491 ms between runs) shifts both alike, not one of them
        runs = {(c, mode): [] for c in pythons for mode in MODES}
        for _ in range(args.reps):
            for mode in MODES:
                for c, py in pythons.items():
                    runs[c, mode].append(measure(c, py, kernel, mode))
        results[kernel] = {c: {mode: median_run(runs[c, mode]) for mode in MODES} for c in pythons}
        print(kernel, {c: {m: round(r["cpu_ms"]) for m, r in by.items()} for c, by in results[kernel].items()},
              flush=True)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    heading = (f"# Compile CPU time, kiln vs Triton (sm_90a, no GPU), {datetime.date.today()}\n\n"
               f"{machine}; `python bench/compile_speed.py --reps {args.reps}`; fresh process and empty cache "
               "per compile (warm: the cache one earlier process filled); cold includes interpreter start and "
               "imports.\n")
    markdown = heading + table(results, list(pythons))
    print(markdown)
    sys.path.insert(0, HERE)
    import results_file
    path = results_file.save(args.out, results_file.stem(datetime.date.today().isoformat(), "cpu", "compile-speed"),
                             results, markdown)
    print(f"saved {path}.md")


if __name__ == "__main__":
    main()
