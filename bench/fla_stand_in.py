"""fla's chunked forwards with the GPU stood in (a machine without one): what a first call compiles and what
each later call costs the host, under whatever `import triton` is (upstream Triton, or kiln with KILN_DROPIN=1).

Nothing runs on a device: the driver answers as an H200's (sm_90a, 132 SMs, 227 KB of shared memory a
block, so that fla picks its Hopper configs), every launch is recorded instead of made, and the autotuner's
timing of a config compiles it and reports the config's place in the list (so the first config wins, the
same one under both libraries). Tensors live on the CPU. What is measured, one process per library, each
from a cold cache of its own (the caller's to give: TRITON_CACHE_DIR / KILN_CACHE_DIR):

- first call: the wall time of the first forward, every config of every autotuned kernel in it compiled.
  kiln compiles as its defaults say (the node daemon, started on demand; KILN_DAEMON=off: in the process),
  Triton in the process, config after config, as it does on a GPU. Run again on the same cache, it is a warm
  start: each library's kept autotuning choices (fla asks for `cache_results`) and binaries.
- host per call: later forwards' wall time, and the same with every autotuned launch skipped (fla's
  autotuner's `run` returning at once): the difference is what the libraries' launch paths cost a call,
  the launch's final driver call excepted.

    FLA=/path/to/flash-linear-attention python bench/fla_stand_in.py                # Triton
    FLA=/path/to/flash-linear-attention KILN_DROPIN=1 python bench/fla_stand_in.py  # kiln

CASES (gdn, simple_gla), B, T from the environment (defaults gdn,simple_gla; 2; 4096), H 16, D 128, bf16.
Under kiln, KERNELS_OUT=dir keeps each launched kernel's block IR and options there (bench/ptx_counts.py
builds them; the autotuned kernels' first configs, as the stand-in's autotuner picks, or those CONFIGS names
(bench/fla_configs.py), as a GPU's tuning did, under either library).
One JSON line per case. The first call's figure leaves out what a GPU adds (the autotuner's timings, module
loads); bench/fla_ops.py times the same ops on one.
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.environ.get("FLA", "."))  # a checkout of flash-linear-attention (its `fla` package)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import fla_configs  # noqa: E402  (beside this file)

H200 = {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}
lib = "kiln" if os.environ.get("KILN_DROPIN") == "1" else "triton"
launches = []


def config_rank(autotuner, config):
    """The stand-in's timing of a config: CONFIGS' pick for this kernel first, then the list's order."""
    want = fla_configs.wanted().get(fla_configs.kernel_name(autotuner))
    return -1.0 if want and fla_configs.holds(config, want) else float(autotuner.configs.index(config))


class _Properties:
    @staticmethod
    def get_device_properties(device):
        return dict(H200)


def _kept(kernel):
    """With KERNELS_OUT: the first launched build of each kernel kept there as `<name>.kir` (its block IR)
    and `<name>.json` (its options), for bench/ptx_counts.py."""
    out = os.environ.get("KERNELS_OUT")
    if not out or os.path.exists(os.path.join(out, kernel.name + ".kir")):
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, kernel.name + ".kir"), "w") as f:
        f.write(kernel.asm["kir"])
    with open(os.path.join(out, kernel.name + ".json"), "w") as f:
        json.dump({k: v for k, v in kernel.options.items() if k in ("num_warps", "num_stages")}, f)


def _kiln_stand_in():
    import triton  # kiln's facade
    from kiln import compiler
    from kiln.autotuner import Autotuner
    from kiln.runtime import cuda_driver
    cuda_driver.is_available = lambda: True
    cuda_driver.device_and_stream = lambda: (0, 0)
    cuda_driver.target = lambda device: "sm_90a"
    compiler.CompiledKernel.launch = lambda self, grid, args, stream=None: (launches.append(self.name), _kept(self))

    def first_config_wins(self, args, kwargs, grid, config, nargs):
        self.fn.run(*args, grid=grid, warmup=True, **kwargs, **config.all_kwargs())
        return config_rank(self, config)
    Autotuner._bench = first_config_wins
    from kiln.runtime import driver
    driver.active = driver.default  # the CUDA driver (without a GPU the drop-in picks the CPU backend's, and fla,
    # asking its target's backend, would take the machine for no NVIDIA one: no Hopper configs, no tf32)
    triton.runtime.driver.active.utils = _Properties()
    from kiln import specialize, tuning_results
    tuning_results._device = lambda: "NVIDIA H200 sm_90a"  # (names a shared autotuning choice, as the driver would)
    specialize._check_reachable = lambda jitfn, name, value: None  # (the stood-in tensors are the host's)


def _triton_stand_in():
    import build_parity  # scripts/: Triton's driver answering as sm_90a
    build_parity._as_sm90a()
    import triton
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.autotuner import Autotuner

    def record(*args, **kwargs):
        launches.append(1)
    CompiledKernel._init_handles = lambda self: None
    CompiledKernel.run = property(lambda self: record)

    def first_config_wins(self, *args, config, **meta):
        self.fn.run(*args, **{**meta, **config.all_kwargs(), "warmup": True})
        return [config_rank(self, config)] * 3
    Autotuner._bench = first_config_wins
    triton.runtime.driver.active.utils = _Properties()


(_kiln_stand_in if lib == "kiln" else _triton_stand_in)()
torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
torch.cuda.device_count = lambda *a, **k: 1

from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402
from fla.ops.simple_gla import chunk_simple_gla  # noqa: E402
from fla.ops.utils.cache import CachedAutotuner  # noqa: E402

B, T, H, D = int(os.environ.get("B", 2)), int(os.environ.get("T", 4096)), 16, 128
generator = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, dtype=dtype, generator=generator)


q, k, v = rand(B, T, H, D), rand(B, T, H, D), rand(B, T, H, D)
g = F.logsigmoid(rand(B, T, H, dtype=torch.float32))
beta = torch.sigmoid(rand(B, T, H))
CASES = {"gdn": lambda: chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True),
         "simple_gla": lambda: chunk_simple_gla(q, k, v, g)}


def per_call_us(f, n=200):
    for _ in range(10):
        f()
    started = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - started) / n * 1e6


for case in os.environ.get("CASES", "gdn,simple_gla").split(","):
    f = CASES[case]
    started = time.perf_counter()
    f()
    first = time.perf_counter() - started
    launches.clear()
    f()
    per_call = len(launches)
    with_launches = per_call_us(f)
    run = CachedAutotuner.run
    CachedAutotuner.run = lambda self, *args, **kwargs: None
    without = per_call_us(f)
    CachedAutotuner.run = run
    with_launches = min(with_launches, per_call_us(f))  # (either side of the skipped run: the lesser)
    print(json.dumps({"lib": lib, "case": case, "B": B, "T": T, "first_s": round(first, 2), "launches": per_call,
                      "host_us": round(with_launches), "launch_paths_us": round(with_launches - without)}), flush=True)
