"""Which outside names a kernel may read, and what happens when one changes (Triton's rules):
constexpr globals, dtypes, modules and functions; a plain value is a CompilationError unless
TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1; a global read by a compiled kernel that changes makes
its next launch a RuntimeError instead of a silently stale result."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl

PLAIN = 3
CONST = tl.constexpr(5)
ANNOTATED: tl.constexpr = 7


@kiln.jit
def _reads_plain(out):
    tl.store(out, PLAIN)


@kiln.jit
def _reads_constexprs(out):
    tl.store(out, CONST + 7)


@kiln.jit
def _reads_annotated(out):
    tl.store(out, ANNOTATED)


def test_a_plain_global_is_refused_unless_allowed(monkeypatch):
    out = np.zeros(1, np.int32)
    with pytest.raises(kiln.CompilationError, match="Cannot access global variable PLAIN"):
        _reads_plain[(1,)](out)
    monkeypatch.setenv("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", "1")
    _reads_plain.cache.clear()
    _reads_plain[(1,)](out)
    assert out[0] == 3


def test_a_global_annotated_constexpr_is_a_plain_value_as_in_triton_3_6():
    with pytest.raises(kiln.CompilationError, match="Cannot access global variable ANNOTATED"):
        _reads_annotated[(1,)](np.zeros(1, np.int32))


def test_constexpr_globals_are_read():
    out = np.zeros(1, np.int32)
    _reads_constexprs[(1,)](out)
    assert out[0] == 12


def test_a_changed_global_makes_the_next_launch_an_error(monkeypatch):
    out = np.zeros(1, np.int32)
    _reads_constexprs[(1,)](out)
    monkeypatch.setitem(globals(), "CONST", tl.constexpr(6))
    with pytest.raises(RuntimeError, match=re.escape("Global variable CONST has changed since we compiled this "
                                                     "kernel, from constexpr[5] to constexpr[6]")):
        _reads_constexprs[(1,)](out)
    monkeypatch.setitem(globals(), "CONST", tl.constexpr(5))  # back as it was: launches again
    _reads_constexprs[(1,)](out)
    assert out[0] == 12


def test_a_captured_plain_value_is_refused():
    captured = 4

    @kiln.jit
    def reads_captured(out):
        tl.store(out, captured)

    # Triton's words (it does not see an enclosing function's plain values), then kiln's reason
    with pytest.raises(kiln.CompilationError, match="captured is not defined .kiln: a value of type int from an enclosing"):
        reads_captured[(1,)](np.zeros(1, np.int32))
