"""cuobjdump's SASS of a cubin, for the tests that check what ptxas made of kiln's PTX: the one the
test extra installs (the nvidia-cuda-cuobjdump wheel), one on PATH, or a CUDA toolkit's; skipped
where there is none."""
import glob
import os
import re
import subprocess

import pytest


def cuobjdump() -> str | None:
    """The path of a cuobjdump (as `knobs.nvidia.cuobjdump` finds one, or a CUDA toolkit's), or None."""
    from kiln.dropin import nvidia_tools
    tool = nvidia_tools.find("cuobjdump", os.environ.get("TRITON_CUOBJDUMP_PATH"))
    return tool.path if tool else next(iter(glob.glob("/usr/local/cuda*/bin/cuobjdump")), None)


def sass(cubin: bytes, tmp_path) -> str:
    """The SASS text of `cubin` (written under `tmp_path` for cuobjdump to read)."""
    found = cuobjdump()
    if found is None:
        pytest.skip("no cuobjdump here (`pip install -e '.[test]'` brings one; so does the GPU machine's CUDA)")
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    return subprocess.run([found, "-sass", str(path)], capture_output=True, text=True, check=True).stdout


def innermost_loop(sass_text: str, marker: str = "GMMA") -> list[str]:
    """The instructions of the shortest loop (a branch back to an earlier address, not a `.U.ANY` retry)
    that holds an instruction containing `marker` (the tensor-core loop's body by default)."""
    code = [(int(a, 16), text) for a, text in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass_text)]
    loops = [(int(target, 16), at) for at, text in code if ".U.ANY" not in text
             for target in re.findall(r"\bBRA (0x[0-9a-f]+)", text) if int(target, 16) < at]
    bodies = [[text for at, text in code if start <= at <= end] for start, end in loops]
    bodies = [body for body in bodies if any(marker in text for text in body)]
    assert bodies, f"no loop around a {marker} instruction"
    return min(bodies, key=len)
