"""A chunked recurrence (fla's shape: a state carried across a sequence's chunks, each chunk's state
stored, its inputs loaded, two dots a step) is pipelined although its loop stores: its stores write
arguments (`h`, `v_new`) that none of its loads reads, so copies issued ahead read nothing an earlier
iteration wrote (kiln.codegen.analysis.pointer_roots). Triton's pipeliner loads ahead of such stores
too. A loop storing where it also loads stays as written. Built for sm_90a (wgmma on rings) and
checked as IR; run on the CPU emulator (mma.sync on cp.async rings) against NumPy."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen.analysis.pointer_roots import roots, stores_unread
from kiln.ir import parse_function

from test_codegen_emulate import in_child
from tile_banks import most_words_a_bank


@kiln.jit
def chunked_state(k_ptr, v_ptr, w_ptr, g_ptr, h_ptr, v_new_ptr, T, BT: tl.constexpr, K: tl.constexpr,
                  V: tl.constexpr, GATED: tl.constexpr):
    """Per chunk t: h_t stored, v_new = v - w @ h, h += k^T @ v_new. GATED: fla's scalar gate, each
    chunk's gates `g` (a vector) and its last gate (a scalar) loaded after the state's store, decaying
    the state and scaling v_new."""
    rows = tl.arange(0, BT)
    ks = tl.arange(0, K)
    vs = tl.arange(0, V)
    h = tl.zeros((K, V), dtype=tl.float32)
    for t in range(tl.cdiv(T, BT)):
        tl.store(h_ptr + t * K * V + ks[:, None] * V + vs[None, :], h.to(tl.float16))
        at = t * BT + rows
        inside = at < T
        w = tl.load(w_ptr + at[:, None] * K + ks[None, :], mask=inside[:, None], other=0.0)
        v = tl.load(v_ptr + at[:, None] * V + vs[None, :], mask=inside[:, None], other=0.0)
        kt = tl.load(k_ptr + at[None, :] * K + ks[:, None], mask=inside[None, :], other=0.0)
        v_new = v.to(tl.float32) - tl.dot(w, h.to(tl.float16))
        tl.store(v_new_ptr + at[:, None] * V + vs[None, :], v_new.to(tl.float16), mask=inside[:, None])
        if GATED:
            g_last = tl.load(g_ptr + tl.minimum((t + 1) * BT, T) - 1)
            g = tl.load(g_ptr + at, mask=inside, other=0.0)
            v_new = v_new * tl.where(inside, tl.exp(g_last - g), 0.0)[:, None]
            h = h * tl.exp(g_last)
        h = tl.dot(kt, v_new.to(tl.float16), h)


@kiln.jit
def scaled_chunk_state(k_ptr, v_ptr, g_ptr, h_ptr, T, BT: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    """fla's chunk_fwd_kernel_h (simple_gla's): each chunk's v scaled by its gates is B of the state's dot;
    with K = BT the chunk's v has the state's shape."""
    rows = tl.arange(0, BT)
    ks = tl.arange(0, K)
    vs = tl.arange(0, V)
    h = tl.zeros((K, V), dtype=tl.float32)
    for t in range(tl.cdiv(T, BT)):
        tl.store(h_ptr + t * K * V + ks[:, None] * V + vs[None, :], h.to(tl.float16))
        at = t * BT + rows
        inside = at < T
        kt = tl.load(k_ptr + at[None, :] * K + ks[:, None], mask=inside[None, :], other=0.0)
        v = tl.load(v_ptr + at[:, None] * V + vs[None, :], mask=inside[:, None], other=0.0)
        g_last = tl.load(g_ptr + tl.minimum((t + 1) * BT, T) - 1)
        g = tl.load(g_ptr + at, mask=inside, other=0.0)
        v = (v * tl.exp(g_last - g)[:, None]).to(tl.float16)
        h = tl.dot(kt, v, h * tl.exp(g_last))


@kiln.jit
def offset_rows(x_ptr, y_ptr, starts_ptr, n, B: tl.constexpr):
    """A sequence's rows start where `starts` says (fla's varlen `bos`): a loaded offset moves the
    addresses within x's and y's memory, so the loop still stores only what it does not load."""
    r = tl.arange(0, B)
    start = tl.load(starts_ptr + tl.program_id(0))
    acc = tl.zeros((B, B), dtype=tl.float32)
    for i in range(n):
        x = tl.load(x_ptr + (start + i * B + r)[:, None] * B + r[None, :])
        acc = tl.dot(x, x, acc)
        tl.store(y_ptr + (start + i * B + r)[:, None] * B + r[None, :], acc.to(tl.float16))


@kiln.jit
def gathered_rows(table_ptr, y_ptr, n, B: tl.constexpr):
    """Each step's rows come through a pointer read from memory: which memory is not known."""
    r = tl.arange(0, B)
    for i in range(n):
        x_ptr = tl.load(table_ptr + i).to(tl.pointer_type(tl.float16))
        x = tl.load(x_ptr + r[:, None] * B + r[None, :])
        tl.store(y_ptr + i * B * B + r[:, None] * B + r[None, :], tl.dot(x, x).to(tl.float16))


@kiln.jit
def in_place_rows(x_ptr, w_ptr, n, B: tl.constexpr):
    """Each step reads the matrix the step before wrote: no load may go ahead of that store. (Checked as
    IR only: other threads wrote what a thread reads, and without a barrier that races on a GPU.)"""
    r = tl.arange(0, B)
    w = tl.load(w_ptr + r[:, None] * B + r[None, :])
    for i in range(1, n):
        prev = tl.load(x_ptr + (i - 1) * B * B + r[:, None] * B + r[None, :])
        tl.store(x_ptr + i * B * B + r[:, None] * B + r[None, :], tl.dot(prev, w).to(tl.float16))


T, BT, K, V = 150, 64, 64, 32  # wgmma: 64 rows a warpgroup


def _args():
    """k, v, w, the gates (fla's cumulative log-gates: falling), h and v_new."""
    rng = np.random.default_rng(5)
    k = (rng.standard_normal((T, K)) / 8).astype(np.float16)
    v = rng.standard_normal((T, V)).astype(np.float16)
    w = (rng.standard_normal((T, K)) / 8).astype(np.float16)
    g = np.cumsum(-rng.random(T) / 16).astype(np.float32)
    chunks = -(-T // BT)
    return k, v, w, g, np.zeros((chunks, K, V), np.float16), np.zeros((T, V), np.float16)


def _reference(k, v, w, g=None):
    """The states stored and v_new, gated by `g` where it is given."""
    h = np.zeros((K, V), np.float32)
    hs, v_news = [], []
    for t in range(0, T, BT):
        hs.append(h.astype(np.float16))
        h16 = h.astype(np.float16).astype(np.float32)
        v_new = v[t:t + BT].astype(np.float32) - w[t:t + BT].astype(np.float32) @ h16
        v_news.append(v_new)
        if g is not None:
            last = g[min(t + BT, T) - 1]
            v_new = v_new * np.exp(last - g[t:t + BT])[:, None]
            h = h * np.exp(last)
        h = h + k[t:t + BT].astype(np.float32).T @ v_new.astype(np.float16).astype(np.float32)
    return np.stack(hs), np.concatenate(v_news)


def _built(kernel, *args, num_warps=4, **constexprs):
    from kiln.codegen import compile
    warm = kernel.warmup(*args, **constexprs, grid=(1,), target="sm_90a")
    return compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps, "num_stages": 3}, link=False)


def _loop_text(kir: str) -> str:
    return kir[kir.index(" = for ") if " = for " in kir else kir.index("for "):]


def test_the_recurrence_s_stores_are_unread_by_its_loads():
    kernel = chunked_state.warmup(*_args(), T, BT=BT, K=K, V=V, GATED=False, grid=(1,), target="sm_90a")
    fn = parse_function(kernel.asm["kir"])
    loop = next(op for op in fn.walk() if op.name == "for")
    names = lambda ids: sorted(fn.arg_names[i] for i, a in enumerate(fn.args) if id(a) in ids)  # noqa: E731
    stored = set().union(*(roots(op.operands[0], fn) for op in loop.regions[0].walk() if op.name == "store"))
    read = set().union(*(roots(op.operands[0], fn) for op in loop.regions[0].walk() if op.name == "load"))
    assert names(stored) == ["h_ptr", "v_new_ptr"] and names(read) == ["k_ptr", "v_ptr", "w_ptr"]
    assert stores_unread(loop.regions[0], fn)


def test_a_loop_storing_what_it_loads_is_not_unread():
    x = np.zeros((4, 16, 16), np.float16)
    kernel = in_place_rows.warmup(x, x[0], 4, B=16, grid=(1,), target="sm_90a")
    fn = parse_function(kernel.asm["kir"])
    loop = next(op for op in fn.walk() if op.name == "for")
    assert not stores_unread(loop.regions[0], fn)


def _loop_of(kernel, *args, **constexprs):
    fn = parse_function(kernel.warmup(*args, **constexprs, grid=(1,), target="sm_90a").asm["kir"])
    return fn, next(op for op in fn.walk() if op.name == "for").regions[0]


def test_an_offset_loaded_from_memory_keeps_the_argument():
    x = np.zeros((64, 16), np.float16)
    fn, body = _loop_of(offset_rows, x, x, np.zeros(2, np.int32), 4, B=16)
    assert stores_unread(body, fn)


def test_a_pointer_loaded_from_memory_is_no_known_argument():
    y = np.zeros((4, 16, 16), np.float16)
    fn, body = _loop_of(gathered_rows, np.zeros(4, np.int64), y, 4, B=16)
    assert any(roots(op.operands[0], fn) is None for op in body.walk() if op.name == "load")
    assert not stores_unread(body, fn)


@pytest.mark.parametrize("num_warps", [4, 8])
def test_the_recurrence_runs_on_wgmma_with_its_inputs_on_rings(num_warps):
    loop = _loop_text(_built(chunked_state, *_args(), T, num_warps=num_warps, BT=BT, K=K, V=V, GATED=False).kir)
    assert loop.count("warp_group_dot ") == 2
    assert "tma_copy" in loop or "async_copy" in loop  # w, v and k copied ahead into rings
    assert loop.count(" = load ") == 0


@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_the_gates_after_the_store_are_loaded_ahead(num_warps):
    """The gates, loaded after the state's store, wait for nothing in the iteration: the vector comes
    through a ring of one-row tiles with the chunk's tiles (as Triton copies it), and so does the scalar,
    in tiles of one, read back by every thread. Carried in a register instead (loaded at the top of
    iteration i for i + 1), it came in behind the ring copies in flight and its carrying move waited for it
    (fla's fwd_h on an H100: 11% of the warps' stalls)."""
    loop = _loop_text(_built(chunked_state, *_args(), T, num_warps=num_warps, BT=BT, K=K, V=V, GATED=True).kir)
    header = loop[:loop.index(" loc(")]
    assert not header.endswith(", fp32")  # nothing carried but the state and the rings' counters
    assert " = load " not in loop
    assert re.search(r"= local_load %\d+ : fp32 ", loop)  # the last gate
    assert re.search(r"= local_load %\d+ : <64xfp32:slice1:", loop)
    assert re.search(r"= local_alloc[^\n]*: smem<\dx1x1xfp32:", _built(chunked_state, *_args(), T, num_warps=num_warps,
                                                                     BT=BT, K=K, V=V, GATED=True).kir)


@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_the_gated_chunk_meets_the_accumulator_in_its_layout(num_warps):
    """v, read back from its ring to be subtracted from a dot's result, is read in the accumulator's
    layout (wgmma's at 4 and 8 warps, mma.sync's at 2), and the gates, broadcast against it after
    exp2, are read back in a slice of it: nothing is converted into the accumulator's layout through
    shared memory (a barrier each) in the loop."""
    loop = _loop_text(_built(chunked_state, *_args(), T, num_warps=num_warps, BT=BT, K=K, V=V, GATED=True).kir)
    acc = re.search(r"= (?:warp_group_dot|mma_dot) [^:]*: <64x32xfp32:([^>]*)>", loop).group(1)
    assert re.search(rf"= local_load %\d+ : <64x32xfp16:{re.escape(acc)}>", loop)
    assert re.search(rf"= local_load %\d+ : <64xfp32:slice1:{re.escape(acc)}>", loop)
    assert not re.search(rf"convert_layout %\d+ \{{scratch = [^}}]*\}} : <[^:]*:{re.escape(acc)}>", loop)


def _most_lanes_a_bank(tile_type) -> int:
    """Reading the tile in an accumulator's layout (lane g, t: rows g, columns 2t, 2t + 1 of an 8-column
    block, one 4-byte word), the most distinct words one bank serves for a warp's read, over the blocks."""
    return max(most_words_a_bank(tile_type, [(g, 8 * block + 2 * t, 4) for g in range(8) for t in range(4)])
               for block in range(tile_type.shape[1] // 8))


@pytest.mark.parametrize("num_warps", [2, 4, 8])
def test_a_chunk_read_in_the_accumulator_s_layout_comes_through_a_swizzled_ring(num_warps):
    """v, subtracted from a dot's result, is read back in the accumulator's layout: its ring's tiles are
    swizzled, which spreads those reads over every bank (fla's fwd_h: unswizzled 64-byte rows put four
    lanes on a bank, 37% of its shared wavefronts excess on an H100)."""
    fn = parse_function(_built(chunked_state, *_args(), T, num_warps=num_warps, BT=BT, K=K, V=V, GATED=True).kir)
    loop = next(op for op in fn.walk() if op.name == "for")
    read_back = [op for op in loop.regions[0].walk() if op.name == "local_load" and len(op.results[0].type.shape) == 2]
    assert len(read_back) == 1
    view = read_back[0].operands[0]
    ring = view.defining_op.operands[0].type  # local_index of the ring
    tile = view.type
    assert ring.swizzle == 64 and tuple(tile.shape) == (BT, V)
    assert _most_lanes_a_bank(tile) == 1
    from kiln.ir.types import shared_type
    assert _most_lanes_a_bank(shared_type(tile.element_ty, tile.shape, 0, tile.order)) == 4  # as it was


@pytest.mark.parametrize("num_warps", [2, 4])
def test_a_chunk_of_the_state_s_shape_is_scaled_where_it_is_read_back(num_warps):
    """v (BT x V) has the state's shape (K x V) when K = BT: the gates' broadcast takes the read-back
    tile's layout, not the accumulator's that the shape prefers, so v is not converted into the
    accumulator's layout through shared memory to be scaled (simple_gla's chunk_fwd_kernel_h at
    BK 64: 9 KB and a barrier an iteration)."""
    k, v, w, g, h, _ = _args()
    loop = _loop_text(_built(scaled_chunk_state, k, v, g, h, T, num_warps=num_warps, BT=BT, K=K, V=V).kir)
    assert "local_load" in loop  # v read back from its ring
    assert not re.search(r"convert_layout %\d+ \{scratch = [^}]*\} : <64x32xfp32:", loop)


def test_the_recurrence_assembles_for_sm_90a():
    from kiln.codegen import compile
    warm = chunked_state.warmup(*_args(), T, BT=BT, K=K, V=V, GATED=False, grid=(1,), target="sm_90a")
    built = compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 4, "num_stages": 3})
    assert built.cubin and built.n_spills == 0
    assert "wgmma.mma_async" in built.ptx
    assert "cp.async.bulk.tensor" in built.ptx or "cp.async.cg" in built.ptx or "cp.async.ca" in built.ptx


def test_a_loop_storing_what_it_loads_keeps_its_loads_in_place():
    x = np.zeros((4, 16, 16), np.float16)
    loop = _loop_text(_built(in_place_rows, x, x[0], 4, B=16).kir)
    assert "async_copy" not in loop and "tma_copy" not in loop and " = load " in loop


def _portable_loop(num_warps):
    from kiln.codegen.compiler import _options, lower_to_llvm
    from kiln.codegen.target import parse_target
    from kiln.ir import copy_function
    kernel = chunked_state.warmup(*_args(), T, BT=BT, K=K, V=V, GATED=False, grid=(1,), target="sm_90a")
    opts = _options({"num_warps": num_warps, "num_stages": 3})
    return _loop_text(lower_to_llvm(copy_function(kernel.ir), parse_target("sm_90a"), opts, portable=True)[0])


def _emulated(num_warps, gated):
    from kiln.codegen.emulate import run_on_cpu
    k, v, w, g, h, v_new = _args()
    kernel = chunked_state.warmup(k, v, w, g, h, v_new, T, BT=BT, K=K, V=V, GATED=gated, grid=(1,),
                                  target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [k, v, w, g, h, v_new, T], num_warps=num_warps, options={"num_stages": 3})
    return (k, v, w, g if gated else None), h, v_new


def _scaled_emulated(num_warps):
    from kiln.codegen.emulate import run_on_cpu
    k, v, _, g, h, _ = _args()
    kernel = scaled_chunk_state.warmup(k, v, g, h, T, BT=BT, K=K, V=V, grid=(1,), target="sm_90a")
    run_on_cpu(kernel.ir, (1,), [k, v, g, h, T], num_warps=num_warps, options={"num_stages": 3})
    return (k, v, g), h


def test_the_scaled_chunk_recurrence_matches_numpy():
    (k, v, g), h = in_child(_scaled_emulated, 2, timeout=600)
    state, want = np.zeros((K, V), np.float32), []
    for t in range(0, T, BT):
        want.append(state.astype(np.float16))
        last = g[min(t + BT, T) - 1]
        scaled = (v[t:t + BT].astype(np.float32) * np.exp(last - g[t:t + BT])[:, None]).astype(np.float16)
        state = state * np.exp(last) + k[t:t + BT].astype(np.float32).T @ scaled.astype(np.float32)
    np.testing.assert_allclose(h.astype(np.float32), np.stack(want).astype(np.float32), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("num_warps", [2, 4])
def test_the_pipelined_recurrence_matches_numpy(num_warps, gated):
    assert "async_copy" in _portable_loop(num_warps)  # as emulated: mma.sync on cp.async rings
    inputs, h, v_new = in_child(_emulated, num_warps, gated, timeout=600)
    want_h, want_v_new = _reference(*inputs)
    np.testing.assert_allclose(h.astype(np.float32), want_h.astype(np.float32), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(v_new.astype(np.float32), want_v_new, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("num_warps", [2, 4, 8])
@pytest.mark.parametrize("num_stages", [2, 3])
def test_the_recurrence_on_the_gpu(num_warps, num_stages, gated, cuda_torch):
    """As built for the GPU: wgmma from rings at 4 and 8 warps, mma.sync from cp.async rings at 2."""
    torch = cuda_torch
    k, v, w, g, h, v_new = (torch.from_numpy(x).cuda() for x in _args())
    chunked_state[(1,)](k, v, w, g, h, v_new, T, BT=BT, K=K, V=V, GATED=gated, num_warps=num_warps,
                        num_stages=num_stages)
    want_h, want_v_new = _reference(*(x.cpu().numpy() for x in (k, v, w)), g.cpu().numpy() if gated else None)
    np.testing.assert_allclose(h.float().cpu().numpy(), want_h.astype(np.float32), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(v_new.float().cpu().numpy(), want_v_new, rtol=2e-2, atol=2e-2)
