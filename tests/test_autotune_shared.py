"""`@autotune(cache_results=True)`: the first process to tune a kernel for a key benchmarks its
configs and the node's other processes (and other nodes, through the shared tier) launch its
choice without benchmarking; a process that does not ask for it tunes for itself. The kernels
run in the interpreter; the benchmark is the test's own (`do_bench`), which makes config 1 win."""
import json
import os
import subprocess
import sys
import textwrap

JOB = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import kiln
    import kiln.language as tl

    benchmarked = []

    def bench(fn, quantiles):
        fn()
        benchmarked.append(1)
        return [1.0 if len(benchmarked) == 2 else 2.0] * 3  # the second config tried is the fastest

    @kiln.autotune(configs=[kiln.Config({"BLOCK": 32}), kiln.Config({"BLOCK": 64})], key=["n"],
                   restore_value=["x_ptr"], do_bench=bench, cache_results=sys.argv[1] == "shared")
    @kiln.jit
    def double(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    x = np.arange(100, dtype=np.float32)
    double[lambda meta: (kiln.cdiv(100, meta["BLOCK"]),)](x, 100)
    print(json.dumps({"benchmarks": len(benchmarked), "best": double.best_config.kwargs,
                      "ok": bool((x == np.arange(100) * 2).all())}))
""")


def run(tmp_path, mode):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "KILN_INTERPRET": "1", "KILN_DAEMON": "off", "KILN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRITON_CACHE_AUTOTUNING", None)
    out = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_second_process_launches_the_first_ones_choice(tmp_path):
    first, second = run(tmp_path, "shared"), run(tmp_path, "shared")
    assert first == {"benchmarks": 2, "best": {"BLOCK": 64}, "ok": True}
    assert second == {"benchmarks": 0, "best": {"BLOCK": 64}, "ok": True}


def test_without_cache_results_each_process_tunes(tmp_path):
    run(tmp_path, "shared")
    assert run(tmp_path, "private")["benchmarks"] == 2
