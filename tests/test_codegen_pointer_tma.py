"""kiln.codegen.passes.pointer_tma on a CPU: which pointer loads of a dot's operands become
TMA copies on maps derived from the kernel's arguments, the IR and PTX they give on
sm_90a, and the metadata the launcher encodes the maps from; on the GPU, wrapped rows past M
against torch (and tests/test_lang_dot.py's conformance)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.cache.metadata import MetadataError, checked, parse_tma_of
from kiln.codegen import nvjitlink
from kiln.codegen.passes import canonicalize, dce, descriptor_loads, pointer_tma
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify


@kiln.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
        BK: tl.constexpr, OTHER: tl.constexpr, ROW_MASK: tl.constexpr, MIX_ROWS: tl.constexpr, SHIFT: tl.constexpr):
    """Tutorial 03's loop: rows and columns wrapped (`% M`, `% N`), a K edge masked."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = (pid_m * BM + tl.arange(0, BM)) % M
    offs_n = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK - SHIFT, other=OTHER)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mask = rn[None, :] < N
    if ROW_MASK:
        mask = mask & (rm[:, None] < M)
    if MIX_ROWS:
        acc = acc + tl.sum(acc, axis=0)[None, :]
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16), mask=mask)


def _build(target="sm_90a", other=0.0, row_mask=True, mix_rows=False, shift=0, n=4096):
    x = np.zeros((64, 64), np.float16)
    return _mm.warmup(x, x, x, 4096, n, 4096, 4096, 4096, 4096, BM=128, BN=256, BK=64, OTHER=other,
                      ROW_MASK=row_mask, MIX_ROWS=mix_rows, SHIFT=shift, num_warps=8, num_stages=3, grid=(1,),
                      target=target)


# (M, N, K): extents of any alignment, a K edge inside a box, one row, one box of columns
RAGGED = [(17, 257, 33), (130, 257, 64), (200, 312, 136), (64, 1000, 77), (512, 72, 200), (1, 8, 16)]


def _padded(n: int) -> int:
    """A row of n fp16 elements padded to a 16-byte multiple (and 8 more): a stride maps take."""
    return 16 * -(-n // 16) + 8


def _mm_on_the_gpu(torch, a, b, bm, bn, bk, warps, stages):
    """`_mm` of `a` and `b` (torch fp16 on the GPU) at that config, C checked against torch; the kernel."""
    (M, K), N = a.shape, b.shape[1]
    c = torch.full((M, N), 7.0, device="cuda", dtype=torch.float16)
    kernel = _mm[(-(-M // bm), -(-N // bn))](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=bm, BN=bn,
                                              BK=bk, OTHER=0.0, ROW_MASK=True, MIX_ROWS=False, SHIFT=0,
                                              num_warps=warps, num_stages=stages)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.25, rtol=2e-2)
    return kernel


def _derived(k) -> dict:
    return {a["name"]: (a.get("tma_of"), a.get("tma_box")) for a in k.metadata["args"] if "tma_of" in a}


def test_tutorial_03s_loads_become_tma_copies_on_maps_derived_from_the_arguments():
    k = _build()
    # a_ptr's map: inner extent K (index 5), outer extent M (3), rows stride_am (6) apart;
    # b_ptr's: inner N (4), outer K (5), rows stride_bk (7) apart
    # A's rows wrap (`% M`): its 128 rows are copied in boxes of 32 (smem_plan.WRAPPED_BOX_ROWS)
    assert _derived(k) == {"a_ptr.tma": ("0,5,3,6", "64x32:swizzle128"), "b_ptr.tma": ("1,4,5,7", "64x64:swizzle128")}
    ptx = k.asm["ptx"]
    assert "cp.async.bulk.tensor.2d" in ptx and "cp.async.cg" not in ptx and "cp.async.ca" not in ptx
    assert "wgmma.mma_async" in ptx and ".local" not in ptx
    assert k.n_spills == 0


def _tf32_build(bm=128, bn=128, warps=4, bk=32, **options):
    x = np.zeros((64, 64), np.float32)
    return _mm.warmup(x, x, x, 4096, 4096, 4096, 4096, 4096, 4096, BM=bm, BN=bn, BK=bk, OTHER=0.0, ROW_MASK=True,
                      MIX_ROWS=False, SHIFT=0, num_warps=warps, num_stages=3, grid=(1,), target="sm_90a", **options)


@pytest.mark.parametrize("bm, bn, warps, loads", [(128, 128, 4, 16), (64, 128, 4, 16), (128, 256, 8, 16)])
def test_a_tf32_b_stored_n_major_is_read_into_registers_as_the_transposed_products_a(bm, bn, warps, loads):
    """tf32 `x @ W` (B [K, N] row-major): wgmma reads tf32 K-major only, so C^T = B^T A^T is run instead: B comes
    16 bytes a copy into an N-major ring, each thread reads its fragments of B^T from there (8-byte loads, two
    columns of a row), and A's K-major tile is the instruction's B (its N = BM). Staged K-major in 4x4 squares
    instead (session 96) it ran 0.66-0.76 of this on an H100 (session 97). (A register cap keeps the build on the
    warps asked.)"""
    k = _tf32_build(bm=bm, bn=bn, warps=warps, maxnreg=255)
    assert set(_derived(k)) == {"a_ptr.tma"}
    ptx = k.asm["ptx"]
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{bm}k8\.f32\.tf32\.tf32 \{{[^}}]*\}}, \{{%r", ptx)
    assert set(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]*\], \[[^\]]*\], (\d+)", ptx)) == {"16"}
    assert ptx.count("ld.shared.v2.b32") == loads and "st.shared.v4.b32" not in ptx  # 32 x BN / 16 per thread
    assert k.n_spills == 0 and k.metadata["threads"] == 32 * warps
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert "C751" not in info  # ptxas neither serializes the wgmmas nor injects waits for their register A


def test_a_tf32_b_whose_columns_the_warpgroups_cannot_share_is_staged_k_major_in_squares():
    """Where B's columns are fewer than 64 a warpgroup (8 warps, BN 64), C^T's rows would not fill both
    warpgroups' instructions: B is staged K-major every iteration, each thread a 4x4 square of it
    (lower/tile_transpose: one 16-byte store per four elements)."""
    k = _tf32_build(bm=128, bn=64, warps=8, bk=64, maxnreg=255)
    ptx = k.asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k8\.f32\.tf32\.tf32 \{[^}]*\}, %rd", ptx)
    assert ptx.count("st.shared.v4.b32") == 4 and k.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K, bm, bn, bk, warps, staged", [
    (256, 384, 200, 128, 128, 32, 4, False), (300, 512, 96, 64, 128, 32, 4, False),
    (128, 256, 64, 128, 64, 32, 4, False), (256, 512, 200, 128, 256, 32, 8, False),
    (300, 384, 96, 64, 256, 32, 4, False), (256, 320, 200, 128, 64, 64, 8, True)])
def test_a_tf32_b_along_n_matches_torch_on_the_gpu(M, N, K, bm, bn, bk, warps, staged, hopper_torch):
    torch = hopper_torch
    gen = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, _padded(K), device="cuda", generator=gen)[:, :K]
    b = torch.randn(K, _padded(N), device="cuda", generator=gen)[:, :N]
    ptx = _mm_on_the_gpu(torch, a, b, bm, bn, bk, warps, 3).asm["ptx"]
    assert ("st.shared.v4.b32" in ptx) == staged and ("ld.shared.v2.b32" in ptx) != staged
    assert "cp.async.ca.shared.global" not in ptx


def test_wrapped_rows_are_copied_in_boxes_that_start_inside_the_tensor():
    """A's 128 rows in four boxes of 32, each starting at its row mod M; B's columns (one 64-wide
    chunk per box) at theirs mod N: no box reaches past the tensor but the one M or N falls in."""
    k = _build()
    copies = [line for line in k.build("sm_90a").kir.splitlines() if "tma_copy" in line]
    assert copies and all("wrap_dim" in line for line in copies)
    assert any("box_rows = 32, wrap_dim = 0" in line for line in copies)
    assert any("{wrap_dim = 1}" in line for line in copies)
    assert "rem.u32" in k.asm["ptx"]


@pytest.mark.parametrize("M, N, K", RAGGED)
def test_ragged_shapes_wrap_columns_only_at_16_byte_multiples(M, N, K):
    """The builds the GPU test below runs (rows padded to 16-byte multiples): both operands take derived
    maps, A's rows wrap in boxes, B's columns wrap mod N only where N is a 16-byte multiple."""
    x = np.zeros((64, 64), np.float16)
    k = _mm.warmup(x, x, x, M, N, K, _padded(K), _padded(N), N, BM=128, BN=256, BK=64, OTHER=0.0, ROW_MASK=True, MIX_ROWS=False,
                   SHIFT=0, num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
    copies = [line for line in k.build("sm_90a").kir.splitlines() if "tma_copy" in line]
    rows = M != 1  # M = 1 is specialized into a constant: no argument to derive A's map from
    assert set(_derived(k)) == ({"a_ptr.tma", "b_ptr.tma"} if rows else {"b_ptr.tma"})
    assert any("wrap_dim = 0" in line for line in copies) == rows
    assert any("wrap_dim = 1" in line for line in copies) == (N % 8 == 0)


def test_columns_wrapped_at_no_16_byte_multiple_are_copied_unwrapped():
    """TMA faults on a box whose first column is no 16-byte multiple: at N = 4100 (8 bytes short)
    a column mod N may be one, so B's boxes start where the pointers do (zeros past N); A's rows
    still wrap."""
    copies = [line for line in _build(n=4100).build("sm_90a").kir.splitlines() if "tma_copy" in line]
    assert any("box_rows = 32, wrap_dim = 0" in line for line in copies)
    assert not any("wrap_dim = 1" in line for line in copies) and len(copies) > 2


@pytest.mark.gpu
@pytest.mark.parametrize("M", [8, 40, 64, 200])
def test_wrapped_rows_past_m_match_torch_on_the_gpu(M, hopper_torch):
    torch = hopper_torch
    N, K = 320, 200  # N past one 256-column tile, K past three 64-deep steps
    gen = torch.Generator(device="cuda").manual_seed(M)
    a = torch.randn(M, K, device="cuda", generator=gen).half()
    b = torch.randn(K, N, device="cuda", generator=gen).half()
    kernel = _mm_on_the_gpu(torch, a, b, 128, 256, 64, 8, 3)
    assert "rem.u32" in kernel.build("sm_90a").ptx  # it ran the wrapped copies


@pytest.mark.gpu
@pytest.mark.parametrize("bm, bn, bk, warps, stages", [(128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4),
                                                      (128, 256, 64, 8, 3)])
@pytest.mark.parametrize("M, N, K", RAGGED)
def test_tutorial_03_at_ragged_shapes_matches_torch_on_the_gpu(M, N, K, bm, bn, bk, warps, stages, hopper_torch):
    """Rows and columns wrapped at extents of any alignment, K edges inside a box, rows padded to
    16-byte multiples (so both take maps): C matches torch and no copy faults (a box that started
    between 16-byte multiples would: an illegal instruction)."""
    torch = hopper_torch
    gen = torch.Generator(device="cuda").manual_seed(M * N + K)
    a = torch.randn(M, _padded(K), device="cuda", generator=gen).half()[:, :K]
    b = torch.randn(K, _padded(N), device="cuda", generator=gen).half()[:, :N]
    _mm_on_the_gpu(torch, a, b, bm, bn, bk, warps, stages)


@kiln.jit
def _device_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Tutorial 09's descriptor kernel: descriptors made from the arguments, B read [N, K] and transposed."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        acc = tl.dot(a_desc.load([m, k * BK]), b_desc.load([n, k * BK]).T, acc)
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    c_desc.store([m, n], acc.to(tl.float16))


@pytest.mark.parametrize("K, tma", [(4096, True), (4100, False)])
def test_device_descriptors_made_from_the_arguments_become_tma_copies(K, tma):
    """The descriptor's loads are pointer loads with `0 <= X < extent` masks in int64 index
    math on `multiple_of` hints: the same proof takes them (K = 4100 puts rows 8200 bytes
    apart, which no map takes)."""
    x = np.zeros((64, 64), np.float16)
    k = _device_descriptors.warmup(x, x, x, 4096, 4096, K, BM=128, BN=256, BK=64, num_warps=8, num_stages=3,
                                   grid=(1,), target="sm_90a")
    stored = {"c_ptr.tma_store": ("2,4,3,4", "64x128:swizzle128")}  # C's rows N apart: by TMA (tma_store)
    if tma:
        assert _derived(k) == {"a_ptr.tma": ("0,5,3,5", "64x128:swizzle128"), "b_ptr.tma": ("1,5,4,5", "64x256:swizzle128"),
                               **stored}
        assert "cp.async.bulk.tensor.2d.shared" in k.asm["ptx"] and "cp.async.cg" not in k.asm["ptx"]
    else:
        assert _derived(k) == stored and "cp.async.bulk.tensor.2d.shared" not in k.asm["ptx"]
    assert k.n_spills == 0


@kiln.jit
def _carried_rows(q_ptr, k_ptr, out_ptr, Z, N, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  BY_STEP: tl.constexpr):
    """Tutorial 06's way of walking K: descriptors over Z * N rows (a count the kernel computes), the
    row offset carried by the loop and advanced by BN each iteration (BY_STEP: or by the iv itself)."""
    rows = Z * N
    q_desc = tl.make_tensor_descriptor(q_ptr, shape=[rows, D], strides=[D, 1], block_shape=[BM, D])
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[rows, D], strides=[D, 1], block_shape=[BN, D])
    first = tl.program_id(1) * N
    q = q_desc.load([first + tl.program_id(0) * BM, 0])
    acc = tl.zeros((BM, BN), tl.float32)
    offset = first
    for start in range(0, N, BN):
        acc += tl.dot(q, k_desc.load([offset, 0]).T)
        offset += BN if BY_STEP else start
    out = out_ptr + (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)) * BM * BN
    tl.store(out + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc)


@pytest.mark.parametrize("by_step", [True, False])
def test_rows_a_loop_carries_and_advances_by_a_step_are_read_by_tma(by_step):
    """Rows `offset += BN` are first + BN * iter: K's block is a TMA box of the map the kernel
    writes; advanced by the iv (a step that changes), they are no such form and keep cp.async."""
    x = np.zeros((4096, 64), np.float16)
    k = _carried_rows.warmup(x, x, np.zeros(64, np.float32), 4, 1024, D=64, BM=128, BN=64, BY_STEP=by_step,
                             num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
    ptx = k.asm["ptx"]
    assert ("cp.async.bulk.tensor.2d.shared" in ptx) == by_step and ("cp.async.cg" in ptx) != by_step
    assert k.n_spills == 0


@pytest.fixture
def torch_scratch(hopper_torch):
    """hopper_torch, with the global scratch of this test's launches (the maps a kernel makes) from
    torch's allocator; the allocator is process-wide, so the tests after it get kiln's own again."""
    torch = hopper_torch
    kiln.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    yield torch
    kiln.set_allocator(None)


def test_rows_carried_by_the_loop_match_numpy_on_the_gpu(torch_scratch):
    torch = torch_scratch
    gen = torch.Generator().manual_seed(3)
    Z, N, D, BM, BN = 2, 512, 64, 128, 64
    q, k = (torch.randn(Z * N, D, generator=gen).half() for _ in range(2))
    out = torch.empty(Z, N // BM, BM, BN, device="cuda")
    _carried_rows[(N // BM, Z)](q.cuda(), k.cuda(), out, Z, N, D=D, BM=BM, BN=BN, BY_STEP=True, num_warps=8,
                                num_stages=3)
    qf, kf = q.float().view(Z, N // BM, BM, D), k.float().view(Z, N // BN, BN, D)
    want = torch.einsum("zmid,zbjd->zmij", qf, kf)  # every K block of the program's batch, summed
    torch.testing.assert_close(out.cpu(), want, atol=5e-2, rtol=1e-3)


@kiln.jit
def _carried_columns(p_ptr, vt_ptr, out_ptr, Z, N, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Tutorial 06's fp8 V^T: V kept transposed per head ([Z][D][N]) and read through a descriptor of D
    rows by Z * N columns, rows N apart, at a column offset program * D * N that the loop carries and
    advances by BN. Columns past Z * N (most programs': the tutorial's extent) read as zeros."""
    vt_desc = tl.make_tensor_descriptor(vt_ptr, shape=[D, Z * N], strides=[N, 1], block_shape=[D, BN])
    p = tl.load(p_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :])
    acc = tl.zeros((BM, D), tl.float32)
    offset = tl.program_id(0) * D * N
    for start in range(0, N, BN):
        acc = tl.dot(p, vt_desc.load([0, offset]).T, acc)
        offset += BN
    out = out_ptr + tl.program_id(0) * BM * D
    tl.store(out + tl.arange(0, BM)[:, None] * D + tl.arange(0, D)[None, :], acc)


@pytest.mark.parametrize("fp8", [False, True])
def test_columns_a_loop_carries_past_the_row_stride_are_read_by_tma(fp8):
    """The column offset carries the row stride N (program * D * N), so splitting the address by
    the stride alone would call it rows; the mask's `X >= 0` terms place it, and V^T comes by TMA."""
    if fp8:
        torch = pytest.importorskip("torch")
        p = vt = torch.float8_e5m2
    else:
        p = vt = np.zeros(1, np.float16)
    k = _carried_columns.warmup(p, vt, np.zeros(1, np.float32), 4, 1024, D=64, BM=128, BN=64, num_warps=4,
                                num_stages=3, grid=(1,), target="sm_90a")
    ptx = k.asm["ptx"]
    assert "cp.async.bulk.tensor.2d.shared" in ptx and "cp.async.cg" not in ptx and k.n_spills == 0


@pytest.mark.parametrize("dtype", ["float16", "float8_e5m2"])
def test_carried_columns_past_the_row_stride_match_torch_on_the_gpu(dtype, torch_scratch):
    torch = torch_scratch
    gen = torch.Generator().manual_seed(5)
    Z, N, D, BM, BN = 3, 256, 64, 64, 64
    p = torch.randn(BM, BN, generator=gen).to(getattr(torch, dtype))
    vt = torch.randn(Z, D, N, generator=gen).to(getattr(torch, dtype))
    out = torch.empty(Z, BM, D, device="cuda")
    _carried_columns[(Z,)](p.cuda(), vt.cuda(), out, Z, N, D=D, BM=BM, BN=BN, num_warps=4, num_stages=3)
    flat, cols = vt.float().flatten(), Z * N
    want = torch.empty(Z, BM, D)
    for z in range(Z):  # element (d, c) of the descriptor: flat[d * N + c] where c < Z * N, else 0
        c = z * D * N + torch.arange(N)
        at = (torch.arange(D)[:, None] * N + c[None, :]).clamp(max=flat.numel() - 1)
        block = torch.where(c[None, :] < cols, flat[at], 0.0)
        want[z] = sum(p.float() @ block[:, j:j + BN].T for j in range(0, N, BN))
    torch.testing.assert_close(out.cpu(), want, atol=5e-2, rtol=1e-2)


@kiln.jit
def _head_scores(q_ptr, k_ptr, s_ptr, o_ptr, stride_h, N, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 SPLIT: tl.constexpr):
    """Attention's pointer loops (bench's forward, tutorial 06's backward): this head's K^T read through
    pointers down the head dim (contiguous) from `k_ptr + head * stride_h`, unmasked; S = Q K^T summed
    over the key blocks, and O = sum of S_j K_j (the dot reading tl.trans of the same load). SPLIT: a
    first loop adds the keys' S_j K_j to O in blocks of BN // 2 (a second tile shape) as well."""
    head = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + head * stride_h + tl.arange(0, BM)[:, None] * D + offs_d[None, :])
    s = tl.zeros((BM, BN), tl.float32)
    o = tl.zeros((BM, D), tl.float32)
    if SPLIT:
        half: tl.constexpr = BN // 2
        kt_half = k_ptr + head * stride_h + offs_d[:, None] + tl.arange(0, half)[None, :] * D
        for first in range(0, N, half):
            kt = tl.load(kt_half + first * D)
            o = tl.dot(tl.dot(q, kt).to(tl.float16), tl.trans(kt), o)
    kt_ptrs = k_ptr + head * stride_h + offs_d[:, None] + tl.arange(0, BN)[None, :] * D
    for first in range(0, N, BN):
        kt = tl.load(kt_ptrs + first * D)
        block = tl.dot(q, kt)
        s += block
        o = tl.dot(block.to(tl.float16), tl.trans(kt), o)
    rows = tl.arange(0, BM)[:, None]
    tl.store(s_ptr + head * BM * BN + rows * BN + tl.arange(0, BN)[None, :], s)
    tl.store(o_ptr + head * BM * D + rows * D + offs_d[None, :], o)


def _head_scores_build(stride_h=4096 * 64, split=False):
    x, f = np.zeros(1, np.float16), np.zeros(1, np.float32)
    return _head_scores.warmup(x, x, f, f, stride_h, 4096, D=64, BM=128, BN=64, SPLIT=split, num_warps=8,
                               num_stages=3, grid=(1,), target="sm_90a")


def test_an_unmasked_transposed_block_from_a_heads_base_is_read_by_tma():
    """K^T's pointers run down its columns: the box is K's [BN, D] rows, read transposed by one dot and
    as it is by the other (tl.trans); the base `k_ptr + head * stride_h` is 16-byte aligned by the
    specialization of both, so the kernel makes the map, its extent unbounded as the pointers are."""
    k = _head_scores_build()
    ptx = k.asm["ptx"]
    assert "cp.async.bulk.tensor.2d.shared" in ptx and "cp.async.cg" not in ptx and k.n_spills == 0
    assert ptx.count("tensormap.replace.tile.global_address") == 1


def test_each_tile_shape_gets_a_map_of_its_own():
    """Two loops read K^T in blocks of 32 and 64 keys: a map's box is its tile's, so two maps."""
    ptx = _head_scores_build(split=True).asm["ptx"]
    assert "cp.async.cg" not in ptx and ptx.count("tensormap.replace.tile.global_address") == 2


def test_a_head_base_of_unknown_alignment_keeps_its_pointers():
    """stride_h = 4096 * 64 + 4 elements is known no multiple of 8 (16 bytes): the head's base may fall
    between 16-byte boundaries, where TMA faults; the loads stay pointer loads."""
    ptx = _head_scores_build(stride_h=4096 * 64 + 4).asm["ptx"]
    assert "cp.async.bulk.tensor" not in ptx and "tensormap" not in ptx


@kiln.jit
def _chunk_scores(q_ptr, k_ptr, s_ptr, stride_h, T, KD: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """fla's chunk_fwd_kernel_o's K loop: a head's chunk of q and k (T rows) from a base the kernel
    computes, K summed BK at a time up to the constant KD."""
    head = tl.program_id(0)
    q_ptr += head * stride_h
    k_ptr += head * stride_h
    rows = tl.arange(0, BT)
    s = tl.zeros((BT, BT), tl.float32)
    for k0 in range(0, KD, BK):
        ks = k0 + tl.arange(0, BK)
        q = tl.load(q_ptr + rows[:, None] * KD + ks[None, :], mask=(rows < T)[:, None] & (ks < KD)[None, :], other=0.0)
        kt = tl.load(k_ptr + rows[None, :] * KD + ks[:, None], mask=(ks < KD)[:, None] & (rows < T)[None, :], other=0.0)
        s += tl.dot(q, kt)
    tl.store(s_ptr + head * BT * BT + rows[:, None] * BT + rows[None, :], s)


@pytest.mark.parametrize("kd, maps", [(128, 0), (448, 0), (512, 2), (1024, 2)])
def test_a_loop_of_few_known_steps_keeps_its_pointer_loads_off_maps_the_kernel_makes(kd, maps):
    """Every CTA builds a map the kernel makes before its first copy: a loop known to run fewer than
    KERNEL_MAP_MIN_TRIPS (8) times copies on cp.async instead (2 steps: 100.5 us on maps, 83.3 on
    cp.async in fla's kernel)."""
    x, f = np.zeros(1, np.float16), np.zeros(1, np.float32)
    ptx = _chunk_scores.warmup(x, x, f, 64 * kd, 64, KD=kd, BT=64, BK=64, num_warps=4, num_stages=3, grid=(1,),
                               target="sm_90a").asm["ptx"]
    assert ptx.count("tensormap.replace.tile.global_address") == maps
    assert ("cp.async.cg" in ptx) == (maps == 0) and "wgmma" in ptx


def test_the_row_stride_of_a_map_the_kernel_makes_is_checked_at_launch():
    """The map takes its row stride (D here: the keys' stride) from an int argument that pointers may
    read at any sign; the metadata names it, and a launch where it is not positive runs the build
    without maps (kiln.runtime.launcher, below)."""
    k = _head_scores_build()  # its keys are the constexpr D apart: nothing to check
    assert "cp.async.bulk.tensor" in k.asm["ptx"] and not any("tma_stride" in a for a in k.metadata["args"])
    x, f = np.zeros(1, np.float16), np.zeros(1, np.float32)
    strided = _strided_keys.warmup(x, x, f, 4096 * 64, 64, 4096, D=64, BM=128, BN=64, num_warps=8, num_stages=3,
                                   grid=(1,), target="sm_90a")
    assert "cp.async.bulk.tensor" in strided.asm["ptx"]
    assert [a["name"] for a in strided.metadata["args"] if a.get("tma_stride") == "1"] == ["stride_n"]


@kiln.jit
def _strided_keys(q_ptr, k_ptr, s_ptr, stride_h, stride_n, N, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """`_head_scores`'s S with the keys `stride_n` apart (an int argument)."""
    head = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + head * stride_h + tl.arange(0, BM)[:, None] * D + offs_d[None, :])
    kt_ptrs = k_ptr + head * stride_h + offs_d[:, None] + tl.arange(0, BN)[None, :] * stride_n
    s = tl.zeros((BM, BN), tl.float32)
    for first in range(0, N, BN):
        s += tl.dot(q, tl.load(kt_ptrs + first * stride_n))
    tl.store(s_ptr + head * BM * BN + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], s)


def test_a_launch_whose_map_stride_is_not_positive_takes_the_build_without_maps(monkeypatch):
    """Without a GPU: the generated launch raises DerivedMapUnusable (the caller then launches the
    build without derived maps) where a checked row stride is 0 or negative, and launches otherwise."""
    from kiln.ir.types import int32, pointer_type
    from kiln.runtime import launcher
    from kiln.runtime.tensormap import DerivedMapUnusable
    calls = []
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: (lambda *a: calls.append(a[1]) or 0))

    class Kernel:
        handle = 1
    launch = launcher.make_launcher(Kernel(), [pointer_type(int32), int32], 4, 0, "k", map_strides=[1])
    for stride in (0, -64):
        with pytest.raises(DerivedMapUnusable, match="row stride"):
            launch((3, 1, 1), [0, stride], 0)
    launch((3, 1, 1), [0, 64], 0)
    assert calls == [3]
    with pytest.raises(ValueError, match="no integer argument"):
        launcher.make_launcher(Kernel(), [pointer_type(int32), int32], 4, 0, "k", map_strides=[0])


def test_a_transposed_box_no_ring_takes_goes_back_to_its_pointer_load():
    """pointer_tma, then descriptor_loads and canonicalize without smem_pipeline between: the box's
    permutes cancel and the dots read the pointer load (and its tl.trans) as the frontend wrote them."""
    k = _head_scores_build()
    source = k.ir if isinstance(k.ir, str) else print_function(k.ir)
    fn = parse_function(source)
    ctx = PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3)
    pointer_tma.apply(fn, ctx)
    text = print_function(fn, locs=False)
    assert text.count("descriptor_load") == 1 and "tensormap_create" in text
    verify(parse_function(text))
    descriptor_loads.apply(fn, ctx)
    canonicalize.apply(fn, ctx)
    dce.apply(fn, ctx)
    out = print_function(fn, locs=False)
    assert "descriptor_load" not in out and "tensormap" not in out
    assert out.count("permute") == source.count("permute")  # the frontend's own tl.trans
    verify(fn)


def test_unmasked_transposed_boxes_from_a_heads_base_match_torch_on_the_gpu(torch_scratch):
    torch = torch_scratch
    gen = torch.Generator().manual_seed(7)
    heads, N, D, BM, BN = 3, 512, 64, 128, 64
    for split in (False, True):
        q = (torch.randn(heads, N, D, generator=gen) / 8).half()
        k = (torch.randn(heads, N, D, generator=gen) / 8).half()
        s = torch.empty(heads, BM, BN, device="cuda")
        o = torch.empty(heads, BM, D, device="cuda")
        _head_scores[(heads,)](q.cuda(), k.cuda(), s, o, N * D, N, D=D, BM=BM, BN=BN, SPLIT=split, num_warps=8,
                               num_stages=3)
        qf, kf = q.float()[:, :BM], k.float()
        blocks = [(j, BN) for j in range(0, N, BN)] + ([(j, BN // 2) for j in range(0, N, BN // 2)] if split else [])
        want_s, want_o = torch.zeros(heads, BM, BN), torch.zeros(heads, BM, D)
        for j, width in blocks:
            block = qf @ kf[:, j:j + width].transpose(1, 2)
            if width == BN:
                want_s += block
            want_o += block.half().float() @ kf[:, j:j + width]
        torch.testing.assert_close(s.cpu(), want_s, atol=2e-2, rtol=1e-2)
        torch.testing.assert_close(o.cpu(), want_o, atol=5e-2, rtol=1e-2)


@kiln.jit
def _gate_up(x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K, stride_xm, stride_wk, stride_om, BM: tl.constexpr,
             BN: tl.constexpr, BK: tl.constexpr, MIX_ROWS: tl.constexpr):
    """A fused gate and up projection (silu(x @ wg) * (x @ wu)): one A tile, rows wrapped, feeds two dots."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = (pid_m * BM + tl.arange(0, BM)) % M
    offs_n = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    wg_ptrs = wg_ptr + offs_k[:, None] * stride_wk + offs_n[None, :]
    wu_ptrs = wu_ptr + offs_k[:, None] * stride_wk + offs_n[None, :]
    gate = tl.zeros((BM, BN), dtype=tl.float32)
    up = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(x_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        wg = tl.load(wg_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        wu = tl.load(wu_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        gate = tl.dot(x, wg, gate)
        up = tl.dot(x, wu, up)
        x_ptrs += BK
        wg_ptrs += BK * stride_wk
        wu_ptrs += BK * stride_wk
    if MIX_ROWS:
        up = up + tl.sum(up, axis=0)[None, :]
    h = gate * tl.sigmoid(gate) * up
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], h.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _gate_up_build(mix_rows=False):
    x = np.zeros((64, 64), np.float16)
    return _gate_up.warmup(x, x, x, x, 4096, 4096, 4096, 4096, 4096, 4096, BM=128, BN=128, BK=64, MIX_ROWS=mix_rows,
                           num_warps=8, num_stages=3, grid=(1,), target="sm_90a")


def test_rows_wrapped_in_an_a_tile_two_dots_share_are_read_by_tma():
    """Both accumulators reach the store through elementwise ops only, masked on the rows: x's rows past M
    are never stored, so x takes a map as the weights do, and the loop's two dots stay in flight together
    (each wait leaves both groups pending: smem_pipeline._carried_dots)."""
    k = _gate_up_build()
    assert set(_derived(k)) == {"x_ptr.tma", "wg_ptr.tma", "wu_ptr.tma"}
    ptx = k.asm["ptx"]
    assert "cp.async.cg" not in ptx and ".local" not in ptx
    assert re.findall(r"wgmma.wait_group.sync.aligned (\d+)", ptx) == ["2", "2", "0"]


def test_a_reduction_over_one_of_two_accumulators_keeps_the_shared_a_on_pointers():
    """x's rows past M would reach the stores through up's column sums, and so would wu's wrapped columns
    (the pass follows elementwise ops only): both keep their pointers, wg (gate's alone) takes its map."""
    assert set(_derived(_gate_up_build(mix_rows=True))) == {"wg_ptr.tma"}


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K", [(200, 320, 200), (17, 136, 64), (512, 256, 1000)])
def test_a_fused_gate_and_up_projection_matches_torch_on_the_gpu(M, N, K, hopper_torch):
    torch = hopper_torch
    gen = torch.Generator(device="cuda").manual_seed(M)
    x = torch.randn(M, K, device="cuda", generator=gen).half()
    wg, wu = (torch.randn(K, N, device="cuda", generator=gen).half() / 8 for _ in range(2))
    out = torch.full((M, N), 7.0, device="cuda", dtype=torch.float16)
    _gate_up[(-(-M // 128), -(-N // 128))](x, wg, wu, out, M, N, K, x.stride(0), wg.stride(0), out.stride(0), BM=128,
                                            BN=128, BK=64, MIX_ROWS=False, num_warps=8, num_stages=3)
    torch.cuda.synchronize()
    gate, up = x.float() @ wg.float(), x.float() @ wu.float()
    torch.testing.assert_close(out.float(), torch.nn.functional.silu(gate) * up, atol=0.1, rtol=2e-2)


def test_a_row_wrap_whose_rows_are_stored_unmasked_keeps_its_pointers():
    """Without `rm < M` in the store's mask the rows past M (read wrapped through the
    pointers, as zeros by TMA) would be stored: A keeps cp.async, B (columns masked) is TMA."""
    assert set(_derived(_build(row_mask=False))) == {"b_ptr.tma"}


def test_a_reduction_over_the_accumulators_rows_keeps_both_pointer_loads():
    assert _derived(_build(mix_rows=True)) == {}


def test_masked_off_elements_that_are_not_zero_keep_their_pointers():
    """A's `other=1.0` is not what TMA reads out of bounds; then no ring takes the loop (a
    cp.async ring zero-fills too), and B's map, read by no ring, is dropped."""
    k = _build(other=1.0)
    assert _derived(k) == {} and "cp.async.bulk.tensor" not in k.asm["ptx"]


def test_a_k_edge_that_is_no_argument_keeps_its_pointers():
    """`cols < K - k * BK - 1`: the extent K - 1 is no kernel argument the launcher could
    encode a map with; A's ring stays cp.async (src-size zero-fill), B's is TMA."""
    k = _build(shift=1)
    assert set(_derived(k)) == {"b_ptr.tma"} and "cp.async.cg" in k.asm["ptx"]


def test_other_targets_get_no_derived_maps():
    k = _build(target="sm_80")
    assert _derived(k) == {} and all(a["type"] != "tensormap" for a in k.metadata["args"])


def test_a_map_no_ring_reads_is_dropped_with_its_argument():
    """pointer_tma alone, then descriptor_loads (no smem_pipeline between): every
    descriptor_load goes back to its pointer load and the maps leave the signature."""
    fn = parse_function(_source_ir())
    ctx = PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3)
    pointer_tma.apply(fn, ctx)
    text = print_function(fn, locs=False)
    assert text.count("descriptor_load") == 2 and 'tma_of = [0, 5, 3, 6]' in text and 'tma_of = [1, 4, 5, 7]' in text
    verify(parse_function(text))
    descriptor_loads.apply(fn, ctx)
    out = print_function(fn, locs=False)
    assert "descriptor_load" not in out and "tensormap" not in out
    assert len(fn.args) == len(fn.arg_names) == len(fn.arg_attrs) == 9
    verify(fn)


def test_the_launchers_fallback_build_has_no_derived_maps():
    fn = parse_function(_source_ir())
    fn.attrs["derived_args"] = 0
    pointer_tma.apply(fn, PassContext(parse_target("sm_90a"), num_warps=8, num_stages=3))
    assert "descriptor_load" not in print_function(fn)


def _source_ir() -> str:
    """The frontend's IR of `_mm` (before codegen's passes)."""
    x = np.zeros((64, 64), np.float16)
    kernel = _mm.warmup(x, x, x, 4096, 4096, 4096, 4096, 4096, 4096, BM=128, BN=256, BK=64, OTHER=0.0,
                        ROW_MASK=True, MIX_ROWS=False, SHIFT=0, num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
    return kernel.ir if isinstance(kernel.ir, str) else print_function(kernel.ir)


def test_tma_of_names_four_argument_indices():
    assert parse_tma_of("0,5,3,6") == (0, 5, 3, 6) and parse_tma_of(None) is None
    for bad in ("0,5,3", "0,5,3,6,7", "a,b,c,d", "-1,5,3,6", 7):
        with pytest.raises(MetadataError):
            parse_tma_of(bad)


def test_metadata_with_a_bad_derived_map_is_refused():
    metadata = {"name": "k", "target": "sm_90a", "num_warps": 8, "num_stages": 3, "threads": 256, "shared": 4096,
                "n_regs": 40, "n_spills": 0, "ptx_version": 80,
                "args": [{"name": "x", "type": "ptr<fp16>", "llvm_type": "ptr"},
                         {"name": "x.tma", "type": "tensormap", "llvm_type": "ptr", "tma_box": "64x128:swizzle128",
                          "tma_of": "0,1,1,1"}]}
    assert checked(metadata, name="k") is metadata
    metadata["args"][1]["tma_of"] = "__import__('os')"
    with pytest.raises(MetadataError):
        checked(metadata, name="k")


@kiln.jit
def _shifted_rows(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, SHIFT: tl.constexpr, FLOOR: tl.constexpr):
    """Rows start SHIFT before the program's block, masked `< M` (and `>= 0` when FLOOR)."""
    rm = tl.program_id(0) * 128 - SHIFT + tl.arange(0, 128)
    rn = tl.arange(0, 128)
    acc = tl.zeros((128, 128), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, 64)):
        rk = k * 64 + tl.arange(0, 64)
        row_ok = rm[:, None] < M
        if FLOOR:
            row_ok = row_ok & (rm[:, None] >= 0)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :], mask=row_ok & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=rk[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rm[:, None] >= 0))


@pytest.mark.parametrize("shift, floor, tma", [(0, False, True), (1, False, False), (1, True, True)])
def test_rows_that_may_start_before_the_base_need_a_mask_for_it(shift, floor, tma):
    """TMA reads zeros before the base where pointers read the memory there: a block that
    may start before row 0 becomes a box only when its mask clears those rows."""
    x = np.zeros((64, 64), np.float16)
    k = _shifted_rows.warmup(x, x, np.zeros((64, 64), np.float32), 4096, 4096, 4096, 4096, SHIFT=shift, FLOOR=floor,
                             num_warps=4, num_stages=3, grid=(1,), target="sm_90a")
    assert ("a_ptr.tma" in _derived(k)) == tma
    assert "b_ptr.tma" not in _derived(k)  # B's columns have no extent: neither masked nor wrapped


@kiln.jit
def _from_column(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, COL: tl.constexpr):
    """A's K window starts at column COL (B's rows at 0): C = A[:, COL:] @ B[:K - COL]."""
    rm = tl.program_id(0) * 128 + tl.arange(0, 128)
    rn = tl.arange(0, 128)
    acc = tl.zeros((128, 128), dtype=tl.float32)
    for k in range(0, tl.cdiv(K - COL, 64)):
        ka = COL + k * 64 + tl.arange(0, 64)
        rk = k * 64 + tl.arange(0, 64)
        a = tl.load(a_ptr + rm[:, None] * stride_am + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=rk[:, None] < K - COL, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)


@pytest.mark.parametrize("col, tma", [(8, True), (3, False), (12, False)])
def test_a_box_starts_at_a_16_byte_multiple_of_its_row(col, tma):
    """TMA faults (an illegal instruction) on a box whose first column is no 16-byte multiple,
    where the pointers read from any column: A's window from column 3 or 12 keeps its pointers."""
    x = np.zeros((64, 64), np.float16)
    k = _from_column.warmup(x, x, np.zeros((64, 64), np.float32), 4096, 128, 4096, 4096, COL=col, num_warps=4,
                            num_stages=3, grid=(1,), target="sm_90a")
    assert ("a_ptr.tma" in _derived(k)) == tma


@pytest.mark.gpu
@pytest.mark.parametrize("col", [3, 8, 12])
def test_a_window_from_any_column_matches_torch_on_the_gpu(col, hopper_torch):
    torch = hopper_torch
    M, N, K = 300, 128, 200
    gen = torch.Generator(device="cuda").manual_seed(col)
    a = torch.randn(M, K, device="cuda", generator=gen).half()
    b = torch.randn(K, N, device="cuda", generator=gen).half()
    c = torch.zeros(M, N, device="cuda")
    _from_column[(-(-M // 128),)](a, b, c, M, N, K, a.stride(0), COL=col, num_warps=4, num_stages=3)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a[:, col:].float() @ b[:K - col].float(), atol=0.25, rtol=2e-2)


def test_a_derived_map_asks_the_driver_for_the_matrix_the_pointers_read(monkeypatch):
    """Inner extent first, rows' byte stride, the box and swizzle of the ring; arguments
    that make no map raise DerivedMapUnusable before the driver is asked."""
    import ctypes
    cu = pytest.importorskip("cuda.bindings.driver")
    from kiln.ir.types import parse_type
    from kiln.runtime.tensormap import DerivedMapUnusable, derived_encoder
    calls, made = [], (ctypes.c_ubyte * 128)(*range(128))
    fake_map = type("Map", (), {"getPtr": lambda self: ctypes.addressof(made)})()
    monkeypatch.setattr(cu, "cuTensorMapEncodeTiled", lambda *a: calls.append(a) or (cu.CUresult.CUDA_SUCCESS, fake_map))
    fill, slot = derived_encoder((64, 128, 128), parse_type("bf16")), (ctypes.c_ubyte * 128)()
    fill(slot, 1 << 20, 100, 4096, 128)
    fill(slot, 1 << 20, 100, 4096, 128)  # kept: the driver is asked once
    (dtype, rank, address, dims, strides, box, steps, _, swizzle, _, _), = calls
    assert (dtype, rank, address) == (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, 1 << 20)
    assert [int(x) for x in dims] == [100, 4096] and [int(x) for x in strides] == [256]
    assert [int(x) for x in box] == [64, 128] and swizzle == cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert bytes(slot) == bytes(made)
    for inner, outer, stride in ((0, 4096, 128), (100, 4096, 64), (100, 4096, 100)):  # empty; overlapping; 200 B rows
        with pytest.raises(DerivedMapUnusable):
            fill(slot, 1 << 20, inner, outer, stride)
    assert len(calls) == 1
