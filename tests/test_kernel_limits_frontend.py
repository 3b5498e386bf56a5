"""Kernels no GPU runs well are refused while they are built, with a CompilationError at the
user's line, as the daemon would refuse them: a static_range that unrolls 100,000 steps (or
three nested ones of 100), a block of 2^24 elements. They once took minutes and gigabytes."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.errors import CompilationError


@kiln.jit
def unrolled(x_ptr, N: tl.constexpr):
    acc = tl.zeros((16,), tl.float32)
    for i in tl.static_range(N):
        acc += i
    tl.store(x_ptr + tl.arange(0, 16), acc)


@kiln.jit
def nested(x_ptr):
    acc = tl.zeros((16,), tl.float32)
    for i in tl.static_range(100):
        for j in tl.static_range(100):
            for k in tl.static_range(100):
                acc += i + j + k
    tl.store(x_ptr + tl.arange(0, 16), acc)


@kiln.jit
def triangular(x_ptr):  # 40,410 operations: within the limit, though a full nest of them would not be
    x = tl.load(x_ptr + tl.arange(0, 16))
    acc = tl.zeros((16,), tl.float32)
    for i in tl.static_range(100):
        for j in tl.static_range(100):
            if j >= i:
                acc = acc * x + tl.exp(x * (i + j)) - tl.sqrt(acc)
    tl.store(x_ptr + tl.arange(0, 16), acc)


@kiln.jit
def huge(x_ptr):
    tl.store(x_ptr + tl.arange(0, 2**24), 1.0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel,kwargs,words", [
    (unrolled, {"N": 100_000}, "more than 65536 operations"),
    (nested, {}, "more than 65536 operations"),
    (huge, {}, "numel (16777216) exceeds triton maximum tensor numel (1048576)"),
])
def test_oversized_kernels_are_refused_at_the_users_line(kernel, kwargs, words):
    with pytest.raises(CompilationError) as error:
        kernel.warmup(np.zeros(16, np.float32), **kwargs, target="sm_90a")
    assert words in str(error.value) and __file__ in str(error.value)


def test_a_long_static_range_within_the_limits_builds():
    unrolled.warmup(np.zeros(16, np.float32), N=1000, target="sm_90a")


def _counting_operations(monkeypatch) -> list:
    from kiln import ast_to_ir
    made = []
    create = ast_to_ir._BoundedBuilder.create
    monkeypatch.setattr(ast_to_ir._BoundedBuilder, "create", lambda self, *a, **k: made.append(1) or create(self, *a, **k))
    return made


@pytest.mark.parametrize("kernel,kwargs", [(unrolled, {"N": 100_000}), (nested, {})])
def test_a_long_static_range_is_refused_after_two_steps(monkeypatch, kernel, kwargs):
    """The first two steps of the innermost static_range tell how many operations every step makes:
    100,000 steps, or three nested ranges of 100, are refused then, not after 65,536 operations
    were built (seconds of Python)."""
    made = _counting_operations(monkeypatch)
    with pytest.raises(CompilationError, match="more than 65536 operations"):
        kernel.warmup(np.zeros(16, np.float32), **kwargs, target="sm_90a")
    assert len(made) < 100, len(made)


def test_a_triangular_nest_within_the_limits_builds(monkeypatch):
    """Its later steps are lighter than its first: the estimate must not refuse it (IR only: its
    40,410 operations take a minute of LLVM)."""
    from kiln import language as kl
    from kiln.compiler import compile_kernel
    made = _counting_operations(monkeypatch)
    compile_kernel(triangular, {"x_ptr": (kl.pointer_type(kl.float32), {})}, {"num_warps": 4})
    assert len(made) == 40_410
