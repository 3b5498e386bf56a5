"""reshape, permute, join and split as renamings of registers (kiln.ir.layout_moves): the layout
pass gives their results the layouts that keep every element in its thread, lowering then moves
no data (no shared memory, no barrier), and the kernels still compute what NumPy does (CPU
emulator)."""
import itertools
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function, print_function
from kiln.ir.layout import Blocked, Linear, as_linear, blocked_for, parse_layout, thread_elements, wgmma_layout
from kiln.ir.layout_moves import _moves, _reshaped, derived_layout, register_moves

from test_codegen_emulate import in_child


@kiln.jit
def _interleave(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    pairs = tl.join(tl.load(x_ptr + offs), tl.load(y_ptr + offs))
    tl.store(out_ptr + tl.arange(0, 2 * BLOCK), tl.reshape(pairs, [2 * BLOCK]))


@kiln.jit
def _deinterleave(x_ptr, even_ptr, odd_ptr, BLOCK: tl.constexpr):
    even, odd = tl.split(tl.reshape(tl.load(x_ptr + tl.arange(0, 2 * BLOCK)), [BLOCK, 2]))
    tl.store(even_ptr + tl.arange(0, BLOCK), even * 2)
    tl.store(odd_ptr + tl.arange(0, BLOCK), odd + 1)


@kiln.jit
def _rotate_pairs(x_ptr, cos_ptr, sin_ptr, out_ptr, ROWS: tl.constexpr, D: tl.constexpr):
    """Rotary embedding on interleaved pairs (x[2i], x[2i+1]) of each row."""
    rows = tl.arange(0, ROWS)[:, None]
    whole = rows * D + tl.arange(0, D)[None, :]
    half = rows * (D // 2) + tl.arange(0, D // 2)[None, :]
    x1, x2 = tl.split(tl.reshape(tl.load(x_ptr + whole), [ROWS, D // 2, 2]))
    c, s = tl.load(cos_ptr + half), tl.load(sin_ptr + half)
    tl.store(out_ptr + whole, tl.reshape(tl.join(x1 * c - x2 * s, x1 * s + x2 * c), [ROWS, D]))


@kiln.jit
def _permute_3d(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    idx = tl.arange(0, A)[:, None, None] * (B * C) + tl.arange(0, B)[None, :, None] * C + tl.arange(0, C)[None, None, :]
    y = tl.permute(tl.load(x_ptr + idx) * 3, (2, 0, 1))  # [C, A, B]
    out = tl.arange(0, C)[:, None, None] * (A * B) + tl.arange(0, A)[None, :, None] * B + tl.arange(0, B)[None, None, :]
    tl.store(out_ptr + out, y + 1)


@kiln.jit
def _concat(x_ptr, y_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    idx = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    both = tl.cat(tl.load(x_ptr + idx), tl.load(y_ptr + idx) * 2)  # [2 ROWS, COLS]
    tl.store(out_ptr + tl.arange(0, 2 * ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :], both)


F32 = np.zeros(4096, np.float32)
KERNELS = {
    "interleave": lambda: _interleave.warmup(F32, F32, F32, BLOCK=256, grid=(1,), target="sm_90a", num_warps=4),
    "deinterleave": lambda: _deinterleave.warmup(F32, F32, F32, BLOCK=256, grid=(1,), target="sm_90a", num_warps=4),
    "rotate_pairs": lambda: _rotate_pairs.warmup(F32, F32, F32, F32, ROWS=32, D=64, grid=(1,), target="sm_90a",
                                                 num_warps=4),
    "permute_3d": lambda: _permute_3d.warmup(F32, F32, A=4, B=8, C=16, grid=(1,), target="sm_90a", num_warps=4),
    "concat": lambda: _concat.warmup(F32, F32, F32, ROWS=32, COLS=16, grid=(1,), target="sm_90a", num_warps=4),
}


def _optimized(name):
    kernel = KERNELS[name]()
    return kernel, parse_function(compile_ir(parse_function(kernel.asm["kir"]), "sm_90a", {"num_warps": 4},
                                             link=False).kir)


@pytest.mark.parametrize("name", ["interleave", "deinterleave"])
def test_pairs_joined_or_split_in_registers_touch_no_shared_memory(name):
    kernel, fn = _optimized(name)
    ops = [op for op in fn.walk() if op.name in ("join", "split", "reshape")]
    assert len(ops) == 2 and all(register_moves(op, 4, i) is not None for op in ops for i in range(len(op.results)))
    assert not any(op.name == "convert_layout" for op in fn.walk())
    ptx = kernel.asm["ptx"]
    assert not re.search(r"\b(st|ld)\.shared|bar\.sync", ptx)


def test_rotary_pairs_split_and_joined_without_moving_data():
    _, fn = _optimized("rotate_pairs")
    ops = [op for op in fn.walk() if op.name in ("join", "split", "reshape")]
    assert [op.name for op in ops] == ["reshape", "split", "join", "reshape"]
    assert all(register_moves(op, 4, i) is not None for op in ops for i in range(len(op.results)))


@pytest.mark.parametrize("name,op_name", [("permute_3d", "permute"), ("concat", "cat")])
def test_a_permute_or_a_cat_moves_no_data(name, op_name):
    kernel, fn = _optimized(name)
    (op,) = [op for op in fn.walk() if op.name == op_name]
    assert register_moves(op, 4) is not None
    if name == "concat":  # (the permuted block is stored along other rows: a conversion for the store)
        assert "st.shared" not in kernel.asm["ptx"]


def _run(name):
    from kiln.codegen.emulate import run_on_cpu
    kernel = KERNELS[name]()
    rng = np.random.default_rng(3)
    fn = parse_function(kernel.asm["kir"])
    if name == "interleave":
        x, y, out = rng.standard_normal(256, np.float32), rng.standard_normal(256, np.float32), np.zeros(512, np.float32)
        run_on_cpu(fn, (1,), [x, y, out], num_warps=4)
        return out, np.stack([x, y], 1).reshape(-1)
    if name == "deinterleave":
        x, even, odd = rng.standard_normal(512, np.float32), np.zeros(256, np.float32), np.zeros(256, np.float32)
        run_on_cpu(fn, (1,), [x, even, odd], num_warps=4)
        return np.concatenate([even, odd]), np.concatenate([x[0::2] * 2, x[1::2] + 1])
    if name == "rotate_pairs":
        x = rng.standard_normal((32, 64), np.float32)
        c, s = rng.standard_normal((32, 32), np.float32), rng.standard_normal((32, 32), np.float32)
        out = np.zeros_like(x)
        run_on_cpu(fn, (1,), [x, c, s, out], num_warps=4)
        x1, x2 = x[:, 0::2], x[:, 1::2]
        return out, np.stack([x1 * c - x2 * s, x1 * s + x2 * c], 2).reshape(32, 64)
    if name == "concat":
        x, y, out = rng.standard_normal((32, 16), np.float32), rng.standard_normal((32, 16), np.float32), \
            np.zeros((64, 16), np.float32)
        run_on_cpu(fn, (1,), [x, y, out], num_warps=4)
        return out, np.concatenate([x, y * 2])
    x, out = rng.standard_normal((4, 8, 16), np.float32), np.zeros((16, 4, 8), np.float32)
    run_on_cpu(fn, (1,), [x, out], num_warps=4)
    return out, np.transpose(x * 3, (2, 0, 1)) + 1


def _max_error(name):
    got, want = _run(name)
    return float(np.abs(got - want).max())


@pytest.mark.parametrize("name", list(KERNELS))
def test_renamed_shape_ops_on_the_emulator_match_numpy(name):
    assert in_child(_max_error, name) < 1e-5


# ---- the layouts themselves -------------------------------------------------------------------

class _Op:
    """An op as derived_layout reads it: name, operand and result shapes, attrs."""

    class _V:
        def __init__(self, shape):
            self.type = type("T", (), {"shape": shape})()

    def __init__(self, name, src, dst, **attrs):
        self.name, self.attrs = name, attrs
        self.operands, self.results = [self._V(src)], [self._V(dst)]


def _same_elements(a, a_shape, b, b_shape, index, warps):
    """Does every thread hold in `b` exactly the elements it holds in `a` (`index`: an element of
    `b` as the flat index in `a` it comes from)?"""
    held = thread_elements(a, a_shape, warps)
    wanted = thread_elements(b, b_shape, warps)
    return all(sorted(index(e) for e in w) == sorted(_flat(e, a_shape) for e in h) for h, w in zip(held, wanted))


def _flat(idx, shape):
    f = 0
    for i, n in zip(idx, shape):
        f = f * n + i
    return f


def _assert_renaming_holds_in_every_thread(src, src_shape, dst, dst_shape, warps):
    """register_moves checks only a few threads of linear layouts: its renaming, checked in all."""
    moves = _moves("reshape", (), 0, ((src, src_shape),), (dst, dst_shape), warps)
    assert moves is not None
    held, wanted = thread_elements(src, src_shape, warps), thread_elements(dst, dst_shape, warps)
    for h, w in zip(held, wanted):
        assert [_flat(h[i], src_shape) for _, i in moves] == [_flat(e, dst_shape) for e in w]


def test_reshape_splits_the_fastest_dim_into_pairs():
    flat = blocked_for((512,), (0,), 4, 4)
    assert _reshaped(flat, (512,), (256, 2), 4) == Blocked((2, 2), (32, 1), (4, 1), (0, 1))
    rows = blocked_for((32, 64), (1, 0), 4, 4)
    pairs = _reshaped(rows, (32, 64), (32, 32, 2), 4)
    assert pairs == Blocked((1, 2, 2), (2, 16, 1), (4, 1, 1), (1, 0, 2))
    assert _reshaped(pairs, (32, 32, 2), (32, 64), 4) == rows  # and back


def test_reshaped_layouts_keep_every_element_in_its_thread():
    """Every Blocked layout of a few shapes, reshaped to every factorization it has: where a
    layout is derived, each thread holds the same flat elements before and after."""
    shapes = [(64,), (16, 16), (8, 4, 8), (2, 128), (32, 8)]
    checked = 0
    for shape in shapes:
        numel = int(np.prod(shape))
        for order in itertools.permutations(range(len(shape))):
            for vec in (1, 2, 4):
                for warps in (1, 2, 4):
                    layout = blocked_for(shape, order, vec, warps)
                    for dst in [(numel,), (numel // 2, 2), (4, numel // 4), (2, numel // 8, 4)]:
                        got = _reshaped(layout, shape, dst, warps)
                        if got is None:
                            continue
                        checked += 1
                        assert _same_elements(layout, shape, got, dst, lambda e: _flat(e, dst), warps), \
                            (layout, shape, dst, got)
                        _assert_renaming_holds_in_every_thread(layout, shape, got, dst, warps)
    assert checked > 100


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_a_permuted_layout_holds_the_permuted_elements(perm):
    src = (4, 8, 16)
    dst = tuple(src[d] for d in perm)
    layout = blocked_for(src, (2, 1, 0), 4, 4)
    got = derived_layout(_Op("permute", src, dst, order=perm), layout, 4)

    def back(e):
        out = [0] * 3
        for i, d in enumerate(perm):
            out[d] = e[i]
        return _flat(out, src)
    assert _same_elements(layout, src, got, dst, back, 4)


def test_split_needs_the_pair_in_one_thread():
    spread = Blocked((1, 1), (16, 2), (4, 1), (1, 0))  # the pair on two lanes
    assert derived_layout(_Op("split", (64, 2), (64,)), spread, 4) is None
    held = Blocked((1, 2), (32, 1), (4, 1), (1, 0))
    assert derived_layout(_Op("split", (128, 2), (128,)), held, 4) == Blocked((1,), (32,), (4,), (0,))


def test_layouts_that_move_elements_between_threads_are_no_renaming():
    flat = blocked_for((512,), (0,), 4, 4)
    assert _moves("reshape", (), 0, ((flat, (512,)),), (Blocked((2, 2), (32, 1), (4, 1), (0, 1)), (256, 2)), 4)
    spread = Blocked((1, 2), (32, 1), (4, 1), (0, 1))  # each thread a pair, but not the pairs it loaded
    assert _moves("reshape", (), 0, ((flat, (512,)),), (spread, (256, 2)), 4) is None
    wrapped = blocked_for((16,), (0,), 1, 4)  # 128 threads over 16 elements: not linear, every thread checked
    row_major, column_major = blocked_for((8, 2), (1, 0), 1, 4), blocked_for((8, 2), (0, 1), 1, 4)
    assert _moves("reshape", (), 0, ((wrapped, (16,)),), (row_major, (8, 2)), 4) == ((0, 0),)  # lane l: element l % 16
    assert _moves("reshape", (), 0, ((wrapped, (16,)),), (column_major, (8, 2)), 4) is None


# ---- a dot's accumulator split in column halves (tutorial 09's epilogue subtiling) --------------

@kiln.jit
def _subtiled_dot(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    left, right = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
    half = tl.arange(0, BN // 2)[None, :]
    tl.store(c_ptr + rm[:, None] * BN + half, left + 1)
    tl.store(c_ptr + rm[:, None] * BN + BN // 2 + half, right * 2)


def _subtiled(target, bm=64, bn=64, warps=4):
    half = np.zeros((bm, 128), np.float16)
    return _subtiled_dot.warmup(half, half, np.zeros((bm, bn), np.float32), 128, BM=bm, BN=bn, BK=32,
                                num_warps=warps, num_stages=3, grid=(1,), target=target)


def _shape_ops(kernel, target, warps):
    kir = compile_ir(parse_function(kernel.asm["kir"]), target, {"num_warps": warps, "num_stages": 3}, link=False).kir
    fn = parse_function(kir)
    return kir, [op for op in fn.walk() if op.name in ("reshape", "permute", "split")]


@pytest.mark.parametrize("bm,bn,warps", [(64, 64, 4), (128, 256, 8)])
def test_a_wgmma_accumulator_splits_in_column_halves_in_registers(bm, bn, warps):
    """reshape [BM, BN] -> [BM, 2, BN/2], permute, split: the intermediates in Linear layouts (no
    Blocked one holds a wgmma fragment), the halves in wgmma layouts of half the width."""
    kir, ops = _shape_ops(_subtiled("sm_90a", bm, bn, warps), "sm_90a", warps)
    assert [op.name for op in ops] == ["reshape", "permute", "split"]
    assert all(register_moves(op, warps, i) is not None for op in ops for i in range(len(op.results)))
    assert isinstance(ops[0].results[0].type.encoding, Linear) and isinstance(ops[1].results[0].type.encoding, Linear)
    assert str(ops[2].results[0].type.encoding).startswith("wgmma:") and f"n{bn // 2}" in str(ops[2].results[0].type)
    assert print_function(parse_function(kir)) == kir  # the Linear layouts read back


def test_the_linear_layouts_hold_what_the_wgmma_layout_holds():
    wgmma = wgmma_layout((128, 256), 8)
    lin = as_linear(wgmma, (128, 256), 8)
    assert thread_elements(lin, (128, 256), 8) == thread_elements(wgmma, (128, 256), 8)
    assert parse_layout(str(lin)) == lin


def _split_error():
    from kiln.codegen.emulate import run_on_cpu
    kernel = _subtiled("sm_80")
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((64, 128)).astype(np.float16), rng.standard_normal((128, 64)).astype(np.float16)
    c = np.zeros((64, 64), np.float32)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [a, b, c, 128], num_warps=4)
    want = a.astype(np.float64) @ b.astype(np.float64)
    want = np.concatenate([want[:, :32] + 1, want[:, 32:] * 2], 1)
    return float(np.abs(c - want).max())


def test_an_mma_accumulator_split_in_registers_on_the_emulator_matches_numpy():
    _, ops = _shape_ops(_subtiled("sm_80"), "sm_80", 4)
    assert all(register_moves(op, 4, i) is not None for op in ops for i in range(len(op.results)))
    assert in_child(_split_error) < 1e-2


@pytest.mark.parametrize("text", ["linear:r0.1:l0.2:w", "linear:r0.1:l0.2/0.4/1.0/2.0/4.0:w16.0.0",
                                  "linear:r0.1:l0.4/0.2/1.0/2.0/4.0:w", "linear:x0.1:l0.2/0.4/1.0/2.0/4.0:w"])
def test_a_linear_layout_that_lowering_could_not_read_is_refused(text):
    """Five lane moves, one rank, each dim's lane bits one ascending run (base_terms reads them so)."""
    with pytest.raises(ValueError, match="not a layout|not one run"):
        parse_layout(text)


def test_two_wgmma_halves_join_back_into_one_accumulator_in_registers():
    """The other way (tutorial 06's Blackwell path rescales the halves, then joins, permutes and
    reshapes them back): Linear intermediates, a wgmma layout of the whole width at the end."""
    half = wgmma_layout((128, 64), 8)
    joined = derived_layout(_Op("join", (128, 64), (128, 64, 2)), half, 8)
    permuted = derived_layout(_Op("permute", (128, 64, 2), (128, 2, 64), order=(0, 2, 1)), joined, 8)
    whole = derived_layout(_Op("reshape", (128, 2, 64), (128, 128)), permuted, 8)
    assert isinstance(joined, Linear) and isinstance(permuted, Linear) and whole == wgmma_layout((128, 128), 8)
    assert _moves("join", (), 0, ((half, (128, 64)), (half, (128, 64))), (joined, (128, 64, 2)), 8) is not None
    assert _moves("permute", (0, 2, 1), 0, ((joined, (128, 64, 2)),), (permuted, (128, 2, 64)), 8) is not None
    assert _moves("reshape", (), 0, ((permuted, (128, 2, 64)),), (whole, (128, 128)), 8) is not None


@kiln.jit
def _pairs_in_a_loop(out_ptr, n):
    acc = tl.zeros([64], tl.float32)
    for _ in range(n):  # carried from zeros: the layout pass meets the reshape before acc has a layout
        a, b = tl.split(tl.reshape(acc, [32, 2]))
        acc = tl.reshape(tl.join(b + 1, a * 2), [64])
    tl.store(out_ptr + tl.arange(0, 64), acc)


def _loop_error():
    from kiln.codegen.emulate import run_on_cpu
    kernel = _pairs_in_a_loop.warmup(np.zeros(64, np.float32), 3, grid=(1,), target="sm_90a")
    out = np.zeros(64, np.float32)
    run_on_cpu(parse_function(kernel.asm["kir"]), (1,), [out, 3], num_warps=4)
    want = np.zeros(64)
    for _ in range(3):
        want = np.stack([want[1::2] + 1, want[0::2] * 2], 1).reshape(-1)
    return float(np.abs(out - want).max())


def test_shape_ops_on_a_value_carried_by_a_loop_compile_and_compute():
    assert in_child(_loop_error) == 0
