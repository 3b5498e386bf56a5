"""A loop folding each step's reduction into a carried value reduces each thread's own runs of the block in
the loop (or folds the blocks elementwise) and exchanges between threads once after the loop
(codegen/passes/reduce_after_loop.py): no exchange between threads in the loop."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.passes import reduce_after_loop
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, verify
from test_codegen_emulate import in_child


@kiln.jit
def row_folds(X, S, M, A, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.arange(0, ROWS)
    total = tl.zeros([ROWS], dtype=tl.float32) + 1.5  # a start value the fold keeps after the loop
    top = tl.full([ROWS], float("-inf"), tl.float32)
    low = tl.full([ROWS], 7, tl.int32)
    bits = tl.zeros([ROWS], dtype=tl.int32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(X + rows[:, None] * N + (start + tl.arange(0, BLOCK_N))[None, :])
        total = total + tl.sum(x, axis=1)
        top = tl.maximum(top, tl.max(x, axis=1))
        low = tl.minimum(tl.min(x.to(tl.int32), axis=1), low)
        bits = bits ^ tl.reduce(x.to(tl.int32), 1, _xor)
    tl.store(S + rows, total)
    tl.store(M + rows, top)
    tl.store(A + rows, low + bits)


@kiln.jit
def _xor(a, b):
    return a ^ b


@kiln.jit
def kept_folds(X, S, N, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, 32)
    total = tl.zeros([32], dtype=tl.float32)
    scaled = tl.zeros([32], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(X + rows[:, None] * N + (start + tl.arange(0, BLOCK_N))[None, :])
        s = tl.sum(x, axis=1)
        total = total + s
        tl.store(S + rows, s)  # the step's sum read elsewhere: kept
        scaled = scaled * 0.5 + tl.sum(x, axis=1)  # not a plain fold
    tl.store(S + rows, total + scaled)


@kiln.jit
def nested_folds(X, S, T, R, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """The fold in an inner loop whose result the outer loop stores and folds on (not a reduction)."""
    grand = tl.zeros([ROWS], dtype=tl.float32)
    for r in range(0, R, ROWS):
        rows = r + tl.arange(0, ROWS)
        total = tl.zeros([ROWS], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            x = tl.load(X + rows[:, None] * N + (start + tl.arange(0, BLOCK_N))[None, :])
            total = total + tl.sum(x, axis=1)
        tl.store(S + rows, total)
        grand = grand + total
    tl.store(T + tl.arange(0, ROWS), grand)


def _ir(kernel, *args, **meta):
    return parse_function(kernel.warmup(*args, grid=(1,), target="sm_90a", **meta).asm["kir"])


def _passed(fn, warps=4):
    reduce_after_loop.apply(fn, PassContext(parse_target("sm_90a"), warps, 3))
    verify(fn)
    return fn


def _loop(fn):
    [loop] = [op for op in fn.walk() if op.name == "for"]
    return loop


def _folds_args(n=256, rows=32):
    x = np.zeros((rows, n), np.float32)
    return x, np.zeros(rows, np.float32), np.zeros(rows, np.float32), np.zeros(rows, np.int32), n


def test_each_fold_leaves_the_loop_but_its_runs_reduced_in_it():
    fn = _passed(_ir(row_folds, *_folds_args(), BLOCK_N=64, ROWS=32))
    loop = _loop(fn)
    inside = [op for op in loop.regions[0].walk() if op.name == "reduce"]
    assert [(op.attrs["axis"], tuple(op.operands[0].type.shape)) for op in inside] == [(2, (32, 16, 4))] * 4
    assert all(op.operands[0].defining_op.name == "reshape" for op in inside)  # runs of 4 fp32 / int32
    assert [tuple(r.type.shape) for r in loop.results] == [(32, 16)] * 4  # four accumulators of partials carried
    after = fn.body.ops[fn.body.ops.index(loop) + 1:]
    assert [op.attrs["axis"] for op in after if op.name == "reduce"] == [1] * 4
    starts = [op.operands[0].defining_op for op in after if op.name == "reduce"]
    assert all(s is loop for s in starts)
    inits = {op.attrs["value"] for op in fn.body.ops if op.name == "constant" and len(op.results[0].type.shape) == 2}
    assert {-0.0, float("-inf"), 2**31 - 1, 0} <= inits  # the identities: sum, max, int min, xor


@kiln.jit
def column_sums(X, S, N, BLOCK_N: tl.constexpr):
    """A fold of sums along dim 0: no runs along it, the blocks folded whole."""
    cols = tl.arange(0, 32)
    total = tl.zeros([32], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(X + (start + tl.arange(0, BLOCK_N))[:, None] * 32 + cols[None, :])
        total = total + tl.sum(x, axis=0)
    tl.store(S + cols, total)


def test_a_fold_along_another_dim_folds_the_blocks_whole():
    fn = _passed(_ir(column_sums, np.zeros((256, 32), np.float32), np.zeros(32, np.float32), 256, BLOCK_N=64))
    loop = _loop(fn)
    assert not [op for op in loop.regions[0].walk() if op.name == "reduce"]
    assert [tuple(r.type.shape) for r in loop.results] == [(64, 32)]


def _run_columns():
    from kiln.codegen.emulate import run_on_cpu
    x = (np.random.default_rng(5).integers(-40, 40, (256, 32)) * 0.25).astype(np.float32)
    args = [x, np.zeros(32, np.float32), 256]
    run_on_cpu(column_sums.warmup(*args, BLOCK_N=64, grid=(1,), target="sm_90a").ir, (1,), args, num_warps=4)
    return args


def test_the_emulated_column_sums_fold_whole_blocks():
    x, s, _ = in_child(_run_columns)
    np.testing.assert_array_equal(s, x.sum(0))


@kiln.jit
def transposed_sums(X, S, N, BLOCK_N: tl.constexpr):
    """Sums along the last dim of a transposed load: its runs lie along the other dim."""
    rows = tl.arange(0, 32)
    total = tl.zeros([32], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        x = tl.load(X + (start + tl.arange(0, BLOCK_N))[:, None] * 32 + rows[None, :])
        total = total + tl.sum(tl.trans(x), axis=1)
    tl.store(S + rows, total)


def test_a_block_not_laid_out_by_its_loads_vectors_folds_whole():
    fn = _passed(_ir(transposed_sums, np.zeros((256, 32), np.float32), np.zeros(32, np.float32), 256, BLOCK_N=64))
    assert not [op for op in _loop(fn).regions[0].walk() if op.name == "reduce"]


@kiln.jit
def masked_row_sums(X, S, N, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, 32)
    total = tl.zeros([32], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        total = total + tl.sum(tl.load(X + rows[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=0.0), 1)
    tl.store(S + rows, total)


@pytest.mark.parametrize("n, runs", [(1024, True), (1001, False)])
def test_runs_only_where_the_loads_come_in_vectors(n, runs):
    # rows of 1001 floats: no row starts 16-byte aligned, the loads are scalar and a run of 4 would
    # span 4 lanes (shuffles in the loop): the blocks fold whole there
    kernel = masked_row_sums.warmup(np.zeros((32, n), np.float32), np.zeros(32, np.float32), n, BLOCK_N=128,
                                    grid=(1,), target="sm_90a")
    fn = _passed(parse_function(kernel.asm["kir"]))
    inside = [op for op in _loop(fn).regions[0].walk() if op.name == "reduce"]
    assert len(inside) == (1 if runs else 0)
    ptx = kernel.asm["ptx"]
    loop = ptx[ptx.index("$L__BB0_"):]  # (the loop's body and what follows it)
    assert "shfl" not in loop[:loop.index("bra")]


def test_the_gpu_stage_shows_the_two_reductions_of_each_fold():
    kernel = row_folds.warmup(*_folds_args(), BLOCK_N=64, ROWS=32, grid=(1,), target="sm_90a")
    ttgir = kernel.asm["ttgir"]
    assert ttgir.count('"tt.reduce"') == 8
    loop = ttgir[ttgir.index("scf.for"):ttgir.index("scf.yield")]
    assert loop.count('"tt.reduce"') == 4 and "ttg.convert_layout" not in loop.split("tt.load")[-1]


def test_folds_read_elsewhere_or_not_plain_stay():
    x = np.zeros((32, 256), np.float32)
    fn = _passed(_ir(kept_folds, x, np.zeros(32, np.float32), 256, BLOCK_N=64))
    assert len([op for op in _loop(fn).regions[0].walk() if op.name == "reduce"]) == 2


def test_big_blocks_keep_their_reduction_in_the_loop():
    # 32 x 1024 on 4 warps: 256 elements a thread, 64 partial sums of runs of 4, more than the accumulator may take
    fn = _passed(_ir(row_folds, *_folds_args(2048), BLOCK_N=1024, ROWS=32))
    inside = [op for op in _loop(fn).regions[0].walk() if op.name == "reduce"]
    assert [op.attrs["axis"] for op in inside] == [1] * 4


def test_the_loop_exchanges_nothing_between_threads():
    kernel = row_folds.warmup(*_folds_args(), BLOCK_N=64, ROWS=32, grid=(1,), target="sm_90a")
    lines = kernel.asm["ptx"].splitlines()
    heads = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"\$(L__BB0_\d+):", l.strip()))}
    loops = [(heads[m.group(1)], i) for i, l in enumerate(lines)
             if (m := re.search(r"bra(?:\.uni)?\s+\$(L__BB0_\d+);", l)) and heads.get(m.group(1), i) < i]
    assert loops
    for start, end in loops:
        assert not any("shfl" in line or "bar.sync" in line for line in lines[start:end])
    assert "shfl.sync" in kernel.asm["ptx"]  # after the loop


def _run_folds(n, block_n):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(3)
    x = (rng.integers(-40, 40, (32, n)) * 0.25).astype(np.float32)  # quarters: every sum exact
    args = [x, np.zeros(32, np.float32), np.zeros(32, np.float32), np.zeros(32, np.int32), n]
    kernel = row_folds.warmup(*args, BLOCK_N=block_n, ROWS=32, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), args, num_warps=4)
    return args


@pytest.mark.parametrize("n, block_n", [(256, 64), (512, 256)])  # accumulators of 16 and 64 partials a row
def test_the_emulated_kernel_computes_the_folds(n, block_n):
    x, s, m, a, _ = in_child(_run_folds, n, block_n)
    ints = x.astype(np.int32)
    np.testing.assert_array_equal(s, x.sum(1) + 1.5)
    np.testing.assert_array_equal(m, x.max(1))
    np.testing.assert_array_equal(a, np.minimum(ints.min(1), 7) + np.bitwise_xor.reduce(ints, axis=1))


def _run_nested():
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(2)
    x = (rng.integers(-20, 20, (64, 256)) * 0.5).astype(np.float32)
    args = [x, np.zeros(64, np.float32), np.zeros(16, np.float32), 64, 256]
    kernel = nested_folds.warmup(*args, BLOCK_N=64, ROWS=16, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), args, num_warps=4)
    return args, kernel.asm["kir"]


def test_a_fold_in_an_inner_loop_leaves_that_loop():
    (x, s, t, _, _), ir = in_child(_run_nested)
    np.testing.assert_array_equal(s, x.sum(1))
    np.testing.assert_array_equal(t, x.sum(1).reshape(4, 16).sum(0))
    fn = _passed(parse_function(ir))
    outer = next(op for op in fn.body.ops if op.name == "for")
    inner = next(op for op in outer.regions[0].ops if op.name == "for")
    assert [op.name for op in outer.regions[0].ops if op.name == "reduce"] == ["reduce"]  # after the inner loop
    assert [op.attrs["axis"] for op in inner.regions[0].walk() if op.name == "reduce"] == [2]  # each thread's runs


@pytest.mark.gpu
def test_the_folds_on_the_gpu(cuda_torch):
    torch = cuda_torch
    gen = torch.Generator().manual_seed(4)
    x = (torch.randint(-40, 40, (32, 1024), generator=gen) * 0.25).float().cuda()
    s, m = torch.empty(32, device="cuda"), torch.empty(32, device="cuda")
    a = torch.empty(32, dtype=torch.int32, device="cuda")
    row_folds[(1,)](x, s, m, a, 1024, BLOCK_N=64, ROWS=32)
    ints = x.int().cpu().numpy()
    assert torch.equal(s, x.sum(1) + 1.5) and torch.equal(m, x.max(1).values)
    assert (a.cpu().numpy() == np.minimum(ints.min(1), 7) + np.bitwise_xor.reduce(ints, axis=1)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 1001, 4096 + 16])
def test_masked_row_sums_on_the_gpu(n, cuda_torch):
    torch = cuda_torch
    x = (torch.randint(-40, 40, (32, n), generator=torch.Generator().manual_seed(n)) * 0.25).float().cuda()
    s = torch.empty(32, device="cuda")
    masked_row_sums[(1,)](x, s, n, BLOCK_N=128)
    assert torch.equal(s, x.sum(1))  # quarters: every sum exact in any order
