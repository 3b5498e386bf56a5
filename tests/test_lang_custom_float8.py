"""Conformance: `tl.extra.cuda.convert_custom_float8_sm80` / `_sm70` against a NumPy model of Triton's
bit-exact fp8e4b15 conversions, over every code and every fp16 bit pattern (interpreter, and the GPU in
the GPU tier's conformance run)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.language.extra import cuda

N16 = 1 << 16


def widened(codes: np.ndarray) -> np.ndarray:
    """fp16 bits of fp8e4b15 codes: the sign to bit 15, the 7 magnitude bits under it (same exponent bias)."""
    c = codes.astype(np.uint16)
    return ((c & 0x80) << 8) | ((c & 0x7F) << 7)


def narrowed(half_bits: np.ndarray) -> np.ndarray:
    """fp8e4b15 codes of fp16 bits: magnitude clamped to 1.75 (NaN and inf too), rounded half away from
    zero at the first bit dropped, sign kept."""
    h = half_bits.astype(np.uint32)
    magnitude = np.minimum(h & 0x7FFF, 0x3F00)
    return (((h >> 8) & 0x80) | ((((magnitude << 1) + 0x80) >> 8) & 0x7F)).astype(np.uint8)


@kiln.jit
def _widen(codes_ptr, out16_ptr, out32_ptr, N: tl.constexpr, SM70: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(codes_ptr + offs).to(tl.float8e4b15, bitcast=True)
    convert = cuda.convert_custom_float8_sm70 if SM70 else cuda.convert_custom_float8_sm80
    tl.store(out16_ptr + offs, convert(x, tl.float16).to(tl.uint16, bitcast=True))
    tl.store(out32_ptr + offs, convert(x, tl.float32))


@kiln.jit
def _narrow(bits_ptr, out_ptr, N: tl.constexpr, SM70: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    x = tl.load(bits_ptr + offs).to(tl.float16, bitcast=True)
    convert = cuda.convert_custom_float8_sm70 if SM70 else cuda.convert_custom_float8_sm80
    tl.store(out_ptr + offs, convert(x, tl.float8e4b15).to(tl.uint8, bitcast=True))


@kiln.jit
def _narrow32(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, cuda.convert_custom_float8_sm80(tl.load(x_ptr + offs), tl.float8e4b15)
             .to(tl.uint8, bitcast=True))


@pytest.mark.parametrize("sm70", [False, True])
def test_every_code_widens_to_fp16_and_fp32(sm70):
    codes = np.arange(256, dtype=np.uint8)
    out16, out32 = np.zeros(256, np.uint16), np.zeros(256, np.float32)
    _widen[(1,)](codes, out16, out32, N=256, SM70=sm70)
    np.testing.assert_array_equal(out16, widened(codes))
    np.testing.assert_array_equal(out32, widened(codes).view(np.float16).astype(np.float32))
    assert out32[0x7F] == 1.875 and out32[0x78] == 1.0 and out32[0x01] == 2.0 ** -17


@pytest.mark.parametrize("sm70", [False, True])
def test_every_fp16_narrows_as_triton_s(sm70):
    bits = np.arange(N16, dtype=np.uint16)
    out = np.zeros(N16, np.uint8)
    _narrow[(N16 // 4096,)](bits, out, N=4096, SM70=sm70)
    np.testing.assert_array_equal(out, narrowed(bits))
    assert out[np.float16(1.0).view(np.uint16)] == 0x78 and out[np.float16(-100).view(np.uint16)] == 0xFE


def test_fp32_narrows_through_fp16_rounded_toward_zero():
    x = np.array([1.0, -1.25, 0.3, 1e-6, 1e30, -np.inf, np.nan, 1.0009765, 2.0 ** -18, -0.0, 1.7, 1.82],
                 np.float32)
    out = np.zeros(16, np.uint8)
    _narrow32[(1,)](np.resize(x, 16), out, N=16)
    out = out[:x.size]
    with np.errstate(over="ignore"):
        half = x.astype(np.float16)  # to nearest; toward zero instead where that rounded up in magnitude
    up = np.abs(half.astype(np.float32)) > np.abs(x)
    half[up] = np.nextafter(half[up], np.float16(0))
    np.testing.assert_array_equal(out, narrowed(half.view(np.uint16)))


def test_other_types_are_refused():
    @kiln.jit
    def bad(p):
        tl.store(p, cuda.convert_custom_float8_sm80(tl.load(p), tl.float8e4b15))
    with pytest.raises(kiln.CompilationError, match="narrows fp16 or fp32"):
        bad[(1,)](np.zeros(1, np.int32))
