"""`tl.extra.cuda` helpers: the launch shape as constants, special registers as inline PTX (GPU only), and
Triton's fp8e4b15 conversions."""
from __future__ import annotations

from ... import semantic
from ...core import builtin, constexpr, int32, int64


@builtin
def num_warps():
    """The kernel's num_warps, a compile-time constant."""
    from kiln import config  # kiln.language is imported before kiln.config exists
    return constexpr(int(semantic.state.options.get("num_warps", config.DEFAULT_NUM_WARPS)))


@builtin
def num_threads():
    """The threads of one program: num_warps * 32."""
    return constexpr(num_warps().value * 32)


@builtin
def globaltimer():
    """The GPU's global nanosecond timer (%globaltimer), as int64."""
    return semantic.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], int64, False, 1)


@builtin
def smid():
    """The index of the SM running this program (%smid), as int32."""
    return semantic.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], int32, False, 1)


# fp8e4b15 is fp16's layout cut to 8 bits: a sign, 4 exponent bits and 3 mantissa bits under fp16's exponent
# bias (15). So widening puts the 7 magnitude bits where fp16 keeps its top ones, and narrowing clamps the
# magnitude to 1.75 (0x3F00; NaN and infinity too), rounds the 7 bits kept half away from zero (+0x80 at
# the first bit dropped) and keeps the sign: Triton's bit-exact conversions, written as integer ops here
# (no inline PTX), so they also run in the interpreter. Every code 0x00-0x7F widens to its value; 0x7F is
# 1.875, which narrowing never gives back (it tops out at 1.75).
_E4B15_MAX_AS_FP16 = 0x3F00


def _widen_e4b15(arg, dst_ty):
    from ...core import float16, float32, uint8, uint16
    bits = semantic.cast(semantic.cast(arg, uint8, bitcast=True), uint16)
    half = semantic.cast(((bits & 0x80) << 8) | ((bits & 0x7F) << 7), float16, bitcast=True)
    return semantic.cast(half, float32) if _scalar_name(dst_ty) == "fp32" else half


def _narrow_to_e4b15(arg):
    from ...core import float8e4b15, float16, uint8, uint16
    name = _scalar_name(arg.dtype)
    if name not in ("fp16", "fp32"):
        raise TypeError(f"convert_custom_float8 narrows fp16 or fp32 to fp8e4b15, not {name}")
    half = semantic.cast(arg, float16, fp_downcast_rounding="rtz") if name == "fp32" else arg
    bits = semantic.cast(half, uint16, bitcast=True)
    magnitude = semantic.minimum(bits & 0x7FFF, _E4B15_MAX_AS_FP16)
    code = ((bits >> 8) & 0x80) | ((((magnitude << 1) + 0x80) >> 8) & 0x7F)
    return semantic.cast(semantic.cast(code, uint8), float8e4b15, bitcast=True)


def _scalar_name(t) -> str:
    t = t.value if isinstance(t, constexpr) else t
    return getattr(t, "scalar", t).name


def _convert_custom_float8(arg, dst_ty):
    arg = semantic.to_tensor(arg)
    if _scalar_name(arg.dtype) == "fp8e4b15":
        return _widen_e4b15(arg, dst_ty)
    return _narrow_to_e4b15(arg)


@builtin
def convert_custom_float8_sm80(arg, dst_ty, fp_downcast_rounding=None):
    """fp8e4b15 to fp16 (or fp32, as `dst_ty` says), or fp16 / fp32 (through fp16, rounding toward zero) to
    fp8e4b15, bit for bit as Triton's (its Ampere version clamps with min.f16x2; the result is the same)."""
    return _convert_custom_float8(arg, dst_ty)


@builtin
def convert_custom_float8_sm70(arg, dst_ty, fp_downcast_rounding=None):
    """As `convert_custom_float8_sm80` (Triton's Volta version clamps by compare and select: the same values)."""
    return _convert_custom_float8(arg, dst_ty)
