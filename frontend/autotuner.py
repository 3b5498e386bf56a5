"""`kiln.autotune`, `kiln.heuristics` and `kiln.Config`, with Triton's signatures."""
from __future__ import annotations

import builtins
import inspect
import time

from . import config as env
from . import tuning_results
from .errors import AutotunerError, CompilationError, OutOfResources, PTXASError, user_facing
from .dropin import knobs
from .jit import KernelInterface

# Builds in flight at once when an autotuner compiles its configs: each is one request to
# the node daemon, which queues what its workers cannot take yet.
MAX_PARALLEL_BUILDS = 32


class Config:
    """One set of meta-parameters and launch options to try."""

    def __init__(self, kwargs, num_warps=env.DEFAULT_NUM_WARPS, num_stages=env.DEFAULT_NUM_STAGES, num_ctas=1,
                 maxnreg=None, pre_hook=None, ir_override=None):
        self.kwargs = kwargs  # the caller's dict itself, as Triton keeps it (a change to it is the config's)
        self.num_warps, self.num_stages, self.num_ctas, self.maxnreg = num_warps, num_stages, num_ctas, maxnreg
        self.pre_hook = pre_hook
        self.ir_override = ir_override  # Triton's path to a TTGIR/PTX file to compile instead; kiln does not read it

    def __setstate__(self, state):
        # Triton's defaults for what a pickle lacks (Inductor's caches pickle configs; an older one has fewer fields)
        self.kwargs = state.get("kwargs", {})
        self.num_warps = state.get("num_warps", env.DEFAULT_NUM_WARPS)
        self.num_stages = state.get("num_stages", env.DEFAULT_NUM_STAGES)
        self.num_ctas = state.get("num_ctas", 1)
        self.maxnreg = state.get("maxnreg")
        self.pre_hook = state.get("pre_hook")
        self.ir_override = state.get("ir_override")
        for name, value in state.items():  # what a subclass or a caller added (Inductor's found_by_coordesc)
            self.__dict__.setdefault(name, value)

    def all_kwargs(self) -> dict:
        """The meta-parameters and the launch options, in Triton's order; an option set to None is
        left out (the launch's default applies), as Triton leaves it out."""
        options = (("num_warps", self.num_warps), ("num_ctas", self.num_ctas), ("num_stages", self.num_stages),
                   ("maxnreg", self.maxnreg))
        return {**self.kwargs, **{k: v for k, v in options if v is not None}}

    def __str__(self):  # Triton's order and words (autotune's "best config selected: ..." line prints it)
        items = [f"{k}: {v}" for k, v in self.kwargs.items()]
        items += [f"num_warps: {self.num_warps}", f"num_ctas: {self.num_ctas}", f"num_stages: {self.num_stages}",
                  f"maxnreg: {self.maxnreg}"]
        return ", ".join(items)

    def _identity(self):
        return (*self.all_kwargs().items(), self.pre_hook)

    def __eq__(self, other):
        return isinstance(other, Config) and self._identity() == other._identity()

    def __hash__(self):
        return hash(self._identity())

    __repr__ = __str__


def _base_function(fn):
    """The Python function under autotune/heuristics/jit wrappers (Triton's `base_fn`)."""
    while not inspect.isfunction(fn):
        fn = fn.fn
    return fn


def _arg_names(fn):
    while not hasattr(fn, "arg_names"):
        fn = fn.fn
    return fn.arg_names


def _bind(fn, args, kwargs) -> dict:
    names = _arg_names(fn)
    if len(args) > len(names):
        raise TypeError(f"too many positional arguments ({len(args)}) for {names}")
    return {**dict(zip(names, args)), **kwargs}


class Autotuner(KernelInterface):
    def __init__(self, fn, arg_names, configs, key, reset_to_zero=None, restore_value=None, pre_hook=None,
                 post_hook=None, prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None,
                 cache_results=False):
        self.fn = fn
        self.base_fn = _base_function(fn)
        self.arg_names = arg_names
        self.configs = list(configs) or [Config({})]
        self.keys = list(key)
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.user_pre_hook, self.user_post_hook = pre_hook, post_hook
        # Triton's names, which torch.compile reads of a user's autotuned kernel (it refuses the hooks)
        self.user_defined_pre_hook, self.user_defined_post_hook = pre_hook is not None, post_hook is not None
        prune = prune_configs_by or {}
        self.perf_model = prune.get("perf_model")
        self.top_k = prune.get("top_k", 1.0)
        self.early_config_prune = prune.get("early_config_prune")
        self.warmup_ms = 25 if warmup is None else warmup
        self.rep_ms = 100 if rep is None else rep
        # Triton's names for them, which torch.compile checks are at their defaults
        self.num_warmups, self.num_reps, self.use_cuda_graph = warmup, rep, use_cuda_graph
        self._do_bench = do_bench
        self.cache_results = tuning_results.requested(cache_results)
        self.cache: dict = {}
        self.best_config: Config | None = None
        self.configs_timings: dict | None = None
        # Triton's attributes, which subclasses of it (FlagGems' LibTuner) call from a run() of their own: the
        # launch's arguments by position, and the hooks around each timed run
        self.nargs: dict | None = None
        self.restore_copies: dict = {}
        self.pre_hook, self.post_hook = self._reset_and_save, self._restore_saved

    def _reset_and_save(self, kwargs: dict, reset_only: bool = False):
        """Before a timed run: `reset_to_zero`'s buffers zeroed and `restore_value`'s copied, then the user's
        pre_hook; `reset_only` (after tuning, before the real launch) only zeroes. An optional buffer given
        as None has nothing to reset or keep."""
        for name in self.reset_to_zero:
            if kwargs.get(name) is not None:
                _zero(kwargs[name])
        if reset_only:
            return
        self.restore_copies = {name: _copy(kwargs[name]) for name in self.restore_value if kwargs.get(name) is not None}
        if self.user_pre_hook:
            self.user_pre_hook(kwargs)

    def _restore_saved(self, kwargs: dict, exception=None):
        """After a timed run (or its failure): the user's post_hook, then `restore_value`'s buffers back."""
        try:
            if self.user_post_hook:
                self.user_post_hook(kwargs, exception=exception)
        finally:
            for name, value in self.restore_copies.items():
                _restore(kwargs[name], value)
            self.restore_copies = {}

    @property
    def do_bench(self):
        """How a config is timed (Triton's attribute): the `do_bench` given, else kiln.testing's."""
        if self._do_bench is not None:
            return self._do_bench
        from .testing import do_bench
        return lambda fn, quantiles: do_bench(fn, warmup=self.warmup_ms, rep=self.rep_ms, quantiles=quantiles)

    @do_bench.setter
    def do_bench(self, timer):
        # Triton's is a cached_property, which an assignment replaces (unsloth's large-head attention does so)
        self._do_bench = timer

    @property
    def configs_top_k(self):
        """Triton's name of `prune_configs_by["top_k"]` (torch.compile reads it; Triton's is a plain
        attribute, which code may set)."""
        return self.top_k

    @configs_top_k.setter
    def configs_top_k(self, top_k):
        self.top_k = top_k

    def prune_configs(self, kwargs: dict) -> list:
        """`early_config_prune(configs, nargs, **kwargs)` as in Triton: `self.nargs` the arguments given
        by position (by name), `kwargs` the launch's keyword arguments (tutorials read their
        constexprs there); `perf_model` gets both and the config's."""
        nargs = self.nargs or {}
        configs = self.configs
        if self.early_config_prune:
            configs = list(self.early_config_prune(configs, nargs, **kwargs))
            if not configs:
                raise AutotunerError("No valid autotuner configs after pruning. `early_config_prune` should return "
                                     "at least one config.")
        if self.perf_model:
            top_k = self.top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(self.configs) * top_k)
            top_k = builtins.max(1, top_k)
            if len(configs) > top_k:
                estimated = {c: self.perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in configs}
                configs = sorted(estimated, key=estimated.get)[:top_k]
        return configs

    def _key(self, nargs: dict):
        key = [nargs[k] for k in self.keys if k in nargs]
        key += [str(v.dtype) for v in nargs.values() if hasattr(v, "dtype")]
        return tuple(key)

    def _bench(self, *args, config: Config, **meta):
        """Time one config (Triton's signature: `meta` the launch's keywords, its grid among them): Triton's
        quantiles (median, 20th, 80th percentile) in ms, or infinities where the config cannot run."""
        conflicts = set(meta) & set(config.kwargs)
        if conflicts:
            raise ValueError(f"conflicting meta-parameters: {', '.join(sorted(conflicts))}; "
                             "they are given both at the launch and by the autotuner's configs")
        current = {**meta, **config.all_kwargs()}
        full = {**_bind(self.fn, args, {k: v for k, v in meta.items() if k not in ("grid", "warmup")}),
                **config.all_kwargs()}
        verbose = knobs.autotuning.print
        if verbose:
            print(f"Autotuning kernel {self.base_fn.__name__} with config {config}")

        def launch():  # Triton's order: the config's hook, then reset/restore and the user's, the run, the post hook
            if config.pre_hook:
                config.pre_hook(full)
            self.pre_hook(full)
            try:
                self.fn.run(*args, **current)
            except Exception as e:
                self.post_hook(full, exception=e)
                raise
            self.post_hook(full, exception=None)

        try:
            return self.do_bench(launch, quantiles=(0.5, 0.2, 0.8))  # a user's do_bench gets Triton's arguments
        except Exception as e:
            if isinstance(e, (OutOfResources, CompilationError, PTXASError)):  # the config cannot run: never chosen
                if verbose:
                    print(f"Autotuning failed with {e}")
                return [float("inf")] * 3
            raise

    def _build_side_by_side(self, args, kwargs, grid, configs, nargs):
        """Compile every config's binary before timing any: the builds run at once (on the node
        daemon's worker pool), where timing config after config would wait for each compile in
        turn. Only the block IR is made here, one config at a time; a config that fails is left
        to `_bench`, which meets the same error in the usual place."""
        if env.interpret() or len(configs) < 2:
            return
        from concurrent.futures import ThreadPoolExecutor

        from .compiler import CompiledKernel
        from .runtime import cuda_driver
        if not cuda_driver.is_available():
            return
        kernels = []
        for c in configs:
            try:
                if c.pre_hook:  # it may set what the kernel is specialized on (a descriptor's block shape)
                    c.pre_hook({**nargs, **c.all_kwargs()})
                kernel = self.fn.run(*args, grid=grid, warmup=True, **kwargs, **c.all_kwargs())
            except Exception:  # noqa: BLE001 - reported by _bench
                continue
            if isinstance(kernel, CompiledKernel):
                kernels.append((kernel, _programs(grid, {**nargs, **c.all_kwargs()}), {**nargs, **c.all_kwargs()}))
        device = cuda_driver.device_and_stream()[0]

        def build(kernel, programs, named):
            try:
                target = kernel.target_for(device)
                kernel.build(target)
                if programs is not None:  # a GEMM launched with few programs: its split-K build too
                    kernel.build_split_for(target, programs, device, named)
            except Exception:  # noqa: BLE001 - reported by _bench (a split build's, by the launch)
                pass
        with ThreadPoolExecutor(builtins.min(len(kernels), MAX_PARALLEL_BUILDS) or 1) as pool:
            list(pool.map(lambda entry: build(*entry), kernels))

    @user_facing
    def run(self, *args, grid, warmup=False, **kwargs):
        nargs = _bind(self.fn, args, kwargs)
        config = self._choose(args, kwargs, grid, nargs)
        self.best_config = config
        values = config.all_kwargs()
        if warmup:
            return self.fn.run(*args, grid=grid, warmup=True, **kwargs, **values)
        if config.pre_hook:
            config.pre_hook({**nargs, **values})
        # `kernel[grid]`: a JIT function's cached launch in one frame (JITFunction.__getitem__)
        return self.fn[grid](*args, **kwargs, **values)

    def _choose(self, args, kwargs, grid, nargs) -> Config:
        """The config for this launch's key: tuned (or another process's choice) the first time."""
        if len(self.configs) <= 1:
            return self.configs[0]
        key = self._key(nargs)
        if key not in self.cache:  # `nargs` only while tuning: a cached launch pays nothing for it
            self.nargs = dict(zip(self.arg_names, args))
            try:
                self._tune_for(key, args, kwargs, grid, nargs)
            finally:
                self.nargs = None
        return self.cache[key]

    def _tune_for(self, key, args, kwargs, grid, nargs):
        """Fill `self.cache[key]`: another process's choice, the one config left after pruning, or timed."""
        configs = self.prune_configs(kwargs)
        shared = tuning_results.name(self.fn, key, configs) if self.cache_results else None
        chosen = tuning_results.shared_choice(shared, configs) if shared else None
        tuned = chosen is None and len(configs) > 1  # one config left after pruning: nothing to time
        if chosen is not None or not tuned:
            self.cache[key] = chosen if chosen is not None else configs[0]
        else:
            started = time.perf_counter()
            self.cache[key] = self._tune(args, kwargs, grid, configs, nargs, shared)
            self.bench_time = time.perf_counter() - started
            if knobs.autotuning.print:  # Triton's words, printed when this process tuned
                print(f"Triton autotuning for function {self.base_fn.__name__},\nwith key as {key},\n"
                      f"finished after {self.bench_time:.2f}s,\nbest config selected: {self.cache[key]};")
        if knobs.autotuning.listener is not None:
            knobs.autotuning.listener(fn=self.base_fn, key=key, best_config=self.cache[key],
                                      configs_timings=self.configs_timings if tuned else None,
                                      duration=self.bench_time if tuned else None, cache_hit=not tuned)

    def _tune(self, args, kwargs, grid, configs, nargs, shared: str | None):
        """Benchmark `configs` and return the fastest (published under `shared` when it is given)."""
        try:
            self._build_side_by_side(args, kwargs, grid, configs, nargs)
            timings = {c: self._bench(*args, config=c, grid=grid, **kwargs) for c in configs}
        except BaseException:
            if shared:
                tuning_results.abandon()
            raise
        best = builtins.min(timings, key=lambda c: _median(timings[c]))
        self.configs_timings = timings
        if shared:
            tuning_results.publish(shared, configs, best, {c: _median(t) for c, t in timings.items()})
        self.pre_hook({**nargs, **best.all_kwargs()}, reset_only=True)  # the timed runs leave no trace
        return best

    def warmup(self, *args, grid=(1,), **kwargs):
        """Compile every (pruned) config without benchmarking or launching."""
        launch_kwargs = {k: v for k, v in kwargs.items() if k != "target"}
        _bind(self.fn, args, launch_kwargs)  # the same argument check as a launch
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = self.prune_configs(launch_kwargs)
        finally:
            self.nargs = None
        return [self.fn.warmup(*args, grid=grid, **kwargs, **c.all_kwargs()) for c in configs]


def _median(timing):
    """A timing as Triton's do_bench gives it with quantiles (a list, the median first) or as a number."""
    return timing[0] if isinstance(timing, (list, tuple)) else timing


class Heuristics(KernelInterface):
    def __init__(self, fn, arg_names, values: dict):
        self.fn, self.arg_names, self.values = fn, arg_names, values
        self.base_fn = _base_function(fn)

    @user_facing
    def run(self, *args, grid, warmup=False, **kwargs):
        nargs = _bind(self.fn, args, kwargs)
        for name, heuristic in self.values.items():
            kwargs[name] = heuristic(nargs)
            nargs[name] = kwargs[name]
        return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)

    def warmup(self, *args, grid=(1,), **kwargs):
        nargs = _bind(self.fn, args, {k: v for k, v in kwargs.items() if k != "target"})
        for name, heuristic in self.values.items():
            kwargs[name] = heuristic(nargs)
            nargs[name] = kwargs[name]
        return self.fn.warmup(*args, grid=grid, **kwargs)


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=False):
    """Benchmark `configs` the first time each value of `key` is seen and launch the fastest. With
    `cache_results` (or TRITON_CACHE_AUTOTUNING=1) the choice is shared by the node's processes and the
    cluster's nodes: the first to need it benchmarks, the others launch its choice (`tuning_results`)."""
    def decorator(fn):
        return Autotuner(fn, _arg_names(fn), configs, key, reset_to_zero, restore_value, pre_hook, post_hook,
                         prune_configs_by, warmup, rep, use_cuda_graph, do_bench, cache_results)
    return decorator


def heuristics(values):
    """Compute meta-parameters from the arguments: `values` maps a name to f(args dict)."""
    def decorator(fn):
        return Heuristics(fn, _arg_names(fn), values)
    return decorator


def _programs(grid, meta: dict) -> int | None:
    """How many programs a launch over `grid` (a tuple, or a function of the launch's arguments and
    the config's values) runs, or None where the grid cannot say without the launch."""
    from .binder import grid3
    try:
        x, y, z = grid3(grid(meta) if callable(grid) else grid)
        return x * y * z
    except Exception:  # noqa: BLE001 - the launch evaluates it again and reports what is wrong
        return None


def _copy(x):
    return x.clone() if hasattr(x, "clone") else x.copy()


def _restore(dst, src):
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        dst[...] = src


def _zero(x):
    if hasattr(x, "zero_"):
        x.zero_()
    else:
        x[...] = 0
