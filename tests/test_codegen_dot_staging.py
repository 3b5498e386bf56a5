"""The dot_staging pass decides what runs each dot and where its operands are staged; lowering takes
its plan as it is: the shared memory a compile reports is the plan's, and a dot the pass did not
give buffers of its own (they would not fit) compiles within the CTA's shared memory."""
import pathlib

import numpy as np
import pytest

import kiln
import kiln.language as tl

from kiln.codegen import compile as compile_ir
from kiln.codegen.analysis.dots import staging_end
from kiln.codegen.analysis.scratch_use import scratch_extent
from kiln.codegen.lower import LoweringError, lower_function
from kiln.codegen.occupancy import max_shared_per_cta
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

TESTS = pathlib.Path(__file__).parent
CORPUS = TESTS / "codegen_corpus"


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_shared_memory_lowering_takes_is_the_staging_plan_and_the_scratch_extent(target):
    staged = 0
    for path in sorted(CORPUS.glob("*.kir")):
        for warps in (4, 8):
            fn = parse_function(path.read_text())
            ctx = PassContext(parse_target(target), warps, 3)
            run_passes(fn, ctx)
            _, _, shared = lower_function(fn, ctx)
            if staging_end(fn):
                staged += 1
                assert shared == staging_end(fn) + scratch_extent(fn), path.name
    assert staged  # the corpus has dots in loops that stage in buffers of their own


@kiln.jit
def negated_matmul(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = (-a) @ b over k-steps: operands computed in registers, so each k-step stages them."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = -tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = -tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def sm80_negated_matmul(bm, bn, bk):
    """Compiled for sm_80 (mma.sync), PTX only; `.kir` is its IR after the passes."""
    x = np.zeros((64, 64), np.float16)
    built = negated_matmul.warmup(x, x, np.zeros((64, 64), np.float32), 4096, BM=bm, BN=bn, BK=bk,
                                  num_warps=8, grid=(1,), target="sm_80")
    return compile_ir(parse_function(built.asm["kir"]), "sm_80", {"num_warps": 8, "num_stages": 3}, link=False)


def test_a_dot_whose_buffers_would_not_fit_stages_in_the_scratch_area_within_the_limit():
    kernel = sm80_negated_matmul(128, 256, 128)  # stages 128x(128+8) A and 128x(256+8) B: 102400 bytes
    assert "mma.sync.aligned.m16n8k16" in kernel.ptx
    assert 'engine = "mma"' in kernel.kir and "staging = [" not in kernel.kir
    assert kernel.metadata["lowerings"] == 1
    assert 2 * 102400 > max_shared_per_cta(80) >= kernel.metadata["shared"] >= 102400


def test_lowering_refuses_a_dot_no_pass_gave_an_engine():
    fn = parse_function(sm80_negated_matmul(128, 256, 128).kir)
    for op in fn.walk():
        if op.name == "dot":
            del op.attrs["engine"]
    with pytest.raises(LoweringError, match="dot without an engine"):
        lower_function(fn, PassContext(parse_target("sm_80"), 8, 3))
