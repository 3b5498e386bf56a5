"""Counter-based random numbers: Philox4x32-10, giving the same streams as Triton's.

A (seed, offset) pair names one random number: the counter is (offset's low word, its high
word, 0, 0) and the key is the seed's low and high 32-bit words. Ten Philox rounds turn them into four
32-bit words; `rand` maps the first to [0, 1), `randn` the first two to a normal
sample with the Box-Muller transform.
"""
from __future__ import annotations

from kiln.jit import jit

from . import core as tl
from .builtins import add, cos, log, maximum, mul, sin, sqrt, static_assert, umulhi, where
from .builtins import full as tl_full
from .builtins import to_tensor as tl_to_tensor
from .core import constexpr
from .core import static_range as tl_static_range

N_ROUNDS_DEFAULT = constexpr(10)

# Weyl-sequence key increments and round multipliers of Philox4x32 (and of Philox4x64).
_KEY_STEP_32 = (0x9E3779B9, 0xBB67AE85)
_MULTIPLIERS_32 = (0xD2511F53, 0xCD9E8D57)
_KEY_STEP_64 = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
_MULTIPLIERS_64 = (0xD2E7470EE14C6C93, 0xCA5A826395121157)


@jit
def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """`n_rounds` Philox rounds on the counter (c0..c3) with key (k0, k1)."""
    if c0.dtype == tl.uint32:
        step_a: constexpr = _KEY_STEP_32[0]
        step_b: constexpr = _KEY_STEP_32[1]
        mul_a: constexpr = _MULTIPLIERS_32[0]
        mul_b: constexpr = _MULTIPLIERS_32[1]
    else:
        static_assert(c0.dtype == tl.uint64, "philox counters must be uint32 or uint64")
        step_a: constexpr = _KEY_STEP_64[0]
        step_b: constexpr = _KEY_STEP_64[1]
        mul_a: constexpr = _MULTIPLIERS_64[0]
        mul_b: constexpr = _MULTIPLIERS_64[1]
    for _ in tl_static_range(n_rounds):
        prev0 = c0
        prev2 = c2
        c0 = umulhi(prev2, mul_b) ^ c1 ^ k0
        c2 = umulhi(prev0, mul_a) ^ c3 ^ k1
        # Philox's products and key steps wrap by design: unchecked in a debug build
        c1 = mul(prev2, mul_b, sanitize_overflow=False)
        c3 = mul(prev0, mul_a, sanitize_overflow=False)
        k0 = add(k0, step_a, sanitize_overflow=False)
        k1 = add(k1, step_b, sanitize_overflow=False)
    return c0, c1, c2, c3


@jit
def philox(seed, c0, c1, c2, c3, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Philox of the counter (c0..c3) keyed by `seed`."""
    seed = tl_to_tensor(seed)
    static_assert(seed.dtype.is_int(), "the seed must be an integer")
    seed = seed.to(tl.uint64)
    c0 = tl_to_tensor(c0)
    c1 = tl_to_tensor(c1)
    c2 = tl_to_tensor(c2)
    c3 = tl_to_tensor(c3)
    if c0.dtype.primitive_bitwidth == 32:
        word: constexpr = tl.uint32
        key_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
        key_lo = (seed & 0xFFFFFFFF).to(tl.uint32)
    else:
        static_assert(c0.dtype.primitive_bitwidth == 64, "philox counters must be 32 or 64 bits wide")
        word: constexpr = tl.uint64
        key_hi = tl_full((1,), 0, tl.uint64)
        key_lo = seed
    return philox_impl(c0.to(word, bitcast=True), c1.to(word, bitcast=True), c2.to(word, bitcast=True),
                       c3.to(word, bitcast=True), key_lo, key_hi, n_rounds)


@jit
def randint4x(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four blocks of random uint32 for each (seed, offset).

    The counter is always 32-bit Philox's (offset low word, offset high word, 0, 0), as in
    Triton, so int64 offsets give the same streams as int32 ones where they agree.
    """
    offset_lo = offset.to(tl.uint32)
    zero = offset_lo * 0
    if offset.dtype.primitive_bitwidth > 32:
        offset_hi = (offset >> 32).to(tl.uint32)
    else:
        offset_hi = zero
    return philox(seed, offset_lo, offset_hi, zero, zero, n_rounds)


@jit
def randint(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """A block of random uint32 for each (seed, offset)."""
    first, _, _, _ = randint4x(seed, offset, n_rounds)
    return first


@jit
def uint_to_uniform_float(x):
    """Random 32- or 64-bit integers -> floats uniform in [0, 1)."""
    if x.dtype == tl.uint32 or x.dtype == tl.int32:
        signed = x.to(tl.int32, bitcast=True)
        scale: constexpr = 4.6566127342e-10  # the largest s with (2**31 - 1) * s < 1 in fp32
    else:
        static_assert(x.dtype == tl.uint64 or x.dtype == tl.int64, "expected 32- or 64-bit integers")
        signed = x.to(tl.int64, bitcast=True)
        scale: constexpr = 1.0842020432385337e-19
    folded = where(signed < 0, -signed - 1, signed)
    return folded * scale


@jit
def rand(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """A block of floats uniform in [0, 1) for each (seed, offset)."""
    return uint_to_uniform_float(randint(seed, offset, n_rounds))


@jit
def rand4x(seed, offsets, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four blocks of floats uniform in [0, 1) for each (seed, offset)."""
    i1, i2, i3, i4 = randint4x(seed, offsets, n_rounds)
    return uint_to_uniform_float(i1), uint_to_uniform_float(i2), uint_to_uniform_float(i3), uint_to_uniform_float(i4)


@jit
def pair_uniform_to_normal(u1, u2):
    """Box-Muller: two uniform samples -> two independent standard normal samples."""
    u1 = maximum(1.0e-7, u1)
    angle = 6.283185307179586 * u2
    radius = sqrt(-2.0 * log(u1))
    return radius * cos(angle), radius * sin(angle)


@jit
def randn(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """A block of standard normal floats for each (seed, offset)."""
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    n1, _ = pair_uniform_to_normal(uint_to_uniform_float(i1), uint_to_uniform_float(i2))
    return n1


@jit
def randn4x(seed, offset, n_rounds: constexpr = N_ROUNDS_DEFAULT):
    """Four blocks of standard normal floats for each (seed, offset)."""
    u1, u2, u3, u4 = rand4x(seed, offset, n_rounds)
    n1, n2 = pair_uniform_to_normal(u1, u2)
    n3, n4 = pair_uniform_to_normal(u3, u4)
    return n1, n2, n3, n4
