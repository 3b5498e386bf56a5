"""A broadcast is laid out as the op after it reads it, so what moves between layouts is the vector
before the broadcast (golden `layouts_outer_product_moves_its_vectors.kir`): the recurrence below,
the shape of fla's fused recurrent kernels, runs on the CPU emulator against NumPy, and its 8-warp
build converts no 64x64 block (its vectors are loaded where their broadcasts are read)."""
import re

import numpy as np

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def gated_state(q_ptr, k_ptr, v_ptr, g_ptr, o_ptr, h_ptr, T, D: tl.constexpr):
    """h = h * exp(g_t[:, None]) + k_t[:, None] * v_t[None, :]; o_t = sum(h * q_t[:, None], axis=0)."""
    r = tl.arange(0, D)
    h = tl.load(h_ptr + r[:, None] * D + r[None, :])
    for t in range(T):
        k = tl.load(k_ptr + t * D + r)
        v = tl.load(v_ptr + t * D + r)
        g = tl.load(g_ptr + t * D + r)
        h = h * tl.exp(g[:, None]) + k[:, None] * v[None, :]
        q = tl.load(q_ptr + t * D + r)
        tl.store(o_ptr + t * D + r, tl.sum(h * q[:, None], axis=0))
    tl.store(h_ptr + r[:, None] * D + r[None, :], h)


def _ir(d=64, warps=8):
    x = np.zeros(d * d, np.float32)
    return gated_state.warmup(x, x, x, x, x, x, 4, D=d, num_warps=warps, grid=(1,), target="sm_90a").asm["kir"]


def _emulated(kir, t=3, d=64):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((t, d)).astype(np.float32) for _ in range(3))
    g = -rng.random((t, d)).astype(np.float32)
    h = rng.standard_normal((d, d)).astype(np.float32)
    o = np.zeros((t, d), np.float32)
    want_h, want_o = h.astype(np.float64), np.zeros((t, d))
    for i in range(t):
        want_h = want_h * np.exp(g[i].astype(np.float64))[:, None] + np.outer(k[i], v[i])
        want_o[i] = (want_h * q[i][:, None]).sum(axis=0)
    run_on_cpu(parse_function(kir), (1,), [q, k, v, g, o, h, t], num_warps=8)
    return float(np.abs(o - want_o).max()), float(np.abs(h - want_h).max())


def test_the_recurrence_runs_as_numpy_computes_it():
    err_o, err_h = in_child(_emulated, _ir())
    assert err_o < 1e-3 and err_h < 1e-4


def test_its_loop_converts_vectors_not_blocks():
    built = compile_ir(parse_function(_ir()), "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False)
    loop = built.kir[built.kir.index(" = for "):built.kir.index("reduce")]
    moved = re.findall(r"= convert_layout %\d+ (?:\{[^}]*\} )?: <([\dx]+)xfp32", loop)
    loads = re.findall(r"= load %\d+ (?:\{[^}]*\} )?: <64xfp32:(\w+)", loop)
    # v, k, q: 64 elements each, loaded in the slice their broadcast is read in (their pointers are index math);
    # exp(g[:, None]) converted as 64x1; no block converted
    assert moved == ["64x1"] and sorted(loads) == ["blocked", "slice0", "slice1", "slice1"]
