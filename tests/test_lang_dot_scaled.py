"""Conformance: tl.dot_scaled with MX operands (fp4 e2m1 packed in bytes, fp8, bf16) and e8m0 scales."""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl

RNG = np.random.default_rng(11)
M = N = 16
K = 64
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


@kiln.jit
def _scaled(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, out_ptr, A_FMT: tl.constexpr, B_FMT: tl.constexpr,
            A_K: tl.constexpr, B_K: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * A_K + tl.arange(0, A_K)[None, :])
    b = tl.load(b_ptr + tl.arange(0, B_K)[:, None] * N + rn[None, :])
    groups = tl.arange(0, K // 32)
    a_scale = tl.load(a_scale_ptr + rm[:, None] * (K // 32) + groups[None, :])
    b_scale = tl.load(b_scale_ptr + rn[:, None] * (K // 32) + groups[None, :])
    c = tl.dot_scaled(a, a_scale, A_FMT, b, b_scale, B_FMT)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], c)


def _operand(fmt, rows, cols, pack_axis):
    """(the array a kernel loads, its fp32 values)."""
    if fmt == "e2m1":
        codes = RNG.integers(0, 16, (rows, cols)).astype(np.uint8)
        values = E2M1[codes]
        lo, hi = (codes[:, 0::2], codes[:, 1::2]) if pack_axis == 1 else (codes[0::2], codes[1::2])
        return (lo | (hi << 4)).astype(np.uint8), values
    if fmt == "bf16":
        x = RNG.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
        return x, x.astype(np.float32)
    np_type = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    x = RNG.standard_normal((rows, cols)).astype(np_type)
    return x.view(np.uint8), x.astype(np.float32)


@pytest.mark.parametrize("a_fmt, b_fmt", [("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e5m2", "bf16")])
def test_dot_scaled_matches_the_scaled_product(a_fmt, b_fmt):
    a, a_values = _operand(a_fmt, M, K, pack_axis=1)
    b, b_values = _operand(b_fmt, K, N, pack_axis=0)
    a_scale = RNG.integers(122, 132, (M, K // 32)).astype(np.uint8)
    b_scale = RNG.integers(122, 132, (N, K // 32)).astype(np.uint8)
    out = np.zeros((M, N), np.float32)
    _scaled[(1,)](a, a_scale, b, b_scale, out, A_FMT=a_fmt, B_FMT=b_fmt, A_K=a.shape[1], B_K=b.shape[0],
                  M=M, N=N, K=K)
    a_factor = np.repeat(2.0 ** (a_scale.astype(np.float64) - 127), 32, axis=1)
    b_factor = np.repeat(2.0 ** (b_scale.astype(np.float64) - 127), 32, axis=1).T
    lhs = (a_values * a_factor).astype(ml_dtypes.bfloat16).astype(np.float64)  # the bf16 dot Triton emulates with
    rhs = (b_values * b_factor).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(out, lhs @ rhs, rtol=1e-5, atol=1e-5)


@kiln.jit
def _wrong_lhs_scale():
    a = tl.full((32, 64), 0, tl.uint8)
    b = tl.full((64, 32), 0, tl.uint8)
    lhs_scale = tl.full((32, 4), 0, tl.uint8)
    rhs_scale = tl.full((32, 2), 0, tl.uint8)
    tl.dot_scaled(a, lhs_scale, "e5m2", b, rhs_scale, "e5m2", tl.full((32, 32), 0.0, tl.float32))


def test_a_scale_of_the_wrong_shape_is_named_in_tritons_words():
    with pytest.raises(kiln.CompilationError) as info:
        _wrong_lhs_scale[(1,)]()
    assert str(info.value.__cause__) == "lhs_scale must be a tensor of shape [32, 2]. Got ['32', '4']"


@kiln.jit
def _scaled_by_fp16(a_ptr, a_scale_ptr, b_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    a_scale = tl.load(a_scale_ptr + rm[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot_scaled(a, a_scale, "e4m3", b, None, "fp16"))


@pytest.mark.parametrize("value, scale, expect", [
    (448.0, 127 + 8, np.inf),   # 448 * 2**8 is past fp16's largest finite value
    (1.0, 127 - 26, 0.0),       # 2**-26 is below half of fp16's smallest subnormal
    (1.5, 127 - 3, 64 * 1.5 / 8),
])
def test_an_fp16_operand_makes_the_scaled_operand_fp16(value, scale, expect):
    # as Triton's GPUs without MX instructions do: both operands and the scale in fp16, not fp32
    a = np.full((M, K), value, ml_dtypes.float8_e4m3fn).view(np.uint8)
    a_scale = np.full((M, K // 32), scale, np.uint8)
    b = np.ones((K, N), np.float16)
    out = np.zeros((M, N), np.float32)
    _scaled_by_fp16[(1,)](a, a_scale, b, out, M=M, N=N, K=K)
    np.testing.assert_array_equal(out, np.full((M, N), expect, np.float32))


@kiln.jit
def _fp4_by_bf16(a_ptr, a_scale_ptr, b_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * (K // 2) + tl.arange(0, K // 2)[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    a_scale = tl.load(a_scale_ptr + rm[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot_scaled(a, a_scale, "e2m1", b, None, "bf16"))


def test_an_operand_of_the_compute_type_reaches_the_dot_as_loaded():
    # a bf16 B through fp32 and back would be a computed operand: on Hopper staged to shared memory a
    # second time beside its pipeline's ring (upstream's test_pipeline_matmul: 237,568 bytes, past the SM's)
    from kiln.ir import parse_function
    compiled = _fp4_by_bf16.warmup(np.zeros((M, K // 2), np.uint8), np.zeros((M, K // 32), np.uint8),
                                   np.zeros((K, N), ml_dtypes.bfloat16), np.zeros((M, N), np.float32),
                                   M=M, N=N, K=K, grid=(1,))
    [dot] = [op for op in parse_function(compiled.asm["kir"]).walk() if op.name == "dot"]
    assert dot.operands[1].defining_op.name == "load"


def _emulated_scaled(a_fmt, b_fmt, warps):
    """The lowering's own run of `_scaled` (sm_89's portable build in kiln's CPU emulator: its
    mma.sync, the factors' layouts; e4m3 from sm_89 on), against the same reference as the interpreter's."""
    from kiln.codegen.emulate import run_on_cpu
    from kiln.ir import parse_function
    a, a_values = _operand(a_fmt, M, K, pack_axis=1)
    b, b_values = _operand(b_fmt, K, N, pack_axis=0)
    a_scale = RNG.integers(122, 132, (M, K // 32)).astype(np.uint8)
    b_scale = RNG.integers(122, 132, (N, K // 32)).astype(np.uint8)
    out = np.zeros((M, N), np.float32)
    kernel = _scaled.warmup(a, a_scale, b, b_scale, out, A_FMT=a_fmt, B_FMT=b_fmt, A_K=a.shape[1], B_K=b.shape[0],
                            M=M, N=N, K=K, grid=(1,), target="sm_89", num_warps=warps)
    bytes_of = lambda x: x.view(np.uint8) if x.dtype.itemsize == 1 else x  # noqa: E731  (the emulator takes bytes)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [bytes_of(a), a_scale, bytes_of(b), b_scale, out],
               num_warps=warps)
    a_factor = np.repeat(2.0 ** (a_scale.astype(np.float64) - 127), 32, axis=1)
    b_factor = np.repeat(2.0 ** (b_scale.astype(np.float64) - 127), 32, axis=1).T
    lhs = (a_values * a_factor).astype(ml_dtypes.bfloat16).astype(np.float64)
    rhs = (b_values * b_factor).astype(ml_dtypes.bfloat16).astype(np.float64)
    return out, lhs @ rhs


@pytest.mark.parametrize("a_fmt, b_fmt, warps", [("e2m1", "e2m1", 4), ("e4m3", "e2m1", 1), ("e5m2", "bf16", 4)])
def test_the_lowering_computes_the_scaled_product(a_fmt, b_fmt, warps):
    from test_codegen_emulate import in_child
    got, want = in_child(_emulated_scaled, a_fmt, b_fmt, warps, timeout=300)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
