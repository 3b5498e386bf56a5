"""`kernel[grid](...)`: the generated launch binds arguments as Python does, whatever the
kernel's parameters are called, and names the kernel when a call is wrong (interpreter)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def shadowing(grid, key, values, kernel, callable, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(grid + offs, tl.load(key + offs) * values + kernel + callable)


@kiln.jit
def scaled_copy(src, dst, n, scale=2.0, BLOCK: tl.constexpr = 64):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask) * scale, mask=mask)


def test_parameters_named_like_the_launchers_own_names():
    out, x = np.zeros(16, np.float32), np.arange(16, dtype=np.float32)
    shadowing[(1,)](out, x, 3.0, 1.0, 0.5, BLOCK=16)
    np.testing.assert_array_equal(out, x * 3 + 1.5)


def test_defaults_keywords_and_grid_functions():
    x = np.arange(200, dtype=np.float32)
    out = np.zeros_like(x)
    scaled_copy[lambda meta: (kiln.cdiv(meta["n"], meta["BLOCK"]),)](x, out, 200)
    np.testing.assert_array_equal(out, x * 2)
    scaled_copy[(4,)](src=x, dst=out, n=200, scale=3.0)
    np.testing.assert_array_equal(out, x * 3)
    launched = scaled_copy[(7,)](x, out, 200, 0.5, BLOCK=32)  # a second specialization
    np.testing.assert_array_equal(out, x * 0.5)
    assert launched is scaled_copy[(1,)](x, out, 40, 0.5, BLOCK=32)  # cached: the same compiled kernel (40, 200: multiples of 8)


def test_a_wrong_call_names_the_kernel():
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"scaled_copy\(\) missing 1 required positional argument: 'n'"):
        scaled_copy[(1,)](x, x)
    with pytest.raises(TypeError, match=r"scaled_copy\(\) got an unexpected keyword argument 'bogus'"):
        scaled_copy[(1,)](x, x, 4, bogus=1)
