"""Conformance: static_assert, static_print, device_assert, device_print."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def _printer(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.device_print("val", x)
    tl.device_print("pid", tl.program_id(0))


@pytest.mark.interpreter_only
def test_device_print_prints_every_element_of_every_program(capsys):
    x = np.array([11, 22, 33, 44], np.int32)
    _printer[(2,)](x, N=4)
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "val" in ln]
    assert len(lines) == 8  # 4 elements x 2 programs
    for v in (11, 22, 33, 44):
        assert sum(bool(re.search(rf"\b{v}\b", ln)) for ln in lines) == 2
    # Triton's format on the GPU: one line per element, "pid (x, y, z) idx (i) <prefix>: <value>"
    assert "pid (1, 0, 0) idx (2) val: 33" in out.splitlines()
    assert "pid (0, 0, 0) idx (0) val: 11" in out.splitlines()
    pid_lines = [ln for ln in out.splitlines() if "pid" in ln and "val" not in ln]
    assert any(re.search(r"pid.*\b1\s*$", ln) for ln in pid_lines)


@kiln.jit
def _hex_printer(x_ptr):
    tl.device_print("h", tl.load(x_ptr), hex=True)


@pytest.mark.interpreter_only
def test_device_print_hex(capsys):
    _hex_printer[(1,)](np.array([255], np.int32))
    out = capsys.readouterr().out
    assert re.search(r"0x0*ff\b", out)


@kiln.jit
def _python_print(x_ptr):
    print("pyprint", tl.load(x_ptr) + 1)


@pytest.mark.interpreter_only
def test_builtin_print_is_device_print(capsys):
    _python_print[(1,)](np.array([41], np.int32))
    out = capsys.readouterr().out
    assert "pyprint" in out and re.search(r"\b42\b", out)


@kiln.jit(debug=True)  # Triton checks device_assert only in debug mode
def _asserting(x_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.device_assert(x >= 0, "x must be non-negative")


@pytest.mark.interpreter_only
def test_device_assert_passes_and_fails():
    _asserting[(1,)](np.arange(4, dtype=np.int32), N=4)
    with pytest.raises(Exception, match="x must be non-negative") as info:
        _asserting[(1,)](np.array([1, 2, -3, 4], np.int32), N=4)
    assert "_asserting" in str(info.value)


@kiln.jit(debug=True)  # Triton checks device_assert only in debug mode
def _assert_masked(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.device_assert(x > 0, "positive where masked in", mask=offs < 2)


@pytest.mark.interpreter_only
def test_device_assert_mask_skips_lanes():
    _assert_masked[(1,)](np.array([1, 2, -3, -4], np.int32), N=4)
    with pytest.raises(Exception, match="positive where masked in"):
        _assert_masked[(1,)](np.array([1, -2, 3, 4], np.int32), N=4)


@kiln.jit(debug=True)  # Triton checks device_assert only in debug mode
def _python_assert(x_ptr):
    x = tl.load(x_ptr)
    assert x < 10, "too big"


@pytest.mark.interpreter_only
def test_python_assert_on_a_tensor_is_a_device_assert():
    _python_assert[(1,)](np.array([3], np.int32))
    with pytest.raises(Exception, match="too big"):
        _python_assert[(1,)](np.array([30], np.int32))


@kiln.jit
def _static_checks(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK % 4 == 0, "BLOCK must be a multiple of 4")
    tl.static_print("compiling with BLOCK =", BLOCK)
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.float32))


def test_static_assert_and_static_print(capsys):
    x = np.ones(8, np.float32)
    _static_checks[(1,)](x, BLOCK=8)
    assert not x.any()
    assert "compiling with BLOCK = 8" in capsys.readouterr().out
    with pytest.raises(kiln.CompilationError, match="BLOCK must be a multiple of 4") as info:
        _static_checks[(1,)](x, BLOCK=2)
    assert "test_lang_debug.py" in str(info.value)
    # static_print runs at compile time only: a cached launch prints nothing
    _static_checks[(1,)](x, BLOCK=8)
    assert "compiling" not in capsys.readouterr().out


@kiln.jit
def _hints(x_ptr, y_ptr, n, N: tl.constexpr):
    offs = tl.max_contiguous(tl.multiple_of(tl.arange(0, N), N), N)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.debug_barrier()
    tl.store(y_ptr + offs, x + 1, mask=offs < n)


def test_compiler_hints_are_accepted_and_do_not_change_values():
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    _hints[(1,)](x, y, 8, N=8)
    np.testing.assert_array_equal(y, x + 1)
