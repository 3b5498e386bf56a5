"""`tl.extra.cuda.libdevice` / `kiln.language.extra.libdevice`: the math functions kernels import from there."""
from __future__ import annotations

from types import SimpleNamespace

from . import semantic
from .builtins import (abs, ceil, cos, div_rn, erf, exp, exp2, floor, fma, log, log2, rsqrt, sin, sqrt,
                       sqrt_rn, umulhi)
from .core import builtin


def _unary(name):
    @builtin
    def fn(x):
        return semantic.math_unary(name, x)
    fn.__name__ = name
    return fn


def _binary(name):
    @builtin
    def fn(x, y):
        return semantic.math_binary(name, x, y)
    fn.__name__ = name
    return fn


tanh, tan, log1p, round, trunc = (_unary(n) for n in ("tanh", "tan", "log1p", "round", "trunc"))
isnan, isinf = _unary("isnan"), _unary("isinf")
pow, atan2, copysign = _binary("pow"), _binary("atan2"), _binary("copysign")
rint, nearbyint = round, round
fast_expf, fast_logf, fast_dividef = exp, log, div_rn

libdevice = SimpleNamespace(
    abs=abs, fabs=abs, ceil=ceil, cos=cos, div_rn=div_rn, erf=erf, exp=exp, exp2=exp2, floor=floor, fma=fma,
    log=log, log2=log2, rsqrt=rsqrt, sin=sin, sqrt=sqrt, sqrt_rn=sqrt_rn, umulhi=umulhi, tanh=tanh, tan=tan,
    log1p=log1p, round=round, rint=rint, nearbyint=nearbyint, trunc=trunc, isnan=isnan, isinf=isinf, pow=pow,
    atan2=atan2, copysign=copysign, fast_expf=fast_expf, fast_logf=fast_logf, fast_dividef=fast_dividef,
)
cuda = SimpleNamespace(libdevice=libdevice)
