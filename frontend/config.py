"""Every environment variable kiln reads, read in one place."""
from __future__ import annotations

import os

# Keyword arguments of a launch that are options, not kernel arguments.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug", "stream",
                  "launch_cooperative_grid", "waves_per_eu", "matrix_instr_nonkdim", "kpack")
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def interpret() -> bool:
    """KILN_INTERPRET=1: run kernels in the NumPy interpreter instead of on a GPU."""
    return _flag("KILN_INTERPRET") or _flag("TRITON_INTERPRET")


def debug() -> bool:
    """KILN_DEBUG=1: keep device_assert checks in compiled kernels."""
    return _flag("KILN_DEBUG") or _flag("TRITON_DEBUG")
