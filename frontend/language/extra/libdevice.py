"""`tl.extra.cuda.libdevice` / `kiln.language.extra.libdevice`: CUDA's libdevice math library.

Each function has libdevice's name and maps to one block-IR op (or a short composition
of them); codegen lowers the op to the `__nv_*` function. The predicates (`isnan`,
`isinf`, `isfinited`, `signbit`) return int1, where libdevice returns a 0/1 int32.
"""
from __future__ import annotations

from .. import semantic
from ..builtins import (abs, ceil, cos, div_rn, erf, exp, exp2, fma, floor, log, log2, rsqrt, sin,  # noqa: F401
                        sqrt, sqrt_rn, umulhi)
from ..core import builtin, int64


def _unary(name, op=None):
    @builtin
    def fn(arg0):
        return semantic.math_unary(op or name, arg0)
    fn.__name__, fn.__doc__ = name, f"libdevice {name}, elementwise."
    return fn


def _binary(name, op=None):
    @builtin
    def fn(arg0, arg1):
        return semantic.math_binary(op or name, arg0, arg1)
    fn.__name__, fn.__doc__ = name, f"libdevice {name}, elementwise."
    return fn


# exponentials and logarithms
expm1, exp10, log10, log1p = _unary("expm1"), _unary("exp10"), _unary("log10"), _unary("log1p")
# trigonometric and hyperbolic
tan, tanh, sinh, cosh = _unary("tan"), _unary("tanh"), _unary("sinh"), _unary("cosh")
asin, acos, atan = _unary("asin"), _unary("acos"), _unary("atan")
asinh, acosh, atanh = _unary("asinh"), _unary("acosh"), _unary("atanh")
atan2 = _binary("atan2")
# special functions
erfc, erfinv, lgamma, tgamma = _unary("erfc"), _unary("erfinv"), _unary("lgamma"), _unary("tgamma")
# roots and powers
cbrt, pow, hypot = _unary("cbrt"), _binary("pow"), _binary("hypot")
# rounding: round is half away from zero, rint and nearbyint half to even
round, rint, nearbyint, trunc = _unary("round"), _unary("rint"), _unary("rint", "rint"), _unary("trunc")
nearbyint.__name__ = "nearbyint"
# classification (int1 results)
isnan, isinf, signbit = _unary("isnan"), _unary("isinf"), _unary("signbit")
isfinited = finitef = _unary("isfinited", "isfinite")
# remainders and comparisons
fmod = _binary("fmod", "rem")
remainder, fdim, nextafter, copysign = _binary("remainder"), _binary("fdim"), _binary("nextafter"), _binary("copysign")
fabs = abs
# integer bit operations
@builtin
def popc(arg0):
    """The number of set bits, as int32."""
    return semantic.bit_count("popc", arg0)


@builtin
def clz(arg0):
    """The number of leading zero bits, as int32."""
    return semantic.bit_count("clz", arg0)


@builtin
def brev(arg0):
    """`arg0` with its bits in reverse order."""
    return semantic.bit_count("brev", arg0)


@builtin
def fmin(arg0, arg1):
    """The smaller of two floats; a NaN operand loses to a number."""
    return semantic.minimum(arg0, arg1)


@builtin
def fmax(arg0, arg1):
    """The larger of two floats; a NaN operand loses to a number."""
    return semantic.maximum(arg0, arg1)


@builtin
def saturatef(arg0):
    """`arg0` clamped to [0, 1]."""
    return semantic.clamp(arg0, 0.0, 1.0)


@builtin
def rcp_rn(arg0):
    """1 / arg0, rounded to nearest."""
    return semantic.truediv(1.0, arg0)


@builtin
def llrint(arg0):
    """`arg0` rounded half to even, as int64."""
    return semantic.cast(semantic.math_unary("rint", arg0), int64)


@builtin
def llround(arg0):
    """`arg0` rounded half away from zero, as int64."""
    return semantic.cast(semantic.math_unary("round", arg0), int64)


@builtin
def mulhi(arg0, arg1):
    """The high half of the double-width product (signed for signed integers)."""
    return semantic.mulhi(arg0, arg1)


# functions of libdevice composed from the ones above
_SQRT2 = 1.4142135623730951
_PI = 3.141592653589793


@builtin
def normcdf(arg0):
    """The standard normal CDF: erfc(-x / sqrt(2)) / 2."""
    return semantic.mul(semantic.math_unary("erfc", semantic.mul(arg0, -1 / _SQRT2)), 0.5)


@builtin
def normcdfinv(arg0):
    """The inverse of normcdf: sqrt(2) * erfinv(2p - 1)."""
    return semantic.mul(semantic.math_unary("erfinv", semantic.sub(semantic.mul(arg0, 2.0), 1.0)), _SQRT2)


@builtin
def erfcinv(arg0):
    """The inverse of erfc: erfinv(1 - x)."""
    return semantic.math_unary("erfinv", semantic.sub(1.0, arg0))


@builtin
def rhypot(arg0, arg1):
    """1 / hypot(x, y)."""
    return semantic.truediv(1.0, semantic.math_binary("hypot", arg0, arg1))


@builtin
def sinpi(arg0):
    """sin(pi * x)."""
    return semantic.math_unary("sin", semantic.mul(arg0, _PI))


@builtin
def cospi(arg0):
    """cos(pi * x)."""
    return semantic.math_unary("cos", semantic.mul(arg0, _PI))


@builtin
def ldexp(arg0, arg1):
    """x * 2**n for an integer n, exactly (two power-of-two factors built from exponent bits)."""
    return semantic.ldexp(arg0, arg1)


scalbn = ldexp


# the fast (approximate) variants compute the same functions here
fast_expf, fast_logf, fast_dividef = exp, log, div_rn
fast_sinf, fast_cosf, fast_tanf, fast_log2f = sin, cos, tan, log2
fast_log10f, fast_exp10f, fast_powf = log10, exp10, pow
