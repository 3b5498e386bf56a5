"""Conformance: the program model, dtypes, pointer types and tensor basics (interpreter vs NumPy)."""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl
try:
    import torch
except ImportError:  # PyTorch is optional; the tests that use it skip without it
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch")


@kiln.jit
def _grid_ids(out):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    nz = tl.num_programs(2)
    linear = (z * ny + y) * nx + x
    base = out + linear * 6
    tl.store(base + 0, x)
    tl.store(base + 1, y)
    tl.store(base + 2, z)
    tl.store(base + 3, nx)
    tl.store(base + 4, ny)
    tl.store(base + 5, nz)


def test_program_id_and_num_programs_over_a_3d_grid():
    grid = (3, 2, 2)
    out = np.full((12, 6), -1, np.int32)
    _grid_ids[grid](out)
    expect = [[x, y, z, 3, 2, 2] for z in range(2) for y in range(2) for x in range(3)]
    np.testing.assert_array_equal(out, np.array(expect, np.int32))


@kiln.jit
def _copy(src, dst, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(dst + offs, tl.load(src + offs))


@pytest.mark.parametrize("np_dtype", [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                      np.uint32, np.uint64, np.float16, np.float32, np.float64,
                                      ml_dtypes.bfloat16])
def test_every_dtype_round_trips_through_load_and_store(np_dtype):
    rng = np.random.default_rng(0)
    if np_dtype == np.bool_:
        src = rng.integers(0, 2, 16).astype(np.bool_)
    elif np.dtype(np_dtype).kind in "iu":
        info = np.iinfo(np_dtype)
        src = rng.integers(info.min, info.max, 16, dtype=np_dtype, endpoint=True)
    else:
        src = (rng.standard_normal(16) * 100).astype(np_dtype)
    dst = np.zeros_like(src)
    _copy[(1,)](src, dst, N=16)
    np.testing.assert_array_equal(dst.view(np.uint8), src.view(np.uint8))


# a torch CPU tensor launched on a GPU is Triton's ValueError ('cpu tensor?'): interpreter only
@pytest.mark.interpreter_only
@needs_torch
@pytest.mark.parametrize("tdtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                                    torch.uint8, torch.bool] if torch else [None])
def test_torch_cpu_tensors_are_pointer_arguments(tdtype):
    src = (torch.arange(16) % 3 - 1).to(tdtype)
    dst = torch.zeros(16, dtype=tdtype)
    _copy[(1,)](src, dst, N=16)
    assert torch.equal(src, dst)


@kiln.jit
def _dtype_probe(x_ptr, out_ptr, EXPECT: tl.constexpr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.static_assert(x.dtype == EXPECT)
    tl.static_assert(x_ptr.dtype == tl.pointer_type(EXPECT))
    tl.static_assert(x_ptr.dtype.element_ty == EXPECT)
    tl.static_assert(len(x.shape) == 1)
    tl.static_assert(x.shape[0] == N)
    tl.store(out_ptr + tl.arange(0, N), x)


@pytest.mark.parametrize("np_dtype,expect", [
    (np.int8, tl.int8), (np.int16, tl.int16), (np.int32, tl.int32), (np.int64, tl.int64),
    (np.uint8, tl.uint8), (np.uint16, tl.uint16), (np.uint32, tl.uint32), (np.uint64, tl.uint64),
    (np.float16, tl.float16), (ml_dtypes.bfloat16, tl.bfloat16), (np.float32, tl.float32),
    (np.float64, tl.float64), (np.bool_, tl.int1),
])
def test_pointer_arguments_carry_their_element_dtype(np_dtype, expect):
    x = np.ones(8, np_dtype)
    out = np.zeros(8, np_dtype)
    _dtype_probe[(1,)](x, out, EXPECT=expect, N=8)
    np.testing.assert_array_equal(out, x)


def test_dtype_objects_and_predicates():
    assert tl.float16.primitive_bitwidth == 16 and tl.float16.is_floating()
    assert tl.int8.is_int_signed() and tl.uint8.is_int_unsigned()
    assert tl.int1.is_int() and not tl.float32.is_int()
    assert tl.pointer_type(tl.float32).element_ty == tl.float32
    assert tl.pointer_type(tl.float32).is_ptr()
    assert tl.float32 != tl.float64 and tl.int32 == tl.int32


@kiln.jit
def _tensor_basics(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)
    cols = tl.arange(0, N)
    offs = rows[:, None] * N + cols[None, :]
    tl.static_assert(offs.shape[0] == M and offs.shape[1] == N)
    x = tl.load(x_ptr + offs)
    y = (x * 2 + 1).to(tl.float16)
    tl.static_assert(y.dtype == tl.float16)
    z = -y + x.to(tl.float16) - (y / 4).to(tl.float16)
    tl.store(out_ptr + offs, z)


def test_tensor_operators_to_and_none_indexing():
    x = np.arange(32, dtype=np.float32).reshape(4, 8) / 8
    out = np.zeros((4, 8), np.float16)
    _tensor_basics[(1,)](x, out, M=4, N=8)
    y = (x * 2 + 1).astype(np.float16)
    expect = (-y + x.astype(np.float16)) - (y.astype(np.float32) / 4).astype(np.float16)
    np.testing.assert_array_equal(out, expect)


@kiln.jit
def _pointer_arith(x_ptr, out_ptr):
    p = x_ptr + 6
    p = p - 2
    offs = tl.arange(0, 4)
    tl.store(out_ptr + offs, tl.load(p + offs))
    q = out_ptr + offs
    tl.store(q + 4, tl.load((x_ptr + 1) + offs * 2))


def test_pointer_arithmetic_scales_by_element_size():
    x = np.arange(16, dtype=np.int64) * 10
    out = np.zeros(8, np.int64)
    _pointer_arith[(1,)](x, out)
    np.testing.assert_array_equal(out, [40, 50, 60, 70, 10, 30, 50, 70])


@kiln.jit
def _scalar_args(out_ptr, i, f, b, big, neg):
    tl.store(out_ptr + 0, i.to(tl.float64))
    tl.store(out_ptr + 1, f.to(tl.float64))
    tl.store(out_ptr + 2, b.to(tl.float64))
    tl.store(out_ptr + 3, big.to(tl.float64))
    tl.store(out_ptr + 4, neg.to(tl.float64))
    tl.static_assert(f.dtype == tl.float32)
    tl.static_assert(big.dtype == tl.int64)
    tl.static_assert(b.dtype == tl.int1)


def test_python_scalars_as_runtime_arguments():
    out = np.zeros(5, np.float64)
    _scalar_args[(1,)](out, 7, 0.5, True, 2**40 + 3, -5)
    np.testing.assert_array_equal(out, [7, 0.5, 1, 2**40 + 3, -5])


@kiln.jit
def _constexpr_param(out_ptr, SCALE: tl.constexpr, NAME: tl.constexpr):
    if NAME == "double":
        v = SCALE * 2
    else:
        v = SCALE
    tl.store(out_ptr, v)


def test_constexpr_parameters_specialize_the_kernel():
    out = np.zeros(1, np.int32)
    _constexpr_param[(1,)](out, 21, "double")
    assert out[0] == 42
    _constexpr_param[(1,)](out, 21, "single")
    assert out[0] == 21
    assert len(_constexpr_param.cache) == 2


GLOBAL_BLOCK = tl.constexpr(8)
GLOBAL_SCALE = tl.constexpr(3)  # Triton reads only constexpr globals


@kiln.jit
def _optional_bias(x_ptr, b_ptr, y_ptr, HAS_SCALE: tl.constexpr):
    offs = tl.arange(0, GLOBAL_BLOCK)
    x = tl.load(x_ptr + offs)
    if b_ptr is not None:
        x += tl.load(b_ptr + offs)
    if HAS_SCALE:
        x = x * GLOBAL_SCALE
    tl.store(y_ptr + offs, x)


def test_none_arguments_and_global_constexprs():
    x = np.arange(8, dtype=np.float32)
    b = np.full(8, 10, np.float32)
    y = np.zeros(8, np.float32)
    _optional_bias[(1,)](x, None, y, HAS_SCALE=False)
    np.testing.assert_array_equal(y, x)
    _optional_bias[(1,)](x, b, y, HAS_SCALE=True)
    np.testing.assert_array_equal(y, (x + 10) * 3)
    _optional_bias[(1,)](x_ptr=x, b_ptr=None, y_ptr=y, HAS_SCALE=True)  # all by keyword
    np.testing.assert_array_equal(y, x * 3)


@kiln.jit
def _methods(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = tl.arange(0, M * N)
    x = tl.load(x_ptr + offs).reshape(M, N)
    tl.store(out_ptr + pid * 8 + 0, x.sum(axis=1).sum(axis=0))
    tl.store(out_ptr + pid * 8 + 1, x.trans().reshape(M * N).argmax(0).to(tl.float32))
    tl.store(out_ptr + pid * 8 + 2, x.permute(1, 0).max(axis=0).min(axis=0))
    tl.store(out_ptr + pid * 8 + 3, x.ravel().cumsum(0).max(0))
    tl.store(out_ptr + pid * 8 + 4, x.exp().log().abs().sum())
    tl.store(out_ptr + pid * 8 + 5, tl.sum(x.broadcast_to(M, N) * 0 + x.expand_dims(0).reshape(M, N)))
    tl.store(out_ptr + pid * 8 + 6, x.sigmoid().to(tl.float16).to(tl.float32).max())
    tl.store(out_ptr + pid * 8 + 7, x[None].reshape(M * N).argmin(0).to(tl.float32))


def test_tensor_method_forms():
    x = np.array([3, -1, 4, 1, -5, 9, 2, -6], np.float32)
    out = np.zeros(16, np.float32)
    _methods[(2,)](x, out, M=2, N=4)
    m = x.reshape(2, 4)
    ref = [x.sum(), float(np.argmax(m.T.ravel())), m.T.max(axis=0).min(), np.cumsum(x).max(), np.abs(x).sum(),
           2 * x.sum() / 2, np.float16(1 / (1 + np.exp(-x.max()))), float(np.argmin(x))]
    np.testing.assert_allclose(out[:8], ref, rtol=1e-5)
    np.testing.assert_allclose(out[8:], ref, rtol=1e-5)


@kiln.jit
def _layer_norm_row(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    _mean = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        a = tl.load(x_ptr + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_ptr + cols, y, mask=mask)


def test_tutorial_style_layer_norm_with_pointer_augassign():
    rng = np.random.default_rng(3)
    M, N = 3, 37
    x = rng.standard_normal((M, N)).astype(np.float16)
    w = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    y = np.zeros((M, N), np.float16)
    mean = np.zeros(M, np.float32)
    rstd = np.zeros(M, np.float32)
    _layer_norm_row[(M,)](x, y, w, b, mean, rstd, N, N, 1e-5, BLOCK=16)
    xf = x.astype(np.float64)
    mu = xf.mean(1)
    sd = 1 / np.sqrt(xf.var(1) + 1e-5)
    np.testing.assert_allclose(mean, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, sd, rtol=1e-4)
    np.testing.assert_allclose(y.astype(np.float64), (xf - mu[:, None]) * sd[:, None] * w + b, rtol=1e-2, atol=1e-2)


@kiln.jit
def _online_softmax(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    m_i = tl.zeros([1], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([1], dtype=tl.float32)
    lo, hi = 0, N
    for start in range(lo, hi, BLOCK):
        start = tl.multiple_of(start, BLOCK)
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < N, other=-float("inf"))
        m_new = tl.maximum(m_i, tl.max(x, 0))
        l_i = l_i * tl.math.exp2((m_i - m_new) * 1.44269504) + tl.sum(tl.exp(x - m_new), 0)
        m_i = m_new
    for start in range(lo, hi, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.0)
        tl.store(y_ptr + cols, tl.exp(x - m_i) / l_i, mask=cols < N)


def test_attention_style_online_softmax():
    x = np.random.default_rng(4).standard_normal(45).astype(np.float32) * 3
    y = np.zeros(45, np.float32)
    _online_softmax[(1,)](x, y, 45, BLOCK=16)
    e = np.exp(x - x.max())
    np.testing.assert_allclose(y, e / e.sum(), rtol=1e-5, atol=1e-7)
