"""A benchmark's measurement in a fresh Python process: the child prints one line `ROWS <json>`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

MARK = "ROWS "


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
