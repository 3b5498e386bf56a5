"""A dot operand that no ring copy can lay out as the tensor cores read it: an 8-bit B contiguous
along N (wgmma and ldmatrix read 8-bit tiles K-major, and cp.async moves 4 bytes at least). It is
copied ahead into an N-major ring and copied K-major each iteration (smem_plan's "staged" source; on sm_90
by warps, lower/tile_transpose; elsewhere byte stores that transpose, as Triton's), so the dot stays on the
tensor cores. Before, on sm_90a an e4m3 dot of such a B ran on FMAs and an int8 one on mma.sync. Where B's
columns fill the warpgroups' instructions, sm_90a runs C^T = B^T A^T instead, B^T read from the N-major ring
into registers (lower/transposed_dot): nothing copied back."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import nvjitlink
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

from bench_support import needs_cuda
from test_codegen_emulate import in_child


@kiln.jit
def _matmul(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IMPRECISE: tl.constexpr = None):
    """C = A @ B, A [BM, K] row-major, B [K, BN] row-major (N-major); IMPRECISE: Triton's partial accumulators."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=C.dtype.element_ty)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(B + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def _operands(dtype, bm, bn, k, seed=4):
    """Small integers, exact in e4m3 and in any order of summing."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-4, 5, (bm, k)), rng.integers(-4, 5, (k, bn))
    if dtype == "int8":
        return a.astype(np.int8), b.astype(np.int8), np.zeros((bm, bn), np.int32), a @ b
    import ml_dtypes
    return (a.astype(ml_dtypes.float8_e4m3fn), b.astype(ml_dtypes.float8_e4m3fn), np.zeros((bm, bn), np.float32),
            a @ b)


def _compiled(dtype, target, bm=128, bn=128, bk=64, warps=8):
    a, b, c, _ = _operands(dtype, 64, 64, 64)
    if dtype != "int8":
        a, b = (kiln.reinterpret(x.view(np.uint8), tl.float8e4nv) for x in (a, b))
    return _matmul.warmup(a, b, c, 4096, BM=bm, BN=bn, BK=bk, grid=(1,), target=target, num_warps=warps,
                          num_stages=3)


@pytest.mark.parametrize("dtype,instruction", [("float8e4nv", "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"),
                                               ("int8", "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8")])
def test_an_n_major_8_bit_b_is_transposed_into_a_k_major_tile_for_wgmma(dtype, instruction):
    # 64 columns of B on 8 warps: fewer than the transposed product's two warpgroups take (below)
    ptx = _compiled(dtype, "sm_90a", bn=64).asm["ptx"]
    assert instruction in ptx
    assert "fma.rn.f32" not in ptx and "mma.sync" not in ptx
    # the transposing copy: 16-bit pairs read transposed, bytes regrouped, stored (lower/tile_transpose)
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx and "stmatrix.sync.aligned.m8n8.x4" in ptx
    assert "st.shared.b8" not in ptx
    assert "cp.async.cg.shared.global" in ptx  # B itself still copied ahead, 16 bytes at a time


@pytest.mark.parametrize("dtype,instruction", [("float8e4nv", "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"),
                                               ("int8", "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8")])
def test_an_n_major_8_bit_b_is_read_into_registers_as_the_transposed_products_a(dtype, instruction):
    # C^T = B^T A^T (lower/transposed_dot): B^T's fragments by ldmatrix.trans from B's N-major ring, its bytes
    # regrouped by prmt, A's K-major tile the instruction's B (N = BM); nothing stored back
    ptx = _compiled(dtype, "sm_90a").asm["ptx"]
    assert re.search(re.escape(instruction) + r" \{[^}]*\}, \{%r", ptx)
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 2  # a warp's 16 columns, 2 x 32 of k
    assert ptx.count("prmt.b32") >= 8 and "stmatrix" not in ptx and "st.shared.b8" not in ptx
    assert "cp.async.cg.shared.global" in ptx
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert "C751" not in info  # ptxas neither serializes the wgmmas nor injects waits for their register A


def _emulated(dtype, bm, bn, bk, k, warps):
    from kiln.codegen.emulate import run_on_cpu
    a, b, c, want = _operands(dtype, bm, bn, k)
    kernel = _compiled(dtype, "sm_89", bm, bn, bk, warps)
    args = [a, b] if dtype == "int8" else [a.view(np.uint8), b.view(np.uint8)]  # the emulator takes the bytes
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), args + [c, k], num_warps=warps)
    return c, want


@pytest.mark.parametrize("dtype,bm,bn,bk,k,warps", [("int8", 64, 64, 64, 128, 4), ("int8", 32, 64, 32, 96, 2),
                                                    ("float8e4nv", 64, 64, 64, 128, 4)])
def test_the_emulated_mma_reads_the_transposed_tile(dtype, bm, bn, bk, k, warps):
    got, want = in_child(_emulated, dtype, bm, bn, bk, k, warps, timeout=300)
    np.testing.assert_array_equal(got, want)


def test_the_sm80_int8_dot_reads_its_staged_tile_with_ldmatrix():
    ptx = _compiled("int8", "sm_80", 64, 64, 64, 4).asm["ptx"]
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in ptx and "ldmatrix" in ptx
    assert re.search(r"st\.shared\.(v2\.)?b8", ptx)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "int8"])
@pytest.mark.parametrize("bm,bn,bk,warps", [(128, 128, 64, 8), (128, 128, 128, 4), (64, 64, 128, 4), (128, 64, 64, 8),
                                             (64, 32, 128, 4), (128, 32, 32, 4)])
def test_n_major_8_bit_matmul_on_the_gpu(dtype, bm, bn, bk, warps):
    # the first three run the transposed product (lower/transposed_dot); the rest have fewer columns than it takes
    # and are staged: the transposing copy's blocks of 32 x 16 bytes over 4 and 8 warps, one or two blocks a warp;
    # the last shape has two blocks for four warps: byte stores (the copy's share would not be whole)
    import torch
    gen = torch.Generator().manual_seed(6)
    a, b = torch.randint(-4, 5, (bm, 512), generator=gen), torch.randint(-4, 5, (512, bn), generator=gen)
    want = a @ b
    out_type = torch.int32 if dtype == "int8" else torch.float32
    c = torch.zeros(bm, bn, dtype=out_type, device="cuda")
    _matmul[(1,)](a.to(getattr(torch, dtype)).cuda(), b.to(getattr(torch, dtype)).cuda(), c, 512, BM=bm, BN=bn,
                  BK=bk, num_warps=warps, num_stages=3)
    assert torch.equal(c.cpu().to(torch.int64), want)


@kiln.jit
def _matmul_descriptors(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The same through host descriptors: B [K, BN] by TMA into an N-major ring, copied K-major."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([0, k]), b_desc.load([k, 0]), acc)
    c_desc.store([0, 0], acc)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("bm,bn,bk,warps", [(128, 128, 128, 4), (128, 128, 64, 8)])
def test_n_major_fp8_matmul_through_host_descriptors_on_the_gpu(bm, bn, bk, warps):
    import torch
    from kiln.tools.tensor_descriptor import TensorDescriptor
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randint(-4, 5, (bm, 512), generator=gen), torch.randint(-4, 5, (512, bn), generator=gen)
    c = torch.zeros(bm, bn, dtype=torch.float32, device="cuda")
    a8, b8 = (x.to(torch.float8_e4m3fn).cuda() for x in (a, b))
    _matmul_descriptors[(1,)](TensorDescriptor.from_tensor(a8, [bm, bk]), TensorDescriptor.from_tensor(b8, [bk, bn]),
                              TensorDescriptor.from_tensor(c, [bm, bn]), 512, BM=bm, BN=bn, BK=bk, num_warps=warps,
                              num_stages=3)
    assert torch.equal(c.cpu().to(torch.int64), a @ b)


def test_a_staged_operand_knows_which_of_its_dims_memory_ran_along():
    # smem_plan stores a 16-bit B computed in the loop K-major where the memory behind it runs along K
    # (mxfp4 weights [N, K/2] unpacked and read transposed), N-major otherwise: the dim is followed back
    # through joins (a nibble pair's dim is the finest), reshapes and transposes
    from kiln.codegen.passes.smem_plan import _reshaped_dim
    assert _reshaped_dim((128, 64, 2), (128, 128), 2) == 1  # the unpacked pairs: K again
    assert _reshaped_dim((128, 128), (4, 32, 128), 0) == 1  # K split into groups of 32
    assert _reshaped_dim((4, 32, 128), (128, 128), 1) == 0  # and merged back
    assert _reshaped_dim((128, 128), (4, 32, 128), 1) == 2
    assert _reshaped_dim((8, 16), (128,), 0) is None  # no dim of the result has that stride


@kiln.jit
def _squared_b(A, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STEPS: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        b = (rk[:, None] + rn[None, :] + k).to(tl.float16)
        for _ in tl.static_range(STEPS):
            b = b * b + b  # each value read twice
        acc = tl.dot(tl.load(A + rm[:, None] * K + (k + rk)[None, :]), b, acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def test_a_staged_operand_read_twice_at_every_step_is_traced_once():
    # smem_plan follows a staged B back to its loads: each value once, or 40 steps of `b * b + b` are 2**40
    # walks (the compile never ended); here no load is behind B, so its tile stays N-major
    from kiln.codegen.pipeline import PassContext, run_passes
    from kiln.codegen.target import parse_target
    f = np.zeros((64, 64), np.float16)
    built = _squared_b.warmup(f, np.zeros((64, 64), np.float32), 256, BM=64, BN=64, BK=64, STEPS=40, num_warps=4,
                              grid=(1,), target="sm_90a")
    fn = parse_function(built.asm["kir"])
    run_passes(fn, PassContext(parse_target("sm_90a"), 4, 3))
    [store] = [op for op in fn.walk() if op.name == "local_store"]
    assert tuple(store.operands[1].type.order) == (1, 0) and "wgmma.mma_async" in built.asm["ptx"]


def _fp8_zeros(rows, cols):
    return kiln.reinterpret(np.zeros((rows, cols), np.uint8), tl.float8e4nv)


@pytest.mark.parametrize("c_dtype,imprecise,a_operand", [(np.float16, None, r"\{"), (np.float32, 32, "%rd")])
def test_fp16_accumulators_run_the_transposed_product_and_partial_sums_stay_staged(c_dtype, imprecise, a_operand):
    ptx = _matmul.warmup(_fp8_zeros(128, 512), _fp8_zeros(512, 128), np.zeros((128, 128), c_dtype), 512,
                         BM=128, BN=128, BK=128, IMPRECISE=imprecise, grid=(1,), target="sm_90a",
                         num_warps=4, num_stages=3).asm["ptx"]
    accumulators = "f16" if c_dtype == np.float16 else "f32"
    # the transposed product's A is B^T in registers; the staged one's a descriptor of the restaged tile
    instruction = rf"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.{accumulators}\.e4m3\.e4m3"
    assert re.search(rf"{instruction} \{{[^}}]*\}}, {a_operand}", ptx)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("c_dtype,imprecise", [("float16", None), ("float32", 32), ("float32", 128)])
def test_n_major_fp8_with_fp16_accumulators_and_partial_sums_on_the_gpu(c_dtype, imprecise):
    # (fp16 accumulators run the transposed product, partial sums the restage) -1, 0, 1: every partial sum
    # (at most 512) exact in fp16 too
    import torch
    gen = torch.Generator().manual_seed(8)
    a, b = torch.randint(-1, 2, (128, 512), generator=gen), torch.randint(-1, 2, (512, 128), generator=gen)
    c = torch.zeros(128, 128, dtype=getattr(torch, c_dtype), device="cuda")
    _matmul[(1,)](a.to(torch.float8_e4m3fn).cuda(), b.to(torch.float8_e4m3fn).cuda(), c, 512, BM=128, BN=128,
                  BK=128, IMPRECISE=imprecise, num_warps=4, num_stages=3)
    assert torch.equal(c.cpu().to(torch.int64), a @ b)
