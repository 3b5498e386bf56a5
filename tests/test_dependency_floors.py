"""The dependency floors that pyproject.toml declares work, for each CUDA extra: a fresh venv that
installs kiln with `[cu12]` or `[cu13]` and exactly the floor versions of llvmlite and of the extra's
packages (cuda-bindings, nvJitLink, the libdevice wheel, the runtime wheel's cuda.h) resolves, and compiles a kernel that calls
libdevice to PTX with its launch bounds and links its cubin with nvJitLink, with no GPU. Skipped
where no package index can be reached; a resolver conflict fails."""
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
    import sys
    from importlib.metadata import version
    from kiln.codegen.libdevice import libdevice_path

    @kiln.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.math.erf(tl.load(x_ptr + offs, mask=offs < n)) * 2, mask=offs < n)

    x = np.zeros(256, np.float32)
    compiled = scale.warmup(x, x, 256, BLOCK=256, num_warps=4, target="sm_90a")
    print(*map(version, sys.argv[1:]), ".maxntid" in compiled.asm["ptx"], "__nv_erff" in compiled.asm["llir"],
          len(compiled.asm["cubin"]) > 0, libdevice_path())
""")


def floors(extra: str) -> dict[str, str]:
    """{distribution: its floor} for `extra`: llvmlite's from the dependencies, and every `>=` of the
    extra's list."""
    text = (REPO / "pyproject.toml").read_text()  # (tomllib is Python 3.11's; kiln runs on 3.10)
    listed = re.search(rf"^{extra} = \[(.*?)\]", text, flags=re.M | re.S)
    assert listed, f"pyproject.toml has no {extra} extra"
    pins = dict(re.findall(r'^\s*"(llvmlite)>=([\w.]+)"', text, flags=re.M))
    pins.update(re.findall(r'"([\w.-]+)>=([\w.]+)', listed.group(1)))
    return pins


def _release(version: str) -> tuple[int, ...]:
    """"0.48" and "0.48.0" alike."""
    parts = [int(p) for p in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("extra", ["cu12", "cu13"])
def test_the_declared_floors_compile_a_kernel(tmp_path, extra):
    pins = floors(extra)
    assert {"llvmlite", "cuda-bindings"} < set(pins) and len(pins) == 5, pins  # nvJitLink, libdevice, cuda.h
    venv = tmp_path / extra
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "-q", "-e", f"{REPO}[{extra}]",
                              *(f"{name}=={version}" for name, version in pins.items())],
                             capture_output=True, text=True, timeout=600)
    assert "ResolutionImpossible" not in install.stderr, install.stderr[-3000:]
    if install.returncode != 0:
        pytest.skip(f"cannot install the floor versions here (no package index?): {install.stderr[-300:]}")
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_DAEMON", "KILN_CACHE_DIR", "KILN_LIBDEVICE")}
    script = tmp_path / "check.py"  # @jit reads its kernel's source from a file
    script.write_text(CHECK)
    out = subprocess.run([python, str(script), *pins], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    *versions, bounds, linked, cubin, libdevice = out.stdout.split()
    assert [_release(v) for v in versions] == [_release(v) for v in pins.values()], (versions, pins)
    assert bounds == linked == cubin == "True"  # launch bounds, libdevice's erff linked in, a cubin
    assert libdevice.startswith(str(venv)), libdevice  # the extra's own libdevice wheel
