"""Value conversions with the GPU's rules: wrapping integers, saturating float->int
casts (PTX cvt.rzi), round-to-nearest-even or round-toward-zero float narrowing, and
the fp32 compute precision of the small float types."""
from __future__ import annotations

import functools

import numpy as np

from kiln.ir.types import dtype as ir_dtype, scalar_of

from .rounding import step

_NUMPY_NATIVE_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


@functools.cache
def _fp8() -> tuple:
    """The fp8 formats' NumPy dtypes (ml_dtypes, imported at the first narrowing to a non-native float:
    it takes 0.5 s of CPU, which a process that only compiles never pays)."""
    import ml_dtypes
    return tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                       ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz))


def np_dtype(t: ir_dtype) -> np.dtype:
    return scalar_of(t).to_numpy()


def compute_dtype(dt: np.dtype) -> np.dtype:
    """fp16, bf16 and fp8 are computed in fp32 and rounded back, as on the GPU."""
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def float_op(fn, out_dtype: np.dtype, *xs):
    """`fn` on floats `xs`, evaluated in the compute precision and rounded to `out_dtype`."""
    ct = compute_dtype(out_dtype)
    return np.asarray(fn(*(np.asarray(x).astype(ct, copy=False) for x in xs))).astype(out_dtype)


def wrap_int(value: int, dt: np.dtype) -> np.ndarray:
    """A Python int as a 0-d array of integer dtype `dt`, wrapped modulo 2**bits."""
    if dt == np.bool_:
        return np.array(bool(value))
    bits = dt.itemsize * 8
    unsigned = np.array(int(value) & ((1 << bits) - 1), dtype=f"u{dt.itemsize}")
    return unsigned.view(dt)


def scalar_to(value, t: ir_dtype) -> np.ndarray:
    """A Python number as a 0-d array of type `t` (ints wrap, floats round to nearest)."""
    dt = np_dtype(t)
    if t.is_ptr():
        return wrap_int(int(value), dt)
    if t.is_floating():
        return narrow_float(np.array(float(value), np.float64), dt)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("not an integer")
        value = int(value)
    return wrap_int(int(value), dt)


# --- cast -----------------------------------------------------------------------------
def cast(x: np.ndarray, src: ir_dtype, dst: ir_dtype, rounding: str = "rtne") -> np.ndarray:
    src, dst = scalar_of(src), scalar_of(dst)
    out = dst.to_numpy()
    x = np.asarray(x)
    if dst.is_bool():
        return x != 0
    if src.is_bool():
        x = x.astype(np.uint8)  # 0 or 1, then as any unsigned integer
    if dst.is_floating():
        if src.is_floating():
            return narrow_float(x, out, rounding)
        if out in _NUMPY_NATIVE_FLOATS:
            return x.astype(out)
        return narrow_float(x.astype(np.float64), out, rounding)
    if src.is_floating():
        return float_to_int(x, out)
    return x.astype(out)  # int/pointer to int/pointer: wraps, sign-extends signed sources


def float_to_int(x: np.ndarray, out: np.dtype) -> np.ndarray:
    """Truncate toward zero, saturate to the integer range, NaN -> 0 (PTX cvt.rzi.sat)."""
    x = np.trunc(np.asarray(x).astype(np.float64))
    info = np.iinfo(out)
    too_big = x >= float(info.max) + 1.0  # float(2**63 - 1) + 1 rounds to 2**63: still right
    too_small = x < float(info.min)
    bad = too_big | too_small | np.isnan(x)
    result = np.where(bad, 0.0, x).astype(out)
    return np.where(too_big, out.type(info.max), np.where(too_small, out.type(info.min), result))


def _saturate_fp8(x: np.ndarray, out: np.dtype, keep_infinities: bool = False) -> np.ndarray:
    # Triton converts to fp8 with cvt.rn.satfinite: out-of-range values clamp to the
    # largest finite value (NaN stays NaN). Toward zero (fp32 -> fp16 cvt.rz, then e5m2's
    # byte of it) only finite values clamp: an infinity stays one where the format has it.
    import ml_dtypes
    limit = float(ml_dtypes.finfo(out).max)
    clamped = np.clip(x, -limit, limit)
    if keep_infinities and _has_infinity(out):
        return np.where(np.isinf(x), x, clamped)
    return clamped


def _has_infinity(dt: np.dtype) -> bool:
    return bool(np.isinf(np.array(np.inf).astype(dt)))


def _round_to_odd_fp32(x: np.ndarray) -> np.ndarray:
    """fp64 -> fp32 rounding to odd: a second rounding to a type with fewer than 23
    mantissa bits then gives the correctly rounded result, not a double-rounded one."""
    y = x.astype(np.float32)
    back = y.astype(np.float64)
    inexact = (back != x) & np.isfinite(x)
    bits = y.view(np.uint32)
    bits = np.where(inexact & (np.abs(back) > np.abs(x)), bits - np.uint32(1), bits)
    return np.where(inexact, bits | np.uint32(1), bits).astype(np.uint32).view(np.float32)


def narrow_float(x: np.ndarray, out: np.dtype, rounding: str = "rtne") -> np.ndarray:
    source = x = np.asarray(x)
    if x.dtype == out or (out.itemsize > x.dtype.itemsize and out in _NUMPY_NATIVE_FLOATS):
        return x.astype(out)  # exact widening
    if out not in _NUMPY_NATIVE_FLOATS and out in _fp8():
        x = _saturate_fp8(x.astype(np.float64), out, keep_infinities=rounding == "rtz")
    if x.dtype == np.float64 and out not in _NUMPY_NATIVE_FLOATS:
        x = _round_to_odd_fp32(x)  # ml_dtypes narrows float64 through float32
    y = x.astype(out)
    if rounding != "rtz":
        return y
    # RTZ: where rounding to nearest went away from zero, step one ulp back toward zero
    with np.errstate(invalid="ignore"):
        excess = np.sign(y.astype(np.float64) - source.astype(np.float64))
    return step(y, excess, "rz")
