"""Where libdevice.10.bc is: the bitcode of CUDA's math functions that kernels calling erf,
pow, tanh, ... link (kiln.codegen.backend). Found without LLVM, so that the compile key can
name the file a node's compiles link (kiln.proto.key) at the cost of a few stats.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from pathlib import Path

LIBDEVICE = "libdevice.10.bc"
LIBDEVICE_FIX = ("pip install 'kiln[cu13]' (CUDA 13 drivers) or 'kiln[cu12]' (CUDA 12 drivers), "
                 "or install the CUDA toolkit, or set KILN_LIBDEVICE to a libdevice.10.bc")


@functools.lru_cache(maxsize=None)
def libdevice_path() -> str:
    """Where libdevice.10.bc is: KILN_LIBDEVICE if set, else where cuda.pathfinder finds it, else
    the first of `libdevice_candidates` that exists; none is a FileNotFoundError naming the fix."""
    from kiln.cache.env import libdevice_setting, toolkit_environ  # (a layer above codegen: imported on use)
    setting = libdevice_setting()
    if setting is not None:
        if not setting.is_file():
            raise FileNotFoundError(f"KILN_LIBDEVICE={setting}: no such file")
        return str(setting)
    found = _pathfinder_libdevice()
    if found:
        return found
    for path in libdevice_candidates(sys.path, toolkit_environ()):
        if path.is_file():
            return str(path)
    raise FileNotFoundError(
        f"{LIBDEVICE} not found: kernels that call math functions (erf, pow, tanh, ...) need it. "
        f"{LIBDEVICE_FIX}. Looked in the nvidia-nvvm, nvidia-cuda-nvcc-cu12 and Triton wheels on sys.path, "
        "$CONDA_PREFIX, $CUDA_HOME, $CUDA_PATH and /usr/local/cuda*")


def _pathfinder_libdevice() -> str | None:
    """cuda.pathfinder's answer (the CUDA wheels, conda, CUDA_HOME; it knows layouts kiln does not),
    or None: not found, or a cuda-pathfinder too old to look for bitcode."""
    try:
        from cuda import pathfinder
        path = pathfinder.find_bitcode_lib("device")
    except Exception:  # noqa: BLE001 - absent, too old, or not found there: kiln's own list follows
        return None
    return path if path and os.path.isfile(path) else None


def libdevice_candidates(path_entries, environ, local: Path = Path("/usr/local")) -> list[Path]:
    """The places libdevice.10.bc may be, in the order searched: the CUDA wheels under each
    `path_entries` folder (13's nvidia-nvvm, then 12's nvidia-cuda-nvcc-cu12), a conda environment,
    CUDA_HOME, CUDA_PATH, /usr/local/cuda, the newest /usr/local/cuda-X.Y first, then Triton's wheel
    (found by its path: importing triton may import kiln)."""
    entries = [Path(e) for e in path_entries if e]
    wheels = [e / "nvidia" / sub / "nvvm" / "libdevice" for e in entries for sub in ("cu13", "cuda_nvcc")]
    toolkits = [Path(environ[k]) for k in ("CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH") if environ.get(k)]
    toolkits += [local / "cuda", *sorted(local.glob("cuda-*"), key=_version_key, reverse=True)]
    triton = [e / "triton" / "backends" / "nvidia" / "lib" for e in entries]
    return [folder / LIBDEVICE for folder in (*wheels, *(t / "nvvm" / "libdevice" for t in toolkits), *triton)]


def _version_key(path: Path) -> tuple[int, ...]:
    """/usr/local/cuda-12.9 -> (12, 9)."""
    return tuple(int(n) for n in re.findall(r"\d+", path.name))


def libdevice_bytes() -> bytes:
    """The bitcode of the libdevice kiln links here, read once per process."""
    return _read(libdevice_path())


@functools.lru_cache(maxsize=None)
def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def libdevice_digest() -> str:
    """SHA-256 of the libdevice kiln links here, or "none" where there is none: part of the
    compiler's identity, since another file (KILN_LIBDEVICE, a toolkit) may compile another kernel."""
    try:
        return hashlib.sha256(libdevice_bytes()).hexdigest()
    except FileNotFoundError:
        return "none"


def libdevice_fingerprint() -> list:
    """What decides which libdevice is found, and its contents, without looking it up: the setting
    and every candidate's size and mtime (cuda.pathfinder looks in the same wheels and toolkits)."""
    from kiln.cache.env import libdevice_setting, toolkit_environ  # (a layer above codegen: imported on use)
    setting = libdevice_setting()
    files = ([setting] if setting is not None else []) + libdevice_candidates(sys.path, toolkit_environ())
    return [str(setting)] + [(str(f), *_stat(f)) for f in files if f.is_file()]


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns
