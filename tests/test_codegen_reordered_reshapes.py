"""`tl.reshape(x, shape, can_reorder=True)` lets the compiler order the result's elements as it likes:
where each thread holds its elements once in the operand's layout, the result takes a layout in which
each thread holds as many, and the reshape renames registers (ir/layout_moves `registers_held`), as
Triton's does. triton_kernels' flexpoint epilogue flattens a 128x256 accumulator that way to take its
absolute maximum, and kiln moved the whole tile through 128 KB of shared memory. Checked as IR,
emulated on the CPU (the result holds the same elements, in some order), and on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function

from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def flattened_product(a_ptr, b_ptr, flat_ptr, stats_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    acc = tl.dot(tl.load(a_ptr + rm[:, None] * K + rk[None, :]), tl.load(b_ptr + rk[:, None] * N + rn[None, :]))
    flat = tl.reshape(acc, [M * N], can_reorder=True)
    tl.store(flat_ptr + tl.arange(0, M * N), flat)
    tl.store(stats_ptr, tl.max(tl.abs(flat), 0))
    tl.store(stats_ptr + 1, tl.sum(flat, 0))


def _args(m, n, k):
    rng = np.random.default_rng(6)
    a = rng.integers(-3, 4, (m, k)).astype(np.float16)
    b = rng.integers(-3, 4, (k, n)).astype(np.float16)
    return a, b, np.zeros(m * n, np.float32), np.zeros(2, np.float32)


def _check(a, b, flat, stats):
    want = (a.astype(np.float64) @ b).ravel()
    np.testing.assert_array_equal(np.sort(flat), np.sort(want))  # the same elements, in any order
    assert stats[0] == np.abs(want).max() and stats[1] == want.sum()


@pytest.mark.parametrize("target, num_warps, shape", [("sm_90a", 8, (128, 256, 32)), ("sm_90a", 4, (64, 64, 32)),
                                                      ("sm_80", 4, (64, 64, 32))])
def test_the_reshape_renames_registers(target, num_warps, shape):
    m, n, k = shape
    warm = flattened_product.warmup(*_args(m, n, k), M=m, N=n, K=k, grid=(1,), target=target, num_warps=num_warps)
    built = compile_ir(parse_function(warm.asm["kir"]), target, {"num_warps": num_warps}, link=False)
    (reshape,) = [line for line in built.kir.splitlines() if " = reshape " in line]
    assert "can_reorder = true" in reshape and "scratch" not in reshape


@pytest.mark.parametrize("target, num_warps", [("sm_90a", 4), ("sm_80", 2)])
def test_the_reordered_elements_are_the_product_s_emulated(target, num_warps):
    _check(*warmed_and_emulated(flattened_product, _args(64, 64, 32), target, num_warps, M=64, N=64, K=32))


def test_the_interpreter_keeps_row_major_order():
    a, b, flat, stats = _args(16, 16, 16)
    flattened_product[(1,)](a, b, flat, stats, M=16, N=16, K=16)
    np.testing.assert_array_equal(flat, (a.astype(np.float64) @ b).ravel())
    _check(a, b, flat, stats)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps, shape", [(4, (64, 64, 32)), (8, (128, 256, 32))])
def test_the_reordered_reshape_on_the_gpu(num_warps, shape, cuda_torch):
    torch = cuda_torch
    m, n, k = shape
    args = [torch.from_numpy(x).cuda() for x in _args(m, n, k)]
    flattened_product[(1,)](*args, M=m, N=n, K=k, num_warps=num_warps)
    _check(*(x.cpu().numpy() for x in args))
