"""A benchmark's measurement in a fresh Python process: the child prints one line `ROWS <json>`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

MARK = "ROWS "

# A child's opening where it runs bench/kernels.py under one library: argv[1] bench/'s folder, argv[2]
# "kiln" or "triton"; it leaves `lib` (the kernels) and `triton` (that library) defined.
LIBRARY_PREAMBLE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import kernel_source
flavour = sys.argv[2]
lib = kernel_source.load("kernels.py", flavour)
if flavour == "kiln":
    import kiln as triton
else:
    import triton
"""


def run(code: str, args: list, env: dict, timeout: float, what: str, caches=("TRITON_CACHE_DIR", "KILN_CACHE_DIR")):
    """(the rows the child `python -c code *args` printed, its completed process), run in `env` with each
    of `caches` an empty directory of its own."""
    env = dict(env)
    with tempfile.TemporaryDirectory() as tmp:
        for name in caches:
            env[name] = os.path.join(tmp, name.lower())
        out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                             timeout=timeout)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        raise RuntimeError(f"{what}: no result (exit {out.returncode}): {out.stderr[-3000:]}")
    return json.loads(line[len(MARK):]), out
