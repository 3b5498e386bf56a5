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


def test_a_grid_function_gets_the_arguments_and_the_options_set_at_every_launch():
    """The first launch of a specialization compiles it; later ones are cached launches, which
    give the grid function the same meta: every argument by name, then each launch option set."""
    x = np.arange(128, dtype=np.float32)
    out = np.zeros_like(x)
    seen = []

    def grid(meta):
        seen.append(meta)
        meta["scratch"] = 1  # the function's own dict: the next launch's is a fresh one
        return (kiln.cdiv(meta["n"], meta["BLOCK"]),)
    for n in (128, 128, 64):
        scaled_copy[grid](x, out, n, BLOCK=32, num_warps=2)
    assert [m["n"] for m in seen] == [128, 128, 64] and all(m["num_warps"] == 2 for m in seen)
    assert seen[0] == {"src": x, "dst": out, "n": 128, "scale": 2.0, "BLOCK": 32, "num_warps": 2, "scratch": 1}
    assert seen[1] is not seen[0] and "num_stages" not in seen[1]  # options not set are not given
    np.testing.assert_array_equal(out, x * 2)


def test_a_wrong_call_names_the_kernel():
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"scaled_copy\(\) missing 1 required positional argument: 'n'"):
        scaled_copy[(1,)](x, x)
    with pytest.raises(TypeError, match=r"scaled_copy\(\) got an unexpected keyword argument 'bogus'"):
        scaled_copy[(1,)](x, x, 4, bogus=1)


@kiln.jit
def takes_launch_names(out, num_stages: tl.constexpr, num_warps: tl.constexpr):
    tl.store(out + tl.arange(0, 16), tl.zeros((16,), tl.int32) + num_stages * 10 + num_warps)


def test_a_parameter_named_like_a_launch_option_is_the_parameter_only():
    """Liger-Kernel passes `num_stages`, `num_warps` to kernels that take them as constexprs; Triton 3.6
    binds them to the parameters and compiles with its default options (4 warps, 3 stages), by position or
    by keyword (checked with its wheel, 2026-12-08): kiln too."""
    out = np.zeros(16, np.int32)
    for compiled in (takes_launch_names.warmup(out, 2, 8, grid=(1,), target="sm_90a"),
                     takes_launch_names.warmup(out, num_stages=2, num_warps=8, grid=(1,), target="sm_90a")):
        assert (compiled.metadata["num_warps"], compiled.metadata["num_stages"]) == (4, 3)
    takes_launch_names[(1,)](out, 2, 8)  # the kernel still reads its parameters
    assert (out == 28).all()
