"""Conformance: tl.dot_scaled with MX operands (fp4 e2m1 in bytes, fp8, bf16), e8m0 and e4m3 scales, 2-D and 3-D."""
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


@kiln.jit
def _scaled_by_e4m3(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, out_ptr, A_FMT: tl.constexpr, A_K: tl.constexpr,
                    M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * A_K + tl.arange(0, A_K)[None, :])
    b = tl.load(b_ptr + tl.arange(0, K // 2)[:, None] * N + rn[None, :])
    groups = tl.arange(0, K // 16)
    a_scale = tl.load(a_scale_ptr + rm[:, None] * (K // 16) + groups[None, :])
    b_scale = tl.load(b_scale_ptr + rn[:, None] * (K // 16) + groups[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot_scaled(a, a_scale, A_FMT, b, b_scale, "e2m1"))


def _e4m3_scales(rows, groups):
    """(e4m3 scales as bytes, their values): NVFP4's, one per 16 elements along K."""
    x = (RNG.uniform(0.25, 4, (rows, groups))).astype(ml_dtypes.float8_e4m3fn)
    return x.view(np.uint8), x.astype(np.float64)


@pytest.mark.parametrize("a_fmt", ["bf16", "e2m1"])
def test_e4m3_scales_scale_groups_of_16(a_fmt):
    """NVFP4: an fp8 e4m3 scale per 16 elements along K, shaped [M, K / 16] and [N, K / 16], each scale's
    value the factor (Triton takes e4m3 scales so; gemlite's A16W4_NVFP)."""
    a, a_values = _operand(a_fmt, M, K, pack_axis=1)
    b, b_values = _operand("e2m1", K, N, pack_axis=0)
    (a_scale, a_factor), (b_scale, b_factor) = _e4m3_scales(M, K // 16), _e4m3_scales(N, K // 16)
    out = np.zeros((M, N), np.float32)
    _scaled_by_e4m3[(1,)](a, a_scale.view(ml_dtypes.float8_e4m3fn), b, b_scale.view(ml_dtypes.float8_e4m3fn), out,
                          A_FMT=a_fmt, A_K=a.shape[1], M=M, N=N, K=K)
    lhs = (a_values * np.repeat(a_factor, 16, axis=1)).astype(ml_dtypes.bfloat16).astype(np.float64)
    rhs = (b_values * np.repeat(b_factor, 16, axis=1).T).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(out, lhs @ rhs, rtol=1e-5, atol=1e-5)


@kiln.jit
def _fp4_packed_along_m_and_n(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr,
                              K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + tl.arange(0, M // 2)[:, None] * K + rk[None, :])  # [M / 2, K]: two rows a byte
    b = tl.load(b_ptr + rk[:, None] * (N // 2) + tl.arange(0, N // 2)[None, :])  # [K, N / 2]: two columns a byte
    groups = tl.arange(0, K // 32)
    a_scale = tl.load(a_scale_ptr + rm[:, None] * (K // 32) + groups[None, :])
    b_scale = tl.load(b_scale_ptr + rn[:, None] * (K // 32) + groups[None, :])
    c = tl.dot_scaled(a, a_scale, "e2m1", b, b_scale, "e2m1", lhs_k_pack=False, rhs_k_pack=False)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], c)


def test_fp4_packed_along_m_and_n():
    a_codes, b_codes = RNG.integers(0, 16, (M, K)).astype(np.uint8), RNG.integers(0, 16, (K, N)).astype(np.uint8)
    a = (a_codes[0::2] | (a_codes[1::2] << 4)).astype(np.uint8)  # row 2i in the low nibble of row i
    b = (b_codes[:, 0::2] | (b_codes[:, 1::2] << 4)).astype(np.uint8)
    a_scale = RNG.integers(122, 132, (M, K // 32)).astype(np.uint8)
    b_scale = RNG.integers(122, 132, (N, K // 32)).astype(np.uint8)
    out = np.zeros((M, N), np.float32)
    _fp4_packed_along_m_and_n[(1,)](a, a_scale, b, b_scale, out, M=M, N=N, K=K)
    lhs = E2M1[a_codes] * np.repeat(2.0 ** (a_scale.astype(np.float64) - 127), 32, axis=1)
    rhs = E2M1[b_codes] * np.repeat(2.0 ** (b_scale.astype(np.float64) - 127), 32, axis=1).T
    np.testing.assert_allclose(out, lhs @ rhs, rtol=1e-5, atol=1e-5)


@kiln.jit
def _batched_scaled(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, out_ptr, BATCH: tl.constexpr, M: tl.constexpr,
                    N: tl.constexpr, K: tl.constexpr):
    rb, rm, rn = tl.arange(0, BATCH)[:, None, None], tl.arange(0, M)[None, :, None], tl.arange(0, N)[None, None, :]
    rk, rg = tl.arange(0, K)[None, None, :], tl.arange(0, K // 32)[None, None, :]
    a = tl.load(a_ptr + rb * M * K + rm * K + rk)  # e4m3 [BATCH, M, K]
    b = tl.load(b_ptr + rb * (K // 2) * N + tl.arange(0, K // 2)[None, :, None] * N + rn)  # e2m1 [BATCH, K / 2, N]
    a_scale = tl.load(a_scale_ptr + rb * M * (K // 32) + rm * (K // 32) + rg)  # [BATCH, M, K / 32]
    b_scale = tl.load(b_scale_ptr + rb * N * (K // 32) + tl.arange(0, N)[None, :, None] * (K // 32) + rg)
    c = tl.dot_scaled(a, a_scale, "e4m3", b, b_scale, "e2m1")
    tl.store(out_ptr + rb * M * N + rm * N + rn, c)


def test_a_batched_scaled_dot_scales_each_batch_by_its_own_scales():
    batch = 2
    a = RNG.standard_normal((batch, M, K)).astype(ml_dtypes.float8_e4m3fn)
    b_codes = RNG.integers(0, 16, (batch, K, N)).astype(np.uint8)
    b = (b_codes[:, 0::2] | (b_codes[:, 1::2] << 4)).astype(np.uint8)
    a_scale = RNG.integers(122, 132, (batch, M, K // 32)).astype(np.uint8)
    b_scale = RNG.integers(122, 132, (batch, N, K // 32)).astype(np.uint8)
    out = np.zeros((batch, M, N), np.float32)
    _batched_scaled[(1,)](a.view(np.uint8), a_scale, b, b_scale, out, BATCH=batch, M=M, N=N, K=K)
    lhs = a.astype(np.float64) * np.repeat(2.0 ** (a_scale.astype(np.float64) - 127), 32, axis=2)
    rhs = E2M1[b_codes] * np.repeat(2.0 ** (b_scale.astype(np.float64) - 127), 32, axis=2).transpose(0, 2, 1)
    np.testing.assert_allclose(out, lhs @ rhs, rtol=1e-5, atol=1e-5)


@kiln.jit
def _e8m0_scale_of_nvfp4_width():
    a = tl.full((32, 64), 0, tl.uint8)
    b = tl.full((64, 32), 0, tl.uint8)
    tl.dot_scaled(a, tl.full((32, 4), 0, tl.uint8), "e4m3", b, None, "e4m3")


def test_an_e8m0_scale_still_groups_32():
    with pytest.raises(kiln.CompilationError) as info:
        _e8m0_scale_of_nvfp4_width[(1,)]()
    assert str(info.value.__cause__) == "lhs_scale must be a tensor of shape [32, 2]. Got ['32', '4']"


def _emulated_e4m3_scaled(a_fmt):
    """`_scaled_by_e4m3` as sm_89's portable build runs it in kiln's CPU emulator (mma.sync, the 16-wide
    groups' factors in their layouts), against the interpreter's reference."""
    from kiln.codegen.emulate import run_on_cpu
    from kiln.ir import parse_function
    a, a_values = _operand(a_fmt, M, K, pack_axis=1)
    b, b_values = _operand("e2m1", K, N, pack_axis=0)
    (a_scale, a_factor), (b_scale, b_factor) = _e4m3_scales(M, K // 16), _e4m3_scales(N, K // 16)
    out = np.zeros((M, N), np.float32)
    kernel = _scaled_by_e4m3.warmup(a, a_scale.view(ml_dtypes.float8_e4m3fn), b, b_scale.view(ml_dtypes.float8_e4m3fn),
                                    out, A_FMT=a_fmt, A_K=a.shape[1], M=M, N=N, K=K, grid=(1,), target="sm_89")
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [a.view(np.uint8) if a_fmt == "e2m1" else a, a_scale, b,
                                                         b_scale, out], num_warps=4)
    lhs = (a_values * np.repeat(a_factor, 16, axis=1)).astype(ml_dtypes.bfloat16).astype(np.float64)
    rhs = (b_values * np.repeat(b_factor, 16, axis=1).T).astype(ml_dtypes.bfloat16).astype(np.float64)
    return out, lhs @ rhs


@pytest.mark.parametrize("a_fmt", ["bf16", "e2m1"])
def test_the_lowering_scales_groups_of_16_by_e4m3(a_fmt):
    from test_codegen_emulate import in_child
    got, want = in_child(_emulated_e4m3_scaled, a_fmt, timeout=300)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@kiln.jit
def _fp8_packed_along_m():
    a = tl.full((32, 64), 0, tl.uint8)
    b = tl.full((64, 32), 0, tl.uint8)
    tl.dot_scaled(a, None, "e4m3", b, None, "e4m3", lhs_k_pack=False)


def test_only_fp4_is_packed_along_m_or_n():
    with pytest.raises(kiln.CompilationError) as info:
        _fp8_packed_along_m[(1,)]()
    assert "only an e2m1 operand may be packed along M or N" in str(info.value.__cause__)
