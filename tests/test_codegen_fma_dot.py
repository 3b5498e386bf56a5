"""Dots on FMAs (fp32 at ieee precision, shapes or types the tensor cores do not take): each thread
reads its rows of A a vector of k at a time from rows padded by 16 bytes, and its runs of B's
columns a vector at a time (kiln.codegen.analysis.dots.fma_staging, kiln.codegen.lower.dot). The
sums stay one FMA chain per output in ascending k, which the emulator's results match exactly."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def _matmul(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=C.dtype.element_ty)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(B + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=C.dtype.element_ty)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


@kiln.jit
def _batched(A, B, C, BATCH: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rb, rm, rn, rk = tl.arange(0, BATCH), tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + rb[:, None, None] * M * K + rm[None, :, None] * K + rk[None, None, :])
    b = tl.load(B + rb[:, None, None] * K * N + rk[None, :, None] * N + rn[None, None, :])
    tl.store(C + rb[:, None, None] * M * N + rm[None, :, None] * N + rn[None, None, :],
             tl.dot(a, b, input_precision="ieee"))


def _chain(a, b):
    """One FMA chain per output, k ascending, each step rounded once (fp32: the product is exact in
    fp64; integers: exact)."""
    if a.dtype.kind == "i":
        return np.einsum("...mk,...kn->...mn", a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], np.float32)
    for k in range(a.shape[-1]):
        acc = (acc.astype(np.float64) + a[..., :, k, None].astype(np.float64) * b[..., k, None, :]).astype(np.float32)
    return acc


def _emulated_matmul(dtype, bm, bn, bk, k, warps):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(bm + bn + bk + k + warps)
    if dtype == "int8":
        a, b = (rng.integers(-128, 128, shape).astype(np.int8) for shape in ((bm, k), (k, bn)))
        c = np.zeros((bm, bn), np.int32)
    else:
        a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((bm, k), (k, bn)))
        c = np.zeros((bm, bn), np.float32)
    kernel = _matmul.warmup(a, b, c, k, BM=bm, BN=bn, BK=bk, PRECISION="ieee", grid=(1,), target="sm_90a",
                            num_warps=warps, num_stages=3)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [a, b, c, k], num_warps=warps)
    return a, b, c


@pytest.mark.parametrize("dtype,bm,bn,bk,k,warps", [
    ("fp32", 64, 64, 32, 64, 4), ("fp32", 32, 64, 16, 48, 2), ("fp32", 16, 32, 8, 8, 1), ("fp32", 64, 32, 4, 8, 4),
    ("int8", 32, 32, 64, 128, 4), ("int8", 16, 16, 16, 32, 1)])
def test_the_emulated_fma_dot_is_one_chain_per_output(dtype, bm, bn, bk, k, warps):
    a, b, got = in_child(_emulated_matmul, dtype, bm, bn, bk, k, warps, timeout=300)
    np.testing.assert_array_equal(got, _chain(a, b))


def _emulated_batched():
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 16, 32)).astype(np.float32), rng.standard_normal((2, 32, 16)).astype(np.float32)
    c = np.zeros((2, 16, 16), np.float32)
    kernel = _batched.warmup(a, b, c, BATCH=2, M=16, N=16, K=32, grid=(1,), target="sm_90a", num_warps=4)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [a, b, c], num_warps=4)
    return a, b, c


def test_a_batched_fma_dot_is_one_chain_per_output():
    a, b, got = in_child(_emulated_batched, timeout=300)
    np.testing.assert_array_equal(got, _chain(a, b))


def test_rows_of_a_and_runs_of_b_are_read_16_bytes_at_a_time():
    x = np.zeros((64, 64), np.float32)
    ptx = _matmul.warmup(x, x, x, 256, BM=64, BN=128, BK=32, PRECISION="ieee", grid=(1,), target="sm_90a",
                         num_warps=4, num_stages=3).asm["ptx"]
    loads = re.findall(r"ld\.shared\.([a-z0-9.]+)", ptx)
    assert loads and set(loads) == {"v4.b32"}
    # per 4 of k: each of the thread's 16 rows of A one load, its 4 columns of B one load per k
    assert ptx.count("fma.rn.f32") == 16 * 4 * 4 and len(loads) == 16 + 4


def test_a_small_dot_stays_a_loop_over_k():
    # LLVM would unroll a 16x16 dot's eight trips whole and ptxas then load all of A's rows and B's
    # columns ahead of the FMAs: fla's fp32 dots on 2 warps took 234 registers where Triton's took 62
    x = np.zeros((16, 32), np.float32)
    kernel = _matmul.warmup(x, x, x, 32, BM=16, BN=16, BK=32, PRECISION="ieee", grid=(1,), target="sm_90a",
                            num_warps=2, num_stages=3)
    ptx = kernel.asm["ptx"]
    assert "llvm.loop.unroll.disable" in kernel.asm["llir"]
    # 4 outputs a thread, 4 of k a trip: one trip's FMAs, not all 32 k's
    assert ptx.count("fma.rn.f32") == 4 * 4
    assert re.search(r"@%p\d+ bra\s+\$L__BB0_\d+;", ptx)
