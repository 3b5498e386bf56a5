"""A vector read along both axes of an accumulator (fla's gates: `a * exp2(g[:, None] - g[None, :])`, the
row and column slices of the accumulator's layout) is loaded once in each slice rather than converted
through shared memory (codegen/passes/convert_layouts.py `_reload`, as Triton rematerializes it): the
conversion's barrier waited for the gates to arrive before the next load (V) was issued. Checked as IR,
emulated on the CPU against NumPy, and on the GPU."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function

from test_codegen_emulate import warmed_and_emulated


@kiln.jit
def gated_products(q_ptr, k_ptr, g_ptr, v_ptr, out_ptr, BT: tl.constexpr):
    """((q k) * 2^(g_i - g_j)) v, the gated product rounded to fp16 before the second dot."""
    r = tl.arange(0, BT)
    tile = r[:, None] * BT + r[None, :]
    a = tl.dot(tl.load(q_ptr + tile), tl.load(k_ptr + tile))
    g = tl.load(g_ptr + r)
    a = a * tl.exp2(g[:, None] - g[None, :])
    v = tl.load(v_ptr + tile)
    tl.store(out_ptr + tile, tl.dot(a.to(tl.float16), v))


def _args(bt):
    rng = np.random.default_rng(9)
    q, k, v = (rng.integers(-2, 3, (bt, bt)).astype(np.float16) for _ in range(3))
    g = rng.integers(-2, 3, bt).astype(np.float32)
    return q, k, g, v, np.zeros((bt, bt), np.float32)


def _want(q, k, g, v):
    a = (q.astype(np.float64) @ k) * np.exp2(g[:, None] - g[None, :])
    return a.astype(np.float16).astype(np.float64) @ v


@pytest.mark.parametrize("target, num_warps", [("sm_90a", 4), ("sm_80", 4), ("sm_80", 1)])
def test_the_gates_are_loaded_in_both_slices_and_not_converted(target, num_warps):
    warm = gated_products.warmup(*_args(64), BT=64, grid=(1,), target=target, num_warps=num_warps)
    kir = compile_ir(parse_function(warm.asm["kir"]), target, {"num_warps": num_warps}, link=False).kir
    vectors = [line for line in kir.splitlines() if ": <64xfp32:" in line]
    assert sum(" = load " in line for line in vectors) == 2
    assert not any(" = convert_layout " in line and "scratch" in line for line in vectors)


@pytest.mark.parametrize("target, num_warps", [("sm_90a", 4), ("sm_80", 2)])
def test_the_reloaded_gates_give_numpy_s_product_emulated(target, num_warps):
    q, k, g, v, out = warmed_and_emulated(gated_products, _args(64), target, num_warps, BT=64)
    np.testing.assert_allclose(out, _want(q, k, g, v), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_the_reloaded_gates_on_the_gpu(num_warps, cuda_torch):
    torch = cuda_torch
    q, k, g, v, out = (torch.from_numpy(x).cuda() for x in _args(64))
    gated_products[(1,)](q, k, g, v, out, BT=64, num_warps=num_warps)
    want = _want(*(x.cpu().numpy() for x in (q, k, g, v)))
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-3, atol=1e-3)
