"""The dependency floors that pyproject.toml declares work: a venv with exactly those versions of
llvmlite and cuda-bindings (the rest from this environment) compiles a kernel that calls
libdevice to PTX with its launch bounds, and links its cubin with nvJitLink, with no GPU."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = textwrap.dedent("""
    import os, tempfile
    os.environ.update(KILN_DAEMON="off", KILN_CACHE_DIR=tempfile.mkdtemp())
    import numpy as np
    import kiln, kiln.language as tl
    import llvmlite, cuda.bindings

    @kiln.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=offs < n)) * 2, mask=offs < n)

    x = np.zeros(256, np.float32)
    compiled = scale.warmup(x, x, 256, BLOCK=256, num_warps=4, target="sm_90a")
    print(llvmlite.__version__, cuda.bindings.__version__, ".maxntid" in compiled.asm["ptx"],
          len(compiled.asm["cubin"]) > 0)
""")


def floors() -> dict[str, str]:
    """{package: its lowest version} from pyproject.toml's `>=` dependencies we pin here."""
    text = (REPO / "pyproject.toml").read_text()  # (tomllib is Python 3.11's; kiln runs on 3.10)
    return dict(re.findall(r'^\s*"(llvmlite|cuda-bindings)>=([\w.]+)"', text, flags=re.M))


def _release(version: str) -> tuple[int, ...]:
    """"0.48" and "0.48.0" alike."""
    parts = [int(p) for p in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_the_declared_floors_compile_a_kernel(tmp_path):
    pins = floors()
    assert set(pins) == {"llvmlite", "cuda-bindings"}, pins
    venv = tmp_path / "floors"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                              *(f"{name}=={version}" for name, version in pins.items())],
                             capture_output=True, text=True, timeout=600)
    if install.returncode != 0:
        pytest.skip(f"cannot install the floor versions here (no package index?): {install.stderr[-300:]}")
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_DAEMON", "KILN_CACHE_DIR")}
    script = tmp_path / "check.py"  # @jit reads its kernel's source from a file
    script.write_text(CHECK)
    out = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    llvmlite_version, bindings_version, bounds, cubin = out.stdout.split()
    assert [_release(v) for v in (llvmlite_version, bindings_version)] == \
        [_release(pins["llvmlite"]), _release(pins["cuda-bindings"])]
    assert bounds == "True" and cubin == "True"
