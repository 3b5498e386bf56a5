"""Triton's JIT hooks and preload: `knobs.runtime.jit_cache_hook` before a compile (a true answer
skips it), `jit_post_compile_hook` after, their `specialization_data`, `JITFunction.preload`, and
`device_caches` (interpreter; the upstream test_tuple's hook test under the drop-in)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin import hook, knobs


@kiln.jit
def _add_pair(x_ptr, pair, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + pair[0] + pair[1])


def _hooked(hook_name, answer=None):
    heard = []

    def listen(**kwargs):
        heard.append(kwargs)
        return answer
    setattr(knobs.runtime, hook_name, listen)
    return heard


def test_the_cache_hook_hears_each_compile_and_preload_makes_the_same_kernel():
    _add_pair.device_caches[0][0].clear()
    with knobs.runtime.scope():
        before, after = _hooked("jit_cache_hook"), _hooked("jit_post_compile_hook")
        x = np.zeros(16, np.float32)
        warm = _add_pair.warmup(x, (1, tl.constexpr(2)), N=16, grid=(1,))
        _add_pair.warmup(x, (1, tl.constexpr(2)), N=16, grid=(1,))  # cached: no hook
    assert len(before) == len(after) == 1
    heard = before[0]
    assert heard["fn"].jit_function is _add_pair and heard["fn"].name == "_add_pair"
    assert heard["is_manual_warmup"] is True and heard["already_compiled"] is False and after[0]["already_compiled"]
    data = heard["compile"]["specialization_data"]
    assert json.loads(data)["args"][1] == {"tuple": [{"int": 1}, {"constexpr": {"int": 2}}]}
    _add_pair.device_caches[3][0].clear()  # any device: kiln's one cache
    again = _add_pair.preload(data)
    assert again.hash == warm.hash


def test_a_true_answer_from_the_cache_hook_skips_the_compile():
    _add_pair.device_caches[0][0].clear()
    with knobs.runtime.scope():
        _hooked("jit_cache_hook", answer=True)
        x = np.zeros(16, np.float32)
        assert _add_pair.warmup(x, (5, tl.constexpr(6)), N=16, grid=(1,)) is None
        assert _add_pair[(1,)](x, (5, tl.constexpr(6)), N=16) is None
    np.testing.assert_array_equal(x, 0)  # nothing ran


def test_preload_refuses_another_kernels_data_and_garbage():
    other = json.dumps({"kernel": "elsewhere.k", "args": [], "options": {}})
    with pytest.raises(RuntimeError, match="Specialization data is for elsewhere.k but trying to preload for "):
        _add_pair.preload(other)
    with pytest.raises(ValueError, match="not specialization data"):
        _add_pair.preload("{")


def test_upstream_shape_of_the_hook_test_under_the_dropin(tmp_path):
    code = textwrap.dedent("""
        import triton, triton.language as tl
        data = None
        @triton.jit
        def k(tup):
            tl.static_assert(tup[1][0] == 2)

        def cache_hook(*args, **kwargs):
            global data
            data = kwargs["compile"]["specialization_data"]
        triton.knobs.runtime.jit_cache_hook = cache_hook
        k.device_caches[0][0].clear()
        warm = k.warmup(((1,), (tl.constexpr(2),)), grid=(1,))
        again = k.preload(data)
        assert warm is not None and again is not None and warm.hash == again.hash
        print("ok")
    """)
    (tmp_path / "job.py").write_text(code)
    env = {**os.environ, hook.ENV: "1", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(tmp_path / "job.py")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-3000:]


def _named_by_specialization(spec):
    ones = "_".join(name for name, value in spec.constants.items() if value == 1)
    return f"scale_{spec.signature['x_ptr'][1:]}_{spec.signature['factor']}_{ones}"


@kiln.jit(repr=_named_by_specialization)
def _scale_named(x_ptr, factor, unit, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * factor * unit)


def test_repr_names_each_specialization_as_triton_does():
    """`@jit(repr=fn)`: the compiled kernel (its PTX entry too) is named by `fn` of the specialization,
    whose `signature` spells runtime types as Triton does and whose `constants` hold the constexprs and
    the ints specialized as 1."""
    x = np.zeros(16, np.float32)
    assert _scale_named.warmup(x, 3, 1, N=16, grid=(1,)).name == "scale_fp32_i32_unit"
    compiled = _scale_named.warmup(x, 2**40, 2, N=16, grid=(1,), target="sm_90a")
    assert compiled.name == "scale_fp32_i64_" and ".entry scale_fp32_i64_(" in compiled.asm["ptx"]


def test_a_repr_names_the_kernel_after_its_last_dot_and_defaults_to_the_full_name():
    """Triton keeps what follows the last `.` of `repr(specialization)`, and `fn.repr(_)` without a repr= is
    the function's `module.qualname`: a library naming a kernel after another's repr gets dotted names."""
    assert _add_pair.repr(None) == f"{__name__}._add_pair"
    dotted = kiln.jit(repr=lambda spec: _add_pair.repr(spec) + "_twice")(_scale_named.fn)
    assert dotted.warmup(np.zeros(16, np.float32), 3, 1, N=16, grid=(1,)).name == "_add_pair_twice"


def test_a_repr_that_cannot_name_a_kernel_is_refused():
    bad = kiln.jit(repr=lambda spec: "not a name")(_scale_named.fn)
    with pytest.raises(ValueError, match="cannot name a kernel"):
        bad.warmup(np.zeros(16, np.float32), 3, 1, N=16, grid=(1,))
