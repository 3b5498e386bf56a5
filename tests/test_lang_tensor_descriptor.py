"""Conformance: device-side tensor descriptors (tl.make_tensor_descriptor), interpreter vs NumPy."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.errors import CompilationError

RNG = np.random.default_rng(3)


@kiln.jit
def _abs_plus_one(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(y_ptr, [M, N], [N, 1], [BM, BN])
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    dst.store([m, n], tl.abs(src.load([m, n])) + 1)


def test_load_and_store_blocks_across_ragged_edges():
    m, n = 10, 20  # not multiples of the block: the edge blocks are partly outside
    x = RNG.standard_normal((m, n)).astype(np.float32)
    y = np.full_like(x, -7.0)
    _abs_plus_one[(3, 3)](x, y, m, n, BM=4, BN=8)
    np.testing.assert_array_equal(y, np.abs(x) + 1)


@kiln.jit
def _edge_block(x_ptr, out_ptr, M, N, PADDING: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [4, 8], padding_option=PADDING)
    block = tl.load_tensor_descriptor(desc, [M - 2, N - 4])
    offs = tl.arange(0, 4)[:, None] * 8 + tl.arange(0, 8)[None, :]
    tl.store(out_ptr + offs, block)


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_out_of_bounds_elements_read_as_the_padding(padding):
    x = RNG.standard_normal((6, 12)).astype(np.float32)
    out = np.zeros((4, 8), np.float32)
    _edge_block[(1,)](x, out, 6, 12, PADDING=padding)
    want = np.full((4, 8), 0.0 if padding == "zero" else np.nan, np.float32)
    want[:2, :4] = x[4:, 8:]
    np.testing.assert_array_equal(out, want)


@kiln.jit
def _accumulate_rows(x_ptr, acc_ptr, N, BN: tl.constexpr):
    """Adds each 1 x BN block of x into row 0 of acc via a loop over a descriptor and atomics."""
    x = tl.make_tensor_descriptor(x_ptr, [4, N], [N, 1], [1, BN])
    acc = tl.make_tensor_descriptor(acc_ptr, [1, N], [N, 1], [1, BN])
    col = tl.program_id(0) * BN
    total = tl.zeros((1, BN), tl.float32)
    for row in range(4):
        total += x.load([row, col])
    acc.atomic_add([0, col], total)


def test_descriptor_in_a_loop_and_atomic_add():
    x = RNG.standard_normal((4, 32)).astype(np.float32)
    acc = np.ones((1, 32), np.float32)
    _accumulate_rows[(2,)](x, acc, 32, BN=16)
    np.testing.assert_allclose(acc[0], 1 + x.sum(axis=0), rtol=1e-6)


@kiln.jit
def _reduce_into(out_ptr, x_ptr, KIND: tl.constexpr):
    desc = tl.make_tensor_descriptor(out_ptr, [2, 8], [8, 1], [2, 8])
    x = tl.load(x_ptr + tl.arange(0, 2)[:, None] * 8 + tl.arange(0, 8)[None, :])
    if KIND == "min":
        desc.atomic_min([0, 0], x)
    elif KIND == "xor":
        desc.atomic_xor([0, 0], x)
    else:
        desc.atomic_add([0, 0], x)


@pytest.mark.parametrize("kind, dtype, takes", [("min", np.int64, True), ("xor", np.uint32, True), ("add", np.int32, True),
                                                ("min", np.float16, True), ("min", np.float32, False),
                                                ("xor", np.float32, False), ("add", np.int64, False)])
def test_descriptor_reductions_take_the_elements_tritons_take(kind, dtype, takes):
    x = np.arange(16, dtype=dtype).reshape(2, 8)
    out = np.full((2, 8), 5, dtype)
    if not takes:
        with pytest.raises(CompilationError, match=f"atomic_{kind} does not take"):
            _reduce_into[(1,)](out, x, KIND=kind)
        return
    _reduce_into[(1,)](out, x, KIND=kind)
    want = {"min": lambda: np.minimum(x, 5), "xor": lambda: x ^ dtype(5), "add": lambda: x + 5}[kind]()
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("kind", ["min", "max"])
def test_half_descriptor_min_and_max_are_compare_and_swap_loops(kind):
    """fp16 and bf16 min/max, which a descriptor's reduction takes (Hopper's TMA reduces do) and a pointer atomic
    does not: a compare-and-swap of the 32-bit word around `min.f16` / `max.bf16`."""
    import re
    half = np.zeros((2, 8), np.float16)
    for dtype, suffix in (("fp16", "f16"), ("bf16", "bf16")):
        k = _reduce_half.warmup(half, half, KIND=kind, DTYPE=dtype, grid=(1,), target="sm_90a")
        ptx = k.asm["ptx"]
        assert f"{kind}.{suffix} " in ptx and re.search(r"atom\.[a-z_.]*global\.cas\.b32", ptx)
    with pytest.raises(CompilationError, match=f"atomic_{kind} does not support fp16"):
        _pointer_half.warmup(half, half, KIND=kind, grid=(1,), target="sm_90a")


@kiln.jit
def _reduce_half(out_ptr, x_ptr, KIND: tl.constexpr, DTYPE: tl.constexpr):
    elem = tl.float16 if DTYPE == "fp16" else tl.bfloat16
    out = out_ptr.to(tl.pointer_type(elem), bitcast=True)
    desc = tl.make_tensor_descriptor(out, [2, 8], [8, 1], [2, 8])
    x = tl.load(x_ptr + tl.arange(0, 2)[:, None] * 8 + tl.arange(0, 8)[None, :]).to(elem)
    if KIND == "min":
        desc.atomic_min([0, 0], x)
    else:
        desc.atomic_max([0, 0], x)


@kiln.jit
def _pointer_half(out_ptr, x_ptr, KIND: tl.constexpr):
    offs = tl.arange(0, 8)
    if KIND == "min":
        tl.atomic_min(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        tl.atomic_max(out_ptr + offs, tl.load(x_ptr + offs))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_descriptor_min_and_max_match_torch_on_the_gpu(kind, dtype, cuda_torch):
    torch = cuda_torch
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(2, 8, device="cuda", generator=gen).to(getattr(torch, dtype))
    out = torch.randn(2, 8, device="cuda", generator=gen).to(getattr(torch, dtype))
    want = (torch.minimum if kind == "min" else torch.maximum)(out, x)
    _reduce_half[(1,)](out, x, KIND=kind, DTYPE="fp16" if dtype == "float16" else "bf16")
    torch.cuda.synchronize()
    assert torch.equal(out, want)


@kiln.jit
def _gather_rows(x_ptr, rows_ptr, out_ptr, M, N):
    desc = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [1, 8])
    rows = tl.load(rows_ptr + tl.arange(0, 4))
    block = desc.gather(rows, 4)
    tl.store(out_ptr + tl.arange(0, 4)[:, None] * 8 + tl.arange(0, 8)[None, :], block)


def test_gather_rows_zero_fills_outside():
    x = RNG.standard_normal((5, 10)).astype(np.float32)
    rows = np.array([3, 0, 7, 4], np.int32)  # row 7 is outside; columns 4..11 pass the end at 10
    out = np.full((4, 8), -1.0, np.float32)
    _gather_rows[(1,)](x, rows, out, 5, 10)
    padded = np.zeros((8, 12), np.float32)
    padded[:5, :10] = x
    np.testing.assert_array_equal(out, padded[rows, 4:12])


@kiln.jit
def _narrow_block(x_ptr, N):
    desc = tl.make_tensor_descriptor(x_ptr, [N], [1], [2])
    desc.store([0], desc.load([0]))


@pytest.mark.interpreter_only
def test_block_narrower_than_16_bytes_is_refused():
    with pytest.raises(CompilationError, match="at least 16 bytes"):
        _narrow_block[(1,)](np.zeros(8, np.float32), 8)


@kiln.jit
def _strided_last(x_ptr, N):
    desc = tl.make_tensor_descriptor(x_ptr, [N, N], [1, 2], [8, 8])
    desc.store([0, 0], desc.load([0, 0]))


@pytest.mark.interpreter_only
def test_last_dimension_must_be_contiguous():
    with pytest.raises(CompilationError, match="contiguous"):
        _strided_last[(1,)](np.zeros(64, np.float32), 8)


@kiln.jit
def _double_through_host_descriptors(x_desc, y_desc, BM: tl.constexpr, BN: tl.constexpr):
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    y_desc.store([m, n], x_desc.load([m, n]) * 2)


def test_host_tensor_descriptor_arguments():
    from kiln.tools.tensor_descriptor import TensorDescriptor
    storage = np.zeros((10, 32), np.float32)  # a 10 x 20 view of a wider buffer
    storage[:, :20] = RNG.standard_normal((10, 20))
    x_desc = TensorDescriptor(storage, shape=[10, 20], strides=[32, 1], block_shape=[4, 8])
    y = np.full((10, 20), -1.0, np.float32)
    y_desc = TensorDescriptor.from_tensor(y, block_shape=[4, 8])
    assert y_desc.strides == [20, 1] and y_desc.shape == [10, 20]
    _double_through_host_descriptors[(3, 3)](x_desc, y_desc, BM=4, BN=8)
    np.testing.assert_array_equal(y, 2 * storage[:, :20])


@pytest.mark.interpreter_only
@kiln.jit
def _store_through_a_descriptor_made_from_another(x_desc, y_ptr, BM: tl.constexpr, BN: tl.constexpr):
    # triton_kernels' persistent matmul: its output's descriptor from the argument's shape and strides
    y_desc = tl.make_tensor_descriptor(y_ptr, x_desc.shape, x_desc.strides[:-1] + (1,), x_desc.block_shape)
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    y_desc.store([m, n], x_desc.load([m, n]) + 1)


def test_a_descriptors_shape_and_strides_are_tuples():
    """As Triton's: sliced and added to, they give another descriptor's (a list's `+ (1,)` failed)."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    y = np.zeros_like(x)
    kiln.set_allocator(lambda size, align, stream: np.zeros(size, np.int8))
    _store_through_a_descriptor_made_from_another[(2, 2)](TensorDescriptor.from_tensor(x, block_shape=[4, 8]), y,
                                                           BM=4, BN=8)
    np.testing.assert_array_equal(y, x + 1)


def test_host_tensor_descriptor_checks_its_layout():
    """Triton's exception types and the phrases its users match: AssertionError for the layout,
    ValueError for a block size that is not a power of two."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    with pytest.raises(AssertionError, match="Last dimension must be contiguous"):
        TensorDescriptor(np.zeros((8, 8), np.float32), [8, 4], [8, 2], [8, 4])
    with pytest.raises(AssertionError, match="strides must be 16-byte aligned"):
        TensorDescriptor(np.zeros((8, 8), np.float32), [8, 3], [3, 1], [8, 4])
    with pytest.raises(ValueError, match="Shape element 1 must be a power of 2"):
        TensorDescriptor.from_tensor(np.zeros((8, 8), np.float32), [8, 6])
    with pytest.raises(AssertionError, match="shape must be positive"):
        TensorDescriptor.from_tensor(np.zeros((0, 8), np.float32), [8, 8])
    with pytest.raises(AssertionError, match="rank mismatch"):
        TensorDescriptor(np.zeros((8, 8), np.float32), [8, 8], [8, 1], [8])
    with pytest.raises(AssertionError, match="Illegal value for padding"):
        TensorDescriptor.from_tensor(np.zeros((8, 8), np.float32), [8, 8], padding="inf")
    with pytest.raises(AssertionError, match="padding='nan'"):
        TensorDescriptor.from_tensor(np.zeros((8, 8), np.int32), [8, 8], padding="nan")


def test_set_allocator_names_who_provides_global_scratch():
    """Triton's API: the allocator provides the global scratch in which a kernel writes the TMA
    maps of its descriptors (kiln.runtime.scratch); None goes back to kiln's own; memory that
    is not GPU memory is refused with the allocator named."""
    from kiln.runtime import scratch
    kiln.set_allocator(lambda size, alignment, stream: None)
    try:
        with pytest.raises(ValueError, match="kiln.set_allocator"):
            scratch.take(256, None)
    finally:
        kiln.set_allocator(None)
    assert scratch._allocator is None
    with pytest.raises(TypeError):
        kiln.set_allocator(42)


@kiln.jit
def _matmul_through_host_descriptors(a_desc, b_desc, c_ptr, M, N, K, B_TRANSPOSED: tl.constexpr,
                                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([m, k])
        b = b_desc.load([n, k]).T if B_TRANSPOSED else b_desc.load([k, n])
        acc = tl.dot(a, b, acc)
    rows, cols = m + tl.arange(0, BM), n + tl.arange(0, BN)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@pytest.mark.parametrize("b_transposed", [False, True])
def test_matmul_loop_through_host_descriptors_with_ragged_edges(b_transposed):
    """A pipelined dot loop fed by host descriptors (on Hopper: TMA copies into the wgmma
    rings, one box per 64 fp16 columns of a 128-wide B tile); M, N and K not multiples of
    the blocks, so the last boxes reach past the tensor and must read as zeros."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    M, N, K, BM, BN, BK = 200, 136, 72, 64, 128, 32
    a = RNG.standard_normal((M, K)).astype(np.float16)
    b = RNG.standard_normal((K, N)).astype(np.float16)
    b_stored = np.ascontiguousarray(b.T) if b_transposed else b
    c = np.zeros((M, N), np.float32)
    b_block = [BN, BK] if b_transposed else [BK, BN]
    _matmul_through_host_descriptors[(triton_cdiv(M, BM), triton_cdiv(N, BN))](
        TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b_stored, b_block), c, M, N, K,
        B_TRANSPOSED=b_transposed, BM=BM, BN=BN, BK=BK, num_warps=4, num_stages=3)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)


@kiln.jit
def _matmul_through_device_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, B_TRANSPOSED: tl.constexpr, PERSISTENT: tl.constexpr,
                                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Tutorial 09's descriptor matmul: descriptors made in the kernel from its arguments
    (on Hopper kiln proves their loads read TMA boxes of the argument matrices and copies
    them so), over the tiles one per program or, persistent, every program striding them."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    if B_TRANSPOSED:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tiles_n = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * tiles_n
    first, step = (tl.program_id(0), tl.num_programs(0)) if PERSISTENT else (tl.program_id(0), tiles)
    for tile in range(first, tiles, step):
        m, n = tile // tiles_n * BM, tile % tiles_n * BN
        acc = tl.zeros([BM, BN], tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = a_desc.load([m, k * BK])
            b = b_desc.load([n, k * BK]).T if B_TRANSPOSED else b_desc.load([k * BK, n])
            acc = tl.dot(a, b, acc)
        c_desc.store([m, n], acc)


@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("M, N, K", [(200, 136, 72), (128, 256, 40), (64, 128, 64)])
def test_matmul_loop_through_device_descriptors(M, N, K, persistent, b_transposed):
    """M, N and K not multiples of the blocks (the last boxes read zeros past the tensor;
    K = 40 is less than two k-steps); the persistent form runs fewer programs than tiles.
    (A descriptor's rows must be 16 bytes apart, as Triton requires: K = 100 would be an
    invalid descriptor.)"""
    BM, BN, BK = 64, 128, 32
    a = RNG.standard_normal((M, K)).astype(np.float16)
    b = RNG.standard_normal((K, N)).astype(np.float16)
    b_stored = np.ascontiguousarray(b.T) if b_transposed else b
    c = np.zeros((M, N), np.float32)
    tiles = triton_cdiv(M, BM) * triton_cdiv(N, BN)
    _matmul_through_device_descriptors[(max(1, tiles // 2) if persistent else tiles,)](
        a, b_stored, c, M, N, K, B_TRANSPOSED=b_transposed, PERSISTENT=persistent, BM=BM, BN=BN, BK=BK,
        num_warps=4, num_stages=3)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)


def triton_cdiv(a, b):
    return -(-a // b)


@kiln.jit
def _grouped_matmul_device_descriptors(pool, offsets, sizes, n_groups, NUM_PROGRAMS: tl.constexpr,
                                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C_g = A_g @ B_g^T for each group g, every size, leading dim and matrix offset read from
    memory (the shape of Triton's tutorial 08 TMA kernel): the programs walk the groups' tiles
    in turn, each tile's K loop loading through descriptors made in the kernel."""
    tile = tl.program_id(0)
    first = 0  # the first tile of group g
    for g in range(n_groups):
        gm, gn, gk = tl.load(sizes + 6 * g), tl.load(sizes + 6 * g + 1), tl.load(sizes + 6 * g + 2)
        n_tiles_n = tl.cdiv(gn, BN)
        n_tiles = tl.cdiv(gm, BM) * n_tiles_n
        if tile >= first and tile < first + n_tiles:
            lda, ldb, ldc = tl.load(sizes + 6 * g + 3), tl.load(sizes + 6 * g + 4), tl.load(sizes + 6 * g + 5)
            a = tl.make_tensor_descriptor(pool + tl.load(offsets + 3 * g), shape=[gm, gk], strides=[lda, 1],
                                          block_shape=[BM, BK])
            b = tl.make_tensor_descriptor(pool + tl.load(offsets + 3 * g + 1), shape=[gn, gk], strides=[ldb, 1],
                                          block_shape=[BN, BK])
            c = tl.make_tensor_descriptor(pool + tl.load(offsets + 3 * g + 2), shape=[gm, gn], strides=[ldc, 1],
                                          block_shape=[BM, BN])
            while tile >= first and tile < first + n_tiles:
                m = (tile - first) // n_tiles_n * BM
                n = (tile - first) % n_tiles_n * BN
                acc = tl.zeros((BM, BN), dtype=tl.float32)
                for kk in range(0, tl.cdiv(gk, BK)):
                    acc += tl.dot(a.load([m, kk * BK]), b.load([n, kk * BK]).T)
                c.store([m, n], acc.to(tl.float16))
                tile += NUM_PROGRAMS
        first += n_tiles


def grouped_problems(shapes, rng):
    """The (M, N, K) problems' A (M x K), B (N x K) and C (M x N) in one fp16 pool, as
    `_grouped_matmul_device_descriptors` reads them: (pool, offsets, sizes, [(a, b, c)]).
    Rows are padded to 16 bytes (a descriptor's strides must be) and the padding is NaN: a
    K edge that read past K would show."""
    def padded(n):
        return -(-n // 8) * 8

    blocks, offsets, sizes, at = [], [], [], 0
    for M, N, K in shapes:
        for rows, cols, random in ((M, K, True), (N, K, True), (M, N, False)):
            block = np.full((rows, padded(cols)), np.nan, np.float16)
            block[:, :cols] = rng.standard_normal((rows, cols)) if random else 0
            blocks.append((at, block, cols))
            offsets.append(at)
            at += padded(block.size)  # each matrix 16-byte aligned
        sizes += [M, N, K, padded(K), padded(K), padded(N)]
    pool = np.zeros(at, np.float16)
    views = []
    for start, block, cols in blocks:
        view = pool[start:start + block.size].reshape(block.shape)
        view[...] = block
        views.append(view[:, :cols])
    return pool, np.array(offsets, np.int64), np.array(sizes, np.int32), [views[i:i + 3] for i in range(0, len(views), 3)]


def test_grouped_matmul_through_device_descriptors_with_ragged_k():
    """K = 100 and 77 (not multiples of the 64-wide K block, nor of 16 bytes): on Hopper the K
    edge's columns come by 16-byte cp.async copies that zero-fill past K (src-size), the
    columns past K being NaN in memory; M and N ragged too."""
    shapes = [(200, 136, 100), (64, 256, 77), (130, 70, 64)]
    pool, offsets, sizes, views = grouped_problems(shapes, np.random.default_rng(8))
    _grouped_matmul_device_descriptors[(4,)](pool, offsets, sizes, len(shapes), NUM_PROGRAMS=4, BM=128, BN=128,
                                             BK=64, num_warps=4, num_stages=3)
    for a, b, c in views:
        np.testing.assert_allclose(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32).T,
                                   rtol=1e-2, atol=5e-2)
