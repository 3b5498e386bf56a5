"""Elementwise arithmetic, comparison and selection with the GPU's integer rules.

Integers wrap at their width; `div`/`rem` follow C (truncate toward zero, remainder with
the dividend's sign) and never trap; shifts by the width or more give 0 (or the sign
for an arithmetic right shift), as PTX does. int1 is arithmetic modulo 2. Floats are
computed in fp32 for the 16- and 8-bit types and rounded back.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.types import scalar_of

from .convert import float_op

# --- integers --------------------------------------------------------------------------


def _unsigned(dt: np.dtype) -> np.dtype:
    return np.dtype(f"u{dt.itemsize}")


def _c_divmod(a: np.ndarray, b: np.ndarray):
    """C's truncating quotient and remainder; x/0 gives 0 and MIN/-1 wraps, never a trap."""
    signed = a.dtype.kind == "i"
    minus_one = (b == -1) if signed else np.zeros(b.shape, bool)
    safe_b = np.where((b == 0) | minus_one, b.dtype.type(1), b)
    rem = np.fmod(a, safe_b)
    quo = (a - rem) // safe_b  # exact division, so floor and trunc agree
    if signed:
        quo = np.where(minus_one, np.negative(a), quo)
        rem = np.where(minus_one, a.dtype.type(0), rem)
    zero = b == 0
    return np.where(zero, a.dtype.type(0), quo), np.where(zero, a, rem)


def _shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    amount = np.asarray(b).view(_unsigned(b.dtype)) if b.dtype.kind == "i" else b
    too_far = amount >= bits
    amount = np.where(too_far, 0, amount).astype(a.dtype)
    if left:
        return np.where(too_far, a.dtype.type(0), np.left_shift(a, amount))
    fill = np.where(a < 0, a.dtype.type(-1), a.dtype.type(0)) if a.dtype.kind == "i" else a.dtype.type(0)
    return np.where(too_far, fill, np.right_shift(a, amount))


def umulhi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The high half of the double-width product, signed or unsigned per the dtype."""
    dt = a.dtype
    bits = dt.itemsize * 8
    if bits <= 32:
        wide = np.int64 if dt.kind == "i" else np.uint64
        return ((a.astype(wide) * b.astype(wide)) >> bits).astype(dt)
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    low32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    al, ah, bl, bh = ua & low32, ua >> s32, ub & low32, ub >> s32
    lh, hl = al * bh, ah * bl
    middle = ((al * bl) >> s32) + (lh & low32) + (hl & low32)
    high = ah * bh + (lh >> s32) + (hl >> s32) + (middle >> s32)
    if dt.kind == "i":  # signed high half: subtract the wrapped-in sign corrections
        high = high - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
    return high.view(dt)


INT_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "div": lambda a, b: _c_divmod(a, b)[0], "rem": lambda a, b: _c_divmod(a, b)[1],
    "min": np.minimum, "max": np.maximum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "shl": lambda a, b: _shift(a, b, True), "shr": lambda a, b: _shift(a, b, False),
    "umulhi": umulhi,
}

# int1 is an unsigned 1-bit integer: arithmetic modulo 2, shifts by 1 clear it.
BOOL_BINARY = {
    "add": np.logical_xor, "sub": np.logical_xor, "mul": np.logical_and,
    "div": lambda a, b: a, "rem": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
    "min": np.logical_and, "max": np.logical_or,
    "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
    "shl": lambda a, b: a & ~b, "shr": lambda a, b: a & ~b,
    "umulhi": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
}


def _float_min(a, b, propagate_nan):
    return np.minimum(a, b) if propagate_nan else np.fmin(a, b)


def _float_max(a, b, propagate_nan):
    return np.maximum(a, b) if propagate_nan else np.fmax(a, b)


def ieee_remainder(x, y):
    """x - n*y with n = x/y rounded to nearest even, exactly (built on fmod, which is exact)."""
    r, ay = np.fmod(x, y), np.abs(y)
    odd_quotient = np.abs(np.fmod(x, 2 * y)) >= ay
    half = ay / 2
    adjust = (np.abs(r) > half) | ((np.abs(r) == half) & odd_quotient)
    return np.where(adjust, r - np.copysign(ay, r), r)


def positive_difference(x, y):
    """libdevice fdim: x - y where x > y, else +0; NaN in, NaN out."""
    return np.where(np.isnan(x) | np.isnan(y), np.nan, np.where(x > y, x - y, 0.0))


FLOAT_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "rem": np.fmod, "div_rn": np.true_divide, "pow": np.power, "atan2": np.arctan2,
    "copysign": np.copysign, "hypot": np.hypot, "remainder": ieee_remainder,
    "fdim": positive_difference, "nextafter": np.nextafter,
}


def binary(ctx, op, a, b):
    t = scalar_of(op.results[0].type)
    if t.is_floating():
        out = t.to_numpy()
        if op.name in ("min", "max"):
            nan = bool(op.attrs.get("propagate_nan", False))
            fn = _float_min if op.name == "min" else _float_max
            return float_op(lambda x, y: fn(x, y, nan), out, a, b)
        return float_op(FLOAT_BINARY[op.name], out, a, b)
    table = BOOL_BINARY if t.is_bool() else INT_BINARY
    return table[op.name](a, b)


# --- unary integer-or-float ops ----------------------------------------------------------
def neg(ctx, op, x):
    if x.dtype == np.bool_:
        return x
    if scalar_of(op.results[0].type).is_floating():
        return float_op(np.negative, x.dtype, x)
    return np.negative(x)


def absolute(ctx, op, x):
    t = scalar_of(op.results[0].type)
    if t.is_floating():
        return float_op(np.abs, x.dtype, x)
    return x if not t.signed else np.abs(x)


def bitwise_not(ctx, op, x):
    return np.invert(x)


def _bits_lsb_first(x: np.ndarray) -> np.ndarray:
    """The bits of each integer, least significant first, on a new last axis."""
    u = np.ascontiguousarray(x).view(_unsigned(x.dtype))
    as_bytes = u[..., None].view(np.uint8)
    if not np.little_endian:
        as_bytes = as_bytes[..., ::-1]
    return np.unpackbits(as_bytes, axis=-1, bitorder="little")


def bit_count(ctx, op, x):
    """popc, clz and brev of integers, in the operand's type."""
    x = np.asarray(x)
    bits = _bits_lsb_first(x)
    width = bits.shape[-1]
    if op.name == "popc":
        return bits.sum(axis=-1).astype(x.dtype)
    if op.name == "clz":
        highest_set = np.where(bits.any(axis=-1), width - 1 - np.argmax(bits[..., ::-1], axis=-1), -1)
        return (width - 1 - highest_set).astype(x.dtype)
    reversed_bytes = np.packbits(bits[..., ::-1], axis=-1, bitorder="little")
    return reversed_bytes.view(_unsigned(x.dtype))[..., 0].view(x.dtype)


# --- comparison and selection -----------------------------------------------------------
_PREDICATES = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


def cmp(ctx, op, a, b):
    if scalar_of(op.operands[0].type).is_floating() and a.dtype.itemsize < 4:
        a, b = a.astype(np.float32), b.astype(np.float32)
    return _PREDICATES[op.attrs["pred"]](a, b)


def select(ctx, op, cond, a, b):
    return np.where(cond, a, b)
