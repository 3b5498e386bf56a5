"""fp8 conversions (e4m3fn as `fp8e4nv`, e5m2 as `fp8e5`, and the "fnuz" pair
e4m3fnuz / e5m2fnuz as `fp8e4b8` / `fp8e5b16`). Semantics are Triton's `cvt.rn.satfinite`:
round to nearest even, values beyond the largest finite one (and infinities) clamp to it,
NaN stays NaN (the fnuz formats have one NaN, 0x80, and no -0). Everything else goes
through fp32, which holds every fp8 value exactly.

sm_89 and later convert e4m3 and e5m2 with that very instruction, two values at a time
(`encode_pair`, `decode_pair`: a block's registers go in pairs, as Triton converts them;
fp8 attention's P is 32 conversions per thread per iteration, not 64); sm_80 has no fp8
`cvt`, and the fnuz formats none anywhere: those run in integer arithmetic.
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import float32

from .types import F16, F32, I8, I16, I32

# name -> (mantissa bits, exponent bias, largest finite code, NaN code, has infinities)
_FORMATS = {"fp8e4nv": (3, 7, 0x7E, 0x7F, False), "fp8e5": (2, 15, 0x7B, 0x7E, True),
            "fp8e4b8": (3, 8, 0x7F, 0x80, False), "fp8e5b16": (2, 16, 0x7F, 0x80, False)}
_FNUZ = ("fp8e4b8", "fp8e5b16")
_PTX_PAIR = {"fp8e4nv": "e4m3x2", "fp8e5": "e5m2x2"}  # the formats sm_89+ convert in hardware


def cast_fp8(lw, x, src, dst, rounding=None):
    """`x` from `src` to `dst`, one of them fp8; `rounding="rtz"` narrows toward zero (Triton's
    fp_downcast_rounding)."""
    from .context import LoweringError
    from .elementwise import cast_value
    for t in (src, dst):
        if t.is_fp8() and t.name not in _FORMATS:
            raise LoweringError(f"{t} values can be loaded, stored and bitcast, not converted")
    toward_zero = rounding == "rtz"
    if src.is_fp8() and dst.is_fp8():
        return _encode(lw, _decode(lw, x, src.name), dst.name, toward_zero)
    if src.is_fp8():
        return cast_value(lw, _decode(lw, x, src.name), float32, dst)
    # fp64 goes to fp32 toward zero as well: both steps truncate, so together they truncate once
    return _encode(lw, cast_value(lw, x, src, float32, rounding), dst.name, toward_zero)


def in_hardware(lw, fmt) -> bool:
    """Does the target convert fp32 to and from `fmt` with one `cvt` (a pair of values)?"""
    # portable lowering (kiln.codegen.emulate runs it on the CPU) has no inline PTX
    return fmt in _PTX_PAIR and lw.ctx.target.capability >= 89 and not lw.ctx.portable


def encode_pair(lw, lo, hi, fmt):
    """The fp8 codes (i8, i8) of two fp32 values, in one `cvt` (`in_hardware` formats)."""
    both = lw.b.call(_encoder(fmt), [hi, lo])  # the second source lands in the low byte
    return lw.b.trunc(both, I8), lw.b.trunc(lw.b.lshr(both, ir.Constant(I16, 8)), I8)


def encoded_pair(lo, hi):
    """The 16-bit result of the one `encode_pair` conversion that gave codes `lo` and `hi` (its low and
    high byte), or None: a consumer that packs codes into words takes the pair whole (LLVM put such a
    word together a byte at a time, three instructions after every conversion in fp8 attention's loop)."""
    if not (_is(lo, "trunc") and _is(hi, "trunc")):
        return None
    both, shifted = lo.operands[0], hi.operands[0]
    if _is(shifted, "lshr") and shifted.operands[0] is both and getattr(shifted.operands[1], "constant", None) == 8:
        return both
    return None


def _is(value, opname: str) -> bool:
    return isinstance(value, ir.Instruction) and value.opname == opname


def decode_pair(lw, lo, hi, fmt):
    """The fp32 values of two fp8 codes (i8), in one `cvt` (`in_hardware` formats)."""
    b = lw.b
    codes = b.or_(b.zext(lo, I16), b.shl(b.zext(hi, I16), ir.Constant(I16, 8)))
    halves = b.call(_decoder(fmt), [codes])  # the low byte's value in the low half
    return tuple(b.fpext(b.bitcast(b.trunc(word, I16), F16), F32)
                 for word in (halves, b.lshr(halves, ir.Constant(I32, 16))))


def f16_pair(lw, codes, fmt):
    """The f16x2 word (i32) of two fp8 codes in a 16-bit value (the low byte's value in the low half),
    in one `cvt` (`in_hardware` formats)."""
    return lw.b.call(_decoder(fmt), [codes])


def _encoder(fmt):
    return ir.InlineAsm(ir.FunctionType(I16, [F32, F32]), f"cvt.rn.satfinite.{_PTX_PAIR[fmt]}.f32 $0, $1, $2;",
                        "=h,f,f")


def _decoder(fmt):
    return ir.InlineAsm(ir.FunctionType(I32, [I16]), f"cvt.rn.f16x2.{_PTX_PAIR[fmt]} $0, $1;", "=r,h")


def _decode(lw, code, fmt):
    """The fp32 value of an fp8 code (i8)."""
    if not in_hardware(lw, fmt):
        return _to_f32(lw, code, fmt)
    # the code in the low byte comes back in the low half (fp16 holds every e4m3 and e5m2 value exactly)
    halves = lw.b.call(_decoder(fmt), [lw.b.zext(code, I16)])
    return lw.b.fpext(lw.b.bitcast(lw.b.trunc(halves, I16), F16), F32)


def _encode(lw, x, fmt, toward_zero: bool = False):
    """The fp8 code (i8) of an fp32 value, rounded to nearest or toward zero (no `cvt` rounds to fp8
    toward zero: that is integer arithmetic on every target)."""
    if toward_zero or not in_hardware(lw, fmt):
        return _from_f32(lw, x, fmt, toward_zero)
    # the second source lands in the low byte
    return lw.b.trunc(lw.b.call(_encoder(fmt), [ir.Constant(F32, 0.0), x]), I8)


def _largest(fmt) -> float:
    """The largest finite value of `fmt`."""
    mbits, bias, max_code, _, _ = _FORMATS[fmt]
    return (1 + ((max_code & ((1 << mbits) - 1)) / (1 << mbits))) * 2.0 ** ((max_code >> mbits) - bias)


def _c(v, ty=I32):
    return ir.Constant(ty, v)


def _to_f32(lw, code, fmt):
    mbits, bias, _, _, has_inf = _FORMATS[fmt]
    b = lw.b
    c = b.zext(code, I32)
    sign = b.shl(b.lshr(c, _c(7)), _c(31))
    exp = b.and_(b.lshr(c, _c(mbits)), _c((1 << (7 - mbits)) - 1))
    man = b.and_(c, _c((1 << mbits) - 1))
    normal = b.or_(sign, b.or_(b.shl(b.add(exp, _c(127 - bias)), _c(23)), b.shl(man, _c(23 - mbits))))
    tiny = b.fmul(b.uitofp(man, F32), ir.Constant(F32, 2.0 ** (1 - bias - mbits)))  # exponent 0
    tiny = b.bitcast(b.or_(b.bitcast(tiny, I32), sign), F32)
    value = b.select(b.icmp_unsigned("==", exp, _c(0)), tiny, b.bitcast(normal, F32))
    if fmt in _FNUZ:  # every exponent is finite; 0x80 alone is NaN
        return b.select(b.icmp_unsigned("==", c, _c(0x80)), ir.Constant(F32, float("nan")), value)
    top = (1 << (7 - mbits)) - 1
    if has_inf:  # e5m2: exponent all ones is inf (mantissa 0) or NaN
        inf = b.bitcast(b.or_(sign, _c(0x7F800000)), F32)
        special = b.select(b.icmp_unsigned("==", man, _c(0)), inf, ir.Constant(F32, float("nan")))
        return b.select(b.icmp_unsigned("==", exp, _c(top)), special, value)
    nan = b.and_(b.icmp_unsigned("==", exp, _c(top)), b.icmp_unsigned("==", man, _c((1 << mbits) - 1)))
    return b.select(nan, ir.Constant(F32, float("nan")), value)


def _from_f32(lw, x, fmt, toward_zero: bool = False):
    """The fp8 code of an fp32 value in integer arithmetic: rounded to nearest even, values past the
    largest finite one clamped to it (`cvt.rn.satfinite`'s meaning); or `toward_zero`, as Triton
    narrows to e5m2 with `rtz` (fp32 -> fp16 `cvt.rz`, then the fp16's high byte), where finite values
    clamp and infinities stay infinite in a format that has them. NaN stays NaN."""
    mbits, bias, max_code, nan_code, has_inf = _FORMATS[fmt]
    b = lw.b
    bits = b.bitcast(x, I32)
    sign = b.and_(b.lshr(bits, _c(24)), _c(0x80))
    mag = b.and_(bits, _c(0x7FFFFFFF))
    shift = 23 - mbits
    rounded = mag if toward_zero else \
        b.add(b.add(mag, _c((1 << (shift - 1)) - 1)), b.and_(b.lshr(mag, _c(shift)), _c(1)))
    normal = b.sub(b.lshr(rounded, _c(shift)), _c((127 - bias) << mbits))
    absx = b.bitcast(mag, F32)
    scaled = b.fmul(absx, ir.Constant(F32, 2.0 ** (bias - 1 + mbits)))
    if not toward_zero:  # fptoui itself truncates
        scaled = b.call(lw.intrinsic("llvm.rint.f32", F32, [F32]), [scaled])
    sub = b.fptoui(scaled, I32)  # below the smallest normal; out-of-range values never take it
    is_normal = b.fcmp_ordered(">=", absx, ir.Constant(F32, 2.0 ** (1 - bias)))
    code = b.select(is_normal, normal, sub)
    code = b.select(b.fcmp_ordered(">", absx, ir.Constant(F32, _largest(fmt))), _c(max_code), code)
    if toward_zero and has_inf:
        inf_code = ((1 << (7 - mbits)) - 1) << mbits
        code = b.select(b.icmp_unsigned("==", mag, _c(0x7F800000)), _c(inf_code), code)
    signed = b.or_(code, sign)
    if fmt in _FNUZ:  # no negative zero
        signed = b.select(b.icmp_unsigned("==", code, _c(0)), _c(0), signed)
    nan = _c(nan_code) if fmt in _FNUZ else b.or_(_c(nan_code), sign)
    signed = b.select(b.icmp_unsigned(">", mag, _c(0x7F800000)), nan, signed)
    return b.trunc(signed, I8)
