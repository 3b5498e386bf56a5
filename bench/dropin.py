"""torch.compile in a training job with kiln's drop-in mode against real Triton (issue 10).

    python bench/dropin.py [--out DIR] [--quick] [--max-autotune] [--device cuda|cpu]

Models: (a) `mlp`, pre-LayerNorm MLP blocks with GELU; (b) `gpt`, GPT-style blocks (RMSNorm, rotary
embedding, causal SDPA, SwiGLU). A step is forward, backward and an AdamW step, the model and the
optimizer step each under torch.compile (default mode; `--max-autotune` adds
`max-autotune-no-cudagraphs`); 20 steps from a fixed seed, fp32.

Each run is a fresh process, once with real Triton and once with KILN_DROPIN=1, with fresh
TRITON_CACHE_DIR, KILN_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR and CUDA_CACHE_PATH (cold), then again on the same
directories (warm). kiln's runs compile through a node daemon of the benchmark's own, started (and
its workers warmed) before the job, as a node's daemon would be; its stats count kiln's compiles.
Per run: the compile phase (the first step, from its start to its synchronized end), the step
time after warm-up (median of steps 10-20), the losses, and whether kiln's equal Triton's.

Losses alone cannot tell a numerical bug from rounding: AdamW's first step is nearly a sign step,
so gradients that differ in their last bits can send two runs apart. So each job also checks its
first step's gradients against float64: a copy of the model made before compiling, cast to
float64, runs step 0's batch eagerly (after the timed steps, outside every timed region); the
figure is the largest over parameters of ||g - g64|| / ||g64||, g being the compiled step 0's
gradient (still in `p.grad` after that step: AdamW reads gradients and does not change them, and
`zero_grad` runs at the start of the next step). The same figure for an eager float32 backward
(`eager_grad_error`) gives the rounding level to hold both flavours against. And where the first
step's time went in the job's process (`first_step_parts`: `triton.compile`, precompile, launchers
made, configs benchmarked, with Inductor's cache counters; compile workers not seen), and by
PyTorch's own accounting (`first_step_breakdown`: every `torch._dynamo.utils.compilation_time_metrics`
entry summed over the first step's calls, headline stages drawn from them (Dynamo, AOTAutograd+Inductor,
the lazy backward compile, codegen, the wait for kernel compiles, autotuning), the process's CPU
seconds, Inductor's and AOTAutograd's cache counters, and CUDA's start-up, timed apart before the
first step so that it is not counted in it).
Then 8 processes on the one GPU compile the same model at once, released together after their
imports, sharing the node's cache directories as ranks do (cold, then warm): each one's time to
its first finished step and its breakdown, the node's busy CPU seconds from the release to the last
rank's exit (/proc/stat: compile workers and kiln's daemon included), kiln's compiles on the node
against the kernels Triton compiled. Every job runs with PyTorch's defaults, as a user's would: the
bench sets no Inductor setting, and clears TORCHINDUCTOR_COMPILE_THREADS from the environment it
passes on (fewer compile threads would tune the baseline down and flatter kiln).

`--new-node` adds, for kiln, a third run after warm: a new node's, with an empty node cache and
Inductor cache and a daemon of its own, whose only warm tier is the Redis shared tier that the cold
run wrote through to (a throwaway `redis-server` on loopback, as the tests start). PyTorch's graphs
and kiln's kernels then come from Redis, checked against the cluster key, as on a node that joins a
job another node compiled. Its figure is held against kiln's warm run.
`--spread index|visible` puts the processes one per GPU (see `Bench.eight_processes`); `--timeline DIR`
records each job's compile stages per thread (bench/timeline; `bench/timeline_report.py DIR`).

A run that fails or passes `--timeout` is recorded with the tail of its stderr; later runs go on.
`--device cpu` (no GPU: Inductor's Triton CPU backend on kiln's interpreter against Inductor's
C++ backend) checks the benchmark itself, not speed. Writes DIR/<date>-<machine>-dropin.{json,md}.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import glob
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # its sibling modules (service, results_file)
import results_file  # noqa: E402
STEPS = 20
LR = 1e-4  # AdamW's; see job()
STEADY = slice(9, 20)  # steps 10-20 (1-based) for the step time
MARK = "DROPIN-RESULT "
MIN_JOB_S = 30  # a job is not started with less of the time budget left (8 processes' start-up alone: ~20 s)
MODES = {"default": None, "max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs"}
# model sizes: modest, so that compiling dominates the first step and the whole bench stays short
SIZES = {"cuda": {"mlp": dict(d=1024, hidden=4096, layers=4, rows=4096),
                  "gpt": dict(d=1024, heads=16, layers=2, batch=8, seq=512)},
         "cpu": {"mlp": dict(d=64, hidden=128, layers=2, rows=64),
                 "gpt": dict(d=64, heads=4, layers=1, batch=2, seq=16)}}


# --- the job: one process, one model, one mode --------------------------------------------------

def build(name: str, size: dict, device: str):
    """The model and a function giving step i's batch (input, target); seeded by the caller."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class MLPBlock(nn.Module):
        def __init__(self, d, hidden):
            super().__init__()
            self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, hidden), nn.Linear(hidden, d)

        def forward(self, x):
            return x + self.down(F.gelu(self.up(self.norm(x))))

    class RMSNorm(nn.Module):
        def __init__(self, d, eps=1e-6):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotary(x, cos, sin):  # x: (B, H, T, D), rotate-half form
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class GPTBlock(nn.Module):
        def __init__(self, d, heads, seq):
            super().__init__()
            self.heads, hidden = heads, 4 * d * 2 // 3 // 64 * 64
            self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.w2 = nn.Linear(hidden, d, bias=False)
            head = d // heads
            freqs = 1.0 / 10000 ** (torch.arange(0, head, 2, dtype=torch.float32) / head)
            angles = torch.outer(torch.arange(seq, dtype=torch.float32), freqs).repeat(1, 2)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            q, k = rotary(q, self.cos[:t], self.sin[:t]), rotary(k, self.cos[:t], self.sin[:t])
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            h = self.norm2(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    if name == "mlp":
        model = nn.Sequential(*[MLPBlock(size["d"], size["hidden"]) for _ in range(size["layers"])])
        shape = (size["rows"], size["d"])
    else:
        model = nn.Sequential(*[GPTBlock(size["d"], size["heads"], size["seq"]) for _ in range(size["layers"])])
        shape = (size["batch"], size["seq"], size["d"])
    model = model.to(device)
    data = [(torch.randn(shape, device=device), torch.randn(shape, device=device)) for _ in range(STEPS)]
    return model, data


def job(spec: dict) -> dict:
    """Run the 20 steps of spec's model and mode; the figures as a dict (printed by --worker)."""
    t0 = time.perf_counter()
    import torch
    import torch._inductor.config as inductor_config
    try:
        import triton
    except ImportError:  # the CPU check's baseline needs none
        triton = None
    device = spec["device"]
    if device == "cpu":  # kiln: Inductor's Triton CPU backend on the interpreter; baseline: its C++ backend
        inductor_config.cpu_backend = "triton" if spec["flavour"] == "kiln" else "cpp"
    if spec.get("device_index") is not None:  # a rank on its own GPU, as torchrun's LOCAL_RANK places it
        torch.cuda.set_device(spec["device_index"])
    cuda_init = init_cuda() if device == "cuda" else None
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model, data = build(spec["model"], spec["size"], device)
    reference = copy.deepcopy(model)  # for the gradient check, before any step changes the weights
    # lr 1e-4: at 1e-3 the MLP's loss spikes (2.2 -> 3.3 by step 12 on a CPU, 18 on the H200) and the run is
    # chaotic: a 1e-6 relative change of step 1's gradients moves later losses by 1.4e-4; at 1e-4 by 7e-8
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    mode = MODES[spec["mode"]]
    compiled = torch.compile(model, mode=mode)

    @torch.compile(mode=mode)
    def opt_step():
        opt.step()

    def step(x, target):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(compiled(x), target)
        loss.backward()
        opt_step()
        return loss.detach()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    ready_s = time.perf_counter() - t0
    timers = time_compile_phases()
    if spec.get("barrier"):  # several processes: start compiling together
        open(os.path.join(spec["barrier"], f"ready-{os.getpid()}"), "w").close()
        while not os.path.exists(os.path.join(spec["barrier"], "go")):
            time.sleep(0.005)
    accounting = compile_accounting()
    times, losses = [], []
    for x, target in data:
        start = time.perf_counter()
        loss = step(x, target)
        sync()
        times.append(time.perf_counter() - start)
        losses.append(float(loss))
        if len(times) == 1:
            first_step_end = time.time()
            first_grads = [p.grad.detach().clone() for p in model.parameters()]
            first_step_parts = timers.snapshot()
            breakdown = first_step_breakdown(accounting, cuda_init)
    grads = grad_errors(reference, data[0], first_grads)
    return {**grads, "first_step_parts": first_step_parts, "first_step_breakdown": breakdown,
            "triton_module": getattr(triton, "__name__", None), "triton_version": getattr(triton, "__version__", None),
            "ready_s": ready_s, "first_step_s": times[0], "first_step_end": first_step_end,
            "step_s": statistics.median(times[STEADY]), "step_times_s": times, "losses": losses,
            "gpu": torch.cuda.get_device_name() if device == "cuda" else None, "torch": torch.__version__}


class _Timers:
    """Time and calls spent in named functions, wrapped in place (this process only)."""

    def __init__(self):
        self.totals: dict[str, list] = {}

    def wrap(self, owner, attr: str, name: str):
        real = getattr(owner, attr)
        total = self.totals.setdefault(name, [0, 0.0])

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                total[0] += 1
                total[1] += time.perf_counter() - start
        setattr(owner, attr, timed)

    def snapshot(self) -> dict:
        from torch._dynamo.utils import counters
        parts = {name: {"calls": n, "s": round(s, 4)} for name, (n, s) in self.totals.items()}
        parts["inductor_counters"] = {k: v for k, v in counters["inductor"].items()
                                      if k.startswith(("async_compile", "fxgraph", "autotune", "triton_bundler"))}
        return parts


def time_compile_phases() -> _Timers:
    """Where a first step's time goes, in the job's own process (compile workers not seen):
    `triton.compile`, precompiling (compile and launchers), making launchers, benchmarking
    configs; and Inductor's cache counters. (Nothing that Inductor pickles to its compile workers
    is wrapped: a wrapper does not pickle.) The GPU run says why kiln's warm first
    step is slower than Triton's (Triton's warm kernels can come back from Inductor's cache as
    static launchers, with no compile at all)."""
    timers = _Timers()
    try:
        from torch._inductor.runtime import triton_heuristics as heuristics
        import triton
    except ImportError:
        return timers
    timers.wrap(triton, "compile", "triton.compile")  # Inductor calls it by attribute
    for attr, name in (("_make_launchers", "launchers made"), ("benchmark_all_configs", "configs benchmarked"),
                       ("precompile", "precompile")):
        if hasattr(heuristics.CachingAutotuner, attr):
            timers.wrap(heuristics.CachingAutotuner, attr, name)
    return timers


def init_cuda() -> float:
    """Seconds to bring CUDA up (driver, context, a first allocation): done before the barrier and
    timed apart, so that a rank's first step holds compiling, not CUDA's start-up."""
    import torch
    start = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    return time.perf_counter() - start


# --- where a first step went, by PyTorch's own accounting -----------------------------------------

# Headline stages drawn from torch._dynamo.utils.compilation_time_metrics (its dynamo_timed names).
# They nest rather than add up: Dynamo's `_compile.compile_inner` holds the backend call
# (`OutputGraph.call_user_compiler`: AOTAutograd and Inductor on the forward graphs), which holds
# Inductor's codegen and the wait for kernel compiles; the backward graph compiles lazily, in
# loss.backward() (`backward._backward_impl`), outside Dynamo; Triton's autotuning runs at a
# kernel's first launch.
STAGES = ("dynamo_s", "aot_inductor_s", "backward_compile_s", "inductor_codegen_s", "kernel_compile_wait_s",
          "autotune_s")
AUTOTUNE_METRICS = ("CachingAutotuner.benchmark_all_configs", "CachingAutotuner.coordinate_descent_tuning")


def compile_time_totals(metrics: dict, since: dict | None = None) -> dict:
    """compilation_time_metrics (name -> seconds of each call) summed per name, rounded to ms; with
    `since` (name -> calls already counted), only the calls made after it. Names with no calls are left out."""
    since = since or {}
    return {name: round(sum(times[since.get(name, 0):]), 3) for name, times in metrics.items()
            if len(times) > since.get(name, 0)}


def headline_stages(totals: dict) -> dict:
    """The headline stages (STAGES) of `compile_time_totals`' figures; a stage with no entry is absent."""
    stages = {}

    def add(stage, names):
        found = [totals[name] for name in names if name in totals]
        if found:
            stages[stage] = round(sum(found), 3)

    if "_compile.compile_inner" in totals:  # Dynamo's own share: its frame compiles less the backend's
        backend = totals.get("OutputGraph.call_user_compiler", 0.0)
        stages["dynamo_s"] = round(totals["_compile.compile_inner"] - backend, 3)
    add("aot_inductor_s", ["OutputGraph.call_user_compiler"])
    add("backward_compile_s", ["backward._backward_impl"])
    add("inductor_codegen_s", ["GraphLowering.codegen"])
    # wait: kernels compiled by the worker pool; precompile: compiled in this process (one compile thread)
    add("kernel_compile_wait_s", ["async_compile.wait", "async_compile.precompile"])
    add("autotune_s", [*AUTOTUNE_METRICS, *(name for name in totals if name.endswith("_template_autotuning"))])
    return stages


def _cache_counters() -> dict:
    """Inductor's and AOTAutograd's cache counters (their names hold "cache") as counted so far."""
    from torch._dynamo.utils import counters
    return {group: {k: v for k, v in counters[group].items() if "cache" in k} for group in ("inductor", "aot_autograd")}


def _children_cpu_s() -> float:
    # counts only children that have exited and been reaped: Inductor's compile workers live on, so
    # their CPU is missing here (the node's /proc/stat figure of the N-process part has it)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_accounting() -> dict:
    """What this process and PyTorch have counted so far: a first step's breakdown is the change from it."""
    snapshot = {"cpu_s": time.process_time(), "children_cpu_s": _children_cpu_s(), "metric_calls": {},
                "cache_counters": {}}
    try:
        from torch._dynamo.utils import compilation_time_metrics
        snapshot["metric_calls"] = {name: len(times) for name, times in compilation_time_metrics.items()}
        snapshot["cache_counters"] = _cache_counters()
    except Exception:  # noqa: BLE001  (a torch without them: those figures absent, not the job failing)
        pass
    return snapshot


def first_step_breakdown(before: dict, cuda_init: float | None) -> dict:
    """Where the first step went, from `before` (compile_accounting() at its start) to now: CPU
    seconds of this process and of its reaped children, every compilation_time_metrics entry
    summed, the headline stages, the cache counters that moved; and `cuda_init`, timed before it."""
    now = compile_accounting()
    breakdown = {"cuda_init": None if cuda_init is None else round(cuda_init, 3),
                 "cpu_s": round(now["cpu_s"] - before["cpu_s"], 3),
                 "children_cpu_s": round(now["children_cpu_s"] - before["children_cpu_s"], 3)}
    try:
        from torch._dynamo.utils import compilation_time_metrics
        totals = compile_time_totals(compilation_time_metrics, before["metric_calls"])
        breakdown.update(headline_stages(totals), compilation_time_metrics=totals)
    except Exception:  # noqa: BLE001
        pass
    breakdown["cache_counters"] = {group: _moved(before["cache_counters"].get(group, {}), counts)
                                   for group, counts in now["cache_counters"].items()}
    return breakdown


def _moved(before: dict, after: dict) -> dict:
    """The counters that changed between two snapshots, by how much."""
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def grad_errors(reference, batch, grads: list) -> dict:
    """How far the compiled first step's gradients `grads` are from float64's, as the largest over
    parameters of ||g - g64|| / ||g64||; and the same for an eager float32 backward (the rounding
    level). `reference` is the model as it was before the first step."""
    import torch
    import torch.nn.functional as F

    def eager_grads(model, dtype):
        model = copy.deepcopy(model).to(dtype)
        model.zero_grad(set_to_none=True)
        x, target = (t.to(dtype) for t in batch)
        loss = F.mse_loss(model(x), target)
        loss.backward()
        return float(loss.detach()), [p.grad.detach().double() for p in model.parameters()]

    def worst(got: list, exact: list):
        errors = [float((g.double() - e).norm() / e.norm()) if e.norm() > 0 else float((g.double() - e).norm())
                  for g, e in zip(got, exact)]
        return max(errors, default=0.0)

    loss64, exact = eager_grads(reference, torch.float64)
    _, eager32 = eager_grads(reference, torch.float32)
    return {"grad_error": worst(grads, exact), "eager_grad_error": worst(eager32, exact), "loss0_fp64": loss64}


# --- processes ----------------------------------------------------------------------------------

SHARED_TIER_ENV = ("KILN_REMOTE_CACHE", "KILN_REMOTE_CACHE_KEY")
CACHES = ("cold", "warm", "new_node")  # new_node: kiln's alone (--new-node)


def flavour_env(flavour: str, dirs: dict, daemon_env: dict | None) -> dict:
    """The environment of a job: Triton's (drop-in off) or kiln's (KILN_DROPIN=1, the daemon's)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("KILN_DROPIN", "KILN_INTERPRET", "KILN_DAEMON", "TORCHINDUCTOR_COMPILE_THREADS")}
    env.update(PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=dirs["triton"], TORCHINDUCTOR_CACHE_DIR=dirs["inductor"],
               KILN_CACHE_DIR=dirs["kiln"], CUDA_CACHE_PATH=dirs["cuda"])
    if flavour == "kiln":
        daemon_env = daemon_env or {"KILN_DAEMON": "off"}
        env.update({k: daemon_env[k] for k in ("KILN_DAEMON", "KILN_RUNTIME_DIR", *SHARED_TIER_ENV) if k in daemon_env})
        env.update(KILN_DROPIN="1", KILN_CACHE_DIR=dirs["kiln"])
    return env


def timeline_dir(env: dict, run: str) -> dict:
    """With --timeline: each run's processes write their timelines to a folder of the run's own
    (the daemon's stay in the top folder), so timeline_report.py reads one run at a time."""
    if top := env.get("KILN_TIMELINE_DIR"):
        folder = os.path.join(top, run.replace(" ", "-"))
        os.makedirs(folder, exist_ok=True)
        env = {**env, "KILN_TIMELINE_DIR": folder}
    return env


class Job:
    """One job process (its own process group: Inductor's compile workers die with it)."""

    def __init__(self, spec: dict, env: dict, log_dir: str):
        fd, self.log = tempfile.mkstemp(prefix="job-", suffix=".log", dir=log_dir)
        self.stdout = os.fdopen(fd, "w")
        self.stderr = open(self.log + ".err", "w")
        self.spec, self.started = spec, time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                                     env=env, stdout=self.stdout, stderr=self.stderr, start_new_session=True)

    def finish(self, timeout: float) -> dict:
        """The job's result, or its failure: exit status or timeout, and the tail of its stderr."""
        try:
            rc = self.proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            rc = None
        wall = time.perf_counter() - self.started
        self.kill()
        self.stdout.close()
        self.stderr.close()
        with open(self.log) as f:
            lines = [line for line in f.read().splitlines() if line.startswith(MARK)]
        with open(self.log + ".err", errors="replace") as f:
            tail = f.read()[-3000:]
        if rc == 0 and lines:
            return {"ok": True, "wall_s": wall, **json.loads(lines[-1][len(MARK):])}
        why = f"timed out at {wall:.0f} s" if rc is None else f"exit status {rc}"
        return {"ok": False, "wall_s": wall, "error": why, "stderr_tail": tail}

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group this Job started, workers included
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


def fresh_dirs(root: str, name: str) -> dict:
    """A run's cache directories. `cuda`: the driver's JIT cache (CUDA_CACHE_PATH), which nvJitLink uses
    too where a driver is present: a PTX linked in an earlier run of the call relinks in 2 ms, not 0.9 s."""
    return {kind: tempfile.mkdtemp(prefix=f"{name}-{kind}-", dir=root) for kind in ("triton", "kiln", "inductor", "cuda")}


def node_daemon(dirs: dict, workers: int, target: str, env: dict | None = None):
    """A kiln daemon of the benchmark's own on `dirs['kiln']`, its workers warm (bench/service.py's)."""
    from service import Daemon
    daemon = Daemon(workers=workers, env=env)
    daemon.cache_dir = dirs["kiln"]
    daemon.env.update(KILN_CACHE_DIR=dirs["kiln"], CUDA_CACHE_PATH=dirs["cuda"])
    daemon.__enter__()
    try:
        daemon.warm_workers(target)
    except Exception:
        daemon.__exit__(None, None, None)
        raise
    return daemon


def daemon_counts(daemon) -> dict | None:
    try:
        s = daemon.stats()
    except Exception as e:  # noqa: BLE001  (a figure missing, not the bench failing)
        return {"error": f"{type(e).__name__}: {e}"}
    return {"requests": s.requests, "hits": s.hits, "compiles": s.misses, "merged": s.merged, "errors": s.errors,
            # torch.compile graphs (FX graphs, AOTAutograd entries) compiled on the node, and served to the others
            "graphs_compiled": s.claims.led + s.claims.taken_over, "graphs_waited_for": s.claims.waited,
            # kernels whose configs one rank timed (KILN_AUTOTUNE_ONCE), and choices the others took
            "autotune_timed": s.claims.autotune_led,
            "autotune_taken": s.claims.autotune_waited + s.claims.autotune_stored}


def counts_between(before: dict | None, after: dict | None) -> dict | None:
    if not before or not after or "error" in before or "error" in after:
        return after
    return {k: after[k] - before[k] for k in after}


class SharedTier:
    """A throwaway Redis on loopback (the tests' own) and the environment that points kiln at it."""

    def __init__(self, server):
        import secrets
        self.server = server
        self.env = {"KILN_REMOTE_CACHE": server.url, "KILN_REMOTE_CACHE_KEY": secrets.token_hex(32)}

    def stop(self):
        self.server.stop()


def shared_tier():
    """A running SharedTier, or why there is none."""
    tests = os.path.join(HERE, os.pardir, "tests")  # the tests' throwaway Redis
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from redis_server import RedisServer, why_missing
    missing = why_missing()
    return missing or SharedTier(RedisServer().start())


def triton_kernels(cache_dir: str) -> int:
    """Kernels Triton compiled into `cache_dir` (one .cubin each; CPU builds leave none)."""
    return len(glob.glob(os.path.join(cache_dir, "*", "*.cubin")))


# --- the measurements ---------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args, self.device = args, args.device
        self.root = tempfile.mkdtemp(prefix="kiln-dropin-")
        self.deadline = time.perf_counter() + args.budget
        self.target = args.target
        self.skipped = []

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def timeout(self) -> float:
        return min(self.args.timeout, max(MIN_JOB_S, self.remaining()))

    def spec(self, flavour: str, model: str, mode: str, barrier: str | None = None) -> dict:
        return {"flavour": flavour, "model": model, "mode": mode, "device": self.device,
                "size": SIZES[self.device][model], "barrier": barrier}

    def _cold_then_warm(self, label: str, launch) -> dict:
        """Triton then kiln, cold then warm caches (each flavour its own fresh directories, kept
        for the warm run), kiln through a node daemon of its own: `launch(flavour, env, dirs)`
        runs one; each result gets kiln's daemon counts or Triton's cached kernels. With
        --new-node, kiln's daemon writes through to a Redis of the bench's own, and a new node
        then runs kiln (`_new_node`)."""
        runs, daemon, tier = {}, None, None
        flavours = self.args.flavours.split(",")
        dirs = {f: fresh_dirs(self.root, f"{label.replace(' ', '-')}-{f}") for f in flavours}
        try:
            if self.args.new_node and "kiln" in flavours:
                tier = shared_tier()
                if isinstance(tier, str):
                    self.skipped.append(f"{label} kiln_new_node ({tier})")
                    tier = None
            if "kiln" in flavours:
                daemon = node_daemon(dirs["kiln"], self.args.daemon_workers, self.target, tier and tier.env)
        except Exception as e:  # noqa: BLE001
            runs["daemon_error"] = f"{type(e).__name__}: {e}"
        try:
            for caches in ("cold", "warm"):
                for flavour in flavours:
                    key = f"{flavour}_{caches}"
                    if self.remaining() < MIN_JOB_S:
                        self.skipped.append(f"{label} {key}")
                        continue
                    before = daemon_counts(daemon) if flavour == "kiln" and daemon else None
                    env = timeline_dir(flavour_env(flavour, dirs[flavour], daemon.env if daemon else None),
                                       f"{label}-{key}")
                    run = runs[key] = launch(flavour, env)
                    if flavour == "kiln" and daemon:
                        run["daemon"] = counts_between(before, daemon_counts(daemon))
                    if flavour == "triton":
                        run["triton_kernels_in_cache"] = triton_kernels(dirs["triton"]["triton"])
                    print(f"  {label} {key}: {brief(run)}", file=sys.stderr, flush=True)
                    self.checkpoint(label, runs)
        finally:
            if daemon:
                daemon.__exit__(None, None, None)
        if tier is not None:
            try:
                if daemon and self.remaining() >= MIN_JOB_S:
                    runs["kiln_new_node"] = self._new_node(label, launch, tier)
                    print(f"  {label} kiln_new_node: {brief(runs['kiln_new_node'])}", file=sys.stderr, flush=True)
                elif daemon:
                    self.skipped.append(f"{label} kiln_new_node")
            finally:
                tier.stop()
        return runs

    def checkpoint(self, label: str, runs: dict) -> None:
        """The runs so far, in OUT/<name>-partial.json: a bench stopped from outside (a device
        call's limit) leaves what it measured."""
        path = os.path.join(self.args.out, f"{self.args.name}-partial.json")
        try:
            with open(path) as f:
                done = json.load(f)
        except (OSError, ValueError):
            done = {}
        done[label] = runs
        os.makedirs(self.args.out, exist_ok=True)
        with open(path, "w") as f:
            json.dump(done, f, default=str)

    def _new_node(self, label: str, launch, tier) -> dict:
        """kiln on a node that joins late: fresh directories (node cache, Inductor's), a daemon of
        its own, and the shared tier the first node wrote through to."""
        from kiln.cache import Cache
        dirs = fresh_dirs(self.root, f"{label.replace(' ', '-')}-kiln-new-node")
        daemon = node_daemon(dirs, self.args.daemon_workers, self.target, tier.env)
        try:
            before = daemon_counts(daemon)
            run = launch("kiln", timeline_dir(flavour_env("kiln", dirs, daemon.env), f"{label}-kiln_new_node"))
            run["daemon"] = counts_between(before, daemon_counts(daemon))
        finally:
            daemon.__exit__(None, None, None)
        with Cache(dirs["kiln"]) as cache:
            run["shared_tier_hits"] = cache.counts("remote").get("hits", 0)
        return run

    def one_process(self, model: str, mode: str) -> dict:
        """Triton and kiln, cold then warm, each a fresh process; kiln's compiles from its daemon."""
        def launch(flavour, env):
            run = Job(self.spec(flavour, model, mode), env, self.root).finish(self.timeout())
            run["checked"] = check_flavour(run, flavour)
            return run
        runs = self._cold_then_warm(f"{model} {mode}", launch)
        compare_losses(runs, self.args.rtol, self.args.atol)
        return runs

    def eight_processes(self, model: str, mode: str, n: int) -> dict:
        """n processes at once, sharing the node's cache directories, cold then warm; placed by
        --spread: all on the one GPU, or rank i on GPU i % count as torchrun places ranks (`index`:
        torch.cuda.set_device(i), torchrun's usual placing; `visible`: CUDA_VISIBLE_DEVICES=i, what
        `torchrun --virtual-local-rank` does, so that every rank's device is cuda:0)."""
        gpus = gpu_count() if self.args.spread != "one" else 1

        def place(flavour, env, barrier, rank):
            spec = self.spec(flavour, model, mode, barrier)
            if self.args.spread == "index":
                spec["device_index"] = rank % gpus
            elif self.args.spread == "visible":
                env = dict(env, CUDA_VISIBLE_DEVICES=str(rank % gpus))
            return spec, env

        def launch(flavour, env):
            return together(n, lambda barrier, rank: place(flavour, env, barrier, rank), self.root, self.timeout())
        return self._cold_then_warm(f"{n} processes", launch)


def keep_kernel_sources(root: str, into: str) -> int:
    """Copy the kernel modules in the runs' Inductor caches under `root` into `into` (one file per
    kernel source: the caches name them by their hash); how many."""
    os.makedirs(into, exist_ok=True)
    kept = set()
    for path in glob.glob(os.path.join(root, "*-inductor-*", "**", "*.py"), recursive=True):
        with open(path) as f:
            text = f.read()
        if "@triton.jit" in text and os.path.basename(path) not in kept:
            kept.add(os.path.basename(path))
            shutil.copy(path, os.path.join(into, os.path.basename(path)))
    return len(kept)


def gpu_count() -> int:
    """The node's GPUs, asked of a child process: CUDA is not initialized in the bench's own."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True, check=True).stdout
    return max(1, int(out.strip().splitlines()[-1]))


def compare_losses(runs: dict, rtol: float, atol: float) -> None:
    for caches in CACHES:  # a new node's against Triton's cold run: the same program
        t, k = runs.get(f"triton_{caches}") or runs.get("triton_cold"), runs.get(f"kiln_{caches}")
        if t and k and t["ok"] and k["ok"]:
            runs[f"losses_equal_{caches}"] = losses_equal(k["losses"], t["losses"], rtol, atol)


def merged(paths: list, rtol: float, atol: float) -> dict:
    """One result of several runs' JSON files (--flavours split across calls: a compile phase longer
    than one call allows), their single-process runs joined per model/mode, losses compared again."""
    parts = [json.load(open(p)) for p in paths]
    results = dict(parts[0], one_process={}, merged_from=[os.path.basename(p) for p in paths])
    for path, part in zip(paths, parts):
        for key, runs in part.get("one_process", {}).items():
            results["one_process"].setdefault(key, {}).update(
                {k: v for k, v in runs.items() if not k.startswith("losses_equal")})
        for field in ("torch", "machine", "skipped"):
            results[field] = results.get(field) or part.get(field)
        eight = part.get("eight_processes")
        if eight and part is not parts[0]:
            mine = results.setdefault("eight_processes", eight)
            if (mine["model"], mine["mode"], mine["processes"]) != (eight["model"], eight["mode"], eight["processes"]):
                raise SystemExit(f"{path}: another 8-process job, not merged")
            mine["runs"] = {**mine["runs"], **eight["runs"]}
    for runs in results["one_process"].values():
        compare_losses(runs, rtol, atol)
    return results


def together(n: int, place, root: str, timeout: float) -> dict:
    """Start n jobs, `place(barrier, rank)` giving each its spec and environment; release them
    together once all have imported and built their models."""
    barrier = tempfile.mkdtemp(prefix="barrier-", dir=root)
    jobs = [Job(*place(barrier, rank), root) for rank in range(n)]
    start = time.perf_counter()
    while len(glob.glob(os.path.join(barrier, "ready-*"))) < n and time.perf_counter() - start < timeout:
        if any(job.proc.poll() is not None for job in jobs):
            break  # one died before the start: the others would wait for it in vain
        time.sleep(0.02)
    cpu_before = node_busy_cpu_s()
    open(os.path.join(barrier, "go"), "w").close()
    go, go_after = time.time(), time.perf_counter() - start
    each = [job.finish(timeout - (time.perf_counter() - start)) for job in jobs]
    cpu_after = node_busy_cpu_s()
    ok = [r for r in each if r["ok"]]
    firsts = [r["first_step_s"] for r in ok]
    return {"ok": len(ok) == n, "processes": n, "each": each, "released_after_s": go_after,
            "node_cpu_s": None if cpu_before is None or cpu_after is None else round(cpu_after - cpu_before, 2),
            "first_step_s": firsts, "first_step_max_s": max(firsts) if firsts else None,
            "first_step_median_s": statistics.median(firsts) if firsts else None,
            "all_done_s": max(r["first_step_end"] for r in ok) - go if ok else None,
            "errors": [r for r in each if not r["ok"]][:2]}


def gpu_name() -> str | None:
    """The first GPU's name as torch names it, from nvidia-smi: for a run whose every job failed
    before saying (its file is still named after the GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out else None


def host_probe() -> dict:
    """The host's CPU model and the seconds one core takes for a fixed piece of plain Python (best
    of 3): a leader rank's compile is serial Python (Dynamo, Inductor), so first steps measured on
    different hosts compare only with this beside them."""
    def work():
        table = {}
        for i in range(200_000):
            table[f"buf{i % 5000}"] = table.get(f"buf{i % 5000}", 0) + len(str(i))
        return table
    times = []
    for _ in range(3):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    return {"cpu": model, "python_probe_s": round(min(times), 4)}


def busy_cpu_seconds(stat_line: str) -> float:
    """The busy time in /proc/stat's aggregate `cpu` line, in seconds: user + nice + system + irq +
    softirq jiffies (idle, iowait and steal are not work; guest is already within user)."""
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in stat_line.split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def node_busy_cpu_s() -> float | None:
    """All the node's CPUs' busy seconds so far (every process: ranks, their compile workers, kiln's
    daemon); None where /proc/stat cannot be read (not Linux)."""
    try:
        with open("/proc/stat") as f:
            return busy_cpu_seconds(f.readline())
    except (OSError, ValueError, IndexError):
        return None


def check_flavour(run: dict, flavour: str) -> str | None:
    """A run under the wrong `triton` is a failure of the benchmark's setup, said so."""
    if not run["ok"]:
        return None
    is_kiln = run["triton_module"] == "kiln.dropin.facade"
    if is_kiln != (flavour == "kiln"):
        run["ok"] = False
        run["error"] = f"`import triton` was {run['triton_module']} in the {flavour} run"
    return run["triton_module"]


def losses_equal(kiln: list, triton: list, rtol: float, atol: float) -> dict:
    """Whether kiln's losses equal Triton's step by step within rtol/atol, and the largest gap."""
    if len(kiln) != len(triton):
        return {"equal": False, "max_abs": None, "max_rel": None, "why": f"{len(kiln)} vs {len(triton)} steps"}
    gaps = [abs(a - b) for a, b in zip(kiln, triton)]
    rel = [g / abs(b) if b else (0.0 if g == 0 else float("inf")) for g, b in zip(gaps, triton)]
    equal = all(g <= atol + rtol * abs(b) for g, b in zip(gaps, triton))
    return {"equal": equal, "max_abs": max(gaps, default=0.0), "max_rel": max(rel, default=0.0)}


def brief(run: dict) -> str:
    if not run.get("ok"):
        failed = run.get("errors") or []
        why = run.get("error") or (f"{len(failed)}+ jobs failed: {failed[0].get('error')}" if failed else "see errors")
        return f"FAILED ({why})"
    if "first_step_max_s" in run:
        return f"first step max {run['first_step_max_s']:.2f} s"
    return f"first step {run['first_step_s']:.2f} s, step {1e3 * run['step_s']:.2f} ms"


# --- report -------------------------------------------------------------------------------------

def _f(value, spec=".2f", scale=1.0):
    return "" if value is None else format(value * scale, spec)


def _ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else ""


def _get(run, key):
    return run.get(key) if run and run.get("ok") else None


def _compiles(run) -> str:
    d = (run or {}).get("daemon")
    if not d:
        return ""
    if "error" in d:
        return "stats failed"
    text = f"{d['compiles']} ({d['requests']} requests, {d['merged']} merged)"
    if d.get("graphs_compiled") or d.get("autotune_timed"):
        text += f"; graphs {d['graphs_compiled']}, {d['graphs_waited_for']} waited for"
        if "autotune_timed" in d:
            text += f"; autotuned {d['autotune_timed']}, {d['autotune_taken']} taken"
    return text


def markdown(results: dict) -> str:
    base = "Triton" if results["device"] == "cuda" else "C++ backend"
    out = [f"### torch.compile with kiln's drop-in mode vs {base}, {results['machine']}, {results['date']}", "",
           f"bench/dropin.py; fp32, {STEPS} steps of forward, backward and AdamW at lr {LR:g} (model and optimizer step "
           f"compiled); a fresh process per run; first step = compile phase; step = median of steps 10-20; "
           f"losses equal within rtol {results['rtol']:g}, atol {results['atol']:g}; kiln through a warm node "
           f"daemon ({results['daemon_workers']} workers); grad error: the largest over parameters of "
           f"||g - g64|| / ||g64||, g the compiled first step's gradient, g64 float64's in eager mode (in "
           f"brackets: eager float32's, the rounding level). torch {results.get('torch', '?')}.{_host_text(results)}",
           "",
           f"| model | mode | caches | {base} first step (s) | kiln first step (s) | kiln / {base} | "
           f"{base} step (ms) | kiln step (ms) | kiln / {base} | losses equal (max rel gap) | first-step grad "
           f"error vs fp64, {base} / kiln (eager fp32) | kiln compiles (daemon) | {base} kernels |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|"]
    failures = []
    for name, runs in results["one_process"].items():
        model, mode = name.split("/")
        for caches in CACHES:
            t, k = runs.get(f"triton_{caches}"), runs.get(f"kiln_{caches}")
            if t is None and k is None:
                continue
            eq = runs.get(f"losses_equal_{caches}")
            eq_text = "" if eq is None else f"{'yes' if eq['equal'] else 'NO'} ({eq['max_rel']:.1e})"
            t_first, k_first = _get(t, "first_step_s"), _get(k, "first_step_s")
            t_step, k_step = _get(t, "step_s"), _get(k, "step_s")
            out.append(f"| {model} | {mode} | {_caches(caches)} | {_f(t_first)} | {_f(k_first)} | {_ratio(k_first, t_first)} | "
                       f"{_f(t_step, scale=1e3)} | {_f(k_step, scale=1e3)} | {_ratio(k_step, t_step)} | {eq_text} | "
                       f"{_grad_errors(t, k)} | {_compiles(k)} | {(t or {}).get('triton_kernels_in_cache', '')} |")
            failures += [(f"{name} {f}_{caches}", r) for f, r in (("triton", t), ("kiln", k)) if r and not r["ok"]]
        if "daemon_error" in runs:
            failures.append((f"{name} daemon", {"error": runs["daemon_error"]}))
    out += _parts_table(results, base)
    eight = results.get("eight_processes")
    if eight:
        n = eight["processes"]
        where = {"one": "on the one device", "index": "one per GPU (torch.cuda.set_device(rank))",
                 "visible": "one per GPU (CUDA_VISIBLE_DEVICES=rank, as torchrun --virtual-local-rank)"}
        out += ["", f"#### {n} processes at once {where[eight.get('spread', 'one')]}, {eight['model']} {eight['mode']}, sharing the "
                f"node's cache directories (PyTorch's default compile threads)", "",
                f"| caches | {base} first step, max / median (s) | kiln first step, max / median (s) | "
                f"kiln / {base} (max) | kiln compiles on the node (daemon) | {base} kernels in its cache |",
                "|---|---:|---:|---:|---|---:|"]
        for caches in CACHES:
            t, k = eight["runs"].get(f"triton_{caches}"), eight["runs"].get(f"kiln_{caches}")
            if t is None and k is None:
                continue
            tm, km = _all_done(t, "first_step_max_s"), _all_done(k, "first_step_max_s")
            t_bound = _timed_out_bound(t)
            ratio = _ratio(km, tm) or (f"< {km / t_bound:.3f}" if km is not None and t_bound else "")
            t_cell = f"> {t_bound:.0f} (every rank timed out)" if t_bound else \
                f"{_f(tm)} / {_f(_all_done(t, 'first_step_median_s'))}{_failed(t)}"
            out.append(f"| {_caches(caches)} | {t_cell} | {_f(km)} / "
                       f"{_f(_all_done(k, 'first_step_median_s'))}{_failed(k)} | {ratio} | {_compiles(k)} | "
                       f"{(t or {}).get('triton_kernels_in_cache', '')} |")
            for flavour, r in (("triton", t), ("kiln", k)):
                failures += [(f"{n} processes {flavour}_{caches}", e) for e in (r or {}).get("errors", [])]
        if "daemon_error" in eight["runs"]:
            failures.append((f"{n} processes daemon", {"error": eight["runs"]["daemon_error"]}))
        out += _new_node_lines(eight["runs"])
        out += _n_process_breakdown_table(eight, base)
    if results["skipped"]:
        out += ["", f"Skipped (past the time budget): {', '.join(results['skipped'])}."]
    for name, run in failures:
        out += ["", f"**{name} failed**: {run.get('error')}", "", "```", (run.get("stderr_tail") or "").strip()[-1500:],
                "```"]
    return "\n".join(out) + "\n"


def _parts_table(results: dict, base: str) -> list:
    """Where each run's first step went in its own process (`first_step_parts`)."""
    rows = []
    for name, runs in results["one_process"].items():
        for caches in CACHES:
            for flavour, label in (("triton", base), ("kiln", "kiln")):
                parts = _get(runs.get(f"{flavour}_{caches}"), "first_step_parts")
                if not parts:
                    continue
                cell = lambda key: f"{parts[key]['calls']} / {parts[key]['s']:.2f}" if key in parts else ""  # noqa: E731
                counters = ", ".join(f"{k} {v}" for k, v in sorted(parts.get("inductor_counters", {}).items()))
                rows.append(f"| {name.replace('/', ' ')} | {caches} | {label} | {cell('triton.compile')} | "
                            f"{cell('precompile')} | {cell('launchers made')} | {cell('configs benchmarked')} | "
                            f"{counters} |")
    if not rows:
        return []
    return ["", "#### The first step in the job's process (calls / s; compile workers not seen)", "",
            "| model mode | caches | flavour | triton.compile | precompile | launchers made | configs benchmarked | "
            "Inductor's counters |", "|---|---|---|---:|---:|---:|---:|---|", *rows]


STAGE_LABELS = {"dynamo_s": "Dynamo", "aot_inductor_s": "AOTAutograd + Inductor",
                "backward_compile_s": "backward compile", "inductor_codegen_s": "Inductor codegen",
                "kernel_compile_wait_s": "kernel compile wait",
                "autotune_s": "autotune", "cpu_s": "rank CPU", "cuda_init": "CUDA init"}


def _rank_median(run, key):
    """The median over the ranks that finished of their first step's `key` (first_step_breakdown)."""
    values = [r["first_step_breakdown"][key] for r in (run or {}).get("each", [])
              if r.get("ok") and (r.get("first_step_breakdown") or {}).get(key) is not None]
    return statistics.median(values) if values else None


def _worst_rank(run) -> dict | None:
    """The finished rank whose first step took longest: the one the job waits for."""
    done = [r for r in (run or {}).get("each", []) if r.get("ok") and r.get("first_step_breakdown")]
    return max(done, key=lambda r: r["first_step_s"]) if done else None


def _n_process_breakdown_table(eight: dict, base: str) -> list:
    """Per flavour and caches: the worst and median rank's first step, the node's busy CPU seconds,
    and the median over ranks of each headline stage of the first step."""
    keys = [*STAGES, "cpu_s", "cuda_init"]
    rows = []
    for caches in CACHES:
        for flavour, label in (("triton", base), ("kiln", "kiln")):
            run = eight["runs"].get(f"{flavour}_{caches}")
            if not run:
                continue
            stages = " | ".join(_f(_rank_median(run, key)) for key in keys)
            worst, median = _all_done(run, "first_step_max_s"), _all_done(run, "first_step_median_s")
            rows.append(f"| {label} | {_caches(caches)} | {_f(worst)} / {_f(median)}{_failed(run)} | "
                        f"{_f(run.get('node_cpu_s'), '.1f')} | {stages} |")
            slowest = _worst_rank(run)
            if slowest is not None and len(run.get("each", [])) > 1:  # the critical path, not a median
                own = " | ".join(_f(slowest["first_step_breakdown"].get(key)) for key in keys)
                rows.append(f"| {label}, its slowest rank | {_caches(caches)} | {_f(slowest['first_step_s'])} | | {own} |")
    if not rows:
        return []
    return ["", f"#### {eight['processes']} processes: where the first step went (s; stages: medians over ranks)", "",
            "Stages by PyTorch's compilation_time_metrics, nested, not adding up: Dynamo = `_compile.compile_inner` "
            "less `OutputGraph.call_user_compiler` (AOTAutograd + Inductor on the forward graphs); backward compile = "
            "`backward._backward_impl` (lazy, in loss.backward()); codegen (`GraphLowering.codegen`) and kernel compile "
            "wait (`async_compile.wait` + `.precompile`) lie within those two; autotune = Triton's config benchmarks at "
            "first launch (and template autotuning). Node CPU: all CPUs' busy seconds (/proc/stat) from the release to "
            "the last rank's exit, compile workers and kiln's daemon included; rank CPU: the rank's own process over "
            "its first step; CUDA init: timed before the release, not in the first step. A flavour's slowest rank "
            "(the one the job waits for) has a row of its own stages.", "",
            f"| flavour | caches | first step, worst / median (s) | node CPU (s) | "
            + " | ".join(STAGE_LABELS[key] for key in keys) + " |",
            "|---|---|---:|---:|" + "---:|" * len(keys), *rows]


def _host_text(results: dict) -> str:
    host = results.get("host")
    if not host:
        return ""
    return f" Host: {host.get('cpu') or 'CPU unknown'}, Python probe {host['python_probe_s']:.3f} s (host_probe)."


def _caches(caches: str) -> str:
    return "new node (warm Redis)" if caches == "new_node" else caches


def _new_node_lines(runs: dict) -> list:
    """kiln's new node against its warm run (the issue's bar: at most 1.2 times)."""
    new, warm = runs.get("kiln_new_node"), runs.get("kiln_warm")
    worst_new, worst_warm = _all_done(new, "first_step_max_s"), _all_done(warm, "first_step_max_s")
    if worst_new is None:
        return []
    return ["", f"kiln's new node (empty node and Inductor caches, the Redis shared tier warm): worst first step "
            f"{_f(worst_new)} s, {_ratio(worst_new, worst_warm)} of its warm run's; {new.get('shared_tier_hits', 0)} "
            f"shared-tier hits; {_compiles(new)}."]


def _grad_errors(triton, kiln) -> str:
    """`Triton's / kiln's (eager fp32's)` first-step gradient errors against float64."""
    t, k = _get(triton, "grad_error"), _get(kiln, "grad_error")
    eager = _get(triton, "eager_grad_error") or _get(kiln, "eager_grad_error")
    if t is None and k is None:
        return ""
    return f"{_f(t, '.1e')} / {_f(k, '.1e')}" + (f" ({eager:.1e})" if eager is not None else "")


def _all_done(run, key):
    """A figure of the processes' first steps, only where every process got there (the max of
    the few that did says nothing about the node)."""
    return (run or {}).get(key) if (run or {}).get("ok") else None


def _timed_out_bound(run) -> float | None:
    """Where every process was killed still in its first step: the time they had had since the
    release, a lower bound of the worst first step (None where one finished or another failure)."""
    each = (run or {}).get("each", [])
    if not each or any(e.get("ok") or not str(e.get("error", "")).startswith("timed out") for e in each):
        return None
    released = run.get("released_after_s")
    return min(e["wall_s"] for e in each) - released if released is not None else None


def _failed(run) -> str:
    bad = [e for e in (run or {}).get("each", []) if not e.get("ok")]
    return f" ({len(bad)} of {len(run['each'])} failed)" if bad else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--quick", action="store_true", help="one process, mlp and gpt, default mode only")
    parser.add_argument("--max-autotune", action="store_true", help="also max-autotune-no-cudagraphs")
    parser.add_argument("--models", default="mlp,gpt")
    parser.add_argument("--modes", help=f"instead of the above: modes to run, of {','.join(MODES)}")
    parser.add_argument("--model8", default="gpt", help="the model of the 8-process part ('' to skip it)")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--spread", choices=("one", "index", "visible"), default="one",
                        help="the n processes all on one GPU (default), or rank i on GPU i %% count: by "
                             "torch.cuda.set_device (index) or CUDA_VISIBLE_DEVICES (visible, as torchrun "
                             "--virtual-local-rank)")
    parser.add_argument("--mode8", default="default", choices=list(MODES), help="the mode of the 8-process part")
    parser.add_argument("--daemon-workers", type=int, default=min(16, os.cpu_count() or 1),
                        help="the node daemon's compile workers (default: one per core, up to 16, as kiln's own)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: check the benchmark without a GPU (Triton CPU backend on kiln's interpreter)")
    parser.add_argument("--target", default="sm_90a", help="the target the daemon's workers are warmed for")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per job")
    parser.add_argument("--budget", type=float, default=345, help="seconds for the whole bench; later runs skip")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--atol", type=float, default=1e-6)
    parser.add_argument("--new-node", action="store_true",
                        help="kiln also on a new node: empty caches, the Redis shared tier the cold run filled")
    parser.add_argument("--flavours", default="triton,kiln", help="run only these (the rest in another call; --merge)")
    parser.add_argument("--name", default="dropin", help="the results file's kind (<date>-<gpu>-<name>.json)")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="join earlier calls' results files and print the table")
    parser.add_argument("--timeline", metavar="DIR", help="record each job's compile stages per thread into DIR "
                        "(bench/timeline; summarize with bench/timeline_report.py DIR)")
    parser.add_argument("--keep-kernels", metavar="DIR", help="copy the Triton kernels Inductor generated (its caches' "
                        "sources) into DIR, to compile them again elsewhere (bench/compile_speed.py)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(MARK + json.dumps(job(json.loads(args.worker))), flush=True)
        return
    if args.merge:
        results = merged(args.merge, args.rtol, args.atol)
        text = markdown(results)
        name = "dropin-merged" if args.name == "dropin" else args.name  # not over a run's own file of that day
        results_file.save(args.out, results_file.stem(results["date"], results["machine"], name), results, text)
        print(text)
        return
    if unknown := set(args.flavours.split(",")) - {"triton", "kiln"}:
        parser.error(f"unknown flavours {sorted(unknown)}")

    if args.timeline:  # the jobs (and the bench's daemon) inherit the environment
        os.makedirs(args.timeline, exist_ok=True)
        os.environ["KILN_TIMELINE_DIR"] = os.path.abspath(args.timeline)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.join(HERE, "timeline"), os.environ.get("PYTHONPATH")) if p)
    bench = Bench(args)
    date = datetime.date.today().isoformat()
    results = {"date": date, "device": args.device, "rtol": args.rtol, "atol": args.atol,
               "daemon_workers": args.daemon_workers, "load_average_before": os.getloadavg(), "host": host_probe(),
               "one_process": {}}
    modes = ["default"] + ([] if args.quick or not args.max_autotune else ["max-autotune-no-cudagraphs"])
    if args.modes:
        modes = args.modes.split(",")
        if unknown := set(modes) - set(MODES):
            parser.error(f"unknown modes {sorted(unknown)}")
    t0 = time.perf_counter()
    try:
        for mode in modes:
            for model in [m for m in args.models.split(",") if m]:
                results["one_process"][f"{model}/{mode}"] = bench.one_process(model, mode)
        if args.model8 and not args.quick:
            results["eight_processes"] = {
                "model": args.model8, "mode": args.mode8, "processes": args.processes, "spread": args.spread,
                "runs": bench.eight_processes(args.model8, args.mode8, args.processes)}
    finally:
        if args.keep_kernels:
            keep_kernel_sources(bench.root, args.keep_kernels)
        shutil.rmtree(bench.root, ignore_errors=True)
    results.update(skipped=bench.skipped, total_s=time.perf_counter() - t0, load_average_after=os.getloadavg())
    eight_runs = results.get("eight_processes", {}).get("runs", {}).values()
    first = next((r for runs in results["one_process"].values() for r in runs.values()
                  if isinstance(r, dict) and r.get("ok")), None) or next(
        (job for run in eight_runs if isinstance(run, dict) for job in run.get("each", []) if job.get("ok")), {})
    results["torch"], gpu = first.get("torch"), first.get("gpu") or (gpu_name() if args.device == "cuda" else None)
    results["machine"] = gpu or f"{socket.gethostname()} ({args.device}, {os.cpu_count()} cores)"
    slug = results_file.stem(date, gpu or socket.gethostname(), args.name)
    text = markdown(results)
    results_file.save(args.out, slug, results, text)
    print(text)


if __name__ == "__main__":
    main()
