"""`tl.multiple_of` / `max_contiguous` / `max_constancy` hold for the value itself, as in
Triton, so a hint whose result is dropped still reaches the value's later uses."""
import re

import numpy as np

import kiln
import kiln.language as tl
from kiln.ir import print_function


@kiln.jit
def _hinted_copy(src, dst, n, BLOCK: tl.constexpr, KEEP: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        ptrs = src + start + offs
        if KEEP:
            ptrs = tl.multiple_of(ptrs, [16])
        else:
            tl.multiple_of(ptrs, [16])  # result dropped: the hint is on `ptrs` itself
        tl.store(dst + start + offs, tl.load(ptrs))


def _frontend_ir(kernel, *args, **kwargs):
    return print_function(kernel.warmup(*args, grid=(1,), **kwargs).ir)


def test_a_dropped_hint_holds_for_the_values_later_uses():
    x = np.zeros(64, np.float32)
    for keep in (True, False):
        text = _frontend_ir(_hinted_copy, x, x, 64, BLOCK=16, KEEP=keep)
        hint = re.search(r"(%\d+) = multiple_of (%\d+) \{values = \[16\]\}", text)
        assert hint, text
        assert re.search(rf"= load {hint.group(1)}\b", text)  # the load reads the hinted pointers


def test_a_dropped_hint_still_computes_the_same_result():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    _hinted_copy[(1,)](x, y, 64, BLOCK=16, KEEP=False)
    assert (y == x).all()


@kiln.jit
def _hint_in_a_branch(src, dst, flag, BLOCK: tl.constexpr):
    ptrs = src + tl.arange(0, BLOCK)
    if flag > 0:
        tl.multiple_of(ptrs, [16])  # made outside this branch: later uses keep the value as made
    tl.store(dst + tl.arange(0, BLOCK), tl.load(ptrs))


def test_a_hint_in_a_branch_leaves_uses_after_it_alone():
    x = np.arange(16, dtype=np.float32)
    y = np.zeros(16, np.float32)
    text = _frontend_ir(_hint_in_a_branch, x, y, 5, BLOCK=16)  # 1 would be a constant
    ptrs = re.search(r"(%\d+) = addptr", text).group(1)
    assert re.search(rf"= load {ptrs}\b", text)
    assert ".target sm_90a" in _hint_in_a_branch.warmup(x, y, 5, BLOCK=16, grid=(1,), target="sm_90a").asm["ptx"]
    _hint_in_a_branch[(1,)](x, y, 5, BLOCK=16)
    assert (y == x).all()


@kiln.jit
def _matmul_of_loaded_pointers(ptrs, sizes, HINT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                               BK: tl.constexpr):
    # each problem's matrices and leading dims are read from memory, so nothing is known of
    # their alignment unless the kernel says so
    k_size, lda, ldb = tl.load(sizes), tl.load(sizes + 1), tl.load(sizes + 2)
    a = tl.load(ptrs).to(tl.pointer_type(tl.float16))
    b = tl.load(ptrs + 1).to(tl.pointer_type(tl.float16))
    c = tl.load(ptrs + 2).to(tl.pointer_type(tl.float16))
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a_ptrs = a + rm[:, None] * lda + rk[None, :]
    b_ptrs = b + rk[:, None] * ldb + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(k_size, BK)):
        if HINT:
            tl.multiple_of(a_ptrs, [16, 16])
            tl.multiple_of(b_ptrs, [16, 16])
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * ldb
    tl.store(c + rm[:, None] * BN + rn[None, :], acc.to(tl.float16))


def test_dropped_alignment_hints_let_a_loop_of_loaded_pointers_run_on_wgmma():
    """Triton's grouped-GEMM tutorial writes its hints this way: without them the tiles'
    alignment is unknown, the loads are 2 bytes wide and the dot cannot be fed by cp.async."""
    p, i = np.zeros(3, np.int64), np.zeros(3, np.int32)

    def ptx(hint):
        return _matmul_of_loaded_pointers.warmup(p, i, HINT=hint, BM=128, BN=128, BK=32, num_warps=4,
                                                 num_stages=3, grid=(1,), target="sm_90a").asm["ptx"]
    hinted, plain = ptx(True), ptx(False)
    assert "wgmma.mma_async" in hinted and "cp.async.cg.shared.global" in hinted and "ld.local" not in hinted
    assert "wgmma.mma_async" not in plain
