"""Where a C compiler finds the CUDA driver API for ahead-of-time kernels (kiln.tools.compile's C):
`cuda.h` and `libcuda.so`. Triton bundles a cuda.h; kiln takes the one a CUDA wheel or toolkit
installed (`nvidia-cuda-runtime`, which kiln's cu12 / cu13 extras bring). These are
`triton.backends.nvidia.driver`'s `include_dirs` and `library_dirs()` under the drop-in.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Where the CUDA runtime wheels keep their headers under a site folder: CUDA 12's before 13's, since
# C written against Triton's bundled 12.x cuda.h (cuCtxCreate with three arguments) compiles against
# 12's only; where just one is installed, that one.
_WHEEL_INCLUDES = ("nvidia/cuda_runtime/include", "nvidia/cu13/include")


def include_dirs(path_entries=None, environ=None) -> list:
    """The folders holding cuda.h, the first one's to be used: $CUDA_HOME's or $CUDA_PATH's, the CUDA
    runtime wheels', cuda.pathfinder's answer, /usr/local/cuda's."""
    entries = sys.path if path_entries is None else path_entries
    environ = _environ() if environ is None else environ
    candidates = [Path(environ[k]) / "include" for k in ("CUDA_HOME", "CUDA_PATH") if environ.get(k)]
    candidates += [Path(e) / sub for sub in _WHEEL_INCLUDES for e in entries if e]
    try:
        from cuda import pathfinder
        candidates.append(Path(pathfinder.find_nvidia_header_directory("cudart")))
    except Exception:  # noqa: BLE001 - absent, too old or nothing found: the fixed places follow
        pass
    candidates.append(Path("/usr/local/cuda/include"))
    return _unique(str(c) for c in candidates if (c / "cuda.h").is_file())


def library_dirs(environ=None) -> list:
    """The folders holding the driver library (`-lcuda`): $TRITON_LIBCUDA_PATH (Triton's setting), the
    loader cache's, $LD_LIBRARY_PATH's, then a toolkit's stubs (to link where no driver is installed)."""
    environ = _environ() if environ is None else environ
    found = [environ["TRITON_LIBCUDA_PATH"]] if environ.get("TRITON_LIBCUDA_PATH") else []
    try:
        listing = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        listing = ""
    found += [str(Path(line.split("=>")[-1].strip()).parent) for line in listing.splitlines()
              if line.strip().startswith("libcuda.so") and "=>" in line]
    found += [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d and _has_libcuda(Path(d))]
    homes = [environ[k] for k in ("CUDA_HOME", "CUDA_PATH") if environ.get(k)] + ["/usr/local/cuda"]
    found += [str(Path(h) / "lib64" / "stubs") for h in homes if _has_libcuda(Path(h) / "lib64" / "stubs")]
    return _unique(found)


def _environ() -> dict:
    """The variables these look at, as kiln.cache.env reads them."""
    from kiln.cache import env
    return {**env.toolkit_environ(), "LD_LIBRARY_PATH": env.library_path(),
            "TRITON_LIBCUDA_PATH": env.triton_libcuda_path() or ""}


def _has_libcuda(folder: Path) -> bool:
    return any(folder.glob("libcuda.so*"))


def _unique(items) -> list:
    return list(dict.fromkeys(items))
