"""Triton 3.9's Python surface beyond the language (tests/test_lang_triton39.py has that): the
autotuning listener, one config left after pruning is not timed, `triton.compiler.max_shared_mem`,
`triton.testing.cuda_graph_without_gc`, `triton.aggregate`, and all of it under the drop-in."""
import gc
import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin import hook, knobs


@kiln.autotune(configs=[kiln.Config({"BLOCK": 16}), kiln.Config({"BLOCK": 32})], key=["n"])
@kiln.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_the_autotuning_listener_hears_each_tuning_once():
    heard = []
    with knobs.autotuning.scope():
        knobs.autotuning.listener = lambda **kw: heard.append(kw)
        x = np.zeros(48, np.float32)
        for _ in range(2):
            _add_one[lambda meta: (kiln.cdiv(48, meta["BLOCK"]),)](x, 48)
    assert len(heard) == 1, heard
    (got,) = heard
    assert got["fn"] is _add_one.base_fn and got["key"] == (48, "float32") and got["cache_hit"] is False
    assert got["best_config"] is _add_one.best_config and set(got["configs_timings"]) == set(_add_one.configs)
    assert got["duration"] > 0
    assert knobs.autotuning.listener is None  # the scope put it back


@kiln.autotune(configs=[kiln.Config({"BLOCK": 16}), kiln.Config({"BLOCK": 32})], key=["n"],
               prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: configs[:1]})
@kiln.jit
def _pruned_to_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def test_one_config_left_after_pruning_is_chosen_without_timing_it(monkeypatch):
    heard = []
    monkeypatch.setattr(type(_pruned_to_one), "_tune", lambda *a, **k: pytest.fail("timed a lone config"))
    with knobs.autotuning.scope():
        knobs.autotuning.listener = lambda **kw: heard.append(kw)
        x = np.zeros(40, np.float32)
        _pruned_to_one[lambda meta: (kiln.cdiv(40, meta["BLOCK"]),)](x, 40)
    np.testing.assert_array_equal(x, 1)
    assert _pruned_to_one.best_config.kwargs == {"BLOCK": 16}
    assert [(h["cache_hit"], h["duration"], h["configs_timings"]) for h in heard] == [(True, None, None)]


def test_cuda_graph_without_gc_turns_the_collector_off_while_capturing(monkeypatch):
    torch = pytest.importorskip("torch")
    seen = []

    @contextmanager
    def graph(*args, **kwargs):  # torch.cuda.graph needs a GPU: what it does here is not the point
        seen.append((args, kwargs, gc.isenabled()))
        yield "graph"
    monkeypatch.setattr(torch.cuda, "graph", graph)
    assert gc.isenabled()
    with kiln.testing.cuda_graph_without_gc("g", pool=3) as got:
        assert got == "graph" and not gc.isenabled()
    assert gc.isenabled() and seen == [(("g",), {"pool": 3}, False)]
    gc.disable()
    try:
        with kiln.testing.cuda_graph_without_gc("g"):
            pass
        assert not gc.isenabled()  # the caller's state, not forced on
    finally:
        gc.enable()


def test_max_shared_mem_asks_the_driver(monkeypatch):
    from kiln.runtime import driver
    monkeypatch.setattr(driver.active.utils, "get_device_properties", lambda device: {"max_shared_mem": 232448 + device})
    assert kiln.compiler.max_shared_mem(1) == 232449


def test_the_39_names_under_the_dropin():
    code = """
        import triton, triton.language as tl
        from triton.compiler import max_shared_mem
        from triton.testing import cuda_graph_without_gc
        from triton.knobs import AutotuneListener
        assert triton.aggregate is tl.core._aggregate and triton.knobs.autotuning.listener is None
        for name in ("squeeze", "unsqueeze", "to_tensor", "aggregate_replace", "expect_zero"):
            assert callable(getattr(tl, name)), name
        print("ok")
    """
    env = {**os.environ, hook.ENV: "1", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr
