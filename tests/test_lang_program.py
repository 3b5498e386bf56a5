"""Conformance: the program model, dtypes, pointer types and tensor basics (interpreter vs NumPy)."""
import ml_dtypes
import numpy as np
import pytest
import torch

import kiln
import kiln.language as tl


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


@pytest.mark.parametrize("tdtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                                    torch.uint8, torch.bool])
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
