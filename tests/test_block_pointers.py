"""Block pointers and structured loop-carried values (tuples), run in the interpreter."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def tile_copy(src, dst, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    src_block = tl.make_block_ptr(src, shape=(M, N), strides=(stride_m, 1), offsets=(pid_m * BM, pid_n * BN),
                                  block_shape=(BM, BN), order=(1, 0))
    dst_block = tl.make_block_ptr(dst, shape=(M, N), strides=(N, 1), offsets=(pid_m * BM, pid_n * BN),
                                  block_shape=(BM, BN), order=(1, 0))
    tile = tl.load(src_block, boundary_check=(0, 1), padding_option="zero")
    tl.store(dst_block, tile * 2, boundary_check=(0, 1))


def test_block_pointer_load_store_with_boundary_checks():
    M, N = 37, 21
    big = np.arange(M * 32, dtype=np.float32).reshape(M, 32)
    src = big[:, :N]  # strided rows
    dst = np.full((M, N), -1, np.float32)
    tile_copy[(kiln.cdiv(M, 16), kiln.cdiv(N, 8))](big, dst, M, N, 32, BM=16, BN=8)
    np.testing.assert_array_equal(dst, src * 2)


@kiln.jit
def row_sums(src, out, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    block = tl.make_block_ptr(src, shape=(M, N), strides=(N, 1), offsets=(pid * BM, 0), block_shape=(BM, BN),
                              order=(1, 0))
    acc = tl.zeros((BM,), tl.float32)
    for _ in range(0, N, BN):
        acc += tl.sum(tl.load(block, boundary_check=(0, 1)), axis=1)
        block = tl.advance(block, (0, BN))  # the block pointer is carried by the loop
    rows = pid * BM + tl.arange(0, BM)
    tl.store(out + rows, acc, mask=rows < M)


def test_advance_in_a_loop_carries_the_block_pointer():
    M, N = 19, 45
    x = np.random.default_rng(0).standard_normal((M, N)).astype(np.float32)
    out = np.zeros(M, np.float32)
    row_sums[(kiln.cdiv(M, 8),)](x, out, M, N, BM=8, BN=16)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5, atol=1e-5)


@kiln.jit
def nan_padding(src, out, n, B: tl.constexpr):
    block = tl.make_block_ptr(src, shape=(n,), strides=(1,), offsets=(0,), block_shape=(B,), order=(0,))
    tl.store(out + tl.arange(0, B), tl.load(block, boundary_check=(0,), padding_option="nan"))


def test_nan_padding():
    src = np.arange(5, dtype=np.float32)
    out = np.zeros(8, np.float32)
    nan_padding[(1,)](src, out, 5, B=8)
    np.testing.assert_array_equal(out[:5], src)
    assert np.isnan(out[5:]).all()


@kiln.jit
def fibonacci_pairs(out, n):
    pair = (tl.full((4,), 0, tl.int32), tl.full((4,), 1, tl.int32))
    for _ in range(n):
        a, b = pair
        pair = (b, a + b)
    tl.store(out + tl.arange(0, 4), pair[0])


def test_tuples_are_carried_by_loops():
    out = np.zeros(4, np.int32)
    fibonacci_pairs[(1,)](out, 10)
    np.testing.assert_array_equal(out, [55] * 4)


@kiln.jit
def pick(flag):
    if flag > 0:
        return flag * 2, flag + 1.0
    else:
        return flag * 3, flag - 1.0


@kiln.jit
def tuple_from_runtime_if(out_i, out_f, flag):
    i, f = pick(flag)
    tl.store(out_i, i)
    tl.store(out_f, f)


@pytest.mark.parametrize("flag, expected", [(4, (8, 5.0)), (-2, (-6, -3.0))])
def test_both_branches_may_return_tuples(flag, expected):
    out_i, out_f = np.zeros(1, np.int32), np.zeros(1, np.float32)
    tuple_from_runtime_if[(1,)](out_i, out_f, flag)
    assert (out_i[0], out_f[0]) == expected


@kiln.jit
def mismatched_tuple(out, n):
    pair = (tl.zeros((4,), tl.int32), tl.zeros((4,), tl.int32))
    for _ in range(n):
        pair = (pair[0], pair[1].to(tl.float32))
    tl.store(out + tl.arange(0, 4), pair[0])


def test_tuple_leaf_type_change_is_a_compilation_error():
    with pytest.raises(kiln.CompilationError, match="loop-carried variable 'pair'"):
        mismatched_tuple[(1,)](np.zeros(4, np.int32), 3)


def test_mask_on_a_block_pointer_is_rejected():
    @kiln.jit
    def bad(src):
        block = tl.make_block_ptr(src, shape=(4,), strides=(1,), offsets=(0,), block_shape=(4,), order=(0,))
        tl.load(block, mask=tl.arange(0, 4) < 2)
    with pytest.raises(kiln.CompilationError, match="boundary_check"):
        bad[(1,)](np.zeros(4, np.float32))


@kiln.jit
def doubled_into_the_output_type(src, dst, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    src_block = tl.make_block_ptr(src, (N,), (1,), (pid * BLOCK,), (BLOCK,), (0,))
    dst_block = tl.make_block_ptr(dst, (N,), (1,), (pid * BLOCK,), (BLOCK,), (0,))
    tl.static_assert(dst_block.type.is_ptr() and not dst_block.type.is_block())
    tl.static_assert(dst_block.dtype.element_ty.element_ty == dst.dtype.element_ty)
    x = tl.load(src_block, boundary_check=(0,))
    # FlagGems' pointwise kernels: the pointee of a block pointer is a block, whose element a cast takes
    tl.store(dst_block, (x * 2).to(dst_block.type.element_ty), boundary_check=(0,))


def test_a_block_pointer_s_type_points_to_its_block():
    x = np.random.default_rng(1).standard_normal(100).astype(np.float32)
    out = np.zeros(100, np.float16)
    doubled_into_the_output_type[(2,)](x, out, 100, BLOCK=64)
    np.testing.assert_array_equal(out, (x * 2).astype(np.float16))
