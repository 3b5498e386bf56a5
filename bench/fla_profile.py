"""fla's chunked forwards kernel by kernel: each kernel's GPU time under torch.profiler, under whatever
`import triton` is (upstream Triton, or kiln with KILN_DROPIN=1), so that two libraries' runs of the same op
can be compared launch by launch (bench/fla_ops.py times the whole op):

    FLA=/path/to/flash-linear-attention python bench/fla_profile.py                  # Triton
    FLA=/path/to/flash-linear-attention KILN_DROPIN=1 python bench/fla_profile.py    # kiln

CASES (gdn, simple_gla, gla; default gdn,simple_gla), B and T from the environment (2, 4096), H 16, D 128,
bf16, forward only. Per case, after a first call (fla's autotuning, every compile) and three warm-ups: the
median over CALLS calls (10) of each kernel's GPU time, its grid's launches a call, and the CUDA-event time of
the calls back to back (the host's share included), and the config each autotuned kernel runs. One JSON
line per case. CONFIGS (bench/fla_configs.py) holds the kernels it names to those configs (each library's
build of one config, its autotuner choosing among those that remain).
"""
import gc
import json
import os
import statistics
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import fla_configs  # beside this file

sys.path.insert(0, os.environ.get("FLA", "."))  # a checkout of flash-linear-attention (its `fla` package)
from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402
from fla.ops.gla import chunk_gla  # noqa: E402
from fla.ops.simple_gla import chunk_simple_gla  # noqa: E402

lib = "kiln" if os.environ.get("KILN_DROPIN") == "1" else "triton"
B, T, H, D = int(os.environ.get("B", 2)), int(os.environ.get("T", 4096)), 16, 128
CALLS = int(os.environ.get("CALLS", 10))


def make(case):
    """The case's forward as a function of nothing (its inputs made once, seeded)."""
    gen = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=gen)
    q, k, v = r(B, T, H, D), r(B, T, H, D), r(B, T, H, D)
    if case == "gdn":
        g, beta = F.logsigmoid(r(B, T, H, dtype=torch.float32)), torch.sigmoid(r(B, T, H))
        return lambda: chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    if case == "gla":
        g = F.logsigmoid(r(B, T, H, D, dtype=torch.float32)) / 16
        return lambda: chunk_gla(q, k, v, g)
    g = F.logsigmoid(r(B, T, H, dtype=torch.float32))
    return lambda: chunk_simple_gla(q, k, v, g)


def kernel_times(f) -> dict:
    """{kernel name: (median µs, launches a call)} over CALLS calls."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            f()
        torch.cuda.synchronize()
    times = defaultdict(list)
    for event in prof.events():
        if event.device_type.name == "CUDA":
            times[event.name].append(event.device_time)
    return {name: (round(statistics.median(us), 1), round(len(us) / CALLS, 2)) for name, us in times.items()}


def tuned_configs() -> dict:
    """{kernel: the config its autotuner chose} for each autotuned kernel that has run (fla's cached
    autotuner derives from the library's `Autotuner`, which keeps its choice as `best_config`)."""
    from triton.runtime.autotuner import Autotuner
    return {obj.base_fn.__name__: str(obj.best_config) for obj in gc.get_objects()
            if isinstance(obj, Autotuner) and getattr(obj, "best_config", None) is not None}


def pin_configs() -> None:
    """Each autotuned kernel CONFIGS names keeps only the configs it picks (before its first call)."""
    from triton.runtime.autotuner import Autotuner
    for want_name, want in fla_configs.wanted().items():
        tuners = [obj for obj in gc.get_objects()
                  if isinstance(obj, Autotuner) and fla_configs.kernel_name(obj) == want_name]
        if not tuners:
            sys.exit(f"CONFIGS: no autotuned kernel {want_name}")
        for tuner in tuners:
            picked = [config for config in tuner.configs if fla_configs.holds(config, want)]
            if not picked:
                sys.exit(f"CONFIGS: {want_name} has no config with {want}")
            tuner.configs = picked


def event_ms(f) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        start.record()
        for _ in range(CALLS):
            f()
        end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / CALLS


pin_configs()
for case in os.environ.get("CASES", "gdn,simple_gla").split(","):
    forward = make(case)
    with torch.no_grad():
        for _ in range(4):  # the first call autotunes and compiles; three warm-ups
            forward()
    torch.cuda.synchronize()
    kernels = kernel_times(forward)
    print(json.dumps({"lib": lib, "case": case, "B": B, "T": T, "event_ms_per_call": round(event_ms(forward), 3),
                      "gpu_us_per_call": round(sum(us * n for us, n in kernels.values()), 1),
                      "kernels": {name: {"us": us, "launches": n} for name, (us, n) in kernels.items()},
                      "configs": tuned_configs()}), flush=True)
