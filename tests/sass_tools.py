"""cuobjdump's SASS of a cubin, for the tests that check what ptxas made of kiln's PTX (skipped
where there is no cuobjdump: the GPU machine's CUDA has one)."""
import glob
import shutil
import subprocess

import pytest


def sass(cubin: bytes, tmp_path) -> str:
    """The SASS text of `cubin` (written under `tmp_path` for cuobjdump to read)."""
    found = shutil.which("cuobjdump") or next(iter(glob.glob("/usr/local/cuda*/bin/cuobjdump")), None)
    if found is None:
        pytest.skip("no cuobjdump here (the GPU machine has one)")
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    return subprocess.run([found, "-sass", str(path)], capture_output=True, text=True, check=True).stdout
