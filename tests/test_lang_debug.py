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


@kiln.jit
def _add_loaded(x_ptr, y_ptr, z_ptr):
    tl.store(z_ptr, tl.load(x_ptr) + tl.load(y_ptr))


@kiln.jit
def _sub_loaded(x_ptr, y_ptr, z_ptr):
    tl.store(z_ptr, tl.load(x_ptr) - tl.load(y_ptr))


@kiln.jit
def _mul_loaded(x_ptr, y_ptr, z_ptr):
    tl.store(z_ptr, tl.load(x_ptr) * tl.load(y_ptr))


@kiln.jit
def _add_unsanitized(x_ptr, y_ptr, z_ptr):
    tl.store(z_ptr, tl.add(tl.load(x_ptr), tl.load(y_ptr), sanitize_overflow=False))


def _one(kernel, x, y, dtype, **launch):
    z = np.zeros(1, dtype)
    kernel[(1,)](np.array([x], dtype), np.array([y], dtype), z, **launch)
    return z[0]


@pytest.mark.interpreter_only
@pytest.mark.parametrize("kernel, x, y, dtype", [
    (_add_loaded, -2**31, -1, np.int32), (_add_loaded, 2**31 - 1, 100, np.int32), (_add_loaded, -2**15, -1, np.int16),
    (_sub_loaded, -2**31, 1, np.int32), (_sub_loaded, 0, 1, np.uint32), (_mul_loaded, 2**30, 2, np.int32),
    (_mul_loaded, -2**30, -4, np.int32), (_mul_loaded, 100, 3, np.uint8)])
def test_a_debug_build_checks_integer_arithmetic_for_overflow(kernel, x, y, dtype):
    """Triton's sanitize_overflow: in a debug build, +, - and * of integers narrower than 64 bits
    assert that the exact result fits the type; outside debug they wrap."""
    with pytest.raises(Exception, match=f"{np.dtype(dtype).name} overflow"):
        _one(kernel, x, y, dtype, debug=True)
    exact = {"_add_loaded": x + y, "_sub_loaded": x - y, "_mul_loaded": x * y}[kernel.__name__]
    bits = 8 * np.dtype(dtype).itemsize
    assert int(_one(kernel, x, y, dtype)) == np.array(exact % (1 << bits)).astype(np.uint64).astype(dtype)


@pytest.mark.interpreter_only
def test_results_in_range_and_unsanitized_adds_pass_in_a_debug_build():
    assert _one(_add_loaded, -2**31, 2, np.int32, debug=True) == -2**31 + 2
    assert _one(_mul_loaded, -2**31, 1, np.int32, debug=True) == -2**31
    assert _one(_sub_loaded, -2**31, -1, np.int32, debug=True) == -2**31 + 1
    assert _one(_add_unsanitized, 2**31 - 1, 1, np.int32, debug=True) == -2**31
    assert _one(_add_loaded, 2**31 - 1, 1, np.int32, debug=True, sanitize_overflow=False) == -2**31


@kiln.jit(debug=True)
def _debug_by_jit(x_ptr, y_ptr, z_ptr):
    tl.store(z_ptr, tl.load(x_ptr) + tl.load(y_ptr))


@kiln.jit
def _debug_by_environment(x_ptr, y_ptr, z_ptr):
    tl.store(z_ptr, tl.load(x_ptr) + tl.load(y_ptr))


def test_the_launch_option_overrides_the_jit_flag_and_the_environment_turns_debug_on(monkeypatch):
    """Triton's precedence: debug= at the launch, else @jit(debug=), and TRITON_DEBUG=1 for every kernel
    (read when a kernel compiles for its arguments); a build outside debug keeps neither its asserts
    nor the overflow checks."""
    x = np.zeros(1, np.int32)
    monkeypatch.delenv("TRITON_DEBUG", raising=False)
    monkeypatch.delenv("KILN_DEBUG", raising=False)
    assert _debug_by_jit.warmup(x, x, x, grid=(1,)).debug
    plain = _debug_by_jit.warmup(x, x, x, grid=(1,), debug=False)
    assert not plain.debug and "assert" not in plain.asm["kir"]
    monkeypatch.setenv("TRITON_DEBUG", "1")
    checked = _debug_by_environment.warmup(x, x, x, grid=(1,))
    assert checked.debug and "int32 overflow in add" in checked.asm["kir"]
    assert _debug_by_environment.warmup(x, x, x, grid=(1,), debug=False).debug  # the environment wins


@kiln.jit(debug=True)
def _assert_with_constexpr_mask(COND: tl.constexpr, MASK: tl.constexpr):
    tl.device_assert(COND, "masked assert", mask=MASK)


@pytest.mark.interpreter_only
def test_device_assert_takes_a_constexpr_mask_or_none():
    _assert_with_constexpr_mask[(1,)](True, None)
    _assert_with_constexpr_mask[(1,)](False, False)
    for mask in (None, True):
        with pytest.raises(Exception, match="masked assert"):
            _assert_with_constexpr_mask[(1,)](False, mask)


@kiln.jit
def _assert_outside_debug(x_ptr):
    tl.device_assert(tl.load(x_ptr) > 0, "checked only in debug")


@pytest.mark.interpreter_only
def test_the_interpreter_drops_device_asserts_outside_debug_as_a_build_does():
    x = np.array([-1], np.int32)
    _assert_outside_debug[(1,)](x)
    with pytest.raises(RuntimeError, match="device-side assert.*checked only in debug"):
        _assert_outside_debug[(1,)](x, debug=True)


@kiln.jit(debug=True)
def _random_in_debug(out_ptr, seed, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.randint(seed, offs))


@kiln.jit
def _negated(x_ptr, z_ptr):
    tl.store(z_ptr, -tl.load(x_ptr))


@pytest.mark.interpreter_only
def test_philox_wraps_unchecked_and_unary_minus_is_checked_in_a_debug_build():
    """Philox's products wrap by design (Triton's tl.mul(..., sanitize_overflow=False)); -x is 0 - x."""
    out = np.zeros(64, np.uint32)
    _random_in_debug[(1,)](out, 1234, N=64)
    assert len(set(out.tolist())) == 64
    z = np.zeros(1, np.int32)
    _negated[(1,)](np.array([-2**31], np.int32), z)
    assert z[0] == -2**31
    with pytest.raises(RuntimeError, match="int32 overflow in sub"):
        _negated[(1,)](np.array([-2**31], np.int32), z, debug=True)
