"""Every environment variable kiln reads, read in one place."""
from __future__ import annotations

import os

# Keyword arguments of a launch that are options, not kernel arguments.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug", "stream",
                  "launch_cooperative_grid", "launch_pdl", "waves_per_eu", "matrix_instr_nonkdim", "kpack")
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3


_TRUE = ("1", "true", "yes", "on")
_environ = os.environ
# os.environ keeps the variables in `_data` with encoded names and values; assigning through
# os.environ (monkeypatch.setenv, too) updates it.
_RAW_ENVIRON = os.environ._data
_INTERPRET_KEYS = tuple(os.environ.encodekey(k) for k in ("KILN_INTERPRET", "TRITON_INTERPRET"))
_TRUE_RAW = tuple(os.environ.encodevalue(v) for v in _TRUE)


def _flag(name: str) -> bool:
    value = _environ.get(name)
    return value is not None and value.strip().lower() in _TRUE


def interpret() -> bool:
    """KILN_INTERPRET=1: run kernels in the NumPy interpreter instead of on a GPU.

    Read on every launch (tests switch it), so it looks in os.environ's own dictionary:
    `os.environ.get` encodes the name and raises KeyError inside for a missing variable,
    which costs a microsecond or two of every launch.
    """
    raw = _RAW_ENVIRON.get
    value = raw(_INTERPRET_KEYS[0]) or raw(_INTERPRET_KEYS[1])
    return value is not None and value.strip().lower() in _TRUE_RAW


def shared_tier_configured() -> bool:
    """KILN_REMOTE_CACHE is set: a shared tier (kiln.cache.env reads its value)."""
    return bool(_environ.get("KILN_REMOTE_CACHE", "").strip())


def debug() -> bool:
    """KILN_DEBUG=1: keep device_assert checks in compiled kernels."""
    return _flag("KILN_DEBUG") or _flag("TRITON_DEBUG")


def allow_non_constexpr_globals() -> bool:
    """KILN_ALLOW_NON_CONSTEXPR_GLOBALS=1 (or Triton's TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1): kernels may
    read plain (non-constexpr) globals and captured variables, compiled in with the value they have then."""
    return _flag("KILN_ALLOW_NON_CONSTEXPR_GLOBALS") or _flag("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS")

