"""int8 dots on Hopper's tensor cores, on a CPU: a pipelined int8 x int8 -> int32 loop
becomes `warp_group_dot` on rings of K-major int8 tiles (as fp8's: 8-bit tiles have no
transposed read), lowered to `wgmma.mma_async ... .s32.s8.s8` with int32 accumulators;
sm_80 keeps `mma.sync` (m16n8k32 s8). tests/test_gpu.py checks the numbers."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import nvjitlink
from kiln.ir.layout import Wgmma, wgmma_layout
from kiln.codegen.passes import canonicalize, cse, dce, descriptor_loads, dot_accumulate, smem_alloc, smem_pipeline
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify


@kiln.jit
def _int8_matmul(A, B, C, M, N, K, sam, sak, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM) % M
    rn = tl.arange(0, BN) % N
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = B + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(C + rm[:, None] * N + rn[None, :], acc)


def _compiled(target="sm_90a", b_k_major=True, BM=128, BN=128, BK=64, num_warps=4, num_stages=3):
    x, c = np.zeros((256, 256), np.int8), np.zeros((256, 256), np.int32)
    b_strides = (1, 256) if b_k_major else (256, 1)
    return _int8_matmul.warmup(x, x, c, 256, 256, 256, 256, 1, *b_strides, BM=BM, BN=BN, BK=BK,
                               num_warps=num_warps, num_stages=num_stages, grid=(1,), target=target)


def _pipelined(kir, num_warps=4, num_stages=3):
    fn = parse_function(kir)
    ctx = PassContext(parse_target("sm_90a"), num_warps, num_stages)
    for p in (canonicalize, cse, dot_accumulate, dce, smem_pipeline, descriptor_loads, canonicalize, cse, dce, smem_alloc):
        p.apply(fn, ctx)
        verify(fn)
    return fn


def test_an_int8_matmul_loop_becomes_warp_group_dot_on_rings_of_k_major_tiles():
    fn = _pipelined(_compiled().asm["kir"])
    text = print_function(fn, locs=False)
    # three stages: rings of four tiles; A [128, 64] and B [64, 128] both K-major (B's
    # order 0.1: k inner), 64-byte rows swizzled by 64
    assert "local_alloc {offset = 0} : smem<4x128x64xint8:swizzle64:order1.0>" in text
    assert "local_alloc {offset = 32768} : smem<4x64x128xint8:swizzle64:order0.1>" in text
    loop = next(op for op in fn.walk() if op.name == "for")
    body = loop.regions[0].ops
    dot = next(op for op in body if op.name == "warp_group_dot")
    assert str(dot.results[0].type) == "<128x128xint32>"
    assert [str(v.type) for v in dot.operands[:2]] == ["smem<128x64xint8:swizzle64:order1.0>",
                                                       "smem<64x128xint8:swizzle64:order0.1>"]
    wait = next(op for op in body if op.name == "warp_group_dot_wait")
    assert wait.attrs == {"pending": 1}  # the int32 accumulator stays in flight
    names = [op.name for op in fn.walk()]
    assert "dot" not in names and "load" not in names
    assert [op.name for op in body].count("async_copy") == 2 and names.count("async_copy") == 6  # + 2 stages ahead


def test_int8_wgmma_ptx_has_int32_accumulators_and_no_scales():
    k = _compiled()
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8" in ptx
    assert ptx.count("wgmma.mma_async") == 4  # two k32 steps of the 64-wide tile, two M halves of 128 rows
    # d (int32 registers), a-desc, b-desc, scale-d: the integer form has no negating
    # scales and no transpose flags
    assert re.search(r"m64n128k32\.s32\.s8\.s8 \{(%r\d+, ){63}%r\d+\}, %rd\d+, %rd\d+, p;", ptx)
    assert "mma.sync" not in ptx and ".local" not in ptx and "cp.async.cg.shared.global" in ptx
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert "C751" not in info  # ptxas neither serializes the wgmmas nor injects waits


def test_int8_dots_on_sm_80_keep_mma_sync():
    ptx = _compiled("sm_80").asm["ptx"]
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32" in ptx and "wgmma.mma_async" not in ptx


def test_an_n_major_int8_b_runs_the_transposed_product():
    """wgmma reads 8-bit tiles K-major only: with B's rows along N the product runs as C^T = B^T A^T, B^T read
    from B's ring into registers (ldmatrix.trans, prmt: lower/transposed_dot), nothing copied back."""
    ptx = _compiled(b_k_major=False).asm["ptx"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.s32\.s8\.s8 \{[^}]*\}, \{%r", ptx)
    assert "mma.sync" not in ptx and "stmatrix" not in ptx and "st.shared.b8" not in ptx and ".local" not in ptx
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert "C751" not in info  # ptxas neither serializes the wgmmas nor injects waits


@pytest.mark.parametrize("BM,BN,warps,instr", [(128, 256, 8, "m64n128k32"), (64, 256, 4, "m64n128k32"),
                                               (64, 64, 4, "m64n64k32")])
def test_int8_instructions_are_at_most_224_wide(BM, BN, warps, instr):
    """int8 wgmma takes N = 8, 16, 24, 32, then multiples of 16 up to 224 (the PTX ISA's
    list, as Triton keeps it): a 256-wide share of N is two n128 instructions."""
    assert wgmma_layout((64, 256), 4, int8=True) == Wgmma((4, 1), 128)
    assert wgmma_layout((64, 256), 4) == Wgmma((4, 1), 256)
    assert wgmma_layout((64, 96), 4, int8=True) == Wgmma((4, 1), 96)
    assert wgmma_layout((64, 40), 4, int8=True) == Wgmma((4, 1), 8)
    k = _compiled(BM=BM, BN=BN, BK=64, num_warps=warps)
    ptx = k.asm["ptx"]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k32)\.s32\.s8\.s8", ptx)) == {instr}
    assert ".local" not in ptx and k.n_spills == 0
