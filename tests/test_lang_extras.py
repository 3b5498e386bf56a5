"""Conformance: flip, sort, topk, gather, histogram, clamp and inline asm (interpreter vs NumPy)."""
import os
import warnings

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.errors import CompilationError
from kiln.interpret import InterpreterError
from kiln.language import core, standard

RNG = np.random.default_rng(7)


@kiln.jit
def _rows(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, OP: tl.constexpr, K: tl.constexpr):
    rows = tl.arange(0, M)[:, None]
    cols = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rows * N + cols)
    if OP == "flip_rows":
        y = tl.flip(x, 0)
    elif OP == "flip":
        y = tl.flip(x)
    elif OP == "sort":
        y = tl.sort(x)
    elif OP == "sort_descending":
        y = x.sort(descending=True)
    else:
        y = tl.topk(x, K)
    out_cols = tl.arange(0, K)[None, :]
    tl.store(out_ptr + rows * K + out_cols, y)


def _run_rows(x, op, k=None):
    m, n = x.shape
    k = n if k is None else k
    out = np.zeros((m, k), x.dtype)
    _rows[(1,)](x, out, M=m, N=n, OP=op, K=k)
    return out


@pytest.mark.parametrize("shape", [(4, 8), (1, 32), (8, 2)])
def test_flip_either_dimension(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(_run_rows(x, "flip"), x[:, ::-1])
    np.testing.assert_array_equal(_run_rows(x, "flip_rows"), x[::-1])


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float16])
def test_sort_rows_both_directions(dtype):
    x = (RNG.standard_normal((4, 16)) * 50).astype(dtype)
    x[0, :4] = x[0, 4]  # ties
    np.testing.assert_array_equal(_run_rows(x, "sort"), np.sort(x, axis=1))
    np.testing.assert_array_equal(_run_rows(x, "sort_descending"), np.sort(x, axis=1)[:, ::-1])


@pytest.mark.parametrize("k", [1, 4, 16])
def test_topk_is_the_k_largest_descending(k):
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_array_equal(_run_rows(x, "topk", k), np.sort(x, axis=1)[:, ::-1][:, :k])


@kiln.jit
def _sort_column(x_ptr, out_ptr):
    offs = tl.arange(0, 8)
    x = tl.load(x_ptr + offs[:, None] * 8 + offs[None, :])
    tl.store(out_ptr + offs[:, None] * 8 + offs[None, :], tl.sort(x, 0))


@pytest.mark.interpreter_only
def test_sort_only_the_last_dimension():
    with pytest.raises(CompilationError, match="only the last dimension"):
        _sort_column[(1,)](np.zeros(64, np.float32), np.zeros(64, np.float32))


@kiln.jit
def _gather(src_ptr, idx_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, AXIS: tl.constexpr):
    if AXIS == 0:
        src = tl.load(src_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
        offs = tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :]
    else:
        src = tl.load(src_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
        offs = tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :]
    index = tl.load(idx_ptr + offs)
    tl.store(out_ptr + offs, src.gather(index, AXIS))


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_along_either_axis(axis):
    m, n, k = 4, 8, 16
    src = RNG.standard_normal((m, n)).astype(np.float32)
    index = RNG.integers(0, src.shape[axis], (k, n) if axis == 0 else (m, k)).astype(np.int32)
    out = np.zeros(index.shape, np.float32)
    _gather[(1,)](src, index, out, M=m, N=n, K=k, AXIS=axis)
    np.testing.assert_array_equal(out, np.take_along_axis(src, index, axis=axis))


@pytest.mark.interpreter_only
def test_gather_index_out_of_range_names_the_kernel():
    src, index = np.zeros((4, 8), np.float32), np.full((4, 8), 9, np.int32)
    with pytest.raises(InterpreterError, match=r"kernel '_gather'.*gather index 9 is out of range"):
        _gather[(1,)](src, index, np.zeros((4, 8), np.float32), M=4, N=8, K=8, AXIS=1)


@kiln.jit
def _gather_bad_rank(src_ptr, out_ptr):
    offs = tl.arange(0, 8)
    src = tl.load(src_ptr + offs[:, None] * 8 + offs[None, :])
    tl.store(out_ptr + offs, tl.gather(src, offs, 0))


@pytest.mark.interpreter_only
def test_gather_needs_index_of_the_source_rank():
    with pytest.raises(CompilationError, match="same rank"):
        _gather_bad_rank[(1,)](np.zeros(64, np.float32), np.zeros(8, np.float32))


@kiln.jit
def _histogram(x_ptr, out_ptr, N: tl.constexpr, BINS: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if MASKED:
        h = tl.histogram(x, BINS, mask=offs % 2 == 0)
    else:
        h = x.histogram(BINS)
    tl.store(out_ptr + tl.arange(0, BINS), h)


@pytest.mark.parametrize("masked", [False, True])
def test_histogram_counts_values_in_range(masked):
    x = RNG.integers(-2, 18, 64).astype(np.int32)  # some values fall outside the 16 bins
    out = np.zeros(16, np.int32)
    _histogram[(1,)](x, out, N=64, BINS=16, MASKED=masked)
    counted = x[::2] if masked else x
    np.testing.assert_array_equal(out, np.bincount(counted[(counted >= 0) & (counted < 16)], minlength=16))


@kiln.jit
def _clamp(x_ptr, out_ptr, N: tl.constexpr, NAN: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if NAN:
        y = tl.clamp(x, -1.0, 1.0, propagate_nan=tl.PropagateNan.ALL)
    else:
        y = tl.clamp(x, -1.0, 1.0)
    tl.store(out_ptr + offs, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_clamp_nan_and_dtype(dtype):
    x = np.array([-3, -1, -0.5, 0, 0.5, 1, 3, np.nan], dtype)
    for propagate, nan_result in ((False, -1.0), (True, np.nan)):
        out = np.zeros(8, dtype)
        _clamp[(1,)](x, out, N=8, NAN=propagate)
        np.testing.assert_array_equal(out[:-1], np.clip(x[:-1], -1, 1))
        np.testing.assert_array_equal(out[-1:], np.array([nan_result], dtype))


@kiln.jit
def _clamp_ints(x_ptr, out_ptr):
    offs = tl.arange(0, 8)
    tl.store(out_ptr + offs, tl.clamp(tl.load(x_ptr + offs), 0, 3))


@pytest.mark.interpreter_only
def test_clamp_refuses_integers_as_triton():
    with pytest.raises(CompilationError, match="clamp needs floating-point"):
        _clamp_ints[(1,)](np.zeros(8, np.int32), np.zeros(8, np.int32))


@kiln.jit
def _shift_by_asm(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise("shl.b32 $0, $1, 3;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(out_ptr + offs, y)


@pytest.mark.interpreter_only
def test_inline_asm_is_refused_by_the_interpreter_with_the_kernel_name():
    with pytest.raises(InterpreterError, match=r"kernel '_shift_by_asm'.*inline_asm_elementwise runs PTX"):
        _shift_by_asm[(1,)](np.arange(8, dtype=np.int32), np.zeros(8, np.int32), N=8)


def test_inline_asm_result_on_the_gpu():
    """Interpreter-exempt: the interpreter cannot run PTX, so the result is checked only in the GPU
    conformance run (KILN_TEST_GPU_CONFORMANCE=1); on the CPU the kernel is still compiled by codegen."""
    x, out = np.arange(8, dtype=np.int32), np.zeros(8, np.int32)
    if os.environ.get("KILN_TEST_GPU_CONFORMANCE") != "1":
        _shift_by_asm.warmup(x, out, N=8, grid=(1,))  # builds it, so conftest compiles it for sm_80/sm_90a
        pytest.skip("interpreter-exempt: inline PTX runs only on the GPU")
    _shift_by_asm[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out, x << 3)


@kiln.jit
def _scaled_square(x, scale):
    return x * x * scale


@kiln.jit
def _small_library(x_ptr, out_ptr, bits_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.map_elementwise(_scaled_square, x, 3.0))
    tl.store(out_ptr + N + offs, tl.sub(tl.add(x, 1.0), tl.mul(x, 2.0)))
    bits = tl.load(bits_ptr + offs[:, None] * 4 + tl.arange(0, 4)[None, :])
    tl.store(bits_ptr + 4 * N + offs, tl.reduce_or(bits, 1))
    tl.store(bits_ptr + 5 * N + offs, bits.reduce_or(1))


def test_map_elementwise_add_sub_mul_and_reduce_or():
    n = 8
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(2 * n, np.float32)
    bits = np.zeros(6 * n, np.int32)
    bits[:4 * n] = 1 << RNG.integers(0, 31, 4 * n)
    _small_library[(1,)](x, out, bits, N=n)
    np.testing.assert_allclose(out[:n], x * x * 3, rtol=1e-6)
    np.testing.assert_allclose(out[n:], (x + 1) - x * 2, rtol=1e-6)
    want = np.bitwise_or.reduce(bits[:4 * n].reshape(n, 4), axis=1)
    np.testing.assert_array_equal(bits[4 * n:5 * n], want)
    np.testing.assert_array_equal(bits[5 * n:], want)


@kiln.jit
def _fp8_round_trip(x_ptr, f8_ptr, back_ptr, N: tl.constexpr, F8: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    f8 = x.to(F8)
    tl.store(f8_ptr + offs, f8)
    tl.store(back_ptr + offs, tl.cast(f8, tl.float32))


def _fp8_case(f8_dtype, np_f8):
    x = np.array([0.0, 0.3, -1.7, 3.14159, 100.0, -448.0, 1e6, -1e6, 2.0**-9, np.nan] + [0.5] * 6, np.float32)
    f8, back = np.zeros(16, np_f8), np.zeros(16, np.float32)
    _fp8_round_trip[(1,)](x, f8, back, N=16, F8=f8_dtype)
    limit = float(ml_dtypes.finfo(np_f8).max)
    want = np.clip(x, -limit, limit).astype(np_f8)  # Triton's conversions saturate (satfinite)
    np.testing.assert_array_equal(f8.view(np.uint8)[:-7], want.view(np.uint8)[:-7])
    assert np.isnan(back[9])
    np.testing.assert_array_equal(back[:9], want[:9].astype(np.float32))


@pytest.mark.parametrize("f8_dtype, np_f8", [pytest.param(tl.float8e4nv, ml_dtypes.float8_e4m3fn, marks=pytest.mark.fp8e4nv),
                                            (tl.float8e5, ml_dtypes.float8_e5m2)])
def test_fp8_casts_round_to_nearest_and_saturate(f8_dtype, np_f8):
    _fp8_case(f8_dtype, np_f8)


@pytest.mark.interpreter_only  # a CUDA target refuses AMD's formats (below)
@pytest.mark.parametrize("f8_dtype, np_f8", [(tl.float8e4b8, ml_dtypes.float8_e4m3fnuz),
                                            (tl.float8e5b16, ml_dtypes.float8_e5m2fnuz)])
def test_fnuz_fp8_casts(f8_dtype, np_f8):
    _fp8_case(f8_dtype, np_f8)


@kiln.jit
def _abs_fp8(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.abs(tl.load(x_ptr + offs)))


@pytest.mark.parametrize("f8_dtype, np_f8", [pytest.param(tl.float8e4nv, ml_dtypes.float8_e4m3fn, marks=pytest.mark.fp8e4nv),
                                            (tl.float8e5, ml_dtypes.float8_e5m2)])
def test_abs_of_fp8_clears_the_sign_bit(f8_dtype, np_f8):
    x = np.array([1.0, -2.0, 0.5, -448.0, 0.0, -0.0, -0.125, 3.5], np.float32).astype(np_f8).view(np.uint8)
    out = np.zeros(8, np.uint8)
    _abs_fp8[(1,)](kiln.reinterpret(x, f8_dtype), kiln.reinterpret(out, f8_dtype), N=8)
    np.testing.assert_array_equal(out, x & 0x7F)


@kiln.jit
def _fp8_both_ways(x_ptr, e4_ptr, e5_ptr, back_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    e4, e5 = x.to(tl.float8e4nv), x.to(tl.float8e5)
    tl.store(e4_ptr + offs, e4)
    tl.store(e5_ptr + offs, e5)
    tl.store(back_ptr + offs, e4.to(tl.float32) + e5.to(tl.float32))


@kiln.jit
def _e5_both_ways(x_ptr, e5_ptr, back_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    e5 = tl.load(x_ptr + offs).to(tl.float8e5)
    tl.store(e5_ptr + offs, e5)
    tl.store(back_ptr + offs, e5.to(tl.float32))


def test_fp8_conversions_use_the_hardware_cvt_from_sm_89():
    x = np.zeros(64, np.float32)
    e4, e5 = (kiln.reinterpret(np.zeros(64, np.uint8), t) for t in (tl.float8e4nv, tl.float8e5))
    ptx = _fp8_both_ways.warmup(x, e4, e5, x, N=64, grid=(1,), target="sm_90a").asm["ptx"]
    for instr in ("cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32", "cvt.rn.f16x2.e4m3x2",
                  "cvt.rn.f16x2.e5m2x2"):
        assert instr in ptx, instr
    ptx = _e5_both_ways.warmup(x, e5, x, N=64, grid=(1,), target="sm_80").asm["ptx"]  # converted in software
    assert "e5m2x2" not in ptx and "cvt.rn.f16x2" not in ptx


@kiln.jit
def _fp8_every_code(codes_ptr, x_ptr, f8_ptr, back_ptr, N: tl.constexpr, F8: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(back_ptr + offs, tl.load(codes_ptr + offs).to(tl.float32))
    tl.store(f8_ptr + offs, tl.load(x_ptr + offs).to(F8))


@pytest.mark.parametrize("f8_dtype, np_f8", [pytest.param(tl.float8e4nv, ml_dtypes.float8_e4m3fn, marks=pytest.mark.fp8e4nv),
                                            (tl.float8e5, ml_dtypes.float8_e5m2)])
def test_fp8_conversions_of_every_code_and_their_midpoints(f8_dtype, np_f8):
    """Every code decoded, and values halfway between neighbouring codes (ties to even), just off
    them and past the largest encoded, at 2 warps: 4 values a thread, converted in pairs on sm_89+."""
    codes = np.arange(256, dtype=np.uint8)
    finite = np.sort(np.unique(codes.view(np_f8).astype(np.float32)[np.isfinite(codes.view(np_f8).astype(np.float32))]))
    mids = (finite[:-1] + finite[1:]) / 2
    limit = float(ml_dtypes.finfo(np_f8).max)
    x = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), [limit * 1.5, -limit * 3, np.inf, -np.inf]])
    x = np.resize(x.astype(np.float32), 256)
    f8, back = np.zeros(256, np.uint8), np.zeros(256, np.float32)
    _fp8_every_code[(1,)](kiln.reinterpret(codes, f8_dtype), x, kiln.reinterpret(f8, f8_dtype), back, N=256, F8=f8_dtype,
                          num_warps=2)
    want = codes.view(np_f8).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(back), np.isnan(want))
    np.testing.assert_array_equal(back[~np.isnan(want)], want[~np.isnan(want)])
    np.testing.assert_array_equal(f8, np.clip(x, -limit, limit).astype(np_f8).view(np.uint8))


@kiln.jit
def _fp8_toward_zero(x_ptr, f8_ptr, N: tl.constexpr, F8: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(f8_ptr + offs, tl.load(x_ptr + offs).to(F8, fp_downcast_rounding="rtz"))


def fp8_toward_zero_case(np_f8):
    """(inputs, the codes rounding toward zero gives them): every code's value, values just
    above and below each, past the largest, the infinities (kept by e5m2, clamped by e4m3fn,
    which has none) and NaN; the reference is the largest code no farther from zero."""
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(np_f8).astype(np.float32)
    finite = np.sort(np.unique(np.abs(values[np.isfinite(values)])))
    x = np.concatenate([finite, np.nextafter(finite, np.float32(np.inf)), np.nextafter(finite[1:], np.float32(0))])
    x = np.concatenate([x, -x, [finite[-1] * 1.5, -finite[-1] * 3, np.inf, -np.inf, np.nan]]).astype(np.float32)
    x = np.resize(x, 1024)
    magnitude = finite[np.searchsorted(finite, np.abs(x), side="right").clip(1) - 1]
    has_inf = np.isinf(np.array(np.inf, np.float32).astype(np_f8))
    want = np.where(np.isinf(x) & has_inf, np.abs(x), magnitude) * np.sign(x)
    want = np.where(np.isnan(x), np.nan, np.where(x == 0, x, want)).astype(np_f8)
    return x, want


@pytest.mark.parametrize("f8_dtype, np_f8", [pytest.param(tl.float8e4nv, ml_dtypes.float8_e4m3fn, marks=pytest.mark.fp8e4nv),
                                            (tl.float8e5, ml_dtypes.float8_e5m2)])
def test_fp8_casts_toward_zero(f8_dtype, np_f8):
    """`fp_downcast_rounding="rtz"` to fp8 truncates (it went to nearest on the GPU before)."""
    x, want = fp8_toward_zero_case(np_f8)
    got = np.zeros(1024, np.uint8)
    _fp8_toward_zero[(1,)](x, kiln.reinterpret(got, f8_dtype), N=1024, F8=f8_dtype)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.view(np_f8).astype(np.float32)), nan)
    np.testing.assert_array_equal(got[~nan], want.view(np.uint8)[~nan])
    ptx = _fp8_toward_zero.warmup(x, kiln.reinterpret(got, f8_dtype), N=1024, F8=f8_dtype, grid=(1,),
                                  target="sm_90a").asm["ptx"]
    assert "satfinite" not in ptx  # no cvt rounds to fp8 toward zero


def test_fp8_conversions_go_two_registers_a_cvt():
    """As Triton's: a thread's 8 values of a 256-element block at one warp are 4 `cvt`s each way."""
    x = np.zeros(256, np.float32)
    e5 = kiln.reinterpret(np.zeros(256, np.uint8), tl.float8e5)
    ptx = _e5_both_ways.warmup(x, e5, x, N=256, grid=(1,), target="sm_90a", num_warps=1).asm["ptx"]
    encodes = [line for line in ptx.splitlines() if "cvt.rn.satfinite.e5m2x2.f32" in line]
    assert len(encodes) == 4 and not any("0f00000000" in line for line in encodes), encodes
    assert ptx.count("cvt.rn.f16x2.e5m2x2") == 4


@pytest.mark.parametrize("f8_dtype, targets", [(tl.float8e4nv, ("sm_80",)),  # from sm_89, as in Triton
                                              (tl.float8e4b8, ("sm_80", "sm_90a")),  # AMD's formats
                                              (tl.float8e5b16, ("sm_80", "sm_90a"))])
def test_fp8_formats_a_target_lacks_are_a_compilation_error(f8_dtype, targets):
    x = np.zeros(16, np.float32)
    f8 = kiln.reinterpret(np.zeros(16, np.uint8), f8_dtype)
    for target in targets:
        with pytest.raises(kiln.CompilationError, match="not supported in this architecture") as info:
            _fp8_round_trip.warmup(x, f8, x, N=16, F8=f8_dtype, grid=(1,), target=target)
        assert "not supported in this architecture" in str(info.value.__cause__)
        assert "The supported fp8 dtypes are ('fp8e4b15', " in str(info.value)


def test_an_fp8e4b15_dot_warns_on_hopper_only():
    @kiln.jit
    def dot_of(x_ptr, F8: tl.constexpr):
        a = tl.full((16, 16), 0.0, F8)
        tl.store(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], tl.dot(a, a))
    out = np.zeros((16, 16), np.float32)
    with pytest.warns(UserWarning, match="the use of fp8e4b15 is deprecated on Hopper and later architectures"):
        dot_of.warmup(out, F8=tl.float8e4b15, grid=(1,), target="sm_90a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dot_of.warmup(out, F8=tl.float8e4b15, grid=(1,), target="sm_80")
        dot_of.warmup(out, F8=tl.float8e5, grid=(1,), target="sm_90a")


@kiln.jit
def _read_only_input(x_ptr: tl.const, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1)


def test_const_pointer_annotation_is_accepted():
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    _read_only_input[(1,)](x, out, N=8)
    np.testing.assert_array_equal(out, x + 1)


@kiln.jit
def _widen(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.float32))


@pytest.mark.fp8e4nv
def test_reinterpret_gives_a_pointer_of_the_named_dtype():
    raw = np.array([1.0, -2.0, 0.5, 448.0, 0.0, -0.125, 3.5, 96.0], ml_dtypes.float8_e4m3fn).view(np.uint8)
    out = np.zeros(8, np.float32)
    _widen[(1,)](kiln.reinterpret(raw, tl.float8e4nv), out, N=8)
    np.testing.assert_array_equal(out, raw.view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    big = np.array([2**31 + 5, 7] * 4, np.uint32)
    _widen[(1,)](kiln.reinterpret(big.view(np.int32), tl.uint32), out, N=8)
    np.testing.assert_array_equal(out, big.astype(np.float32))
    wrapped = kiln.reinterpret(raw, tl.float8e4nv)
    assert kiln.reinterpret(wrapped, tl.float8e5).dtype == tl.float8e5 and wrapped.stride() == (1,)


@kiln.jit
def _selu_scalar(x, alpha):
    if x > 0:
        return x
    else:
        return alpha * (tl.exp(x) - 1)


@kiln.jit
def _piecewise_scalar(x, limit):
    y = x * 2
    if x > limit:
        y = limit
    elif x < -limit:
        y = -limit - x
    return y if y != 0 else 1.0


@kiln.jit
def _map_with_branches(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.map_elementwise(_selu_scalar, x, 1.5))
    tl.store(out_ptr + N + offs, tl.map_elementwise(_piecewise_scalar, x, 1.0))


def test_map_elementwise_branches_per_element():
    x = np.linspace(-2, 2, 16).astype(np.float32)
    x[5] = 0.0
    out = np.zeros(32, np.float32)
    _map_with_branches[(1,)](x, out, N=16)
    np.testing.assert_allclose(out[:16], np.where(x > 0, x, 1.5 * (np.exp(x) - 1)), rtol=1e-6, atol=1e-7)
    y = np.where(x > 1, 1.0, np.where(x < -1, -1 - x, x * 2))
    np.testing.assert_array_equal(out[16:], np.where(y != 0, y, 1.0).astype(np.float32))


@kiln.jit
def _copy_bytes(x_ptr, out_ptr, N: tl.constexpr, CONVERT: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if CONVERT:
        tl.store(out_ptr + offs, x.to(tl.float32).to(x.dtype))
    else:
        tl.store(out_ptr + offs, x)


def test_float8e4b15_is_its_own_type_moved_but_not_converted():
    assert tl.float8e4b15 != tl.float8e4nv
    raw, out = np.arange(16, dtype=np.uint8), np.zeros(16, np.uint8)
    _copy_bytes[(1,)](kiln.reinterpret(raw, tl.float8e4b15), kiln.reinterpret(out, tl.float8e4b15), N=16,
                      CONVERT=False)
    np.testing.assert_array_equal(out, raw)


def _fp8e4b15_value(byte):
    """The format's definition: sign, 4 exponent bits with bias 15, 3 mantissa bits, no inf or NaN."""
    byte = int(byte)
    sign, exp, man = -1.0 if byte & 0x80 else 1.0, (byte >> 3) & 0xF, byte & 0x7
    return sign * (2.0**-14 * man / 8 if exp == 0 else 2.0**(exp - 15) * (1 + man / 8))


def test_float8e4b15_converts_as_tritons_gpu_conversion():
    raw, up = np.arange(256, dtype=np.uint8), np.zeros(256, np.float32)
    _to_float32[(1,)](kiln.reinterpret(raw, tl.float8e4b15), up, N=256)
    np.testing.assert_array_equal(up, [_fp8e4b15_value(b) for b in range(256)])
    back = np.zeros(256, np.uint8)
    _copy_bytes[(1,)](kiln.reinterpret(raw, tl.float8e4b15), kiln.reinterpret(back, tl.float8e4b15), N=256,
                      CONVERT=True)
    expected = raw.copy()
    expected[[0x7F, 0xFF]] = [0x7E, 0xFE]  # the largest magnitude, 1.875, comes back clamped to 1.75
    np.testing.assert_array_equal(back, expected)


def test_float32_to_float8e4b15_clamps_and_rounds_ties_away():
    x = np.array([1.0625, -1.0625, 0.3, 5.0, -np.inf, np.nan, 1e-5, 0.0], np.float32)
    out = np.zeros(8, np.uint8)
    _from_float32[(1,)](x, kiln.reinterpret(out, tl.float8e4b15), N=8)
    assert [int(b) for b in out] == [0x79, 0xF9, 0x6A, 0x7E, 0xFE, 0x7E, 0x01, 0x00]


def test_float8e4b15_arithmetic_goes_through_float16():
    raw = np.array([0x78, 0x70, 0xF0, 0x01, 0x7E, 0x00, 0x80, 0x3C], np.uint8)
    out_abs, out_fma = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    _fp8e4b15_math[(1,)](kiln.reinterpret(raw, tl.float8e4b15), kiln.reinterpret(out_abs, tl.float8e4b15),
                         kiln.reinterpret(out_fma, tl.float8e4b15), N=8)
    np.testing.assert_array_equal(out_abs, raw & 0x7F)  # abs clears the sign bit, -x flips it
    # x*x + x on 1.0, 0.5, -0.5, 2^-17, 1.75, 0, -0, 1.5*2^-8: 2 and 4.81 clamp to 1.75 (0x7e),
    # 0.75 is 0x74, -0.25 is 0xe8, -0*-0 + -0 is +0, and 2^-17 and 1.5*2^-8 keep their codes
    assert [int(b) for b in out_fma] == [0x7E, 0x74, 0xE8, 0x01, 0x7E, 0x00, 0x00, 0x3C]


@kiln.jit
def _to_float32(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.float32))


@kiln.jit
def _from_float32(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.float8e4b15))


@kiln.jit
def _fp8e4b15_math(x_ptr, abs_ptr, fma_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(abs_ptr + offs, tl.where(x < 0, -x, tl.abs(x)))
    tl.store(fma_ptr + offs, x * x + x)


@kiln.jit
def _special_registers(out_ptr):
    start = tl.extra.cuda.globaltimer()
    sm = tl.extra.cuda.smid()
    tl.store(out_ptr, (tl.extra.cuda.globaltimer() - start >= 0).to(tl.int64) + sm.to(tl.int64) * 0)


def test_cuda_special_registers_on_the_gpu():
    """Interpreter-exempt (inline PTX); the CPU run still compiles the kernel for both targets."""
    out = np.zeros(1, np.int64)
    if os.environ.get("KILN_TEST_GPU_CONFORMANCE") != "1":
        _special_registers.warmup(out, grid=(1,))
        pytest.skip("interpreter-exempt: globaltimer and smid read GPU registers")
    _special_registers[(1,)](out)
    assert out[0] == 1


@kiln.jit
def _swap_halves_like_hand_written_sorts(x_ptr, out_ptr, N: tl.constexpr):
    # the style of hand-written bitonic kernels: helpers imported from triton.language.core/standard
    n_dims: core.constexpr = standard._log2(N)
    y = core.reshape(tl.load(x_ptr + core.arange(0, N)), [2, N // 2])
    mask = core.arange(0, 2)[:, None]
    left = core.broadcast_to(standard.sum(y * (1 - mask), 0)[None, :], [2, N // 2])
    right = core.broadcast_to(standard.sum(y * mask, 0)[None, :], [2, N // 2])
    idtype = core.get_int_dtype(bitwidth=32, signed=True)
    iy = y.to(idtype, bitcast=True)
    flip = (left ^ right).to(idtype, bitcast=True)
    swapped = iy ^ core.where(mask == 0, flip, standard.zeros_like(iy))
    swapped = swapped ^ core.where(mask == 1, flip, standard.zeros_like(iy))
    tl.store(out_ptr + core.arange(0, N), core.reshape(swapped, [N]) + n_dims * 0)


def test_helpers_found_where_triton_defines_them():
    x = np.arange(16, dtype=np.int32) * 3
    out = np.zeros(16, np.int32)
    _swap_halves_like_hand_written_sorts[(1,)](x, out, N=16)
    np.testing.assert_array_equal(out, np.concatenate([x[8:], x[:8]]))


@kiln.jit
def _launch_shape(out_ptr):
    tl.store(out_ptr, tl.extra.cuda.num_warps())
    tl.store(out_ptr + 1, tl.extra.cuda.num_threads())


@pytest.mark.parametrize("warps", [None, 8])
def test_num_warps_and_num_threads_are_the_launch_options(warps):
    out = np.zeros(2, np.int32)
    if warps is None:
        _launch_shape[(1,)](out)
    else:
        _launch_shape[(1,)](out, num_warps=warps)
    assert list(out) == [warps or 4, (warps or 4) * 32]


@kiln.jit
def _pairwise(a0, a1, a2, a3, b0, b1, b2, b3):
    # the first result mixes a group's elements, so the test pins which elements form a group
    return a0 + a3, a1 * b1, a2 - b2, a3, a0 - b0, a1, a2, a3 + b3


@kiln.jit
def _packed(a_ptr, b_ptr, c_ptr, d_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    c, d = tl.map_elementwise(_pairwise, tl.load(a_ptr + offs), tl.load(b_ptr + offs), pack=4)
    tl.store(c_ptr + offs, c)
    tl.store(d_ptr + offs, d)


def test_map_elementwise_packs_consecutive_elements():
    """pack=4: the function takes 4 consecutive elements (row-major) of each argument and gives 4 values
    of each result in turn, as Triton's map_elementwise does."""
    a, b = RNG.integers(-50, 50, (4, 8)).astype(np.int32), RNG.integers(-50, 50, (4, 8)).astype(np.int32)
    c, d = np.zeros_like(a), np.zeros_like(a)
    _packed[(1,)](a, b, c, d, M=4, N=8)
    g, h = a.reshape(-1, 4), b.reshape(-1, 4)
    want_c = np.stack([g[:, 0] + g[:, 3], g[:, 1] * h[:, 1], g[:, 2] - h[:, 2], g[:, 3]], 1).reshape(4, 8)
    want_d = np.stack([g[:, 0] - h[:, 0], g[:, 1], g[:, 2], g[:, 3] + h[:, 3]], 1).reshape(4, 8)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(d, want_d)
