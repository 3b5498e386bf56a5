"""Triton 3.6's JIT surface that upstream's runtime/test_cache.py reads (issue 31): the `key` a
jit hook gets finds its kernel in `device_caches[device][0]`; `fn.name` is the qualified name; a
warmup with torch dtypes and a launch with tensors make one specialization (also under the
interpreter, where the tensors are the host's); data preloaded is found by the next warmup; a
kernel's TTIR has its device_asserts only in debug mode."""
import numpy as np
import pytest

import kiln.language as tl
from kiln.dropin import knobs
from kiln.dropin.jit import jit

torch = pytest.importorskip("torch")


def _listen(into):
    def hook(**kwargs):
        into.append(kwargs)
    return hook


def test_the_hooks_key_finds_the_kernel_and_names_it_by_its_qualified_name():
    @jit
    def add(a, b, o, N: tl.constexpr):
        idx = tl.arange(0, N)
        tl.store(o + idx, tl.load(a + idx) + tl.load(b + idx))

    heard = []
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = _listen(heard)
        add.warmup(torch.float32, torch.float32, torch.float32, 32, grid=(1,))
    key = heard[0]["compile"]["key"]
    assert isinstance(key, str) and key in add.device_caches[0][0]
    assert add.device_caches[0][0][key] is next(iter(add.device_caches[0][0].values()))
    assert heard[0]["fn"].name.endswith("<locals>.add")


def test_a_warmup_with_dtypes_and_a_launch_with_tensors_share_a_kernel():
    @jit
    def add(a, b, o, N: tl.constexpr):
        idx = tl.arange(0, N)
        tl.store(o + idx, tl.load(a + idx) + tl.load(b + idx))

    args = [torch.ones(32), torch.ones(32), torch.empty(32), 32]
    add.warmup(torch.float32, torch.float32, torch.float32, 32, grid=(1,))
    add.warmup(*args, grid=(1,))
    add[(1,)](*args)
    assert len(add.device_caches[0][0]) == 1
    assert args[2].tolist() == [2.0] * 32


def test_preloaded_data_is_found_by_the_next_warmup_and_refuses_another_kernel():
    @jit
    def add(a, b, o, N: tl.constexpr, KIND: tl.constexpr):
        idx = tl.arange(0, N)
        tl.store(o + idx, tl.load(a + idx) + tl.load(b + idx))

    @jit
    def sub(a, b, o, N: tl.constexpr, KIND: tl.constexpr):
        idx = tl.arange(0, N)
        tl.store(o + idx, tl.load(a + idx) - tl.load(b + idx))

    heard = []
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = _listen(heard)
        first = add.warmup(torch.float32, torch.float32, torch.float32, 32, tl.float32, grid=(1,))
        data = heard[0]["compile"]["specialization_data"]
        add.device_caches[0][0].clear()
        assert add.preload(data).hash == first.hash
        heard.clear()
        again = add.warmup(torch.float32, torch.float32, torch.float32, 32, tl.float32, grid=(1,))
    assert heard == [] and again.hash == first.hash and len(add.device_caches[0][0]) == 1
    with pytest.raises(RuntimeError, match="Specialization data is for .*add but trying to preload for .*sub"):
        sub.preload(data)


def test_device_asserts_are_in_the_ttir_only_in_debug_mode():
    @jit
    def check(t):
        tl.device_assert(tl.load(t) == 1, "t == 1")

    t = np.ones(1, np.int32)
    plain, debug = check[(1,)](t, debug=False), check[(1,)](t, debug=True)
    assert "tt.assert" not in plain.asm["ttir"] and "tt.assert" in debug.asm["ttir"]


def test_pre_run_hooks_see_each_launchs_arguments_first():
    @jit
    def add_two(a, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(a + offs, tl.load(a + offs) + 2)

    seen = []

    def zero(*args, **kwargs):
        seen.append(len(args))
        args[0].zero_()

    add_two.add_pre_run_hook(zero)
    a = torch.ones(4, dtype=torch.int32)
    add_two[(1,)](a, 4)
    assert a.tolist() == [2] * 4
    a = torch.ones(4, dtype=torch.int32)
    add_two.run(a, 4, grid=(1,), warmup=False)
    assert a.tolist() == [2] * 4 and seen == [2, 2]
    with pytest.raises(TypeError):
        add_two.add_pre_run_hook(3)
