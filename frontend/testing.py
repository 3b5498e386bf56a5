"""`kiln.testing`: benchmarking and comparison helpers with Triton's signatures."""
from __future__ import annotations

import contextlib
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

from kiln.cache import env

from . import config
from .device_peaks import get_dram_gbps, get_max_simd_tflops, get_max_tensorcore_tflops  # noqa: F401 - Triton's API


def _cuda_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() and not config.interpret() else None


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """Time `fn` in milliseconds: CUDA events with an L2 flush before each run on a GPU, the wall clock otherwise.

    Runs `fn` for about `warmup` ms, then enough times to fill about `rep` ms; returns the
    `quantiles` of the runs if given, else the statistic named by `return_mode`
    (min, max, mean, median or all).
    """
    _check_return_mode(return_mode)
    torch = _cuda_torch()
    times = _bench_cuda(torch, fn, warmup, rep, grad_to_none) if torch else _bench_wall(fn, warmup, rep)
    return _summarize(times, quantiles, return_mode)


@contextlib.contextmanager
def cuda_graph_without_gc(*args, **kwargs):
    """Triton 3.9's: `torch.cuda.graph(*args, **kwargs)` with Python's garbage collector off while it
    captures, so that no kernel object is collected (its module unloaded) in the middle of a capture."""
    import gc

    import torch
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(*args, **kwargs) as graph:
            yield graph
    finally:
        if was_enabled:
            gc.enable()


def do_bench_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
    """Time `fn` in milliseconds with the launch overhead taken out, as Triton's: on a side stream,
    after one warm-up call and an estimate from 5 calls, a CUDA graph (torch.cuda.CUDAGraph) of as
    many calls as fill about `rep` ms is captured and replayed 10 times; each replay's time per
    call is one sample. No L2 flush. `quantiles` / `return_mode` as for `do_bench`; tensors in
    `grad_to_none` have their gradient reset before every call. Without a GPU, the wall clock."""
    _check_return_mode(return_mode)
    torch = _cuda_torch()
    if torch is None:
        return _summarize(_bench_wall(fn, 0, rep), quantiles, return_mode)
    with torch.cuda.stream(_side_stream(torch)):  # as Triton: warm-up, estimate and capture off the caller's stream
        times = _bench_graph(torch, fn, rep, grad_to_none)
    return _summarize(times, quantiles, return_mode)


def _bench_graph(torch, fn, rep, grad_to_none):
    fn()  # compiles and loads what fn launches, which a capture may not do
    for x in grad_to_none or ():
        x.detach_()
        x.requires_grad_(True)
        x.grad = None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(end) / 5
    calls = max(1, int(rep / estimate)) if estimate > 0 else 1000
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            for x in grad_to_none or ():
                x.grad = None
            fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return times


def do_bench_proton(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """Triton 3.9's: the time in milliseconds of the work `fn` runs on the device, as the profiler
    (kiln.profiler, proton's API) measures it, without the host's launch overhead. After calls for
    about `warmup` ms, each of about `rep` ms worth of calls runs in a profiler scope of its own,
    the L2 flushed before it outside the scope; a call's time is the sum of its kernels' times.
    On a GPU the profiler times kiln's launches with CUDA events (and a scope in which no kiln
    kernel ran, other work, between events around it); under KILN_INTERPRET, interpreted launches
    on the host clock. A launch with neither fails as it fails in `do_bench`. `quantiles` and
    `return_mode` as for `do_bench`."""
    _check_return_mode(return_mode)
    torch = _cuda_torch()
    flush = _l2_flush(torch)
    estimate = _estimate_ms(torch, fn, flush)
    if estimate == 0:  # as Triton's: too fast for the clock
        n_warmup = n_repeat = 1000
    else:
        n_warmup, n_repeat = max(1, int(warmup / estimate)), max(1, int(rep / estimate))
    for _ in range(n_warmup):
        fn()
    _synchronize(torch)
    return _summarize(_profiled_calls(torch, fn, n_repeat, grad_to_none, flush), quantiles, return_mode)


def do_bench_cudagraph_proton(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
    """Triton 3.9's: as `do_bench_cudagraph`, a CUDA graph of about `rep` ms worth of calls replayed
    10 times, but each call timed apart, with the L2 flushed before it (in the graph, outside its
    time); a call's time is its mean over the replays. Proton follows the graph's kernels through
    CUPTI; kiln's profiler cannot follow a replay, so each call is timed between CUDA events recorded
    in the graph: its kernels and the gaps between them. Without a GPU, `do_bench_proton` with no
    warm-up, as `do_bench_cudagraph` falls back to the wall clock."""
    _check_return_mode(return_mode)
    torch = _cuda_torch()
    if torch is None:
        return do_bench_proton(fn, 0, rep, grad_to_none, quantiles, return_mode)
    with torch.cuda.stream(_side_stream(torch)):  # as Triton: off the caller's stream
        times = _graph_calls_timed(torch, fn, rep, grad_to_none)
    return _summarize(times, quantiles, return_mode)


def _side_stream(torch):
    """A new stream that starts after the work the caller's stream holds: the writes that made `fn`'s
    inputs (a `torch.zeros` just before, say) land before the first timed call reads them."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    return side


def _l2_flush(torch):
    """What empties the L2 before a timed call: a write of more than it holds (nothing off the GPU)."""
    if torch is None:
        return lambda: None
    return torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda").zero_


def _synchronize(torch) -> None:
    if torch is not None:
        torch.cuda.synchronize()


def _estimate_ms(torch, fn, before_each) -> float:
    """The mean time of a call of `fn` over 5 calls after a first one, each after `before_each()`."""
    fn()
    _synchronize(torch)
    if torch is None:
        start = time.perf_counter()
        for _ in range(5):
            before_each()
            fn()
        return (time.perf_counter() - start) * 1e3 / 5
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        before_each()
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 5


def _profiled_calls(torch, fn, calls, grad_to_none, flush) -> list:
    """The device time (ms) of each of `calls` calls of `fn`, each in a profiler scope of its own."""
    from kiln import profiler
    prefix = f"do_bench_proton.{uuid.uuid4().hex}."
    with tempfile.TemporaryDirectory(prefix="kiln-bench-proton-") as folder:
        session = profiler.start(os.path.join(folder, "profile"))
        try:
            for i in range(calls):
                for x in grad_to_none or ():
                    x.grad = None
                flush()
                with profiler.scope(f"{prefix}{i:08d}"):
                    fn()
            _synchronize(torch)
            profiler.deactivate(session, flushing=True)
            times = _scope_times(profiler.data.get(session), prefix)
        finally:
            profiler.finalize(session)
    if not times:
        raise RuntimeError("do_bench_proton: the profiler measured nothing that fn ran (it times kiln's launches, "
                           "and other work on a GPU)")
    return times


def _scope_times(profile, prefix: str) -> list:
    """The device time (ms) under each scope named `prefix...` of a hatchet profile, in the scopes'
    order; a scope with none is left out, as Triton leaves it."""
    found = {}

    def visit(node):
        name = node["frame"]["name"]
        if name.startswith(prefix):
            found[name] = _leaf_time_ns(node) / 1e6
            return
        for child in node["children"]:
            visit(child)

    visit(profile[0])
    return [found[name] for name in sorted(found) if found[name] > 0]


def _leaf_time_ns(node) -> float:
    """A frame's kernel time: its own where it is a kernel (a leaf), else its children's."""
    if not node["children"]:
        return node["metrics"].get("time (ns)", 0)
    return sum(_leaf_time_ns(child) for child in node["children"])


def _graph_calls_timed(torch, fn, rep, grad_to_none) -> list:
    """Per call of a graph of about `rep` ms of calls, its mean time over 10 replays (ms)."""
    fn()  # compiles and loads what fn launches, which a capture may not do
    for x in grad_to_none or ():
        x.detach_()
        x.requires_grad_(True)
        x.grad = None
    estimate = _estimate_ms(torch, fn, lambda: None)
    calls = 1000 if estimate == 0 else max(1, int(rep / estimate))
    flush = _l2_flush(torch)
    # external: recorded as nodes of the graph, so that each replay records them again
    marks = [tuple(torch.cuda.Event(enable_timing=True, external=True) for _ in range(2)) for _ in range(calls)]
    graph = torch.cuda.CUDAGraph()
    with cuda_graph_without_gc(graph):
        for start, end in marks:
            for x in grad_to_none or ():
                x.grad = None
            flush()
            start.record()
            fn()
            end.record()
    torch.cuda.synchronize()
    totals = [0.0] * calls
    for _ in range(10):
        graph.replay()
        torch.cuda.synchronize()
        totals = [total + start.elapsed_time(end) for total, (start, end) in zip(totals, marks)]
    return [total / 10 for total in totals]


def cublas():
    """Triton 3.9's: the current device's cuBLAS handle, one per device with its 32 MiB workspace
    (kiln's `triton._C.libtriton.nvidia.cublas.CublasLt`, which runs PyTorch's cuBLASLt)."""
    import torch
    return _cublas_for_device(torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cublas_for_device(device: int):
    import torch
    from .dropin.libtriton import CublasLt
    return CublasLt(torch.empty(32 * 1024 * 1024, device=device, dtype=torch.uint8))


def _check_return_mode(return_mode):
    if return_mode not in ("min", "max", "mean", "median", "all"):
        raise ValueError(f"unknown return_mode {return_mode!r}")


def _summarize(times, quantiles, return_mode):
    """The `quantiles` of `times` (linear interpolation; one value alone if one was asked), else
    the statistic `return_mode` names."""
    if quantiles is not None:
        result = [float(q) for q in np.quantile(times, quantiles)]
        return result[0] if len(result) == 1 else result
    if return_mode == "all":
        return times
    return {"min": min, "max": max, "mean": statistics.mean, "median": statistics.median}[return_mode](times)


def _bench_wall(fn, warmup, rep):
    start = time.perf_counter()
    fn()
    estimate = max((time.perf_counter() - start) * 1e3, 1e-6)
    for _ in range(max(0, int(warmup / estimate) - 1)):
        fn()
    times = []
    for _ in range(max(1, int(rep / estimate))):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _bench_cuda(torch, fn, warmup, rep, grad_to_none):
    flush = _l2_flush(torch)
    estimate = max(_estimate_ms(torch, fn, flush), 1e-6)
    n_warmup, n_repeat = max(1, int(warmup / estimate)), max(1, int(rep / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    for i in range(n_repeat):
        for x in grad_to_none or ():
            x.grad = None
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _to_numpy(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    """Assert that two arrays or tensors agree to within atol (default 1e-2) + rtol * |y| (default 0)."""
    x, y = _to_numpy(x), _to_numpy(y)
    atol = atol(x.dtype) if callable(atol) else (1e-2 if atol is None else atol)
    rtol = rtol(x.dtype) if callable(rtol) else (0.0 if rtol is None else rtol)
    if x.dtype == np.bool_ or y.dtype == np.bool_:
        np.testing.assert_array_equal(x, y, err_msg=err_msg)
        return
    np.testing.assert_allclose(x.astype(np.float64), y.astype(np.float64), atol=atol, rtol=rtol,
                               equal_nan=True, err_msg=err_msg)


# --- perf_report: Triton's benchmark tables and plots -----------------------------------------

class Benchmark:
    """One benchmark table (and plot) of `perf_report`: for every value of `x_vals` (one per
    name of `x_names`, or a tuple with one value for each) and every `line_vals` value of
    argument `line_arg`, the benchmarked function is called with those and the fixed `args`;
    it returns a number, or (value, min, max)."""

    def __init__(self, x_names, x_vals, line_arg, line_vals, line_names, plot_name, args, xlabel="", ylabel="",
                 x_log=False, y_log=False, styles=None):
        self.x_names, self.x_vals, self.x_log = list(x_names), list(x_vals), x_log
        self.line_arg, self.line_vals, self.line_names = line_arg, list(line_vals), list(line_names)
        self.plot_name, self.args, self.xlabel, self.ylabel = plot_name, dict(args), xlabel, ylabel
        self.y_log, self.styles = y_log, styles


class Mark:
    """A function under `perf_report`; `.run(print_data=True)` measures and prints its tables."""

    def __init__(self, fn, benchmarks):
        self.fn, self.benchmarks = fn, benchmarks

    def _measure(self, bench: Benchmark, **kwargs):
        """The rows (x values, then one (value, min, max) per line) of one benchmark."""
        rows = []
        for x in bench.x_vals:
            xs = list(x) if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)
            if len(xs) != len(bench.x_names):
                raise ValueError(f"Expected {len(bench.x_names)} values, got {x}")
            results = []
            for y in bench.line_vals:
                ret = self.fn(**dict(zip(bench.x_names, xs)), **{bench.line_arg: y}, **bench.args, **kwargs)
                results.append(tuple(ret) if isinstance(ret, (list, tuple)) else (ret, None, None))
            rows.append((xs, results))
        return rows

    def _run(self, bench: Benchmark, save_path, show_plots, print_data, diff_col=False, save_precision=6, **kwargs):
        rows = self._measure(bench, **kwargs)
        labels = [f"{name} ({bench.ylabel})" for name in bench.line_names]
        columns = bench.x_names + labels
        table = [xs + [r[0] for r in results] for xs, results in rows]
        if diff_col and len(columns) == 2:
            columns, table = columns + ["Diff"], [row + [row[1] - row[0]] for row in table]
        if bench.plot_name and (show_plots or save_path):
            _plot(bench, rows, labels, show_plots, save_path)
        if print_data:
            print(bench.plot_name + ":")
            print(_format_table(columns, table))
        if save_path:
            import csv
            with open(os.path.join(save_path, f"{bench.plot_name}.csv"), "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(columns)
                writer.writerows([[f"{v:.{save_precision}f}" if isinstance(v, float) else v for v in row]
                                  for row in table])
        return _data_frame(columns, table)

    def run(self, show_plots=False, print_data=False, save_path="", return_df=False, **kwargs):
        single = isinstance(self.benchmarks, Benchmark)
        benchmarks = [self.benchmarks] if single else list(self.benchmarks)
        if save_path:
            os.makedirs(save_path, exist_ok=True)
        frames = []
        try:
            for bench in benchmarks:
                frames.append(self._run(bench, save_path, show_plots, print_data, **kwargs))
        finally:
            if save_path:
                with open(os.path.join(save_path, "results.html"), "w") as html:
                    html.write("<html><body>\n")
                    html.writelines(f'<image src="{b.plot_name}.png"/>\n' for b in benchmarks[:len(frames)])
                    html.write("</body></html>\n")
        if return_df:
            return frames[0] if single else frames
        return None


def perf_report(benchmarks):
    """Mark a function for benchmarking over `benchmarks` (one `Benchmark` or a list); call
    `.run(print_data=True, show_plots=..., save_path=...)` on the result."""
    return lambda fn: Mark(fn, benchmarks)


def _format_table(columns, table) -> str:
    """The table as pandas prints a DataFrame: an index column, then right-aligned columns."""
    def text(v):
        return f"{v:.6f}".rstrip("0").rstrip(".") if isinstance(v, float) and v == v and abs(v) < 1e15 else str(v)
    cells = [[""] + list(columns)] + [[str(i)] + [text(v) for v in row] for i, row in enumerate(table)]
    widths = [max(len(row[c]) for row in cells) for c in range(len(cells[0]))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)).rstrip() for row in cells)


def _data_frame(columns, table):
    """A pandas DataFrame when pandas is installed (Triton returns one), else the rows as dicts."""
    try:
        import pandas as pd
    except ImportError:
        return [dict(zip(columns, row)) for row in table]
    return pd.DataFrame(table, columns=columns)


def _plot(bench, rows, labels, show_plots, save_path):
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        import warnings
        warnings.warn("perf_report: matplotlib is not installed, so no plot is drawn", stacklevel=3)
        return
    plt.figure()
    ax = plt.subplot()
    xs = [x[0] for x, _ in rows]
    for i, label in enumerate(labels):
        color, style = bench.styles[i] if bench.styles else (None, None)
        ax.plot(xs, [results[i][0] for _, results in rows], label=label, color=color, ls=style)
        lo, hi = [results[i][1] for _, results in rows], [results[i][2] for _, results in rows]
        if all(v is not None for v in lo + hi):
            ax.fill_between(xs, [float(v) for v in lo], [float(v) for v in hi], alpha=0.15, color=color)
    ax.legend()
    ax.set_xlabel(bench.xlabel or bench.x_names[0])
    ax.set_ylabel(bench.ylabel)
    ax.set_xscale("log" if bench.x_log else "linear")
    ax.set_yscale("log" if bench.y_log else "linear")
    if show_plots:
        plt.show()
    if save_path:
        plt.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
    plt.close()


# --- the GPU's own settings, through nvidia-smi (Triton's helpers: GPU 0, as nvidia-smi numbers them) ---

def nvsmi(attrs) -> list[int]:
    """GPU 0's `nvidia-smi --query-gpu` fields `attrs` (e.g. ["clocks.max.sm"]) as integers, without units.
    PyTorch's Inductor reads the maximal SM clock this way for its flop estimates."""
    out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=" + ",".join(attrs), "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    fields = [f.strip() for f in out.strip().splitlines()[0].split(",")] if out.strip() else []
    if len(fields) != len(attrs) or not all(f.lstrip("-").isdigit() for f in fields):
        raise ValueError(f"nvidia-smi gave {out.strip()!r} for {list(attrs)}: not one integer per field")
    return [int(f) for f in fields]


def _smi(*args) -> None:
    subprocess.run(["nvidia-smi", "-i", "0", *args], capture_output=True, check=True)


@contextlib.contextmanager
def set_gpu_clock(ref_sm_clock=1350, ref_mem_clock=1215):
    """Lock GPU 0's SM and memory clocks (MHz) for the block, as Triton's benchmarks do (it needs the rights
    to change them), and give back (peak fp16 tensor-core TFLOP/s, peak DRAM GB/s) at those clocks, from
    the device's own properties; the clocks are unlocked after, whatever happens."""
    try:
        _smi("-pm", "1")
        _smi(f"--lock-gpu-clocks={ref_sm_clock},{ref_sm_clock}")
        _smi(f"--lock-memory-clocks={ref_mem_clock},{ref_mem_clock}")
        sm_clock, mem_clock = nvsmi(["clocks.current.sm", "clocks.current.memory"])
        if abs(sm_clock - ref_sm_clock) >= 10 or abs(mem_clock - ref_mem_clock) >= 10:
            raise RuntimeError(f"GPU clocks are {sm_clock} / {mem_clock} MHz after locking them at "
                               f"{ref_sm_clock} / {ref_mem_clock}")
        yield _peaks_at(ref_sm_clock, ref_mem_clock)
    finally:
        _smi("-pm", "0")
        _smi("-rgc")
        _smi("-rmc")


def _peaks_at(sm_clock: int, mem_clock: int) -> tuple[float, float]:
    """(fp16 tensor-core TFLOP/s, DRAM GB/s) of the current device at these clocks (MHz)."""
    tflops = get_max_tensorcore_tflops("fp16", sm_clock * 1000)
    gbps = get_dram_gbps() * mem_clock / max(1, nvsmi(["clocks.max.memory"])[0])
    return tflops, gbps


def cuda_memcheck(**target_kwargs):
    """A pytest test decorator (Triton's): where the test's parameters include `target_kwargs`, the test runs
    again in a child pytest under compute-sanitizer's memcheck, which must finish with no error; elsewhere, and
    inside that child, it runs as it is. The test takes pytest's `request` fixture (to name its case)."""
    def decorator(test):
        @functools.wraps(test)
        def wrapper(*args, **kwargs):
            if env.under_sanitizer() or not target_kwargs.items() <= kwargs.items():
                return test(*args, **kwargs)
            request = kwargs.get("request")
            if request is None:
                raise TypeError(f"{test.__name__}: a memcheck'd test takes the `request` fixture")
            case = f"{request.node.path}::{test.__name__}[{request.node.callspec.id}]"
            out = subprocess.run(["compute-sanitizer", "--tool", "memcheck", sys.executable, "-m", "pytest", "-q", case],
                                 capture_output=True, text=True,
                                 env={**env.environment(), env.UNDER_SANITIZER: "1",
                                      "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
            if out.returncode != 0 or "ERROR SUMMARY: 0 errors" not in out.stdout:
                raise AssertionError(f"compute-sanitizer found errors in {case}:\n{out.stdout[-3000:]}")
        return wrapper
    return decorator
