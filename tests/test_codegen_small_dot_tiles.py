"""Dots of fewer than 16 rows or 8 columns run on mma.sync, their operands repeated up to a tile and the
result's first copy kept (codegen/passes/small_dot_tiles.py), as Triton pads them (upstream's test_dot at
1x2x32 e5m2 and 2x4x32 fp16 on one warp looks for `mma.sync...m16n8k16`); before, each thread's FMAs."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.passes import small_dot_tiles
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, verify
from test_codegen_emulate import in_child


@kiln.jit
def small_dot(X, Y, A, Z, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PRECISION: tl.constexpr = "tf32"):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    acc = tl.load(A + rm[:, None] * N + rn[None, :])
    z = tl.dot(tl.load(X + rm[:, None] * K + rk[None, :]), tl.load(Y + rk[:, None] * N + rn[None, :]), acc,
               input_precision=PRECISION)
    tl.store(Z + rm[:, None] * N + rn[None, :], z)


def _arrays(m, n, k, dtype, acc=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if dtype in ("fp8e5", "fp8e4nv"):
        x, y = (kiln.reinterpret(np.zeros(s, np.uint8), getattr(tl, "float8" + dtype[3:])) for s in ((m, k), (k, n)))
    else:
        x, y = rng.integers(-3, 4, (m, k)).astype(dtype), rng.integers(-3, 4, (k, n)).astype(dtype)
    return x, y, rng.integers(-3, 4, (m, n)).astype(acc), np.full((m, n), 0, acc)


def _build(m, n, k, dtype, warps, target="sm_90a", acc=np.float32):
    return small_dot.warmup(*_arrays(m, n, k, dtype, acc), M=m, N=n, K=k, num_warps=warps, grid=(1,), target=target)


@pytest.mark.parametrize("m, n, k, dtype, warps", [(2, 4, 32, np.float16, 1), (1, 2, 32, "fp8e5", 1),
                                                   (4, 16, 32, np.float16, 4), (16, 4, 16, np.float16, 4)])
def test_the_dot_runs_on_a_whole_mma_tile(m, n, k, dtype, warps):
    kernel = _build(m, n, k, dtype, warps)
    ptx = kernel.asm["ptx"]
    assert set(re.findall(r"mma\.sync\S+", ptx)) == {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"}
    assert "fma.rn.f32" not in ptx and kernel.n_spills == 0


def test_the_pass_repeats_rows_and_columns_then_keeps_one_copy():
    fn = parse_function(_build(2, 4, 32, np.float16, 1).asm["kir"])
    small_dot_tiles.apply(fn, PassContext(parse_target("sm_90a"), 1, 3))
    verify(fn)
    [dot] = [op for op in fn.walk() if op.name == "dot"]
    assert [tuple(v.type.shape) for v in dot.operands] == [(16, 32), (32, 8), (16, 8)]
    names = [op.name for op in fn.body.ops]
    after = names[names.index("dot") + 1:names.index("store")]
    # [8, 2, 2, 4] -> [2, 4, 8, 2] -> four halvings (16 copies) -> [2, 4]
    assert after[:2] == ["reshape", "permute"] and after.count("split") == 4
    store = next(op for op in fn.body.ops if op.name == "store")
    kept = store.operands[1].defining_op
    assert kept.name == "reshape" and tuple(kept.results[0].type.shape) == (2, 4)


@pytest.mark.parametrize("m, n, k, dtype, precision", [(16, 16, 16, np.float16, "tf32"), (4, 4, 16, np.float32, "ieee")])
def test_dots_a_tile_holds_or_no_mma_takes_stay(m, n, k, dtype, precision):
    # a whole tile; fp32 at ieee precision, which no mma keeps: as they were
    fn = parse_function(small_dot.warmup(*_arrays(m, n, k, dtype), M=m, N=n, K=k, PRECISION=precision, grid=(1,),
                                         target="sm_90a").asm["kir"])
    before = [tuple(v.type.shape) for op in fn.walk() if op.name == "dot" for v in op.operands]
    small_dot_tiles.apply(fn, PassContext(parse_target("sm_90a"), 4, 3))
    assert [tuple(v.type.shape) for op in fn.walk() if op.name == "dot" for v in op.operands] == before


def _emulated(m, n, k, dtype, warps, acc):
    from kiln.codegen.emulate import run_on_cpu
    x, y, a, z = _arrays(m, n, k, dtype, acc, seed=m * 31 + n)
    kernel = small_dot.warmup(x, y, a, z, M=m, N=n, K=k, num_warps=warps, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [x, y, a, z], num_warps=warps)
    return x, y, a, z


@pytest.mark.parametrize("m, n, k, dtype, warps, acc", [
    (2, 4, 32, np.float16, 1, np.float32), (1, 1, 16, np.float16, 1, np.float32), (4, 16, 32, np.float16, 4, np.float32),
    (16, 4, 16, np.float16, 4, np.float32), (8, 8, 16, np.float16, 2, np.float32), (4, 4, 32, np.int8, 4, np.int32),
])
def test_the_emulated_dot_is_exact(m, n, k, dtype, warps, acc):
    x, y, a, z = in_child(_emulated, m, n, k, dtype, warps, acc)
    np.testing.assert_array_equal(z, x.astype(np.int64) @ y.astype(np.int64) + a)  # small integers: exact


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, warps", [(2, 4, 32, 1), (1, 2, 32, 1), (4, 16, 32, 4), (16, 4, 16, 4), (8, 8, 16, 2)])
def test_small_dots_on_the_gpu(m, n, k, warps, cuda_torch):
    torch = cuda_torch
    gen = torch.Generator().manual_seed(m * 31 + n)
    x, y = (torch.randint(-3, 4, s, generator=gen).half().cuda() for s in ((m, k), (k, n)))
    a = torch.randint(-3, 4, (m, n), generator=gen).float().cuda()
    z = torch.empty(m, n, device="cuda")
    small_dot[(1,)](x, y, a, z, M=m, N=n, K=k, num_warps=warps)
    assert torch.equal(z, x.float() @ y.float() + a)
