"""Conformance: tl.rand/randn/randint/randint4x against an independent NumPy Philox4x32-10."""
import numpy as np
import pytest

import kiln
import kiln.language as tl

MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(offsets, seed):
    """Philox4x32 with 10 rounds; counter (offset lo, offset hi, 0, 0), key (seed lo, seed hi).

    Returns 4 uint32 arrays. For int32 offsets the high word is 0.
    """
    seed = int(seed) & (2**64 - 1)
    words = np.asarray(offsets).astype(np.int64).view(np.uint64)
    c = [words & MASK32, words >> np.uint64(32)]
    c += [np.zeros_like(c[0]) for _ in range(2)]
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for _ in range(10):
        p0 = c[0] * np.uint64(0xD2511F53)  # full 64-bit products of two 32-bit words fit in uint64
        p2 = c[2] * np.uint64(0xCD9E8D57)
        c = [(p2 >> np.uint64(32)) ^ c[1] ^ k0, p2 & MASK32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & MASK32]
        k0 = (k0 + np.uint64(0x9E3779B9)) & MASK32
        k1 = (k1 + np.uint64(0xBB67AE85)) & MASK32
    return [x.astype(np.uint32) for x in c]


def uniform_ref(u32):
    x = u32.view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


def test_reference_matches_the_published_philox_known_answer():
    # Random123's kat_vectors: philox4x32 10 rounds, counter 0, key 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
    out = philox4x32_10(np.array([0]), 0)
    assert [int(w[0]) for w in out] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


@kiln.jit
def _random_kernel(out_ptr, seed, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if KIND == "rand":
        tl.store(out_ptr + offs, tl.rand(seed, offs), mask=mask)
    elif KIND == "randn":
        tl.store(out_ptr + offs, tl.randn(seed, offs), mask=mask)
    elif KIND == "randint":
        r = tl.randint(seed, offs)
        tl.static_assert(r.dtype == tl.uint32)
        tl.store(out_ptr + offs, r, mask=mask)
    else:
        a, b, c, d = tl.randint4x(seed, offs)
        tl.store(out_ptr + offs, a, mask=mask)
        tl.store(out_ptr + n + offs, b, mask=mask)
        tl.store(out_ptr + 2 * n + offs, c, mask=mask)
        tl.store(out_ptr + 3 * n + offs, d, mask=mask)


SEEDS = [0, 42, 0xDEADBEEF, 2**40 + 12345]


@pytest.mark.parametrize("seed", SEEDS)
def test_randint_bit_exact(seed):
    n = 50
    out = np.zeros(n, np.uint32)
    _random_kernel[(kiln.cdiv(n, 16),)](out, seed, n, KIND="randint", BLOCK=16)
    np.testing.assert_array_equal(out, philox4x32_10(np.arange(n), seed)[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_randint4x_bit_exact(seed):
    n = 32
    out = np.zeros(4 * n, np.uint32)
    _random_kernel[(2,)](out, seed, n, KIND="randint4x", BLOCK=16)
    ref = philox4x32_10(np.arange(n), seed)
    for k in range(4):
        np.testing.assert_array_equal(out[k * n:(k + 1) * n], ref[k])


@pytest.mark.parametrize("seed", SEEDS)
def test_rand_bit_exact_and_in_unit_interval(seed):
    n = 64
    out = np.zeros(n, np.float32)
    _random_kernel[(4,)](out, seed, n, KIND="rand", BLOCK=16)
    ref = uniform_ref(philox4x32_10(np.arange(n), seed)[0])
    np.testing.assert_array_equal(out, ref)
    assert out.min() >= 0 and out.max() < 1


@pytest.mark.parametrize("seed", [7, 2**33 + 5])
def test_randn_matches_box_muller_of_the_first_two_words(seed):
    n = 64
    out = np.zeros(n, np.float32)
    _random_kernel[(4,)](out, seed, n, KIND="randn", BLOCK=16)
    w = philox4x32_10(np.arange(n), seed)
    u1 = np.maximum(np.float32(1e-7), uniform_ref(w[0])).astype(np.float64)
    u2 = uniform_ref(w[1]).astype(np.float64)
    ref = np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@kiln.jit
def _dropout(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.rand(seed, offs) > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def test_low_memory_dropout_is_reproducible_from_the_seed():
    n = 40
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    a, b, c = (np.zeros(n, np.float32) for _ in range(3))
    _dropout[(3,)](x, a, n, 0.5, 123, BLOCK=16)
    _dropout[(3,)](x, b, n, 0.5, 123, BLOCK=16)
    _dropout[(3,)](x, c, n, 0.5, 124, BLOCK=16)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    keep = uniform_ref(philox4x32_10(np.arange(n), 123)[0]) > np.float32(0.5)
    np.testing.assert_allclose(a, np.where(keep, x / np.float32(0.5), 0.0), rtol=1e-6)


@kiln.jit
def _random_int64_offsets(out_ptr, f_ptr, seed, base, N: tl.constexpr):
    offs = tl.arange(0, N)
    o64 = base + offs.to(tl.int64) * 3
    a, b, c, d = tl.randint4x(seed, o64)
    tl.store(out_ptr + offs, a)
    tl.store(out_ptr + N + offs, b)
    tl.store(out_ptr + 2 * N + offs, c)
    tl.store(out_ptr + 3 * N + offs, d)
    tl.store(f_ptr + offs, tl.rand(seed, o64))


@pytest.mark.parametrize("base", [1, 2**32 - 4, 5 * 2**32 + 7])
def test_int64_offsets_use_the_high_word_as_second_counter(base):
    n = 8
    out = np.zeros(4 * n, np.uint32)
    f = np.zeros(n, np.float32)
    _random_int64_offsets[(1,)](out, f, 99, base, N=n)
    offsets = np.int64(base) + np.arange(n, dtype=np.int64) * 3
    ref = philox4x32_10(offsets, 99)
    for k in range(4):
        np.testing.assert_array_equal(out[k * n:(k + 1) * n], ref[k])
    np.testing.assert_array_equal(f, uniform_ref(ref[0]))
    if base == 1:  # small int64 offsets give the int32 stream
        np.testing.assert_array_equal(ref[0], philox4x32_10(offsets.astype(np.int32), 99)[0])
