"""The NVIDIA programs that `triton.knobs.nvidia` names (ptxas, cuobjdump, nvdisasm): where one is
and which CUDA release it comes from. kiln runs none of them (it assembles with nvJitLink, in the
process); tools and tests that run one themselves read its path from the knob."""
from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

_RELEASE = re.compile(r"release (\d+\.\d+)")


@dataclass
class NvidiaTool:
    """A program and its CUDA release, "major.minor" (Triton's `knobs.NvidiaTool`)."""
    path: str | None
    version: str

    @staticmethod
    @functools.lru_cache
    def from_path(path: str) -> NvidiaTool | None:
        """The program at `path` if it runs and names its release in `--version`'s text, else None."""
        try:
            done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        release = _RELEASE.search(done.stdout + done.stderr)
        return NvidiaTool(path, release.group(1)) if release else None


def find(binary: str, named: str | None) -> NvidiaTool | None:
    """The program a knob's variable names (`named`), else `binary` on PATH, else the copy an NVIDIA
    wheel installed (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm: kiln's test extra has both, as Triton
    bundles its own); None if none runs."""
    for path in (named, shutil.which(binary), *wheel_copies(binary)):
        if path and (tool := NvidiaTool.from_path(path)):
            return tool
    return None


def wheel_copies(binary: str) -> list[str]:
    """`binary` as NVIDIA's wheels install it (nvidia/cu<major>/bin/), newest CUDA first."""
    try:
        import nvidia
    except ImportError:
        return []
    found = {}
    for root in nvidia.__path__:  # cu13/ (CUDA 13's wheels), cuda_cuobjdump/ and the like (CUDA 12's)
        for path in glob.glob(os.path.join(root, "cu*", "bin", binary)):
            major = re.fullmatch(r"cu(\d+)", os.path.basename(os.path.dirname(os.path.dirname(path))))
            found[path] = int(major.group(1)) if major else 0
    return sorted(found, key=found.get, reverse=True)


def nvjitlink_assembler() -> NvidiaTool | None:
    """The assembler kiln uses: ptxas inside nvJitLink, a library, so no path; nvJitLink's release.
    None where nvJitLink cannot be loaded."""
    try:
        from cuda.bindings import nvjitlink
        major, minor = nvjitlink.version()
    except Exception:  # noqa: BLE001  (no cuda-bindings, or no libnvJitLink to load)
        return None
    return NvidiaTool(None, f"{major}.{minor}")
