"""fp8 dots that no loop pipelined run on wgmma on sm_90a (codegen/passes/standalone_wgmma.py): both
operands stored K-major to shared tiles, a fence and a barrier, the dot issued and awaited. Before, they
ran on fp16 mma.sync with upcast operands (fp8_dot_upcast), which upstream's chain-dot test rejects on
Hopper (it looks for wgmma's m64n128k32 e4m3 / e5m2 instruction)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.passes import standalone_wgmma
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function
from test_codegen_fp8_dot_upcast import block_dot  # one dot, or upstream's chain of two


@kiln.jit
def unpipelined_loop_dot(X, Y, Z, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """A K loop that asks for one stage: smem_pipeline leaves it, so its dot is a standalone one."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, K, BK, num_stages=1):
        x = tl.load(X + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(Y + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(x, y, acc)
    tl.store(Z + rm[:, None] * BN + rn[None, :], acc)


def _fp8(shape, fp8):
    return kiln.reinterpret(np.zeros(shape, np.uint8), fp8)


def _compiled(fp8, target="sm_90a", bm=128, bn=128, bk=64, chain=False, warps=4, fp8_b=None):
    x, y, w = _fp8((bm, bk), fp8), _fp8((bk, bn), fp8_b or fp8), _fp8((bn, bn), fp8)
    return block_dot.warmup(x, y, w, np.zeros((bm, bn), np.float32), BM=bm, BN=bn, BK=bk, CHAIN=chain,
                            num_warps=warps, grid=(1,), target=target)


def _instructions(ptx):
    return sorted(set(re.findall(r"wgmma\.mma_async\.\S+|mma\.sync\.\S+", ptx)))


@pytest.mark.parametrize("fp8, name", [(tl.float8e4nv, "e4m3"), (tl.float8e5, "e5m2")])
@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("warps", [4, 8])
def test_the_dot_runs_on_wgmma(fp8, name, chain, warps):
    kernel = _compiled(fp8, chain=chain, warps=warps)
    ptx = kernel.asm["ptx"]
    assert _instructions(ptx) == [f"wgmma.mma_async.sync.aligned.m64n128k32.f32.{name}.{name}"]
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") == (2 if chain else 1)
    assert kernel.n_spills == 0


def test_an_e4m3_by_e5m2_dot_reads_each_operand_in_its_format():
    ptx = _compiled(tl.float8e4nv, fp8_b=tl.float8e5).asm["ptx"]
    assert _instructions(ptx) == ["wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2"]


def test_a_loop_left_unpipelined_runs_its_dot_on_wgmma_each_iteration():
    x, y = _fp8((128, 256), tl.float8e4nv), _fp8((256, 128), tl.float8e4nv)
    kernel = unpipelined_loop_dot.warmup(x, y, np.zeros((128, 128), np.float32), 256, BM=128, BN=128, BK=64,
                                         num_warps=4, grid=(1,), target="sm_90a")
    assert _instructions(kernel.asm["ptx"]) == ["wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"]
    assert "cp.async" not in kernel.asm["ptx"] and kernel.n_spills == 0


def _passed(kernel, target="sm_90a", warps=4):
    fn = parse_function(kernel.asm["kir"])
    standalone_wgmma.apply(fn, PassContext(parse_target(target), warps, 3))
    return fn


def test_the_pass_stores_both_operands_k_major_then_fences_issues_and_awaits():
    fn = _passed(_compiled(tl.float8e5))
    names = [op.name for op in fn.body.ops]
    at = names.index("warp_group_dot")
    assert names[at - 6:at + 2] == ["local_alloc", "local_store", "local_alloc", "local_store", "fence_async_shared",
                                    "barrier", "warp_group_dot", "warp_group_dot_wait"]
    dot, wait = fn.body.ops[at:at + 2]
    assert wait.attrs["pending"] == 0 and "dot" not in names
    a_tile, b_tile = (v.type for v in dot.operands[:2])
    assert (a_tile.order, b_tile.order) == ((1, 0), (0, 1))  # K innermost in both
    assert (a_tile.swizzle, b_tile.swizzle) == (64, 64)  # 64 fp8 of K a row
    stored = [op.operands[0] for op in fn.body.ops if op.name == "local_store"]
    assert [v.defining_op.name for v in stored] == ["load", "load"]
    store = next(op for op in fn.body.ops if op.name == "store")
    assert store.operands[1] is wait.results[0]


@pytest.mark.parametrize("target, warps, kwargs", [
    ("sm_80", 4, {}),                              # no wgmma
    ("sm_90a", 2, {}),                             # half a warpgroup
    ("sm_90a", 4, {"bm": 32}),                     # fewer than 64 rows: no wgmma layout
])
def test_dots_wgmma_cannot_run_stay_dots(target, warps, kwargs):
    fn = _passed(_compiled(tl.float8e4nv, target="sm_89", warps=warps, **kwargs), target, warps)
    assert [op.name for op in fn.walk() if "dot" in op.name] == ["dot"]


def test_sixteen_bit_dots_stay_for_mma_sync():
    x, y, w = (np.zeros(shape, np.float16) for shape in ((128, 64), (64, 128), (128, 128)))
    kernel = block_dot.warmup(x, y, w, np.zeros((128, 128), np.float32), BM=128, BN=128, BK=64, CHAIN=False,
                              num_warps=4, grid=(1,), target="sm_90a")
    assert [op.name for op in _passed(kernel).walk() if "dot" in op.name] == ["dot"]


# --- GPU tier: exact sums (small powers of two), every path ---------------------------------

VALUES = [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]


def small_powers(torch, shape, fp8, gen):
    return torch.tensor(VALUES)[torch.randint(0, len(VALUES), shape, generator=gen)].to(fp8).cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("warps", [2, 4, 8])
def test_standalone_fp8_dots_on_the_gpu(dtype, chain, warps, cuda_torch):
    torch = cuda_torch
    fp8 = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(11)
    x, y, w = (small_powers(torch, shape, fp8, gen) for shape in ((128, 64), (64, 128), (128, 128)))
    z = torch.zeros(128, 128, device="cuda")
    block_dot[(1,)](x, y, w, z, BM=128, BN=128, BK=64, CHAIN=chain, num_warps=warps)
    want = x.double() @ y.double()
    if chain:  # the fp32 product rounded to fp8, as the kernel's z.to(w.dtype)
        want = want.float().to(fp8).double() @ w.double()
    torch.testing.assert_close(z.double(), want, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("warps", [4, 8])
def test_an_unpipelined_fp8_loop_on_the_gpu(warps, cuda_torch):
    torch = cuda_torch
    gen = torch.Generator().manual_seed(12)
    x = small_powers(torch, (128, 512), torch.float8_e4m3fn, gen)
    y = small_powers(torch, (512, 128), torch.float8_e5m2, gen)
    z = torch.zeros(128, 128, device="cuda")
    unpipelined_loop_dot[(1,)](x, y, z, 512, BM=128, BN=128, BK=64, num_warps=warps)
    torch.testing.assert_close(z.double(), x.double() @ y.double(), rtol=0, atol=0)
