"""PTX -> cubin through a standalone ptxas, for the kernels that set their warps' registers
themselves (`setmaxnreg`: a warp-specialized kernel's producer gives registers to its dot warps).
nvJitLink assembles PTX as a separately compiled unit, where ptxas drops `setmaxnreg` (info C7504)
and every warp keeps the entry share; a ptxas run on the whole program keeps it. Every other
kernel links through nvJitLink as before.

Which ptxas: `KILN_PTXAS` (a path; `off`: none), else Triton's `TRITON_PTXAS_PATH`, `ptxas` on
PATH, `$CUDA_HOME/bin`, `/usr/local/cuda/bin`, the `nvidia-cuda-nvcc` wheel's. One that does not
answer `--version` is not used."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .nvjitlink import PTXAssembleError
from .target import Target

_RELEASE = re.compile(r"release (\d+\.\d+), V([\d.]+)")


def wanted(ptx: str) -> bool:
    """Does `ptx` set its warps' registers itself, which only a standalone ptxas keeps?"""
    return "setmaxnreg." in ptx


def candidates() -> list[str]:
    """The paths a ptxas is looked for at, in order (`find` takes the first that answers)."""
    from kiln.cache import env  # (a layer above codegen: imported on use)
    named = env.ptxas_setting()
    if named:
        return [] if named.lower() in ("0", "off", "none") else [named]
    triton_path, search = env.ptxas_search()
    found = [triton_path, shutil.which("ptxas", path=search) or ""]
    toolkit = env.toolkit_environ()
    for home in (toolkit.get("CUDA_HOME", ""), toolkit.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if home:
            found.append(os.path.join(home, "bin", "ptxas"))
    for site in sys.path:  # the nvidia-cuda-nvcc wheel (cu12: nvidia/cuda_nvcc; cu13: nvidia/cu13)
        if os.path.isabs(site):  # (not the working directory's: nothing found there is run)
            found += [os.path.join(site, sub) for sub in ("nvidia/cuda_nvcc/bin/ptxas", "nvidia/cu13/bin/ptxas")]
    return [f for f in found if f]


@functools.lru_cache(maxsize=1)  # once per process: the environment a compile process starts with
def find() -> tuple[str, str] | None:
    """(path, version) of the ptxas to use, or None."""
    for path in candidates():
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        release = _RELEASE.search(out)
        if release:
            return path, release.group(2)
    return None


def version() -> str:
    """The version of the ptxas `find` picks ("13.0.88"), "" where there is none: part of the
    compile key, since kernels that set their registers are assembled by it."""
    found = find()
    return found[1] if found else ""


def assemble(ptx: str, target: Target) -> tuple[bytes, str]:
    """The cubin for `ptx` and ptxas's info log (`-v`: the lines nvjitlink.resource_usage reads).
    PTXAssembleError where there is no ptxas or it refuses the PTX."""
    found = find()
    if found is None:
        raise PTXAssembleError("no standalone ptxas found (KILN_PTXAS names one)")
    with tempfile.TemporaryDirectory(prefix="kiln-ptxas-") as scratch:
        source, cubin = Path(scratch, "kernel.ptx"), Path(scratch, "kernel.cubin")
        source.write_text(ptx)
        try:
            done = subprocess.run([found[0], f"-arch={target.name}", "-O3", "-lineinfo", "-v", "-o", str(cubin),
                                   str(source)], capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            raise PTXAssembleError(f"ptxas {found[0]} did not run: {e}") from None
        if done.returncode != 0 or not cubin.is_file():
            raise PTXAssembleError(f"ptxas {found[0]} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return cubin.read_bytes(), done.stdout + done.stderr
