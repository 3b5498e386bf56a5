"""Loops whose loads the prefetch pass carries one iteration ahead although the body stores (they
ask for stages, as Triton's softmax tutorial's row loop does) or whose step is known only at run
time: lowered, run on the CPU emulator (kiln.codegen.emulate) and compared with NumPy."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from test_codegen_emulate import in_child


@kiln.jit(do_not_specialize=["n_rows", "n_cols"])
def softmax_rows(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    # each program a row at a time, stepping by the program count: the step is a run-time value
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=3):
        cols = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(v - tl.max(v, 0))
        tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols)


@kiln.jit(do_not_specialize=["first", "end", "step"])  # a 1 stays an argument: run_on_cpu passes all five
def rows_by_step(x_ptr, y_ptr, first, end, step, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in tl.range(first, end, step, num_stages=2):
        v = tl.load(x_ptr + row * BLOCK + cols)
        tl.store(y_ptr + row * BLOCK + cols, v * 2 + row)


@kiln.jit
def rows_down(x_ptr, y_ptr, STEP: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in tl.range(11, -1, STEP, num_stages=2):  # a constant step < 0: counts up from -1, row = 10 - it
        v = tl.load(x_ptr + row * BLOCK + cols)
        tl.store(y_ptr + row * BLOCK + cols, v - row)


def _optimized(kernel, num_warps):
    from kiln.codegen.compiler import _options, lower_to_llvm
    from kiln.codegen.target import parse_target
    from kiln.ir import copy_function
    return lower_to_llvm(copy_function(kernel.ir), parse_target("sm_90a"), _options({"num_warps": num_warps}),
                         portable=True)[0]


def _loaded_before_the_loop(text: str) -> bool:
    before = text[:text.index(" = for ")] if " = for " in text else text[:text.index("for ")]
    return " = load " in before


def check_softmax_rows(in_place: bool, programs: int):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(43)
    n_rows, n_cols = 7, 100
    x = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    y = x.copy() if in_place else np.zeros_like(x)
    kernel = softmax_rows.warmup(y, y if in_place else x, n_rows, n_cols, BLOCK=128, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (programs,), [x if not in_place else y, y, n_rows, n_cols], num_warps=4)
    return float(np.abs(y - want).max())


@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("programs", [1, 3])
def test_a_row_loop_that_stores_is_prefetched_and_right(in_place, programs):
    x = np.zeros((7, 100), np.float32)
    kernel = softmax_rows.warmup(x, x, 7, 100, BLOCK=128, grid=(1,), target="sm_90a")
    assert _loaded_before_the_loop(_optimized(kernel, 4))
    assert in_child(check_softmax_rows, in_place, programs) < 1e-6


def check_rows_by_step(first, end, step):
    from kiln.codegen.emulate import run_on_cpu
    x = np.arange(12 * 32, dtype=np.float32).reshape(12, 32)
    y = np.zeros_like(x)
    kernel = rows_by_step.warmup(x, y, first, end, step, BLOCK=32, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [x, y, first, end, step], num_warps=1)
    want = np.zeros_like(x)
    for row in range(first, end, step):
        want[row] = x[row] * 2 + row
    return bool((y == want).all())


@pytest.mark.parametrize("first, end, step", [(1, 12, 3), (11, 0, -2), (11, -1, -4), (3, 3, 1), (5, 2, 1), (2, 5, -1)])
def test_a_run_time_step_prefetches_within_the_loop_s_own_range(first, end, step):
    """Going up or down, the loads carried ahead read only rows the loop visits (others are masked
    off): a load past the end would read outside the array."""
    x = np.zeros((12, 32), np.float32)
    kernel = rows_by_step.warmup(x, x, first, end, step, BLOCK=32, grid=(1,), target="sm_90a")
    assert _loaded_before_the_loop(_optimized(kernel, 1))
    assert in_child(check_rows_by_step, first, end, step)


def check_rows_down(step):
    from kiln.codegen.emulate import run_on_cpu
    x = np.arange(12 * 32, dtype=np.float32).reshape(12, 32)
    y = np.zeros_like(x)
    kernel = rows_down.warmup(x, y, STEP=step, BLOCK=32, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [x, y], num_warps=1)
    want = np.zeros_like(x)
    for row in range(11, -1, step):
        want[row] = x[row] - row
    return bool((y == want).all())


@pytest.mark.parametrize("step", [-1, -3])
def test_a_constant_negative_step_prefetches_downwards(step):
    x = np.zeros((12, 32), np.float32)
    kernel = rows_down.warmup(x, x, STEP=step, BLOCK=32, grid=(1,), target="sm_90a")
    assert _loaded_before_the_loop(_optimized(kernel, 1))
    assert in_child(check_rows_down, step)


@pytest.mark.gpu
@pytest.mark.parametrize("n_cols", [100, 1024, 4096, 8192])
def test_softmax_rows_on_the_gpu(n_cols, cuda_torch):
    """The row loop as Triton's tutorial launches it (fewer programs than rows), in place too."""
    torch = cuda_torch
    x = torch.randn(777, n_cols, device="cuda")
    want = torch.softmax(x, 1)
    y = torch.full_like(x, float("nan"))
    block = 1 << (n_cols - 1).bit_length()
    softmax_rows[(100,)](x, y, 777, n_cols, BLOCK=block, num_warps=8)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)
    softmax_rows[(33,)](x, x, 777, n_cols, BLOCK=block, num_warps=8)
    torch.testing.assert_close(x, want, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("first, end, step", [(1, 12, 3), (11, 0, -2), (11, -1, -4), (5, 2, 1)])
def test_rows_by_a_run_time_step_on_the_gpu(first, end, step, cuda_torch):
    torch = cuda_torch
    x = torch.arange(12 * 32, dtype=torch.float32, device="cuda").reshape(12, 32)
    y = torch.zeros_like(x)
    rows_by_step[(1,)](x, y, first, end, step, BLOCK=32, num_warps=1)
    want = torch.zeros_like(x)
    for row in range(first, end, step):
        want[row] = x[row] * 2 + row
    assert torch.equal(y, want)
