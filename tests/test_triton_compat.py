"""Triton programs that run unchanged: the host-side and frontend behaviour that Triton's own
tests and tutorials rely on (issue 9)."""
import inspect
import textwrap

import numpy as np
import pytest

import kiln
import kiln as triton
import kiln.language as tl


@triton.jit
def _template(Z, X, SIZE: tl.constexpr):
    off = tl.arange(0, SIZE)
    x = tl.load(X + off)
    z = GENERATE_TEST_HERE  # noqa: F821
    tl.store(Z + off, z)


def _exec_patched(template, expr):
    """A kernel built from source text by exec(), as generated-code users and Triton's tests do."""
    namespace = {}
    src = textwrap.dedent(inspect.getsource(template.fn)).replace("GENERATE_TEST_HERE", expr)
    exec(src, globals(), namespace)
    return namespace[template.fn.__name__]


def _run(kernel, x):
    z = np.zeros_like(x)
    kernel[(1,)](z, x, SIZE=x.size)
    return z


X = np.arange(8, dtype=np.float32)


def test_jit_of_a_function_built_by_exec():
    kernel = _exec_patched(_template, "x * 3")
    np.testing.assert_array_equal(_run(kernel, X), X * 3)
    assert kernel.src.startswith("def _template(")
    assert "x * 3" in kernel.src


def test_jit_source_patched_with_unsafe_update_src():
    kernel = triton.JITFunction(_template.fn)
    kernel._unsafe_update_src(kernel.src.replace("GENERATE_TEST_HERE", "x + 1"))
    np.testing.assert_array_equal(_run(kernel, X), X + 1)
    kernel._unsafe_update_src(kernel.src.replace("x + 1", "x - 1"))  # recompiles: no stale kernel
    np.testing.assert_array_equal(_run(kernel, X), X - 1)
    with pytest.raises(AttributeError, match="_unsafe_update_src"):
        kernel.src = "def f(): pass"


def test_src_is_the_dedented_function_without_decorators():
    assert _template.src.splitlines()[0] == "def _template(Z, X, SIZE: tl.constexpr):"


def test_error_in_patched_source_shows_the_patched_line():
    kernel = triton.JITFunction(_template.fn)
    kernel._unsafe_update_src(kernel.src.replace("GENERATE_TEST_HERE", "x * not_defined_here"))
    with pytest.raises(kiln.CompilationError, match="not_defined_here") as info:
        _run(kernel, X)
    lines = str(info.value).splitlines()
    shown = next(i for i, text in enumerate(lines) if "x * not_defined_here" in text)
    assert lines[shown][lines[shown + 1].index("^"):].startswith("not_defined_here")


def test_exec_without_a_readable_source_says_so():
    code = compile("def f(x):\n    pass\n", "<nowhere>", "exec")
    namespace = {}
    exec(code, namespace)
    with pytest.raises(ValueError, match="defined in a Python file"):
        triton.jit(namespace["f"])
