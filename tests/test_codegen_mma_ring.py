"""Pipelined dots without wgmma (sm_80-sm_89, and Hopper kernels of fewer than 4 warps):
cp.async rings of swizzled tiles that `mma_dot` reads by ldmatrix. The kernels run on the
CPU emulator (the portable build takes the same rings, copying at once) against NumPy, and
their sm_80 PTX is checked as text and assembled."""
import re

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir, nvjitlink, occupancy
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def _ring_matmul(A, B, C, K, lda, ldb, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 A_T: tl.constexpr, B_T: tl.constexpr):
    """C[BM, BN] = A[BM, K] @ B[K, BN], K read up to its edge. A_T: A given as AT[K, BM]
    (M contiguous); B_T: B given as BT[BN, K] (K contiguous). Rows lda / ldb apart."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=C.dtype.element_ty)
    for k in range(0, K, BK):
        kk = k + rk
        if A_T:
            a = tl.load(A + kk[None, :] * lda + rm[:, None], mask=kk[None, :] < K, other=0)
        else:
            a = tl.load(A + rm[:, None] * lda + kk[None, :], mask=kk[None, :] < K, other=0)
        if B_T:
            b = tl.load(B + rn[None, :] * ldb + kk[:, None], mask=kk[:, None] < K, other=0)
        else:
            b = tl.load(B + kk[:, None] * ldb + rn[None, :], mask=kk[:, None] < K, other=0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


@kiln.jit
def _ring_attention(Q, K, V, Out, n_ctx, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    offs_m, offs_n, offs_d = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for start in range(0, n_ctx, BN):
        k = tl.load(K + (start + offs_n)[:, None] * D + offs_d[None, :])
        qk = tl.dot(q, tl.trans(k))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + (start + offs_n)[:, None] * D + offs_d[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_ij
    tl.store(Out + offs_m[:, None] * D + offs_d[None, :], acc / l_i[:, None])


# name -> (input dtype, accumulator dtype, BK): 32 bytes of k per step for every type
TYPES = {"fp16": (np.float16, np.float32, 32), "bf16": (ml_dtypes.bfloat16, np.float32, 32),
         "int8": (np.int8, np.int32, 64), "tf32": (np.float32, np.float32, 16),
         "fp8e4nv": (ml_dtypes.float8_e4m3fn, np.float32, 64), "fp8e5": (ml_dtypes.float8_e5m2, np.float32, 64)}
BM, BN, K, LD = 64, 32, 88, 128  # K: a masked edge in the last step, not a multiple of 16


def _operands(dtype, a_t, b_t):
    rng = np.random.default_rng(3)
    make = (lambda s: rng.integers(-4, 4, s)) if np.dtype(dtype).itemsize == 1 else rng.standard_normal
    A, B = make((BM, K)).astype(dtype), make((K, BN)).astype(dtype)
    a_mem = np.zeros((K, LD) if a_t else (BM, LD), dtype)
    b_mem = np.zeros((BN, LD) if b_t else (K, LD), dtype)
    if a_t:
        a_mem[:, :BM] = A.T
    else:
        a_mem[:, :K] = A
    if b_t:
        b_mem[:, :K] = B.T
    else:
        b_mem[:, :BN] = B
    return A, B, a_mem, b_mem


def _matmul_ir(name, a_t, b_t, num_warps=4, num_stages=3, target="sm_80"):
    dtype, acc, bk = TYPES[name]
    _, _, a_mem, b_mem = _operands(dtype, a_t, b_t)
    k = _ring_matmul.warmup(a_mem, b_mem, np.zeros((BM, BN), acc), K, LD, LD, BM=BM, BN=BN, BK=bk, A_T=a_t, B_T=b_t,
                            num_warps=num_warps, num_stages=num_stages, target=target)
    return k.asm["kir"]


def check_matmul(kir, name, a_t, b_t, num_warps):
    from kiln.codegen.emulate import run_on_cpu
    dtype, acc, _ = TYPES[name]
    A, B, a_mem, b_mem = _operands(dtype, a_t, b_t)
    C = np.zeros((BM, BN), acc)
    run_on_cpu(parse_function(kir), (1,), [a_mem, b_mem, C, K, LD, LD], num_warps=num_warps)
    if name == "tf32":  # the tensor cores read the top 19 bits of each fp32 input
        A, B = ((X.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for X in (A, B))
    return float(np.abs(C - A.astype(np.float64) @ B.astype(np.float64)).max())


def _optimized(kir, target="sm_80", **opts):
    return compile_ir(parse_function(kir), target, opts, link=False).kir


@pytest.mark.parametrize("name,a_t,b_t", [("fp16", False, False), ("fp16", True, False), ("fp16", False, True),
                                          ("bf16", True, True), ("int8", False, True), ("tf32", False, True),
                                          ("int8", False, False), ("tf32", False, False)])
def test_ring_matmul_on_the_emulator_matches_numpy(name, a_t, b_t):
    kir = _matmul_ir(name, a_t, b_t)
    assert "mma_dot" in _optimized(kir, num_warps=4, num_stages=3)
    assert in_child(check_matmul, kir, name, a_t, b_t, 4) < 1e-3


@pytest.mark.parametrize("name", ["fp8e4nv", "fp8e5"])
def test_fp8_dots_run_on_mma_sync_from_sm_89(name):
    kir = _matmul_ir(name, False, True, target="sm_89")
    assert "mma_dot" not in _optimized(kir, num_warps=4, num_stages=3)  # sm_80: no fp8 mma
    assert "mma_dot" in _optimized(kir, "sm_89", num_warps=4, num_stages=3)
    assert in_child(check_matmul, kir, name, False, True, 4) < 1e-3  # small integers: exact in fp8
    kind = {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}[name]
    for stages in (1, 3):  # operands staged from registers; the ring
        k = compile_ir(parse_function(kir), "sm_89", {"num_warps": 4, "num_stages": stages}, check=True)
        assert f"mma.sync.aligned.m16n8k32.row.col.f32.{kind}.{kind}.f32" in k.ptx and k.n_spills == 0


@pytest.mark.parametrize("num_warps", [1, 2, 8])
def test_ring_matmul_with_other_warp_counts(num_warps):
    kir = _matmul_ir("fp16", False, False, num_warps=num_warps)
    assert in_child(check_matmul, kir, "fp16", False, False, num_warps) < 1e-3


def test_8_bit_tiles_stored_n_major_are_staged_and_32_bit_ones_read_as_stored():
    """ldmatrix transposes 16-bit elements only: an N-major 8-bit B (cp.async moves 4 bytes at least)
    is staged, stored K-major each iteration; an N-major 32-bit B stays N-major in its ring, copied 16
    bytes at a time, and the lowering reads its fragments a register a load (emulated below), in whole
    rows XORed in 32-byte units, where those loads take every bank once."""
    tf32 = _optimized(_matmul_ir("tf32", False, False), num_warps=4, num_stages=3)
    assert "mma_dot" in tf32 and "async_copy" in tf32 and "local_store" not in tf32.split("for ")[1]
    allocs = re.findall(r"local_alloc \{offset = \d+\} : (smem<[^>]*>)", tf32)
    assert f"smem<3x16x{BN}xfp32:rowxor32:order1.0>" in allocs  # B [16, BN]: N (dim 1) inner
    int8 = _optimized(_matmul_ir("int8", False, False), num_warps=4, num_stages=3)
    assert "mma_dot" in int8 and "local_store" in int8.split("for ")[1]


@pytest.mark.parametrize("num_warps", [1, 2, 4])
def test_an_n_major_tf32_b_on_the_emulator_matches_numpy(num_warps):
    kir = _matmul_ir("tf32", False, False, num_warps=num_warps)
    assert in_child(check_matmul, kir, "tf32", False, False, num_warps) < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [1, 2, 4])
def test_an_n_major_tf32_b_matches_numpy_on_the_gpu(num_warps, cuda_torch):
    """On Hopper one and two warps run mma.sync (four, wgmma); every warp count earlier."""
    torch = cuda_torch
    dtype, acc, bk = TYPES["tf32"]
    A, B, a_mem, b_mem = _operands(dtype, False, False)
    got = torch.zeros((BM, BN), device="cuda")
    _ring_matmul[(1,)](torch.from_numpy(a_mem).cuda(), torch.from_numpy(b_mem).cuda(), got, K, LD, LD, BM=BM, BN=BN,
                       BK=bk, A_T=False, B_T=False, num_warps=num_warps, num_stages=3)
    np.testing.assert_allclose(got.cpu().numpy(), A.astype(np.float64) @ B.astype(np.float64), atol=0.05, rtol=0.01)


def test_an_n_major_tf32_b_ptx_for_sm_80():
    """Copies of 16 bytes (not 4, element by element, into a K-major tile); B's fragments by
    `ld.shared.b32`, A's still by ldmatrix."""
    kir = _matmul_ir("tf32", False, False)
    k = compile_ir(parse_function(kir), "sm_80", {"num_warps": 4, "num_stages": 3}, check=True)
    sizes = set(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]*\], \[[^\]]*\], (\d+)", k.ptx))
    assert sizes == {"16"}
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in k.ptx and "ld.shared.b32" in k.ptx
    assert k.n_spills == 0


def check_attention(kir):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(5)
    n, d = 128, 32
    q, k, v = (rng.standard_normal((n if i else 64, d)).astype(np.float16) for i in range(3))
    out = np.zeros((64, d), np.float32)
    run_on_cpu(parse_function(kir), (1,), [q, k, v, out, n], num_warps=4)
    s = q.astype(np.float64) @ k.astype(np.float64).T
    p = np.exp2(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)
    return float(np.abs(out - ref).max())


def _attention_ir():
    x = np.zeros((128, 32), np.float16)
    return _ring_attention.warmup(x, x, x, np.zeros((64, 32), np.float32), 128, D=32, BM=64, BN=32,
                                  num_warps=4, num_stages=2, target="sm_80").asm["kir"]


def test_attention_on_the_ring_keeps_q_in_shared_memory_and_p_in_registers():
    kir = _attention_ir()
    text = _optimized(kir, num_warps=4, num_stages=2)
    loop = text[text.index(" = for "):]
    assert text.count("mma_dot") == 2 and "local_store" not in loop
    # Q, once, stored after the ring's first copies went out (the barrier at the loop's top orders it)
    assert text.index("async_copy") < text.index("local_store") < text.index(" = for ")
    # both accumulators hold whole rows per warp, so P is the second dot's A as it is
    assert loop.count(":blocked:spt1.2:tpw8.4:wpc4.1:order1.0>") >= 2
    assert not [line for line in loop.splitlines() if "= convert_layout" in line and "xfp16:" in line]
    assert in_child(check_attention, kir) < 2e-2  # P rounded to fp16


def test_p_is_staged_where_a_warp_cannot_hold_whole_rows():
    """BM = 64 over 8 warps: 8 rows per warp, less than an m16 tile."""
    x = np.zeros((128, 32), np.float16)
    kir = _ring_attention.warmup(x, x, x, np.zeros((64, 32), np.float32), 128, D=32, BM=64, BN=32,
                                 num_warps=8, num_stages=2, target="sm_80").asm["kir"]
    loop = _optimized(kir, num_warps=8, num_stages=2)
    loop = loop[loop.index(" = for "):]
    assert loop.count("mma_dot") == 2 and loop.count("local_store") == 1


def test_ring_matmul_ptx_for_sm_80():
    kir = _matmul_ir("fp16", True, False)
    k = compile_ir(parse_function(kir), "sm_80", {"num_warps": 4, "num_stages": 3}, check=True)
    ptx = k.ptx
    assert "cp.async.cg.shared.global" in ptx and re.search(r"cp\.async\.wait_group\s+1;", ptx)
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx  # A stored M-major, B N-major
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "fence.proxy" not in ptx and "wgmma" not in ptx  # neither exists before sm_90
    assert "ld.local" not in ptx and "st.local" not in ptx and k.n_spills == 0
    loop = re.search(r"^\$L__BB0_(\d+):\n(.*?)bra\s+\$L__BB0_\1;", ptx, re.S | re.M)
    assert loop is not None and loop.group(2).count("bar.sync") == 1  # one barrier per k-step
    nvjitlink.link_cubin(ptx, parse_target("sm_80"))  # PTX 7.0: masks as src-sizes, not ignore-src


@kiln.jit
def _dequant_matmul(A, W, S, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ (W * S): int8 weights W [K, BN] scaled per column and per k-block by S
    [K // BK, BN], converted to fp16 in the loop (a B operand computed in the loop)."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        w = tl.load(W + (k + rk)[:, None] * BN + rn[None, :])
        s = tl.load(S + (k // BK) * BN + rn)
        acc = tl.dot(a, w.to(tl.float16) * s[None, :], acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def _dequant_operands(BMx=64, BNx=64, Kx=256, BKx=64):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((BMx, Kx)).astype(np.float16)
    w = rng.integers(-100, 100, (Kx, BNx)).astype(np.int8)
    s = (rng.random((Kx // BKx, BNx)) / 64).astype(np.float16)
    return a, w, s


def _dequant_ir(num_warps=4, target="sm_90a"):
    a, w, s = _dequant_operands()
    return _dequant_matmul.warmup(a, w, s, np.zeros((64, 64), np.float32), 256, BM=64, BN=64, BK=64,
                                  num_warps=num_warps, num_stages=3, target=target).asm["kir"]


def _dequant_reference(a, w, s, bk):
    b = w.astype(np.float16) * np.repeat(s, bk, axis=0)  # rounded to fp16 as the kernel does
    return a.astype(np.float64) @ b.astype(np.float64)


def check_dequant(kir, num_warps):
    from kiln.codegen.emulate import run_on_cpu
    a, w, s = _dequant_operands()
    c = np.zeros((64, 64), np.float32)
    run_on_cpu(parse_function(kir), (1,), [a, w, s, c, 256], num_warps=num_warps)
    return float(np.abs(c - _dequant_reference(a, w, s, 64)).max())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_b_computed_in_the_loop_is_staged_and_its_loads_come_through_a_ring(target):
    """The raw weights are copied ahead like any ring load and read back (`local_load`);
    the converted B is stored each iteration into a tile, N-major, that the dot reads."""
    text = _optimized(_dequant_ir(target=target), target, num_warps=4, num_stages=3)
    loop = text[text.index(" = for "):]
    dot = "warp_group_dot" if target == "sm_90a" else "mma_dot"
    assert dot in loop and " dot " not in loop
    assert loop.count("local_load") == 1 and loop.count("local_store") == 1
    assert "smem<64x64xint8:swizzle0:order1.0>" in text  # the weights' ring tile
    # the scales: loaded one iteration ahead (first before the loop), in a slice of the
    # weights' layout, so scaling the tile converts nothing
    scales = [line for line in text.splitlines() if re.search(r"= load .* : <64xfp16:slice0:", line)]
    assert len(scales) == 2 and text.index(scales[0]) < text.index(" = for ") < text.index(scales[1])
    assert not [line for line in loop.splitlines() if "= convert_layout" in line and "xfp16:" in line]
    assert re.search(r"local_alloc \{offset = \d+\} : smem<\d+x64x64xfp16:swizzle128:order1.0>", text)  # B, N-major
    k = compile_ir(parse_function(_dequant_ir(target=target)), target, {"num_warps": 4, "num_stages": 3}, check=True)
    assert k.n_spills == 0 and ("wgmma.mma_async" in k.ptx) == (target == "sm_90a")
    # each thread's 64 / 8 = 8 scales are contiguous: one 16-byte load, not 8 of 2 bytes
    assert "ld.global.b16" not in k.ptx and re.search(r"ld\.global\.v4\.b32", k.ptx)


def test_a_staged_b_over_two_warpgroups_takes_a_tight_ring_where_it_fits_two_ctas():
    """W8A16 at 128x128x64, 3 stages, 8 warps: S + 1 = 4 ring tiles of 24 KB and the staged B
    leave room for one CTA per SM, 3 tiles for two. The B tile has 2 slots (the barrier at
    the top of each iteration follows every warpgroup's wait for the dot two back)."""
    a, w, s = _dequant_operands(128, 128, 1024, 64)
    kir = _dequant_matmul.warmup(a, w, s, np.zeros((128, 128), np.float32), 1024, BM=128, BN=128, BK=64,
                                 num_warps=8, num_stages=3, target="sm_90a").asm["kir"]
    text = _optimized(kir, "sm_90a", num_warps=8, num_stages=3)
    allocs = re.findall(r"local_alloc \{offset = \d+\} : (smem<[^>]*>)", text)
    assert "smem<3x128x64xfp16:swizzle128:order1.0>" in allocs  # A: 3 tiles, no spare
    assert "smem<3x64x128xint8:swizzle0:order1.0>" in allocs  # the raw weights
    assert "smem<2x64x128xfp16:swizzle128:order1.0>" in allocs  # the converted B
    loop = text[text.index(" = for "):]
    body = loop[:loop.index("yield")]
    # tight: both warpgroups retired the dots of i - 1 (a barrier after the waits) before
    # the copies of i + 2 overwrite their tiles
    after_wait = body[body.index("warp_group_dot_wait"):]
    assert after_wait.index("barrier") < after_wait.index("async_copy")
    k = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 8, "num_stages": 3})
    assert k.metadata["shared"] <= 113 * 1024 and k.n_spills == 0
    assert occupancy.ctas_per_sm(k.n_regs, 256, k.metadata["shared"], 90) == 2  # registers capped to 128


def test_a_b_computed_in_the_loop_on_the_emulator_matches_numpy():
    assert in_child(check_dequant, _dequant_ir(), 4) < 1e-2


@pytest.mark.gpu
def test_a_b_computed_in_the_loop_on_the_gpu_matches_numpy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, w, s = _dequant_operands(128, 128, 1024, 64)
    got = torch.zeros((128, 128), device="cuda")
    for warps in (4, 8):
        _dequant_matmul[(1,)](*(torch.from_numpy(x).cuda() for x in (a, w, s)), got, 1024, BM=128, BN=128, BK=64,
                              num_warps=warps, num_stages=3)
        np.testing.assert_allclose(got.cpu().numpy(), _dequant_reference(a, w, s, 64), atol=0.05, rtol=1e-3)


@kiln.jit
def _zero_point_matmul(A, W, Z, S, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ ((W - Z) * S) with the product in fp32: int8 weights with a zero point and
    fp32 scale per column and k-block."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        w = tl.load(W + (k + rk)[:, None] * BN + rn[None, :])
        z = tl.load(Z + (k // BK) * BN + rn)
        s = tl.load(S + (k // BK) * BN + rn)
        acc = tl.dot(a, ((w - z[None, :]).to(tl.float32) * s[None, :]).to(tl.float16), acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def check_zero_point(kir, num_warps):
    from kiln.codegen.emulate import run_on_cpu
    a, w, s = _dequant_operands()
    z = np.random.default_rng(5).integers(-3, 4, (4, 64)).astype(np.int8)
    c = np.zeros((64, 64), np.float32)
    run_on_cpu(parse_function(kir), (1,), [a, w, z, s.astype(np.float32), c, 256], num_warps=num_warps)
    b = ((w.astype(np.int32) - np.repeat(z, 64, 0)).astype(np.float32) * np.repeat(s.astype(np.float32), 64, 0))
    return float(np.abs(c - a.astype(np.float64) @ b.astype(np.float16).astype(np.float64)).max())


def test_a_scale_beside_converted_weights_takes_their_layout_through_a_zero_point():
    """The scale multiplies (w - z).to(fp32), not the tile read back itself: its load still
    takes a slice of the read-back tile's layout, so the 64x64 fp32 product (the
    accumulator's shape) is not converted through shared memory every iteration."""
    a, w, s = _dequant_operands()
    z = np.zeros((4, 64), np.int8)
    kir = _zero_point_matmul.warmup(a, w, z, s.astype(np.float32), np.zeros((64, 64), np.float32), 256, BM=64, BN=64,
                                    BK=64, num_warps=4, num_stages=3, target="sm_90a").asm["kir"]
    for target in ("sm_90a", "sm_80"):
        text = _optimized(kir, target, num_warps=4, num_stages=3)
        loop = text[text.index(" = for "):text.index("yield")]
        assert not [line for line in loop.splitlines() if "= convert_layout" in line and "64x64xfp" in line]
    assert in_child(check_zero_point, kir, 4) < 1e-2


@kiln.jit
def _linear_dequant(A, W, S, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ (W * S)^T with W int8 as nn.Linear keeps it, [BN, K]: each tile is read
    transposed, and its transpose moves through shared memory (scratch beside the rings)."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        w = tl.trans(tl.load(W + rn[:, None] * K + (k + rk)[None, :]))
        s = tl.load(S + (k // BK) * BN + rn)
        acc = tl.dot(a, w.to(tl.float16) * s[None, :], acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def test_rings_are_planned_again_when_lowering_scratch_overflows_shared_memory():
    """64x128x128 over 4 stages: 5 ring tiles of 32 KB and the staged B fit the budget the
    ring planner sees, but the transpose's scratch does not fit beside them; the compile
    plans the rings again with that much less room and the kernel fits."""
    from kiln.codegen import occupancy
    a = np.zeros((64, 512), np.float16)
    w = np.zeros((128, 512), np.int8)
    s = np.zeros((4, 128), np.float16)
    kir = _linear_dequant.warmup(a, w, s, np.zeros((64, 128), np.float32), 512, BM=64, BN=128, BK=128,
                                 num_warps=4, num_stages=4, target="sm_90a").asm["kir"]
    k = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 4, "num_stages": 4}, check=True)
    assert k.metadata["shared"] <= occupancy.max_shared_per_cta(90) and "wgmma.mma_async" in k.ptx


@kiln.jit
def _int4_matmul(A, B, S, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    """GPTQ-style W4A16: eight int4 weights per int32 along K (B is [K // 8, BN]), each row of
    the loaded tile repeated for the eight rows it packs and shifted to its own nibble."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * K + rk[None, :]
    b_ptrs = B + (rk[:, None] // 8) * BN + rn[None, :]
    shifter = (rk % 8) * 4
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K // BK):
        b = (tl.load(b_ptrs) >> shifter[:, None]) & 0xF
        s = tl.load(S + ((k * BK) // GROUP) * BN + rn)
        acc += tl.dot(tl.load(a_ptrs), (b - 8).to(tl.float16) * s[None, :])
        a_ptrs += BK
        b_ptrs += (BK // 8) * BN
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def _int4_operands(M=64, N=64, K=256, group=64):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((M, K)) / 4).astype(np.float16)
    q = rng.integers(0, 16, (K, N)).astype(np.uint32)
    packed = np.zeros((K // 8, N), np.uint32)
    for i in range(8):
        packed |= q[i::8] << (4 * i)
    s = (rng.random((K // group, N)) / 8 + 0.01).astype(np.float16)
    want = a.astype(np.float64) @ ((q.astype(np.float16) - np.float16(8)) * np.repeat(s, group, 0)).astype(np.float64)
    return a, packed.view(np.int32), s, want


def check_int4(kir, num_warps):
    from kiln.codegen.emulate import run_on_cpu
    a, b, s, want = _int4_operands()
    c = np.zeros((64, 64), np.float32)
    run_on_cpu(parse_function(kir), (1,), [a, b, s, c, 256], num_warps=num_warps)
    return float(np.abs(c - want).max())


def test_int4_weights_unpacked_in_the_loop_come_through_a_ring_and_match_numpy():
    a, b, s, _ = _int4_operands()
    kir = _int4_matmul.warmup(a, b, s, np.zeros((64, 64), np.float32), 256, BM=64, BN=64, BK=64, GROUP=64,
                              num_warps=4, num_stages=3, target="sm_90a").asm["kir"]
    text = _optimized(kir, "sm_90a", num_warps=4, num_stages=3)
    loop = text[text.index(" = for "):]
    assert "warp_group_dot" in loop and "local_load" in loop and "smem<64x64xint32:" in loop
    assert in_child(check_int4, kir, 4) < 1e-4


@pytest.mark.gpu
def test_int4_weights_on_the_gpu_match_numpy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, b, s, want = _int4_operands()
    got = torch.zeros((64, 64), device="cuda")
    for warps in (4, 8):
        _int4_matmul[(1,)](*(torch.from_numpy(x).cuda() for x in (a, b, s)), got, 256, BM=64, BN=64, BK=64, GROUP=64,
                           num_warps=warps, num_stages=3)
        np.testing.assert_allclose(got.cpu().numpy(), want, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_tile_too_small_for_4_byte_copies_per_thread_stays_off_the_ring(target):
    """64x8 int8 B over 8 warps: 2 bytes per thread, and cp.async moves 4 at least: B is staged (stored
    from registers each iteration), on mma.sync (sm_80) or wgmma (sm_90a)."""
    dtype, acc, bk = TYPES["int8"]
    x = np.zeros((128, 128), dtype)
    kir = _ring_matmul.warmup(x, x, np.zeros((128, 8), acc), 128, 128, 128, BM=128, BN=8, BK=bk, A_T=False, B_T=True,
                              num_warps=8, num_stages=2, target=target).asm["kir"]
    k = compile_ir(parse_function(kir), target, {"num_warps": 8, "num_stages": 2}, check=True)
    assert ("wgmma.mma_async" if target == "sm_90a" else "mma.sync") in k.ptx
    assert "local_store" in k.kir


def _lone_warp_ir(target):
    x = np.zeros((16, 1024), np.float16)
    return _ring_matmul.warmup(x, np.zeros((1024, 1024), np.float16), np.zeros((16, 256), np.float32), 1024, 1024,
                               1024, BM=16, BN=256, BK=64, A_T=False, B_T=False, num_warps=1, num_stages=4,
                               target=target).asm["kir"]


@pytest.mark.parametrize("target,slots,ctas", [("sm_90a", 3, 2), ("sm_80", 4, 1)])
def test_a_lone_one_warp_ring_gives_up_a_stage_where_that_fits_a_second_cta(target, slots, ctas):
    """16x256x64 fp16 on one warp, 4 stages: 4 slots of 34 KB leave the H100's SM to one CTA (one
    warp!), 3 slots to two (triton_kernels' small-M `_matmul` builds; Triton's takes 104,448
    bytes too). The A100's 164 KB holds one CTA at either depth, so its ring keeps its stages."""
    k = compile_ir(parse_function(_lone_warp_ir(target)), target, {"num_warps": 1, "num_stages": 4})
    allocs = re.findall(r"local_alloc \{offset = \d+\} : (smem<[^>]*>)", k.kir)
    assert f"smem<{slots}x64x256xfp16:swizzle128:order1.0>" in allocs
    assert k.metadata["shared"] == slots * 34816
    assert occupancy.ctas_per_sm(k.n_regs, 32, k.metadata["shared"], int(target[3:5])) == ctas


@pytest.mark.gpu
def test_the_lone_one_warp_tile_on_three_slots_matches_numpy_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((16, 1000)).astype(np.float16), rng.standard_normal((1000, 256)).astype(np.float16)
    got = torch.zeros((16, 256), device="cuda")
    _ring_matmul[(1,)](torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), got, 1000, 1000, 256, BM=16, BN=256,
                       BK=64, A_T=False, B_T=False, num_warps=1, num_stages=4)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.cpu().numpy(), want, atol=2e-2, rtol=1e-3)


def test_the_verifier_checks_mma_dot():
    from kiln.ir import verify
    from kiln.ir.verifier import VerificationError
    text = """kernel @k() {
  %r = local_alloc : smem<32x16xint8:swizzle0:order0.1>
  %a = constant {value = 1} : <16x32xint8>
  %c = constant {value = 0} : <16x16xint32>
  %d = mma_dot %a, %r, %c : <16x16xint32>
  return
}
"""
    with pytest.raises(VerificationError, match="mma_dot reads b from a shared tile, a from a shared tile or"):
        verify(parse_function(text))  # an 8-bit A is not read from registers
    verify(parse_function(text.replace("%a = constant {value = 1} : <16x32xint8>",
                                       "%a = local_alloc : smem<16x32xint8:swizzle32:order1.0>")))
    tf32 = """kernel @k() {
  %a = constant {value = 1.0} : <16x16xfp32>
  %b = constant {value = 1.0} : <16x16xfp32>
  %c = constant {value = 0.0} : <16x16xfp32>
  %d = mma_dot %a, %b, %c : <16x16xfp32>
  return
}
"""
    verify(parse_function(tf32))  # an fp32 (tf32) B may be read from registers too (one warp: the lowering says)
    with pytest.raises(VerificationError, match="mma_dot reads b from a shared tile"):
        verify(parse_function(text.replace("%r = local_alloc : smem<32x16xint8:swizzle0:order0.1>",
                                           "%r = constant {value = 1} : <32x16xint8>").replace(
            "%a = constant {value = 1} : <16x32xint8>", "%a = local_alloc : smem<16x32xint8:swizzle32:order1.0>")))


def test_ldmatrix_fragments_add_immediates_to_a_few_addresses():
    """Fragments a constant apart (wgmma.constant_step) share one 32-bit shared address, each ldmatrix adding its
    immediate, where each kept a 64-bit address of its own live through the loop: tutorial 03's fp16 16x256x64 on
    one warp issued 68 ldmatrix through 68 addresses and spilled 248 bytes."""
    from bench_support import bench_kernels
    size = 1024
    a, b, c = (np.zeros((size, size), np.float16) for _ in range(3))
    k = bench_kernels().matmul_kernel.warmup(a, b, c, size, size, size, size, 1, size, 1, size, 1, BLOCK_M=16,
                                             BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=1, num_stages=4, grid=(1,),
                                             target="sm_90a")
    addresses = re.findall(r"ldmatrix[^\[]*\[(%rd?\d+)(?:\+-?\d+)?\]", k.asm["ptx"])
    assert len(addresses) >= 64 and len(set(addresses)) <= 8 and all(not r.startswith("%rd") for r in addresses)
    assert k.metadata["n_spills"] == 0
