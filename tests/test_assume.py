"""`tl.assume(cond)`: a promise the optimizer may use (LLVM's `llvm.assume`), in the IR as an `assume`
op that every pass keeps and none takes for a side effect; the interpreter runs past it."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.errors import CompilationError
from kiln.ir import parse_function


@kiln.jit
def promised_branch(out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    rest = N - tl.program_id(0) * BLOCK
    tl.assume(rest >= BLOCK)
    if rest >= 128:
        tl.store(out_ptr + tl.program_id(0), rest)
    else:
        tl.store(out_ptr + tl.program_id(0), rest + 777001)


@kiln.jit
def block_promise(out_ptr):
    offs = tl.arange(0, 16)
    tl.assume(offs >= 0)
    tl.store(out_ptr + offs, offs)


@kiln.jit
def promised_loop(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    tl.assume(stride > 0)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n):
        tl.assume(i >= 0)
        acc += tl.load(x_ptr + i * stride + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@kiln.jit
def unpromised_loop(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n):
        acc += tl.load(x_ptr + i * stride + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@kiln.jit
def promised_gemm(a, b, c, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PROMISE: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    if PROMISE:
        tl.assume(K > 0)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        if PROMISE:
            tl.assume(k >= 0)
        acc += tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]), tl.load(b + (k + rk)[:, None] * BN + rn[None, :]))
    tl.store(c + rm[:, None] * BN + rn[None, :], acc.to(tl.float16))


def _built(target="sm_90a"):
    return promised_branch.warmup(np.zeros(8, np.int32), N=1024, BLOCK=128, grid=(8,), target=target)


def test_the_promise_is_triton_s_llvm_assume_in_both_irs():
    kernel = _built()
    assert kernel.asm["ttir"].count("llvm.intr.assume") == 1
    assert "llvm.intr.assume %" in kernel.asm["ttgir"] and ": i1" in kernel.asm["ttgir"]
    assert "call void @llvm.assume(i1" in kernel.asm["llir"]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_llvm_drops_the_branch_the_promise_rules_out(target):
    assert "777001" not in _built(target).asm["ptx"]


def test_the_interpreter_runs_past_it():
    out = np.zeros(8, np.int32)
    promised_branch[(8,)](out, N=1024, BLOCK=128)
    np.testing.assert_array_equal(out, 1024 - 128 * np.arange(8))


def test_a_block_condition_is_refused_at_its_line():
    with pytest.raises(CompilationError, match="scalar condition") as err:
        block_promise.warmup(np.zeros(16, np.int32), grid=(1,))
    assert "tl.assume(offs >= 0)" in str(err.value)


def _ops(fn):
    return sorted(op.name for op in fn.walk() if op.name not in ("assume", "cmp", "constant"))  # (the promises)


def test_the_passes_keep_it_and_take_it_for_no_side_effect():
    x = np.zeros(4096, np.float32)
    promised = promised_loop.warmup(x, x, 8, 128, BLOCK=128, grid=(1,), target="sm_90a")
    fn = parse_function(promised.built.kir)
    assert sum(op.name == "assume" for op in fn.walk()) == 2
    plain = unpromised_loop.warmup(x, x, 8, 128, BLOCK=128, grid=(1,), target="sm_90a")
    assert _ops(fn) == _ops(parse_function(plain.built.kir))
    h = np.zeros(64 * 256, np.float16)
    gemms = [promised_gemm.warmup(h, h, h, 256, 64, 64, 32, PROMISE=p, grid=(1,), target="sm_90a", num_warps=4,
                                  num_stages=3) for p in (True, False)]
    with_promises, without = (parse_function(k.built.kir) for k in gemms)
    assert _ops(with_promises) == _ops(without)  # the same rings, copies and wgmma: nothing held back
    assert "async_copy" in _ops(without) and "warp_group_dot" in _ops(without)


def test_the_emulated_kernel_keeps_its_results():
    from test_codegen_emulate import in_child
    assert in_child(_emulated) == list(1024 - 128 * np.arange(8))


def _emulated():
    from kiln.codegen.emulate import run_on_cpu
    out = np.zeros(8, np.int32)
    kernel = promised_branch.warmup(out, N=1024, BLOCK=128, grid=(8,), target="sm_90a")
    run_on_cpu(kernel.ir, (8,), [out], num_warps=4)
    return out.tolist()
