"""TMA maps a kernel makes itself (`tensormap_create`): device-side tensor descriptors whose
base, extents or stride are no kernel arguments (tutorial 08 reads them from memory, tutorial
06 multiplies its rows out), and descriptor stores by TMA (`tma_store`), on a CPU (IR, PTX,
metadata, launcher) and on the GPU against PyTorch."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.cache.metadata import MetadataError, checked, parse_global_scratch
from kiln.codegen import compile as compile_ir
from kiln.codegen.passes import descriptor_loads, pointer_tma
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify


@kiln.jit
def _grouped_matmul(a_ptrs, b_ptrs, c_ptrs, sizes, n_groups, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr):
    """C_g = A_g @ B_g^T for every group g, the groups' matrices and sizes read from memory;
    the programs walk all groups' tiles, NUM_PROGRAMS apart (tutorial 08's shape)."""
    tile = tl.program_id(0)
    seen = 0
    for g in range(n_groups):
        M = tl.load(sizes + 3 * g)
        N = tl.load(sizes + 3 * g + 1)
        K = tl.load(sizes + 3 * g + 2)
        tiles_n = tl.cdiv(N, BN)
        tiles = tl.cdiv(M, BM) * tiles_n
        if tile >= seen and tile < seen + tiles:
            a = tl.make_tensor_descriptor(tl.load(a_ptrs + g).to(tl.pointer_type(tl.float16)), [M, K], [K, 1],
                                          [BM, BK])
            b = tl.make_tensor_descriptor(tl.load(b_ptrs + g).to(tl.pointer_type(tl.float16)), [N, K], [K, 1],
                                          [BN, BK])
            c = tl.make_tensor_descriptor(tl.load(c_ptrs + g).to(tl.pointer_type(tl.float16)), [M, N], [N, 1],
                                          [BM, BN])
            while tile >= seen and tile < seen + tiles:
                m = (tile - seen) // tiles_n * BM
                n = (tile - seen) % tiles_n * BN
                acc = tl.zeros((BM, BN), dtype=tl.float32)
                for k in range(tl.cdiv(K, BK)):
                    acc = tl.dot(a.load([m, k * BK]), b.load([n, k * BK]).T, acc)
                c.store([m, n], acc.to(tl.float16))
                tile += tl.num_programs(0)
        seen += tiles


def _build(target="sm_90a", num_warps=8):
    p, s = np.zeros(4, np.int64), np.zeros(12, np.int32)
    return _grouped_matmul.warmup(p, p, p, s, 4, BM=128, BN=128, BK=64, num_warps=num_warps, num_stages=3,
                                  grid=(1,), target=target)


def _source_ir():
    """The frontend's IR of `_grouped_matmul` (before codegen's passes)."""
    ir = _build().ir
    return parse_function(ir if isinstance(ir, str) else print_function(ir))


def test_descriptors_read_from_memory_are_copied_by_tma_on_maps_the_kernel_makes():
    k = _build()
    ptx = k.asm["ptx"]
    assert "cp.async.bulk.tensor.2d" in ptx and "cp.async.cg" not in ptx and "wgmma.mma_async" in ptx
    # A's map, B's and C's, each zero-filled and written field by field in shared memory, then copied to global
    # memory releasing it to the tensormap proxy (as Triton does), and acquired there
    assert ptx.count("tensormap.replace.tile.global_address.shared::cta") == 3
    assert ptx.count("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned") == 3
    assert ptx.count("fence.proxy.tensormap::generic.acquire.gpu") == 3
    assert ".version 8.3" in ptx  # tensormap.replace's PTX ISA
    # C's tile leaves by TMA stores (two 64-column boxes), the pointer store kept for negative starts
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 2
    # its tile written by stmatrix: each thread's share of it, 8 elements an instruction
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 128 * 128 // k.metadata["threads"] // 8
    assert "cp.async.bulk.wait_group.read 0" in ptx
    assert k.n_spills == 0
    scratch = [a for a in k.metadata["args"] if "global_scratch" in a]
    assert len(scratch) == 1 and scratch[0]["global_scratch"] == "384" and scratch[0]["type"] == "ptr<int8>"


def test_the_maps_are_made_once_per_group_not_once_per_tile():
    """The creates go as far out as their operands allow: out of the tile loop (`while`),
    not out of the `if` whose ops load the matrices' addresses."""
    kir = compile_ir(_source_ir(), "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False).kir
    creates = [i for i, line in enumerate(kir.splitlines()) if "tensormap_create" in line]
    loop = next(i for i, line in enumerate(kir.splitlines()) if " while " in f" {line} " or "= while" in line)
    assert len(creates) == 3 and max(creates) < loop
    assert 'box = [64, 128, 128]' in kir  # inner elements, rows, swizzle bytes (smem_pipeline's)


def test_other_targets_keep_the_pointer_loads():
    k = _build(target="sm_80")
    assert "tensormap" not in k.asm["ptx"] and all("global_scratch" not in a for a in k.metadata["args"])


def test_a_map_no_ring_reads_is_dropped_with_the_scratch():
    """pointer_tma alone makes the maps; descriptor_loads (no ring between) drops them and
    the scratch argument."""
    fn = _source_ir()
    ctx = PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3)
    pointer_tma.apply(fn, ctx)
    text = print_function(fn, locs=False)
    assert text.count("tensormap_create") == 2 and "global_scratch" in text
    verify(parse_function(text))
    descriptor_loads.apply(fn, ctx)
    out = print_function(fn, locs=False)
    assert "tensormap" not in out and "global_scratch" not in out
    verify(fn)


def test_an_unhinted_stride_read_from_memory_keeps_its_pointers():
    """Only a descriptor promises a 16-byte multiple stride; a pointer load whose row stride
    is read from memory (no hint) gets no map."""
    x = np.zeros((64, 64), np.float16)
    k = _loaded_stride.warmup(x, np.zeros(1, np.int32), x, np.zeros((64, 64), np.float32), 4096, BM=128, BN=64,
                              BK=64, num_warps=4, num_stages=3, grid=(1,), target="sm_90a")
    assert "tensormap.replace" not in k.asm["ptx"] and "cp.async.bulk" not in k.asm["ptx"]
    assert all("global_scratch" not in a for a in k.metadata["args"])


@kiln.jit
def _loaded_stride(a_ptr, strides, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    stride = tl.load(strides)
    rows, cols, ks = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * stride + (k + ks)[None, :], mask=(k + ks)[None, :] < K, other=0.0)
        b = tl.load(b_ptr + (k + ks)[:, None] * BN + cols[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * BN + cols[None, :], acc)


def test_metadata_names_the_scratch_in_whole_maps():
    assert parse_global_scratch("256") == 256 and parse_global_scratch(None) is None
    for bad in ("100", "-128", "x", "1" * 9, 128):
        with pytest.raises(MetadataError):
            parse_global_scratch(bad)
    meta = dict(_build().metadata)
    meta["args"] = [dict(a, global_scratch="130") if "global_scratch" in a else a for a in meta["args"]]
    with pytest.raises(MetadataError):
        checked(meta)


def test_the_launcher_asks_for_scratch_per_cta_and_hands_it_back(monkeypatch):
    """Without a GPU: the generated launch takes ctas x 256 bytes for the launch and gives
    them back after it, through the allocator set with kiln.set_allocator."""
    from kiln.runtime import launcher, scratch
    calls = []

    class Buffer:
        def __init__(self, n):
            self.n = n

        def data_ptr(self):
            return 4096 * 128

    def allocator(size, alignment, stream):
        calls.append((size, alignment, stream))
        return Buffer(size)

    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: (lambda *a: calls.append(("launch", a[1])) or 0))

    class Kernel:
        handle = 1
    from kiln.ir.types import int32, int64, pointer_type
    kiln.set_allocator(allocator)
    try:
        launch = launcher.make_launcher(Kernel(), [pointer_type(int64), int32], 8, 1024, "k", derived=[("scratch", 256)])
        launch((6, 2, 1), [0, 3], 7)
    finally:
        kiln.set_allocator(None)
    assert calls == [(6 * 2 * 256, 128, 7), ("launch", 6)]
    assert scratch._allocator is None


# --- on the GPU ---------------------------------------------------------------------------

def _gpu_torch():
    """torch, where a Hopper GPU runs these tests (maps made in the kernel are sm_90a code)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("maps made in the kernel are sm_90a code")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("allocator", ["torch", "kiln"])
def test_grouped_matmul_on_maps_the_kernel_makes_matches_torch(allocator, monkeypatch):
    torch = _gpu_torch()
    monkeypatch.setenv("KILN_INTERPRET", "0")
    # edges on every dim, K not a multiple of BK, and an empty K (a map made, never read)
    shapes = [(256, 256, 512), (200, 72, 136), (128, 384, 64), (64, 64, 0)]
    gen = torch.Generator(device="cuda").manual_seed(0)
    A = [torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen) for m, _, k in shapes]
    B = [torch.randn(n, k, device="cuda", dtype=torch.float16, generator=gen) for _, n, k in shapes]
    C = [torch.full((m, n), 7.0, device="cuda", dtype=torch.float16) for m, n, _ in shapes]
    ptrs = [torch.tensor([t.data_ptr() for t in ts], device="cuda", dtype=torch.int64) for ts in (A, B, C)]
    sizes = torch.tensor([v for s in shapes for v in s], device="cuda", dtype=torch.int32)
    if allocator == "torch":
        kiln.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    try:
        tiles = sum(-(-m // 128) * -(-n // 128) for m, n, _ in shapes)
        for programs in (tiles, 5):  # a program per tile; five programs walking them all
            for c in C:
                c.fill_(7.0)
            _grouped_matmul[(programs,)](*ptrs, sizes, len(shapes), BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
            torch.cuda.synchronize()
            for a, b, c in zip(A, B, C):
                torch.testing.assert_close(c, (a.float() @ b.float().T).half(), atol=0.05, rtol=0.01)
    finally:
        kiln.set_allocator(None)
    from kiln.runtime.cuda_driver import compile_target
    ptx = _grouped_matmul.warmup(*ptrs, sizes, len(shapes), BM=128, BN=128, BK=64, num_warps=8, num_stages=3,
                                 grid=(1,)).asm["ptx"]
    # KILN_TARGET=sm_80 on a Hopper: the same kernel on pointer loads, no map made
    assert ("tensormap.replace" in ptx) == (compile_target(torch.cuda.current_device()) == "sm_90a")


# --- descriptor stores: tma_store ---------------------------------------------------------

@kiln.jit
def _store_tiles(x_ptr, y_ptrs, M, N, SHIFT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Copies a block from x to y through descriptors; y's base read from memory when SHIFT < 0
    (then its rows start SHIFT rows before the program's: a start that may be negative)."""
    x = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    block = x.load([m, n])
    if SHIFT < 0:
        y = tl.make_tensor_descriptor(tl.load(y_ptrs).to(tl.pointer_type(tl.float16)), shape=[M, N], strides=[N, 1],
                                      block_shape=[BM, BN])
        y.store([m + SHIFT, n], block)
    else:
        y = tl.make_tensor_descriptor(y_ptrs, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        y.store([m, n], block)


def _store_ir(shift):
    x = np.zeros((64, 64), np.float16)
    y = np.zeros(1, np.int64) if shift < 0 else x
    k = _store_tiles.warmup(x, y, 4096, 4096, SHIFT=shift, BM=64, BN=128, num_warps=4, grid=(1,), target="sm_90a")
    return k, parse_function(k.ir if isinstance(k.ir, str) else print_function(k.ir))


def test_a_descriptor_store_becomes_a_tma_store_on_a_map_derived_from_the_arguments():
    """IR in, IR out: the block goes to a swizzled tile, thread 0 copies it by TMA; starts made
    of program ids are never negative, so no pointer store is kept."""
    from kiln.codegen.passes import tma_store
    _, fn = _store_ir(0)
    ctx = PassContext(parse_target("sm_90a"), num_warps=4, num_stages=3)
    tma_store.apply(fn, ctx)
    text = print_function(fn, locs=False)
    verify(parse_function(text))
    assert "local_alloc : smem<64x128xfp16:swizzle128:order1.0>" in text
    assert text.count("tma_store ") == 1 and " store " not in text and " if " not in text
    assert 'tma_of = [1, 3, 2, 3]' in text and 'tma_box = [64, 64, 128]' in text  # the map's box, in the IR


def test_a_store_that_may_start_before_the_tensor_keeps_its_pointer_store_for_those_programs():
    from kiln.codegen.passes import tma_store
    _, fn = _store_ir(-8)
    ctx = PassContext(parse_target("sm_90a"), num_warps=4, num_stages=3)
    tma_store.apply(fn, ctx)
    text = print_function(fn, locs=False)
    verify(parse_function(text))
    assert "tensormap_create" in text and " = if " not in text and "if %" in text
    assert text.count("tma_store ") == 1 and text.count(" store ") == 1 and 'box = [64, 64, 128]' in text


def test_tiles_a_tma_store_takes():
    from kiln.codegen.passes.tma_store import tile_type
    from kiln.ir.types import block_type, float16, float32, int1, pointer_type
    assert str(tile_type(block_type(float16, (64, 128)))) == "smem<64x128xfp16:swizzle128:order1.0>"
    assert str(tile_type(block_type(float32, (128, 8)))) == "smem<128x8xfp32:swizzle32:order1.0>"
    # rows under 32 bytes, more than 256 rows, bools (stored as bytes) and pointers keep their stores
    for t in (block_type(float16, (64, 8)), block_type(float16, (512, 64)), block_type(int1, (64, 128)),
              block_type(pointer_type(float16), (64, 64))):
        assert tile_type(t) is None


def test_stores_without_both_bounds_keep_their_pointers():
    """Tutorial 03's C store (`rm < M & rn < N`, no lower bounds) is a pointer store."""
    from test_codegen_pointer_tma import _build as build_mm
    k = build_mm()
    assert "cp.async.bulk.tensor.2d.global.shared" not in k.asm["ptx"]
    assert not any("tma_store" in a["name"] for a in k.metadata["args"])


@kiln.jit
def _store_from_column(x_ptr, y_ptr, M, N, COL: tl.constexpr):
    """Each program's 64 rows of x's first 128 columns go to y's columns from COL on."""
    x = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[64, 128])
    y = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[64, 128])
    m = tl.program_id(0) * 64
    y.store([m, COL], x.load([m, 0]))


@pytest.mark.parametrize("col, tma", [(8, True), (3, False)])
def test_a_store_from_a_column_between_16_byte_multiples_keeps_its_pointers(col, tma):
    """TMA faults (an illegal instruction) on a box whose first column is no 16-byte multiple."""
    x = np.zeros((64, 64), np.float16)
    k = _store_from_column.warmup(x, x, 4096, 4096, COL=col, num_warps=4, grid=(1,), target="sm_90a")
    assert ("cp.async.bulk.tensor.2d.global.shared" in k.asm["ptx"]) == tma


@pytest.mark.gpu
@pytest.mark.parametrize("col", [3, 8])
def test_stores_from_any_column_match_torch_on_the_gpu(col, monkeypatch):
    torch = _gpu_torch()
    monkeypatch.setenv("KILN_INTERPRET", "0")
    M, N = 200, 312
    x = torch.randn(M, N, device="cuda").half()
    y = torch.zeros(M, N, device="cuda", dtype=torch.float16)
    _store_from_column[(-(-M // 64),)](x, y, M, N, COL=col, num_warps=4)
    torch.cuda.synchronize()
    want = torch.zeros_like(y)
    want[:, col:col + 128] = x[:, :128]
    torch.testing.assert_close(y, want)


@pytest.mark.gpu
@pytest.mark.parametrize("shift", [0, -8])
def test_tma_stores_match_the_pointer_stores_on_the_gpu(shift, monkeypatch):
    """Ragged M and N (the last boxes reach past the tensor: TMA drops those elements) and,
    with shift -8, the first programs' rows before the tensor (their pointer stores)."""
    torch = _gpu_torch()
    monkeypatch.setenv("KILN_INTERPRET", "0")
    M, N = 200, 312
    x = torch.randn(M, N, device="cuda").half()
    y = torch.full((M, N), 7.0, device="cuda", dtype=torch.float16)
    target = torch.tensor([y.data_ptr()], device="cuda", dtype=torch.int64) if shift < 0 else y
    _store_tiles[(-(-M // 64), -(-N // 128))](x, target, M, N, SHIFT=shift, BM=64, BN=128, num_warps=4)
    torch.cuda.synchronize()
    # y's row r comes from x's row r - shift, zeros where that is past x (read as zeros)
    want = torch.zeros_like(y)
    want[:M + shift] = x[-shift:]
    torch.testing.assert_close(y, want)


# --- maps of matrices whose stride or extents are constants or products -------------------

@kiln.jit
def _keys(acc, row_sum, row_max, q, k_desc, v_desc, first, start, lo, hi, BM: tl.constexpr, BN: tl.constexpr,
          DIAGONAL: tl.constexpr):
    for n in range(lo, hi, BN):
        s = tl.dot(q, k_desc.load([first + n, 0]).T) * 0.125
        if DIAGONAL:
            s = tl.where((start + tl.arange(0, BM))[:, None] >= (n + tl.arange(0, BN))[None, :], s, -1.0e6)
        new_max = tl.maximum(row_max, tl.max(s, 1))
        p = tl.exp(s - new_max[:, None])
        scale = tl.exp(row_max - new_max)
        row_sum = row_sum * scale + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.float16), v_desc.load([first + n, 0]), acc * scale[:, None])
        row_max = new_max
    return acc, row_sum, row_max


@kiln.jit
def _heads_attention(Q, K, V, Out, Z, H, N_CTX, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     CAUSAL: tl.constexpr):
    """Tutorial 06's way of reading [Z, H, N_CTX, D] tensors: descriptors over Z * H * N_CTX
    rows of D (a product of arguments; a constant stride); causal runs two loops over K and V."""
    rows = Z * H * N_CTX
    q_desc = tl.make_tensor_descriptor(Q, shape=[rows, D], strides=[D, 1], block_shape=[BM, D])
    k_desc = tl.make_tensor_descriptor(K, shape=[rows, D], strides=[D, 1], block_shape=[BN, D])
    v_desc = tl.make_tensor_descriptor(V, shape=[rows, D], strides=[D, 1], block_shape=[BN, D])
    o_desc = tl.make_tensor_descriptor(Out, shape=[rows, D], strides=[D, 1], block_shape=[BM, D])
    first = tl.program_id(1) * N_CTX
    start = tl.program_id(0) * BM
    q = q_desc.load([first + start, 0])
    row_max = tl.full([BM], -float("inf"), tl.float32)
    row_sum = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    acc, row_sum, row_max = _keys(acc, row_sum, row_max, q, k_desc, v_desc, first, start, 0,
                                  start if CAUSAL else N_CTX, BM, BN, False)
    if CAUSAL:
        acc, row_sum, row_max = _keys(acc, row_sum, row_max, q, k_desc, v_desc, first, start, start, start + BM,
                                      BM, BN, True)
    o_desc.store([first + start, 0], (acc / row_sum[:, None]).to(tl.float16))


def test_rows_a_constant_apart_with_a_product_of_extents_get_one_map_per_matrix():
    """K and V: Z * H * N_CTX rows (multiplied out before the map) of D = 64 elements, D apart
    (a constant); the causal kernel's two loops over K and V share their maps; O is stored by TMA."""
    x = np.zeros((64, 64), np.float16)
    k = _heads_attention.warmup(x, x, x, x, 2, 4, 1024, D=64, BM=128, BN=64, CAUSAL=True, num_warps=8,
                                num_stages=3, grid=(1,), target="sm_90a")
    ptx = k.asm["ptx"]
    assert ptx.count("tensormap.replace.tile.global_address") == 3  # K, V, O
    assert "cp.async.bulk.tensor.2d.shared" in ptx and "cp.async.cg" not in ptx and k.n_spills == 0
    kir = compile_ir(parse_function(k.ir if isinstance(k.ir, str) else print_function(k.ir)), "sm_90a",
                     {"num_warps": 8, "num_stages": 3}, link=False).kir
    defined = {line.split(" = ")[0].strip(): line.split(" = ", 1)[1] for line in kir.splitlines() if " = " in line}
    creates = [line for line in kir.splitlines() if "tensormap_create" in line]
    assert len(creates) == 3
    # scratch, base, inner extent D, outer extent Z * H * N_CTX, stride D
    operands = creates[0].split("tensormap_create ")[1].split(" {")[0].split(", ")
    assert defined[operands[2]].startswith("constant {value = 64}") and defined[operands[3]].startswith("mul ")
    assert defined[operands[4]].startswith("constant {value = 64}")


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_attention_through_maps_the_kernel_makes_matches_torch(causal, monkeypatch):
    torch = _gpu_torch()
    monkeypatch.setenv("KILN_INTERPRET", "0")
    Z, H, N, D = 2, 3, 512, 64
    q, k, v = (torch.randn(Z, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    _heads_attention[(N // 128, Z * H)](q, k, v, out, Z, H, N, D=D, BM=128, BN=64, CAUSAL=causal, num_warps=8,
                                        num_stages=3)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.125)
    torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)
