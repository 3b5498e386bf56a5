"""Scans whose axis spans several warps and repeats of the layout tile (kiln.codegen.lower.reduce):
a 128x32 block on 8 warps scanned along axis 0 (fla's chunked cumsum), each thread one element of
each of 4 repetitions. The warps' totals meet in shared memory, and the warps before this one are
a prefix of their running total. Checked on the CPU emulator against NumPy, an integer sum (exact)
and a first-order recurrence (a combine that does not commute), forward and reversed."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def _recurrence(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@kiln.jit
def _column_scans(X, A, B, Y, Z, M: tl.constexpr, N: tl.constexpr, REVERSE: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(Y + offs, tl.cumsum(tl.load(X + offs), axis=0, reverse=REVERSE))
    _, z = tl.associative_scan((tl.load(A + offs), tl.load(B + offs)), axis=0, combine_fn=_recurrence,
                               reverse=REVERSE)
    tl.store(Z + offs, z)


def _reference(x, a, b, reverse):
    if reverse:
        y, z = _reference(x[::-1], a[::-1], b[::-1], False)
        return y[::-1], z[::-1]
    z = np.zeros_like(b, dtype=np.float64)
    z[0] = b[0]
    for t in range(1, len(b)):  # the scan of (a, b) pairs: z_t = z_{t-1} * a_t + b_t
        z[t] = z[t - 1] * a[t] + b[t]
    return np.cumsum(x, axis=0, dtype=np.int32), z


def _emulated(reverse, warps):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(7 + reverse)
    m, n = 128, 32
    x = rng.integers(-1000, 1000, (m, n)).astype(np.int32)
    a = rng.uniform(0.5, 1.0, (m, n)).astype(np.float32)
    b = rng.standard_normal((m, n)).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros_like(b)
    kernel = _column_scans.warmup(x, a, b, y, z, M=m, N=n, REVERSE=reverse, grid=(1,), target="sm_90a",
                                  num_warps=warps)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [x, a, b, y, z], num_warps=warps)
    return x, a, b, y, z


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("warps", [8, 2])
def test_a_scan_along_warps_and_repetitions_matches_numpy(reverse, warps):
    x, a, b, y, z = in_child(_emulated, reverse, warps, timeout=300)
    want_y, want_z = _reference(x, a, b, reverse)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_allclose(z, want_z, rtol=1e-4, atol=1e-4)
