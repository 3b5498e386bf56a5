"""`tl.math`: the elementwise math functions."""
from .builtins import (abs, ceil, cos, div_rn, erf, exp, exp2, fdiv, floor, fma, log, log2, rsqrt,  # noqa: F401
                       sin, sqrt, sqrt_rn, umulhi)
from .extra.libdevice import isinf, isnan, log1p, pow, tan, tanh  # noqa: F401
from .standard import cdiv, sigmoid, softmax  # noqa: F401
