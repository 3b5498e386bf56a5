"""The libdevice subsets a compile makes are kept in the node cache (kiln.daemon.tiers'
`keep_libdevice_subsets`), so the node's next process that calls the same functions links the
subset another made instead of parsing all of libdevice again: two real processes, one cache."""
import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, sys
import numpy as np
import kiln
import kiln.language as tl
from kiln.codegen import backend

made = []
extract = backend._extract_subset
backend._extract_subset = lambda *args: made.append(sorted(args[0])) or extract(*args)


@kiln.jit
def first(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.erf(x) + 1.0, mask=offs < n)


@kiln.jit
def second(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.erf(x * 2.0), mask=offs < n)


kernel = first if sys.argv[1] == "first" else second
x = np.zeros(256, np.float32)
compiled = kernel.warmup(x, x, 256, BLOCK=256, grid=(1,), target="sm_90a")
print(json.dumps({"made": made, "ptx": ".entry" in compiled.build("sm_90a").ptx}))
"""


def run(which, cache_dir, tmp_path):
    path = tmp_path / "kernels.py"  # a file: kiln reads a kernel's source from it
    path.write_text(SCRIPT)
    env = dict(os.environ, KILN_CACHE_DIR=str(cache_dir), KILN_DAEMON="off", KILN_INTERPRET="0")
    out = subprocess.run([sys.executable, str(path), which], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_links_the_subset_the_first_one_made(tmp_path):
    cache = tmp_path / "cache"
    first = run("first", cache, tmp_path)
    assert first["made"] == [["__nv_erff"]] and first["ptx"]
    second = run("second", cache, tmp_path)  # another kernel, the same function: found in the node cache
    assert second["made"] == [] and second["ptx"]


def test_without_the_shared_cache_each_process_makes_its_own(tmp_path):
    assert run("first", tmp_path / "one", tmp_path)["made"] == [["__nv_erff"]]
    assert run("second", tmp_path / "two", tmp_path)["made"] == [["__nv_erff"]]
