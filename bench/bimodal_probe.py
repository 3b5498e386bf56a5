"""Few-microsecond kernels (vector add 1M/2M/4M, softmax 256/512 columns) on kiln and Triton in one
process: every do_bench call of 15 (the libraries taking turns), and µs per launch in a CUDA graph of
50 launches. Shows do_bench's two modes (bench/results/2026-11-24-NVIDIA_H200-bimodal.md).

    python bench/bimodal_probe.py                 # timings
    ncu --profile-from-start off --metrics gpu__time_duration.sum python bench/bimodal_probe.py ncu
"""
from __future__ import annotations

import os
import statistics
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  bench/'s own

CALLS = 15


def cases(libs):
    """(name, {library: launch}) for each kernel and size."""
    for n in (1 << 20, 1 << 21, 1 << 22):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        grid = (run.triton_cdiv(n, 1024),)
        yield f"vector add {n}", {name: (lambda k=k, x=x, y=y, out=out, n=n, grid=grid:
                                         k.add_kernel[grid](x, y, out, n, BLOCK=1024)) for name, k in libs.items()}
    for cols in (256, 512):
        x = torch.randn(4096, cols, device="cuda")
        out = torch.empty_like(x)
        yield f"softmax 4096 x {cols}", {name: (lambda k=k, x=x, out=out, cols=cols: k.softmax_kernel[(4096,)](
            out, x, x.stride(0), out.stride(0), cols, BLOCK=cols, num_warps=4)) for name, k in libs.items()}


def calls(fns: dict) -> dict:
    """Each library's do_bench medians (µs), CALLS of them, in turns."""
    got = {name: [] for name in fns}
    names = list(fns)
    for r in range(CALLS):
        for name in names[r % 2:] + names[:r % 2]:
            got[name].append(triton.testing.do_bench(fns[name], warmup=25, rep=100, return_mode="median") * 1e3)
    return got


def graph_us(fn, launches: int = 50) -> float:
    """µs per launch of `fn` replayed back to back from a CUDA graph (median of 20 replays)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    return statistics.median(times)


def main():
    profile = sys.argv[1:] == ["ncu"]
    libs = {"kiln": run.load_kernels("kiln"), "triton": run.load_kernels("triton")}
    for name, fns in cases(libs):
        for fn in fns.values():
            fn()  # compile
        torch.cuda.synchronize()
        if profile:  # three launches each, alternating, inside the profiled range
            torch.cuda.profiler.start()
            for _ in range(3):
                for fn in fns.values():
                    fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        print(name)
        for lib, times in calls(fns).items():
            print(f"  {lib}: median {statistics.median(times):.2f} min {min(times):.2f} | calls "
                  + " ".join(f"{t:.2f}" for t in times))
        print("  graph µs/launch: " + " ".join(f"{lib}={graph_us(fn):.2f}" for lib, fn in fns.items()))


if __name__ == "__main__":
    main()
