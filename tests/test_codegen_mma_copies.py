"""A dot whose result has fewer 16x8 mma tiles than the kernel has warps (16x16 on 4 warps, 32x32 on
16) runs on mma.sync with the warps past the tiles holding copies of the others' (the accumulator
layout's columns wrap, as Triton's mma layouts do); before, such a dot ran on FMAs. Checked as PTX,
and by value in the CPU emulator, which runs the lowering's mma.sync and ldmatrix: the copies store
once (owner masks) and a reduction over the result counts each element once."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def _dot(A, B, C, S, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + rm[:, None] * K + rk[None, :])
    b = tl.load(B + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b)
    tl.store(C + rm[:, None] * N + rn[None, :], c)
    tl.store(S + rm, tl.sum(c, axis=1))  # a reduction across the copies


CASES = [("float16", 16, 16, 16, 4), ("float16", 16, 8, 32, 4), ("float16", 32, 32, 64, 16), ("int8", 32, 32, 128, 16),
         ("float16", 16, 32, 16, 8)]


def _operands(dtype, m, n, k, seed=3):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-3, 4, (m, k)), rng.integers(-3, 4, (k, n))
    np_type, out_type = (np.int8, np.int32) if dtype == "int8" else (np.float16, np.float32)
    return a.astype(np_type), b.astype(np_type), np.zeros((m, n), out_type), np.zeros(m, out_type), a @ b


def _compiled(dtype, m, n, k, warps, target):
    a, b, c, s, _ = _operands(dtype, m, n, k)
    return _dot.warmup(a, b, c, s, M=m, N=n, K=k, grid=(1,), target=target, num_warps=warps)


@pytest.mark.parametrize("dtype,m,n,k,warps", CASES)
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_dot_with_fewer_tiles_than_warps_runs_on_mma(dtype, m, n, k, warps, target):
    ptx = _compiled(dtype, m, n, k, warps, target).asm["ptx"]
    assert "mma.sync.aligned" in ptx and "fma.rn.f32" not in ptx


def _emulated(dtype, m, n, k, warps):
    from kiln.codegen.emulate import run_on_cpu
    a, b, c, s, want = _operands(dtype, m, n, k)
    kernel = _compiled(dtype, m, n, k, warps, "sm_80")
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [a, b, c, s], num_warps=warps)
    return c, s, want


@pytest.mark.parametrize("dtype,m,n,k,warps", CASES)
def test_the_copies_compute_the_product_once(dtype, m, n, k, warps):
    c, s, want = in_child(_emulated, dtype, m, n, k, warps, timeout=300)
    np.testing.assert_array_equal(c, want)
    np.testing.assert_array_equal(s, want.sum(axis=1))
