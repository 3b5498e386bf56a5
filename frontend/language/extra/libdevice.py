"""`tl.extra.cuda.libdevice` / `kiln.language.extra.libdevice`: CUDA's libdevice math library.

Each function has libdevice's name and maps to one block-IR op (or a short composition
of them); codegen lowers the op to the `__nv_*` function. The predicates (`isnan`,
`isinf`, `isfinited`, `signbit`) return int1, where libdevice returns a 0/1 int32.
"""
from __future__ import annotations

from .. import core, semantic
from ..builtins import (abs, ceil, cos, erf, exp, exp2, fma, floor, log, log2, rsqrt, sin,  # noqa: F401
                        sqrt, umulhi)
from ..core import builtin, int64


@builtin
def div_rn(arg0, arg1):
    """libdevice div_rn: arg0 / arg1 rounded to nearest, fp32 or fp64 (tl.div_rn takes fp32 only)."""
    return semantic.math_binary("div_rn", arg0, arg1)


@builtin
def sqrt_rn(arg0):
    """libdevice sqrt_rn: the square root rounded to nearest, fp32 or fp64 (tl.sqrt_rn takes fp32 only)."""
    return semantic.math_unary("sqrt_rn", arg0)


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
fast_tanhf = tanh


# --- functions with Triton's per-dtype signatures ---------------------------------------
# Each accepts exactly the dtypes of Triton's libdevice table (mixed operands are first
# promoted to their common type, as Triton does); any other dtype is a TypeError.
_F = (("fp32",), ("fp64",))
_FF = (("fp32", "fp32"), ("fp64", "fp64"))
_FFF = (("fp32", "fp32", "fp32"), ("fp64", "fp64", "fp64"))
_FFFF = (("fp32",) * 4, ("fp64",) * 4)
_II = (("int32", "int32"), ("uint32", "uint32"))
_ROUNDINGS = ("rn", "rz", "rd", "ru")


def _export(fn, name, doc):
    fn.__name__, fn.__qualname__, fn.__doc__ = name, name, doc
    globals()[name] = fn


def _operands(name, args, signatures):
    return semantic.libdevice_operands(name, args, signatures)


def _typed(name, op, signatures, doc, result=None):
    """libdevice `name` as the block-IR op `op` with one operand per signature entry."""
    def fn(*args):
        return semantic.libdevice_op(op, _operands(name, args, signatures), result)
    _export(builtin(fn), name, doc)


for _r in _ROUNDINGS:
    _how = {"rn": "to nearest even", "rz": "toward zero", "rd": "down", "ru": "up"}[_r]

    def _add(arg0, arg1, _r=_r, _name=f"add_{_r}"):
        return semantic.libdevice_op("add_r", _operands(_name, [arg0, arg1], _FF), rounding=_r)

    def _sub(arg0, arg1, _r=_r, _name=f"sub_{_r}"):
        a, b = _operands(_name, [arg0, arg1], _FF)
        return semantic.libdevice_op("add_r", [a, semantic.neg(b)], rounding=_r)  # negation is exact

    def _mul(arg0, arg1, _r=_r, _name=f"mul_{_r}"):
        return semantic.libdevice_op("mul_r", _operands(_name, [arg0, arg1], _FF), rounding=_r)

    def _div(arg0, arg1, _r=_r, _name=f"div_{_r}"):
        return semantic.libdevice_op("div_r", _operands(_name, [arg0, arg1], _FF), rounding=_r)

    def _rcp(arg0, _r=_r, _name=f"rcp_{_r}"):
        (x,) = _operands(_name, [arg0], _F)
        one = semantic.broadcast_to(semantic.cast(1.0, x.dtype), x.type.shape)
        return semantic.libdevice_op("div_r", [one, x], rounding=_r)

    def _fma(arg0, arg1, arg2, _r=_r, _name=f"fma_{_r}"):
        return semantic.libdevice_op("fma_r", _operands(_name, [arg0, arg1, arg2], _FFF), rounding=_r)

    def _sqrt(arg0, _r=_r, _name=f"sqrt_{_r}"):
        return semantic.libdevice_op("sqrt_r", _operands(_name, [arg0], _F), rounding=_r)

    _export(builtin(_add), f"add_{_r}", f"arg0 + arg1, rounded {_how} (fp32 or fp64).")
    _export(builtin(_sub), f"sub_{_r}", f"arg0 - arg1, rounded {_how} (fp32 or fp64).")
    _export(builtin(_mul), f"mul_{_r}", f"arg0 * arg1, rounded {_how} (fp32 or fp64).")
    _export(builtin(_fma), f"fma_{_r}", f"arg0 * arg1 + arg2 with one rounding, {_how} (fp32 or fp64).")
    if _r != "rn":  # div_rn, rcp_rn and sqrt_rn are the builtins of the same name
        _export(builtin(_div), f"div_{_r}", f"arg0 / arg1, rounded {_how} (fp32 or fp64).")
        _export(builtin(_rcp), f"rcp_{_r}", f"1 / arg0, rounded {_how} (fp32 or fp64).")
        _export(builtin(_sqrt), f"sqrt_{_r}", f"The square root, rounded {_how} (fp32 or fp64).")


# conversions: float -> integer rounds with an op kiln has, then casts (saturating, NaN -> 0);
# the unsigned ones return the bits as a signed type, as Triton's table types them
_INT_ROUND = {"rn": "rint", "rz": None, "rd": "floor", "ru": "ceil"}
_FLOAT_TO_INT = {  # prefix: (source, conversion type, result type)
    "float2int": ("fp32", core.int32, core.int32), "float2uint": ("fp32", core.uint32, core.int32),
    "float2ll": ("fp32", core.int64, core.int64), "float2ull": ("fp32", core.uint64, core.int64),
    "double2int": ("fp64", core.int32, core.int32), "double2uint": ("fp64", core.uint32, core.int32),
    "double2ll": ("fp64", core.int64, core.int64), "double2ull": ("fp64", core.uint64, core.int64),
}
# number -> float: round to nearest is a plain cast, the directed roundings the cvt_r op
_TO_FLOAT = {  # prefix: (source, result, roundings)
    "double2float": ("fp64", core.float32, _ROUNDINGS), "int2float": ("int32", core.float32, _ROUNDINGS),
    "uint2float": ("uint32", core.float32, _ROUNDINGS), "ll2float": ("int64", core.float32, _ROUNDINGS),
    "ull2float": ("uint64", core.float32, _ROUNDINGS), "ll2double": ("int64", core.float64, _ROUNDINGS),
    "ull2double": ("uint64", core.float64, _ROUNDINGS),
    "int2double": ("int32", core.float64, ("rn",)), "uint2double": ("uint32", core.float64, ("rn",)),
}

for _prefix, (_src, _via, _dst) in _FLOAT_TO_INT.items():
    for _r in _ROUNDINGS:
        def _to_int(arg0, _name=f"{_prefix}_{_r}", _src=_src, _via=_via, _dst=_dst, _r=_r):
            (x,) = _operands(_name, [arg0], ((_src,),))
            if _INT_ROUND[_r]:
                x = semantic.math_unary(_INT_ROUND[_r], x)
            return semantic.cast(semantic.cast(x, _via), _dst, bitcast=True)
        _export(builtin(_to_int), f"{_prefix}_{_r}",
                f"{_src} rounded ({_r}) to {_via}, saturating, NaN -> 0; returned as {_dst}.")

for _prefix, (_src, _dst, _modes) in _TO_FLOAT.items():
    for _r in _modes:
        def _to_float(arg0, _name=f"{_prefix}_{_r}", _src=_src, _dst=_dst, _r=_r):
            (x,) = _operands(_name, [arg0], ((_src,),))
            if _r == "rn":
                return semantic.cast(x, _dst)
            return semantic.libdevice_op("cvt_r", [x], _dst, rounding=_r)
        _export(builtin(_to_float), f"{_prefix}_{_r}", f"{_src} converted to {_dst}, rounded {_r}.")


# bit reinterpretation (float_as_uint returns int32, as in Triton's table)
for _name, _src, _dst in (("float_as_int", "fp32", core.int32), ("float_as_uint", "fp32", core.int32),
                          ("int_as_float", "int32", core.float32), ("uint_as_float", "uint32", core.float32),
                          ("double_as_longlong", "fp64", core.int64),
                          ("longlong_as_double", "int64", core.float64)):
    def _reinterpret(arg0, _name=_name, _src=_src, _dst=_dst):
        (x,) = _operands(_name, [arg0], ((_src,),))
        return semantic.cast(x, _dst, bitcast=True)
    _export(builtin(_reinterpret), _name, f"The bits of a {_src} read as {_dst}.")


@builtin
def double2hiint(arg0):
    """The high 32 bits of a double, as int32."""
    (x,) = _operands("double2hiint", [arg0], (("fp64",),))
    return semantic.cast(semantic.shr(semantic.cast(x, core.int64, bitcast=True), 32), core.int32)


@builtin
def double2loint(arg0):
    """The low 32 bits of a double, as int32."""
    (x,) = _operands("double2loint", [arg0], (("fp64",),))
    return semantic.cast(semantic.cast(x, core.int64, bitcast=True), core.int32)


@builtin
def hiloint2double(arg0, arg1):
    """The double whose high 32 bits are arg0 and low 32 bits arg1."""
    hi, lo = _operands("hiloint2double", [arg0, arg1], (("int32", "int32"),))
    low_bits = semantic.cast(semantic.cast(lo, core.uint32, bitcast=True), core.int64)  # zero-extended
    bits = semantic.or_(semantic.shl(semantic.cast(hi, core.int64), 32), low_bits)
    return semantic.cast(bits, core.float64, bitcast=True)


# integer functions, built from integer arithmetic
@builtin
def hadd(arg0, arg1):
    """(arg0 + arg1) >> 1 without overflow (int32 or uint32)."""
    a, b = _operands("hadd", [arg0, arg1], _II)
    return semantic.add(semantic.and_(a, b), semantic.shr(semantic.xor_(a, b), 1))


@builtin
def rhadd(arg0, arg1):
    """(arg0 + arg1 + 1) >> 1 without overflow (int32 or uint32)."""
    a, b = _operands("rhadd", [arg0, arg1], _II)
    return semantic.sub(semantic.or_(a, b), semantic.shr(semantic.xor_(a, b), 1))


@builtin
def mul24(arg0, arg1):
    """The low 32 bits of the product of the operands' low 24 bits (sign-extended for int32)."""
    a, b = _operands("mul24", [arg0, arg1], _II)
    if a.dtype.is_int_signed():
        a, b = (semantic.shr(semantic.shl(v, 8), 8) for v in (a, b))  # arithmetic: sign-extends
    else:
        a, b = (semantic.and_(v, 0xFFFFFF) for v in (a, b))
    return semantic.mul(a, b)


@builtin
def sad(arg0, arg1, arg2):
    """|arg0 - arg1| + arg2, the difference taken exactly and the sum modulo 2**32
    ((int32, int32, uint32) -> int32 or (uint32, uint32, uint32) -> uint32)."""
    a, b, c = _operands("sad", [arg0, arg1, arg2], (("int32", "int32", "uint32"), ("uint32",) * 3))
    distance = semantic.where(semantic.greater(a, b), semantic.sub(a, b), semantic.sub(b, a))
    total = semantic.add(semantic.cast(distance, core.uint32, bitcast=True), c)
    return semantic.cast(total, a.dtype, bitcast=True)


@builtin
def byte_perm(arg0, arg1, arg2):
    """Byte i of the result is byte (arg2 >> 4i) & 7 of the 8 bytes arg1:arg0 (int32)."""
    x, y, s = _operands("byte_perm", [arg0, arg1, arg2], (("int32",) * 3,))
    low = semantic.cast(semantic.cast(x, core.uint32, bitcast=True), core.int64)
    pool = semantic.or_(semantic.shl(semantic.cast(y, core.int64), 32), low)
    selectors = semantic.cast(s, core.int64)
    result = None
    for i in range(4):
        which = semantic.and_(semantic.shr(selectors, 4 * i), 7)
        byte = semantic.and_(semantic.shr(pool, semantic.mul(which, 8)), 0xFF)
        byte = semantic.shl(byte, 8 * i)
        result = byte if result is None else semantic.or_(result, byte)
    return semantic.cast(result, core.int32)


@builtin
def ffs(arg0):
    """The 1-based position of the least significant set bit, 0 for 0 (int32 or int64 -> int32)."""
    (x,) = _operands("ffs", [arg0], (("int32",), ("int64",)))
    # x ^ (x - 1) sets every bit up to and including the lowest set bit
    count = semantic.bit_count("popc", semantic.xor_(x, semantic.sub(x, 1)))
    return semantic.where(semantic.equal(x, 0), 0, count)


# exponent extraction, from the bits
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def _exponent(x):
    """ilogb of fp32/fp64 `x` as int32, subnormals included; 0 and NaN give INT_MIN and
    infinities INT_MAX, as libdevice."""
    wide = x.dtype.is_fp64()
    bits_t, width, mantissa, bias = (core.int64, 64, 52, 1023) if wide else (core.int32, 32, 23, 127)
    bits = semantic.and_(semantic.cast(x, bits_t, bitcast=True), (1 << (width - 1)) - 1)  # |x|
    biased = semantic.cast(semantic.shr(bits, mantissa), core.int32)
    normal = semantic.sub(biased, bias)
    # a subnormal's value is bits * 2**-(bias + mantissa - 1): its top set bit gives the exponent
    top_bit = semantic.sub(width - 1, semantic.bit_count("clz", bits))
    subnormal = semantic.sub(top_bit, bias + mantissa - 1)
    e = semantic.where(semantic.equal(biased, 0), subnormal, normal)
    e = semantic.where(semantic.equal(bits, 0), _INT32_MIN, e)
    e = semantic.where(semantic.math_unary("isinf", x), _INT32_MAX, e)
    return semantic.where(semantic.math_unary("isnan", x), _INT32_MIN, e)


@builtin
def ilogb(arg0):
    """The unbiased exponent of arg0 as int32 (fp32 or fp64); ilogb(0) and ilogb(NaN) are
    INT_MIN, ilogb(+-inf) INT_MAX."""
    (x,) = _operands("ilogb", [arg0], _F)
    return _exponent(x)


@builtin
def logb(arg0):
    """The unbiased exponent of arg0 as a float; -inf for 0, +inf for +-inf, NaN for NaN."""
    (x,) = _operands("logb", [arg0], _F)
    e = semantic.cast(_exponent(x), x.dtype)
    e = semantic.where(semantic.equal(x, 0.0), float("-inf"), e)
    e = semantic.where(semantic.math_unary("isinf", x), float("inf"), e)
    return semantic.where(semantic.math_unary("isnan", x), x, e)


# functions with their own op (codegen calls the libdevice function of the same name)
_typed("rsqrt_rn", "rsqrt_rn", (("fp32",),), "1 / sqrt(arg0), correctly rounded (fp32).")
_typed("rcp64h", "rcp64h", (("fp64",),),
       "libdevice's coarse reciprocal of a double (rcp.approx.ftz.f64): about 20 significant bits, "
       "its low 32 bits zero; the interpreter reciprocates the operand's high 32 bits.")
_typed("rcbrt", "rcbrt", _F, "1 / cbrt(arg0).")
_typed("erfcx", "erfcx", _F, "The scaled complementary error function exp(x*x) * erfc(x).")
_typed("norm3d", "norm3d", _FFF, "sqrt(a*a + b*b + c*c) without overflow or underflow in between.")
_typed("rnorm3d", "rnorm3d", _FFF, "1 / norm3d(a, b, c).")
_typed("norm4d", "norm4d", _FFFF, "sqrt(a*a + b*b + c*c + d*d) without overflow or underflow in between.")
_typed("rnorm4d", "rnorm4d", _FFFF, "1 / norm4d(a, b, c, d).")
for _name in ("j0", "j1", "y0", "y1", "cyl_bessel_i0", "cyl_bessel_i1"):
    _typed(_name, _name, _F, f"The Bessel function {_name} (fp32 or fp64).")
_typed("jn", "jn", (("int32", "fp32"), ("int32", "fp64")), "The Bessel function J of integer order arg0 at arg1.")
_typed("yn", "yn", (("int32", "fp32"), ("int32", "fp64")), "The Bessel function Y of integer order arg0 at arg1.")
