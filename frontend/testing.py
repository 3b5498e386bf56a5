"""`kiln.testing`: benchmarking and comparison helpers with Triton's signatures."""
from __future__ import annotations

import statistics
import time

import numpy as np

from . import config


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
    if return_mode not in ("min", "max", "mean", "median", "all"):
        raise ValueError(f"unknown return_mode {return_mode!r}")
    torch = _cuda_torch()
    times = _bench_cuda(torch, fn, warmup, rep, grad_to_none) if torch else _bench_wall(fn, warmup, rep)
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
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")  # larger than any L2
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-6)
    n_warmup, n_repeat = max(1, int(warmup / estimate)), max(1, int(rep / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    for i in range(n_repeat):
        for x in grad_to_none or ():
            x.grad = None
        cache.zero_()
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
