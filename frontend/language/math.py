"""`tl.math`: the elementwise math functions, exactly the names of Triton's `tl.math` (libdevice's
others, tanh, pow, isnan..., are in `tl.extra.cuda.libdevice`, as in Triton)."""
from .builtins import (abs, ceil, cos, div_rn, erf, exp, exp2, fdiv, floor, fma, log, log2, rsqrt,  # noqa: F401
                       sin, sqrt, sqrt_rn, umulhi)
