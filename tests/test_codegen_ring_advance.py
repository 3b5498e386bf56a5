"""A ring's copies are issued iterations ahead, before the loop too, so every carried value their addresses
step by must step without the loop's loads (smem_plan asks prefetch.address_cone for the closed cone). A
pointer stepped by an increment the loop loads (triton-lang/kernels' block-sparse `_dsd_kernel`, its LUT) is
left to the loop's own loads; before, its build named the increment before the loop, where it is not defined,
and failed to verify wherever `tl.multiple_of` on the increment let the load take a ring. An increment the
loop carries unchanged still steps a ring. CPU: the builds, and the emulator against NumPy."""
import numpy as np
import pytest

import kiln
import kiln.language as tl

from test_codegen_emulate import in_child

T, N, STEPS = 16, 64, 4


@kiln.jit
def lut_stepped_matmul(A, B, C, lut, steps, T: tl.constexpr, N: tl.constexpr, LOADED: tl.constexpr):
    """C = (sum of `steps` T x T tiles of A, each `lut[i]` elements after the last) @ B [T, N]; LOADED: each
    step's increment loaded from the LUT, else the first one carried through the loop."""
    rows = tl.arange(0, T)
    cols = tl.arange(0, N)
    pa = A + rows[:, None] * T + rows[None, :]
    pb = B + rows[:, None] * N + cols[None, :]
    inc = tl.multiple_of(tl.load(lut), 8)
    acc = tl.zeros((T, N), dtype=tl.float32)
    for i in range(steps):
        acc += tl.dot(tl.load(pa), tl.load(pb))
        pa += inc
        if LOADED:
            inc = tl.multiple_of(tl.load(lut + i + 1), 8)
        else:
            inc = tl.multiple_of(inc, 8)
    tl.store(C + rows[:, None] * N + cols[None, :], acc)


def _operands():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(STEPS * T * T).astype(np.float16)
    b = rng.standard_normal((T, N)).astype(np.float16)
    lut = np.full(STEPS + 1, T * T, np.int32)  # each step one T x T tile further on
    want = sum(a[i * T * T:(i + 1) * T * T].reshape(T, T).astype(np.float64) for i in range(STEPS)) @ b
    return a, b, lut, want


def _warm(target, stages, loaded):
    a, b, lut, _ = _operands()
    return lut_stepped_matmul.warmup(a, b, np.zeros((T, N), np.float32), lut, STEPS, T=T, N=N, LOADED=loaded,
                                     num_warps=4, num_stages=stages, grid=(1,), target=target)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("stages", [2, 3])
def test_a_loaded_increment_builds_and_leaves_its_load_in_the_loop(target, stages):
    ptx = _warm(target, stages, loaded=True).asm["ptx"]
    assert "cp.async" not in ptx  # no ring: the copies could not be issued ahead
    assert "mma.sync" in ptx or "wgmma" in ptx


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_a_carried_increment_still_steps_a_ring(target):
    assert "cp.async" in _warm(target, 3, loaded=False).asm["ptx"]


def _emulated(target, stages, loaded):
    from kiln.codegen.emulate import run_on_cpu
    a, b, lut, want = _operands()
    c = np.full((T, N), np.nan, np.float32)
    run_on_cpu(_warm(target, stages, loaded).ir, (1,), [a, b, c, lut, STEPS], num_warps=4, target=target,
               options={"num_stages": stages})
    return c, want


@pytest.mark.parametrize("target, stages, loaded", [("sm_90a", 2, True), ("sm_80", 3, True), ("sm_90a", 3, False)])
def test_the_builds_compute_the_product_on_the_emulator(target, stages, loaded):
    c, want = in_child(_emulated, target, stages, loaded, timeout=300)
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-2)
