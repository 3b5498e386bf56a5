"""fp8 dots that no fp8 instruction runs (not taken by wgmma, on a target whose PTX has no fp8 mma.sync:
kiln's sm_90a code is PTX 8.0) run on fp16 mma.sync with their operands cast to fp16, exactly, as Triton's
do there (codegen/passes/fp8_dot_upcast.py); before, they ran on FMAs (a 128x128x64 block: 168 bytes of
spills). At 4 warps and more the 128-row blocks here run on wgmma instead (standalone_wgmma,
tests/test_codegen_fp8_standalone_dots.py); at 2 warps, half a warpgroup, on mma.sync."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.passes import fp8_dot_upcast
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function


@kiln.jit
def block_dot(X, Y, W, Z, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CHAIN: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    z = tl.dot(tl.load(X + rm[:, None] * BK + rk[None, :]), tl.load(Y + rk[:, None] * BN + rn[None, :]))
    if CHAIN:  # the product rounded to fp8 and multiplied again (upstream's chain-dot epilogue)
        w = tl.load(W + rn[:, None] * BN + rn[None, :])
        z = tl.dot(z.to(w.dtype), w)
    tl.store(Z + rm[:, None] * BN + rn[None, :], z)


def _compiled(fp8, target, bm=128, bn=128, bk=64, chain=False, warps=4):
    x, y, w = (kiln.reinterpret(np.zeros(shape, np.uint8), fp8) for shape in ((bm, bk), (bk, bn), (bn, bn)))
    return block_dot.warmup(x, y, w, np.zeros((bm, bn), np.float32), BM=bm, BN=bn, BK=bk, CHAIN=chain,
                             num_warps=warps, grid=(1,), target=target)


@pytest.mark.parametrize("fp8", [tl.float8e4nv, tl.float8e5])
@pytest.mark.parametrize("bm, bn, bk, chain, warps", [(128, 128, 64, False, 2), (64, 128, 64, True, 2),
                                                     (16, 8, 16, False, 4)])
def test_the_dot_runs_on_fp16_mma(fp8, bm, bn, bk, chain, warps):
    kernel = _compiled(fp8, "sm_90a", bm, bn, bk, chain, warps)
    ptx = kernel.asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "fma.rn.f32" not in ptx
    assert kernel.n_spills == 0


@kiln.jit
def _mixed_dot(X, Y, Z, F16_OUT: tl.constexpr):
    r = tl.arange(0, 64)
    z = tl.dot(tl.load(X + r[:, None] * 64 + r[None, :]), tl.load(Y + r[:, None] * 64 + r[None, :]),
               out_dtype=tl.float16 if F16_OUT else tl.float32)
    tl.store(Z + r[:, None] * 64 + r[None, :], z)


@pytest.mark.parametrize("f16_out, instruction", [(False, "f32.f16.f16.f32"), (True, "f16.f16.f16.f16")])
def test_an_e4m3_by_e5m2_dot_runs_on_fp16_mma_into_its_accumulators_type(f16_out, instruction):
    x, y = (kiln.reinterpret(np.zeros((64, 64), np.uint8), t) for t in (tl.float8e4nv, tl.float8e5))
    out = np.zeros((64, 64), np.float16 if f16_out else np.float32)
    ptx = _mixed_dot.warmup(x, y, out, F16_OUT=f16_out, num_warps=2, grid=(1,), target="sm_90a").asm["ptx"]
    assert f"mma.sync.aligned.m16n8k16.row.col.{instruction}" in ptx


def test_the_pass_casts_both_operands_and_keeps_the_accumulator():
    fn = parse_function(_compiled(tl.float8e5, "sm_90a").asm["kir"])
    fp8_dot_upcast.apply(fn, PassContext(parse_target("sm_90a"), 4, 3))
    [dot] = [op for op in fn.walk() if op.name == "dot"]
    assert [x.defining_op.name for x in dot.operands[:2]] == ["cast", "cast"]
    assert [x.type.element_ty.name for x in dot.operands] == ["fp16", "fp16", "fp32"]
    assert [x.defining_op.operands[0].type.element_ty.name for x in dot.operands[:2]] == ["fp8e5", "fp8e5"]


def test_targets_with_fp8_mma_and_dots_no_mma_runs_keep_their_fp8():
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in _compiled(tl.float8e4nv, "sm_89").asm["ptx"]
    fn = parse_function(_compiled(tl.float8e4nv, "sm_90a", bm=8, bn=8, bk=16).asm["kir"])
    fp8_dot_upcast.apply(fn, PassContext(parse_target("sm_90a"), 4, 3))
    [dot] = [op for op in fn.walk() if op.name == "dot"]
    assert dot.operands[0].type.element_ty.name == "fp8e4nv"  # 8 rows: no mma tile, so no cast


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("chain", [False, True])
def test_the_upcast_dot_on_the_gpu(dtype, chain, cuda_torch):
    torch = cuda_torch
    fp8 = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(5)
    # small powers of two: every product and sum exact in fp32, so the fp8 rounding of the chain's first
    # product is the same here and there
    values = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
    x, y, w = (values[torch.randint(0, 7, shape, generator=gen)].to(fp8).cuda()
               for shape in ((128, 64), (64, 128), (128, 128)))
    z = torch.zeros(128, 128, device="cuda")
    block_dot[(1,)](x, y, w, z, BM=128, BN=128, BK=64, CHAIN=chain, num_warps=2)  # no wgmma at 2 warps
    want = x.double() @ y.double()
    if chain:  # the fp32 product rounded to fp8, as the kernel's z.to(w.dtype)
        want = want.float().to(fp8).double() @ w.double()
    torch.testing.assert_close(z.double(), want, rtol=0, atol=0)
