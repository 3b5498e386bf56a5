"""Conformance: tl.range(..., loop_unroll_factor=N) unrolls the loop in the kernel's IR (Triton's
LoopUnroll) and computes what the loop computes (interpreter vs Python)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile
from kiln.ttir import kernel_with_calls, render_ttir


@kiln.jit
def _atomic_loop(dst, FACTOR: tl.constexpr):
    pid = tl.program_id(axis=0)
    for i in tl.range(0, 10, loop_unroll_factor=FACTOR):
        tl.atomic_add(dst + pid, i + pid)


@kiln.jit
def _sum_of_squares(out_ptr, lo, hi, STEP: tl.constexpr, FACTOR: tl.constexpr):
    total = tl.zeros([4], tl.int32)
    last = lo - 1
    for i in tl.range(lo, hi, STEP, loop_unroll_factor=FACTOR):
        total += i * i + tl.arange(0, 4)
        last = i
    tl.store(out_ptr + tl.arange(0, 4), total)
    tl.store(out_ptr + 4, last)


@kiln.jit
def _nested(out_ptr, n, FACTOR: tl.constexpr):
    acc = 0
    for i in tl.range(0, n, loop_unroll_factor=FACTOR):
        for j in tl.range(i, n, 2, loop_unroll_factor=FACTOR):
            acc += i * 100 + j
    tl.store(out_ptr, acc)


@kiln.jit
def _runtime_step(out_ptr, n, step, FACTOR: tl.constexpr):
    acc = 0
    for i in tl.range(0, n, step, loop_unroll_factor=FACTOR):
        acc += i
    tl.store(out_ptr, acc)


def _loops(fn):
    return [op for op in fn.walk() if op.name == "for"]


@pytest.mark.parametrize("factor, remainder", [(1, False), (2, False), (4, True), (5, False), (8, True)])
def test_constant_bounds_unroll_into_a_main_loop_and_a_remainder(factor, remainder):
    fn = kernel_with_calls(_atomic_loop, (np.zeros(1, np.float32), factor))
    loops = _loops(fn)
    if factor == 1:
        assert len(loops) == 1 and sum(op.name == "atomic_rmw" for op in fn.walk()) == 1
        return
    main = loops[0]
    assert "loop_unroll_factor" not in main.attrs
    assert sum(op.name == "atomic_rmw" for op in main.walk()) == factor
    assert main.operands[2].defining_op.attrs["value"] == factor  # the step: factor x 1
    assert len(loops) == 1 + remainder
    # as upstream's test_unroll_attr counts them in Triton's TTIR
    assert render_ttir(fn).count("tt.atomic_rmw") >= factor


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (0, 9), (3, 20), (5, 2), (-7, 8), (0, 12)])
@pytest.mark.parametrize("step, factor", [(1, 4), (2, 3), (3, 2), (1, 1)])
def test_unrolled_loop_computes_what_the_loop_computes(lo, hi, step, factor):
    out = np.zeros(5, np.int32)
    _sum_of_squares[(1,)](out, lo, hi, STEP=step, FACTOR=factor)
    iters = list(range(lo, hi, step))
    expected = sum(i * i for i in iters) + len(iters) * np.arange(4)
    np.testing.assert_array_equal(out[:4], expected)
    assert out[4] == (iters[-1] if iters else lo - 1)


@pytest.mark.parametrize("n", [0, 1, 5, 8])
def test_nested_unrolled_loops(n):
    out = np.zeros(1, np.int32)
    _nested[(1,)](out, n, FACTOR=3)
    assert out[0] == sum(i * 100 + j for i in range(n) for j in range(i, n, 2))
    fn = kernel_with_calls(_nested, (out, n, 3))
    # the outer main loop and its remainder; the inner main loop and remainder in each of the outer main
    # loop's 3 body copies and in the outer remainder
    assert len(_loops(fn)) == 2 + 3 * 2 + 2


def test_a_runtime_step_keeps_the_loop_as_written():
    out = np.zeros(1, np.int32)
    _runtime_step[(1,)](out, 10, 3, FACTOR=4)
    assert out[0] == sum(range(0, 10, 3))
    loops = _loops(kernel_with_calls(_runtime_step, (out, 10, 3, 4)))
    assert len(loops) == 1 and loops[0].attrs["loop_unroll_factor"] == 4


def test_the_unrolled_loop_compiles():
    fn = kernel_with_calls(_sum_of_squares, (np.zeros(5, np.int32), 0, 10, 1, 4))
    assert ".entry" in compile(fn, "sm_90a", {"num_warps": 1}, link=False).ptx
