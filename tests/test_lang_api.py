"""Conformance: the top-level API: jit options and caching, grids, autotune, heuristics, Config, testing."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln import testing
try:
    import torch
except ImportError:  # PyTorch is optional; the tests that use it skip without it
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch")


@pytest.mark.parametrize("x,y,expect", [(10, 4, 3), (8, 4, 2), (1, 128, 1), (0, 5, 0), (129, 128, 2)])
def test_cdiv(x, y, expect):
    assert kiln.cdiv(x, y) == expect


@pytest.mark.parametrize("n,expect", [(0, 0), (1, 1), (2, 2), (3, 4), (17, 32), (1024, 1024), (1025, 2048)])
def test_next_power_of_2(n, expect):
    assert kiln.next_power_of_2(n) == expect


def test_assert_close_accepts_and_rejects():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    testing.assert_close(a, a + 1e-3)
    if torch is not None:
        testing.assert_close(torch.tensor([1.0, 2.0]), np.array([1.0, 2.0]))
    testing.assert_close(a, a * 1.05, atol=0, rtol=0.1)
    with pytest.raises(AssertionError):
        testing.assert_close(a, a + 0.5)
    with pytest.raises(AssertionError):
        testing.assert_close(a, a * 1.5, atol=0, rtol=0.1)


@kiln.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def test_do_bench_returns_positive_milliseconds():
    x = np.zeros(64, np.float32)
    ms = testing.do_bench(lambda: _add_one[(4,)](x, 64, BLOCK=16), warmup=1, rep=5)
    assert isinstance(ms, float) and ms > 0
    assert x[0] >= 2  # ran at least the estimate and one timed run
    q = testing.do_bench(lambda: _add_one[(4,)](x, 64, BLOCK=16), warmup=1, rep=5, quantiles=[0.2, 0.5, 0.8])
    assert len(q) == 3 and 0 < q[0] <= q[1] <= q[2]


def test_grid_as_a_callable_of_the_meta_parameters():
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (kiln.cdiv(meta["n"], meta["BLOCK"]),)

    x = np.zeros(50, np.float32)
    _add_one[grid](x, 50, BLOCK=16)
    np.testing.assert_array_equal(x, np.ones(50))
    assert seen and seen[0]["BLOCK"] == 16 and seen[0]["n"] == 50


def test_grid_forms():
    x = np.zeros(32, np.float32)
    _add_one[(2,)](x, 32, BLOCK=16)
    _add_one[(2, 1)](x, 32, BLOCK=16)
    _add_one[(2, 1, 1)](x, 32, BLOCK=16)
    np.testing.assert_array_equal(x, np.full(32, 3))


@kiln.jit
def _store_n(out_ptr, n):
    tl.store(out_ptr, n * 2)


@kiln.jit(do_not_specialize=["n"])
def _store_n_nospec(out_ptr, n):
    tl.store(out_ptr, n * 2)


@kiln.jit(do_not_specialize=[1])
def _store_n_nospec_index(out_ptr, n):
    tl.store(out_ptr, n * 2)


def test_integer_specialization_and_do_not_specialize():
    out = np.zeros(1, np.int32)
    for kernel in (_store_n, _store_n_nospec, _store_n_nospec_index):
        for n in (1, 16, 17, 33, 48):
            kernel[(1,)](out, n)
            assert out[0] == 2 * n
    assert len(_store_n.cache) == 3  # n == 1, n % 16 == 0, other
    assert len(_store_n_nospec.cache) == 1
    assert len(_store_n_nospec_index.cache) == 1


def test_specialization_on_dtype_and_constexpr():
    for dt in (np.float32, np.float16, np.int32):
        x = np.zeros(16, dt)
        _add_one[(1,)](x, 16, BLOCK=16)
        np.testing.assert_array_equal(x, np.ones(16, dt))
    before = len(_add_one.cache)
    _add_one[(1,)](np.zeros(16, np.float32), 16, BLOCK=16)
    assert len(_add_one.cache) == before  # a cache hit
    _add_one[(2,)](np.zeros(16, np.float32), 16, BLOCK=8)
    assert len(_add_one.cache) == before + 1


def test_warmup_compiles_without_running():
    x = np.zeros(16, np.float32)
    k = _add_one.warmup(x, 16, BLOCK=16, grid=(1,))
    assert not x.any()
    assert "load" in k.asm["kir"] and "store" in k.asm["kir"]


def test_launch_options_are_accepted():
    x = np.zeros(16, np.float32)
    _add_one[(1,)](x, 16, BLOCK=16, num_warps=8, num_stages=2)
    np.testing.assert_array_equal(x, np.ones(16))


def test_calling_a_jit_function_outside_a_kernel_is_an_error():
    with pytest.raises(Exception):
        _add_one(np.zeros(4, np.float32), 4, 4)


# --- Config -------------------------------------------------------------------------

def test_config_fields():
    hook = lambda nargs: None  # noqa: E731
    c = kiln.Config({"BLOCK": 32}, num_warps=2, num_stages=4, pre_hook=hook)
    assert c.kwargs == {"BLOCK": 32} and c.num_warps == 2 and c.num_stages == 4 and c.pre_hook is hook
    assert c.all_kwargs()["BLOCK"] == 32 and c.all_kwargs()["num_warps"] == 2
    assert "BLOCK: 32" in str(c)


# --- autotune -------------------------------------------------------------------------

def _fake_bench(times, calls):
    """A do_bench that times a config by the BLOCK its Config.pre_hook recorded last."""
    current = {}

    def hook(nargs):
        current["BLOCK"] = nargs["BLOCK"]

    def bench(fn, quantiles):  # Triton calls do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
        fn()
        calls.append(current["BLOCK"])
        t = times[current["BLOCK"]]
        return [t * q for q in (1.0, 0.9, 1.1)][:len(quantiles)]

    return hook, bench


def _autotuned_add(times, calls, **kw):
    hook, bench = _fake_bench(times, calls)
    configs = [kiln.Config({"BLOCK": b}, num_warps=4, pre_hook=hook) for b in sorted(times)]

    @kiln.autotune(configs=configs, key=["n"], do_bench=bench, **kw)
    @kiln.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

    return add_one


def test_autotune_picks_the_fastest_config_and_caches_per_key():
    calls = []
    add = _autotuned_add({8: 3.0, 16: 1.0, 32: 2.0}, calls)
    grid = lambda meta: (kiln.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    x = np.zeros(40, np.float32)
    add[grid](x, 40)
    assert add.best_config.kwargs == {"BLOCK": 16}
    assert sorted(calls) == [8, 16, 32]
    add[grid](x, 40)
    assert len(calls) == 3  # same key: no new benchmark
    y = np.zeros(100, np.float32)
    add[grid](y, 100)
    assert len(calls) == 6  # new key value: benchmarked again
    np.testing.assert_array_equal(y[:100], np.full(100, 1 + 3))  # 3 benchmark runs + the real one


@kiln.jit
def _accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=mask, other=0.0), axis=0))


def test_autotune_reset_to_zero_leaves_one_launch_worth():
    calls = []
    hook, bench = _fake_bench({8: 2.0, 16: 1.0}, calls)
    configs = [kiln.Config({"BLOCK": b}, pre_hook=hook) for b in (8, 16)]
    acc = kiln.autotune(configs=configs, key=["n"], reset_to_zero=["out_ptr"], do_bench=bench)(_accumulate)
    x = np.arange(32, dtype=np.float32)
    out = np.full(1, 1000.0, np.float32)
    acc[lambda m: (kiln.cdiv(32, m["BLOCK"]),)](x, out, 32)
    assert len(calls) == 2
    assert out[0] == x.sum()  # zeroed after tuning, then one real launch


@kiln.jit
def _in_place_double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def test_autotune_restore_value():
    calls = []
    hook, bench = _fake_bench({4: 2.0, 8: 1.0}, calls)
    configs = [kiln.Config({"BLOCK": b}, pre_hook=hook) for b in (4, 8)]
    dbl = kiln.autotune(configs=configs, key=["n"], restore_value=["x_ptr"], do_bench=bench)(_in_place_double)
    x = np.arange(16, dtype=np.float32)
    dbl[lambda m: (kiln.cdiv(16, m["BLOCK"]),)](x, 16)
    np.testing.assert_array_equal(x, np.arange(16) * 2)  # the benchmark runs were undone


def test_autotune_prune_configs_by():
    calls, seen = [], {}
    times = {4: 1.0, 8: 2.0, 16: 3.0, 32: 4.0}

    def early_prune(configs, nargs, **kwargs):
        seen["n"] = nargs["n"]
        return [c for c in configs if c.kwargs["BLOCK"] >= 8]

    def perf_model(**kw):
        return -kw["BLOCK"]  # predicts bigger blocks are faster

    add = _autotuned_add(times, calls, prune_configs_by={"early_config_prune": early_prune,
                                                         "perf_model": perf_model, "top_k": 2})
    x = np.zeros(64, np.float32)
    add[lambda m: (kiln.cdiv(64, m["BLOCK"]),)](x, 64)
    assert seen["n"] == 64
    assert sorted(calls) == [16, 32]
    assert add.best_config.kwargs["BLOCK"] == 16
    np.testing.assert_array_equal(x, np.full(64, 3))
    # `configs_top_k` is an attribute code may set, as Triton's: the next tuning keeps that many (one: the
    # perf model's pick, nothing left to time)
    add.configs_top_k = 1
    calls.clear()
    add[lambda m: (kiln.cdiv(32, m["BLOCK"]),)](x, 32)
    assert add.configs_top_k == 1 and calls == [] and add.best_config.kwargs["BLOCK"] == 32


def test_autotune_with_the_real_do_bench():
    configs = [kiln.Config({"BLOCK": 16}), kiln.Config({"BLOCK": 32})]
    add = kiln.autotune(configs=configs, key=["n"], warmup=1, rep=2, reset_to_zero=["x_ptr"])(_add_one)
    x = np.zeros(64, np.float32)
    add[lambda m: (kiln.cdiv(64, m["BLOCK"]),)](x, 64)
    assert add.best_config in configs
    np.testing.assert_array_equal(x, np.ones(64))


def test_single_config_runs_without_benchmarking():
    calls = []
    add = _autotuned_add({16: 1.0}, calls)
    x = np.zeros(16, np.float32)
    add[(1,)](x, 16)
    assert calls == [] and add.best_config.kwargs == {"BLOCK": 16}
    np.testing.assert_array_equal(x, np.ones(16))


# --- heuristics -----------------------------------------------------------------------

@kiln.heuristics({"BLOCK": lambda args: kiln.next_power_of_2(args["n"]),
                  "EVEN": lambda args: args["n"] % 2 == 0})
@kiln.jit
def _heuristic_fill(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = 2 if EVEN else 1
    tl.store(x_ptr + offs, tl.full((BLOCK,), v, tl.int32) + BLOCK * 0 + BLOCK, mask=offs < n)


def test_heuristics_compute_meta_parameters():
    x = np.zeros(5, np.int32)
    _heuristic_fill[(1,)](x, 5)
    np.testing.assert_array_equal(x, np.full(5, 1 + 8))
    y = np.zeros(12, np.int32)
    _heuristic_fill[(1,)](y, 12)
    np.testing.assert_array_equal(y, np.full(12, 2 + 16))


def test_autotune_over_heuristics():
    calls = []
    hook, bench = _fake_bench({1: 2.0, 2: 1.0}, calls)

    @kiln.autotune(configs=[kiln.Config({"SCALE": 1}, pre_hook=lambda a: hook({"BLOCK": 1})),
                            kiln.Config({"SCALE": 2}, pre_hook=lambda a: hook({"BLOCK": 2}))],
                   key=[], do_bench=bench)
    @kiln.heuristics({"BLOCK": lambda args: kiln.next_power_of_2(args["n"])})
    @kiln.jit
    def fill(x_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, offs * SCALE, mask=offs < n)

    x = np.zeros(6, np.int32)
    fill[(1,)](x, 6)
    assert fill.best_config.kwargs == {"SCALE": 2}
    np.testing.assert_array_equal(x, np.arange(6) * 2)


# a torch CPU tensor launched on a GPU is Triton's ValueError ('cpu tensor?'): interpreter only
@pytest.mark.interpreter_only
@needs_torch
def test_kernels_take_torch_tensors_with_autotune():
    calls = []
    add = _autotuned_add({8: 1.0, 16: 2.0}, calls)
    x = torch.zeros(24)
    add[lambda m: (kiln.cdiv(24, m["BLOCK"]),)](x, 24)
    assert torch.equal(x, torch.full((24,), 3.0))
