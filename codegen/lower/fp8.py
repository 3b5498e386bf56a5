"""fp8 conversions are not lowered yet (they need PTX `cvt` with `.e4m3x2`, sm_89+)."""
from .context import LoweringError


def cast_fp8(lw, x, src, dst):
    raise LoweringError(f"casts between {src} and {dst} are not lowered yet")
