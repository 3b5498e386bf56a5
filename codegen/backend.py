"""LLVM IR text -> optimized module -> PTX, with libdevice linked when the kernel uses it.

llvmlite's targets are initialized once per process (a warm worker pays it once); a
parsed libdevice is kept as bitcode bytes and re-parsed per compile because `link_in`
consumes the module it links.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

import llvmlite.binding as llvm

from .target import Target

# Shared (3), constant (4) and local (5) pointers are 32 bits, as the hardware addresses
# them: with -nvptx-short-ptr a shared address takes one register, not two.
DATA_LAYOUT = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
TRIPLE = "nvptx64-nvidia-cuda"


@functools.lru_cache(maxsize=None)
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.set_option("", "-nvptx-short-ptr")


@functools.lru_cache(maxsize=None)
def _target_machine(target: Target):
    _init_llvm()
    tgt = llvm.Target.from_triple(TRIPLE)
    return tgt.create_target_machine(cpu=target.name, features=target.llvm_features, opt=3)


LIBDEVICE = "libdevice.10.bc"
LIBDEVICE_FIX = ("pip install 'kiln[cu13]' (CUDA 13 drivers) or 'kiln[cu12]' (CUDA 12 drivers), "
                 "or install the CUDA toolkit, or set KILN_LIBDEVICE to a libdevice.10.bc")


@functools.lru_cache(maxsize=None)
def libdevice_path() -> str:
    """Where libdevice.10.bc is: KILN_LIBDEVICE if set, else where cuda.pathfinder finds it, else
    the first of `libdevice_candidates` that exists; none is a FileNotFoundError naming the fix."""
    from kiln.cache.env import libdevice_setting  # (a layer above codegen: imported on use)
    setting = libdevice_setting()
    if setting is not None:
        if not setting.is_file():
            raise FileNotFoundError(f"KILN_LIBDEVICE={setting}: no such file")
        return str(setting)
    found = _pathfinder_libdevice()
    if found:
        return found
    for path in libdevice_candidates(sys.path, os.environ):
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


@functools.lru_cache(maxsize=None)
def _libdevice_bytes() -> bytes:
    with open(libdevice_path(), "rb") as f:
        return f.read()


@functools.lru_cache(maxsize=256)
def _libdevice_subset(names: frozenset[str], target: Target) -> bytes:
    """The bitcode of libdevice's functions `names` and of what they use, nothing else. Linking
    all of libdevice (575 functions) and letting O3 drop the rest cost a pointwise kernel that
    calls erf and tanh 130 of its 250 ms; a process (a daemon worker) meets the same few sets again."""
    lib = llvm.parse_bitcode(_libdevice_bytes())
    for f in lib.functions:
        if not f.is_declaration and f.name not in names:
            f.linkage = llvm.Linkage.internal
    for g in lib.global_variables:
        if not g.is_declaration:
            g.linkage = llvm.Linkage.internal
    pb = llvm.create_pass_builder(_target_machine(target), llvm.create_pipeline_tuning_options())
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(lib, pb)
    return lib.as_bitcode()


def optimize(llir: str, target: Target, kernel_name: str) -> llvm.ModuleRef:
    """Parse `llir`, link the libdevice functions it calls (`__nv_*`), internalize, run O3."""
    _init_llvm()
    mod = llvm.parse_assembly(llir)
    mod.verify()
    called = frozenset(f.name for f in mod.functions if f.is_declaration and f.name.startswith("__nv_"))
    if called:
        lib = llvm.parse_bitcode(_libdevice_subset(called, target))
        lib.triple, lib.data_layout = mod.triple, mod.data_layout
        mod.link_in(lib)
        # Everything but the kernel becomes internal so O3 drops the unused libdevice.
        for f in mod.functions:
            if not f.is_declaration and f.name != kernel_name:
                f.linkage = llvm.Linkage.internal
        for g in mod.global_variables:
            if not g.is_declaration and g.linkage != llvm.Linkage.internal and g.name.startswith("__nv"):
                g.linkage = llvm.Linkage.internal
    tm = _target_machine(target)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return mod


def emit_ptx(mod: llvm.ModuleRef, target: Target) -> str:
    return _target_machine(target).emit_assembly(mod)
