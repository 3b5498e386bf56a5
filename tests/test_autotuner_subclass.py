"""A subclass of the Autotuner with a run() of its own, as libraries write them against Triton's
(FlagGems' LibTuner): it reads `nargs`, calls `prune_configs(kwargs)`, `_bench(*args, config=,
**kwargs)`, `pre_hook(nargs, reset_only=True)` and `do_bench`, which must be Triton's. Interpreter."""
import numpy as np

import kiln
import kiln.language as tl
from kiln.autotuner import Autotuner


@kiln.jit
def _add_into(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs, mask=offs < n) + tl.load(x_ptr + offs, mask=offs < n),
             mask=offs < n)


class _OwnTuner(Autotuner):
    """Times every config with the base class's pieces, keeps the fastest per n, launches it."""

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        key = self.nargs["n"]
        if key not in self.cache:
            pruned = self.prune_configs(kwargs)
            timings = {config: self._bench(*args, config=config, **kwargs) for config in pruned}
            self.cache[key] = min(timings, key=timings.get)
            self.pre_hook({**self.nargs, **kwargs, **self.cache[key].all_kwargs()}, reset_only=True)
            self.configs_timings = timings
        config = self.cache[key]
        self.nargs = None
        return self.fn.run(*args, **kwargs, **config.all_kwargs())


def test_a_subclass_s_own_run_tunes_through_triton_s_methods():
    seen, timed = [], []

    def early_prune(configs, named_args, **kwargs):
        seen.append((sorted(named_args), sorted(kwargs)))
        return configs

    def bench(launch, quantiles):
        launch()
        timed.append(quantiles)
        return [float(len(timed)), 0.0, 0.0]  # the first config timed is the fastest

    tuner = _OwnTuner(_add_into, _add_into.arg_names, [kiln.Config({"BLOCK": 32}), kiln.Config({"BLOCK": 64})],
                      key=["n"], reset_to_zero=["acc_ptr"], prune_configs_by={"early_config_prune": early_prune},
                      do_bench=bench)
    x, acc = np.arange(100, dtype=np.float32), np.full(100, 5, np.float32)
    tuner[lambda meta: (kiln.cdiv(100, meta["BLOCK"]),)](x, acc, 100)
    assert seen == [(["acc_ptr", "n", "x_ptr"], ["grid"])]  # by position, then the launch's keywords
    assert timed == [(0.5, 0.2, 0.8)] * 2 and tuner.do_bench is bench
    assert tuner.cache[100].kwargs == {"BLOCK": 32} and list(tuner.configs_timings.values())[0] == [1.0, 0.0, 0.0]
    # every timed run started from zero (reset_to_zero), and so did the real launch after the reset_only hook
    np.testing.assert_array_equal(acc, x)


def test_the_default_hooks_restore_what_a_timed_run_changed():
    tuner = Autotuner(_add_into, _add_into.arg_names, [kiln.Config({"BLOCK": 32}), kiln.Config({"BLOCK": 64})],
                      key=["n"], reset_to_zero=None, restore_value=["acc_ptr"])
    acc = np.full(8, 3, np.float32)
    tuner.pre_hook({"acc_ptr": acc})
    acc += 1
    tuner.post_hook({"acc_ptr": acc}, exception=None)
    np.testing.assert_array_equal(acc, np.full(8, 3, np.float32))
    assert callable(tuner.do_bench)


def test_an_assigned_do_bench_times_the_configs():
    timed = []

    def bench(launch, quantiles):
        launch()
        timed.append(quantiles)
        return [2.0 - len(timed), 0.0, 0.0]  # the second config timed is the fastest

    tuner = kiln.autotune([kiln.Config({"BLOCK": 32}), kiln.Config({"BLOCK": 64})], key=["n"],
                          reset_to_zero=["acc_ptr"])(_add_into)
    tuner.do_bench = bench
    x, acc = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    tuner[lambda meta: (kiln.cdiv(100, meta["BLOCK"]),)](x, acc, 100)
    assert timed == [(0.5, 0.2, 0.8)] * 2 and list(tuner.cache.values())[0].kwargs == {"BLOCK": 64}
    np.testing.assert_array_equal(acc, x)
