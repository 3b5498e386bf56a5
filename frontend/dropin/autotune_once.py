"""A kernel's autotuning done by one rank of the node (KILN_AUTOTUNE_ONCE), its choice taken by the rest.

Inductor tunes a kernel at its first launch: it times the kernel's configs (`benchmark_all_configs`)
and, under coordinate descent (max-autotune's `coordinate_descent_tuning`), then walks from the
fastest to its neighbours, compiling and timing each (`coordinate_descent_tuning`). Both store the
result through Inductor's remote autotune cache, which the drop-in serves from the node cache.

Here the first rank to launch a kernel asks the node for its choice with single flight and leads:
it tunes and stores; the others, launching the same kernel at the same moment, wait for that entry
and launch its config without timing any. Under coordinate descent the leader's first store (the
descent's starting point) is held back until the descent's own: a follower gets the final config,
compiles it (the leader's compile of it is in the node cache) and skips both stages. A rank whose
leader fails or dies tunes the kernel itself (the lease's deadline, as for graphs).

The node's GPUs are of one model (PyTorch's key covers the device), and eight ranks timing the same
configs at once on one GPU only slow each other.
"""
from __future__ import annotations

import functools
import logging
import threading

from kiln.daemon.artifacts import node_artifacts

log = logging.getLogger("kiln.dropin")

# Per thread, during one kernel's tuning: `asking` while it asks the node (`NodeCacheBackend._get`
# takes single flight then), `namespace` the cache it asked (its lease, if it leads), `taken` when
# it launched the node's choice (nothing of its own to store), `hold` while a store is to wait for
# the descent, `held` that store, `stored` the key of the last store that went through.
_flight = threading.local()


def asking() -> bool:
    return getattr(_flight, "asking", False)


def asked(namespace: str) -> None:
    _flight.namespace = namespace


def store_now(key: str, data) -> bool:
    """Whether the remote cache should store this entry now (`NodeCacheBackend._put`): not a choice
    this rank took from the node, nor a leader's descent start (held until the descent ends)."""
    if getattr(_flight, "taken", False):
        return False
    if getattr(_flight, "hold", False):
        _flight.held = (key, data)
        return False
    _flight.stored = key
    return True


def install(triton_heuristics, put) -> None:
    """Wrap Inductor's CachingAutotuner; `put(key, data)` stores an entry as the remote cache does."""
    autotuner = triton_heuristics.CachingAutotuner
    benchmark = autotuner.benchmark_all_configs
    autotune = autotuner.autotune_to_one_config
    descend = autotuner.coordinate_descent_tuning

    @functools.wraps(benchmark)
    def benchmark_all_configs(self, *args, **kwargs):
        chosen = _ask_node(self)
        if chosen is None:
            return benchmark(self, *args, **kwargs)
        _flight.taken = True
        if all(launcher is not chosen for launcher in self.launchers):  # found by the leader's descent
            self.launchers.append(chosen)
        return {launcher: 0.0 if launcher is chosen else 1.0 for launcher in self.launchers}

    @functools.wraps(autotune)
    def autotune_to_one_config(self, *args, **kwargs):
        _flight.namespace, _flight.taken, _flight.held = None, False, None
        _flight.hold = bool(self.inductor_meta.get("coordinate_descent_tuning"))
        try:
            return autotune(self, *args, **kwargs)
        except BaseException:
            _flight.held = None
            raise
        finally:
            _flight.hold = _flight.taken = False
            if _flight.held is not None:  # led: the descent that follows stores, or stores this
                self._kiln_held_choice = (_flight.namespace, *_flight.held)
            elif _flight.namespace is not None:  # led and not stored (the timing failed): the others time it
                node_artifacts().abandon(_flight.namespace)

    @functools.wraps(descend)
    def coordinate_descent_tuning(self, launcher, *args, **kwargs):
        held = self.__dict__.pop("_kiln_held_choice", None)
        if not _descends(self, triton_heuristics):  # Inductor returns at once: the timing's choice stands
            if held is not None:
                put(held[1], held[2])
            return descend(self, launcher, *args, **kwargs)
        if held is None:  # one config: no timing came first, so the node is asked here
            _flight.namespace = None
            chosen = _ask_node(self)
            if chosen is not None:
                return chosen
        namespace = held[0] if held is not None else _flight.namespace
        _flight.stored = None
        try:
            best = descend(self, launcher, *args, **kwargs)
        except BaseException:
            if namespace is not None:
                node_artifacts().abandon(namespace)
            raise
        if held is not None and _flight.stored != held[1]:  # the descent stored nothing: its start stands
            put(held[1], held[2])
        elif namespace is not None:  # stored (a no-op then) or not: the lease goes
            node_artifacts().abandon(namespace)
        return best

    autotuner.benchmark_all_configs = benchmark_all_configs
    autotuner.autotune_to_one_config = autotune_to_one_config
    autotuner.coordinate_descent_tuning = coordinate_descent_tuning


def _descends(autotuner, triton_heuristics) -> bool:
    """Whether Inductor's coordinate descent tunes this kernel (PyTorch 2.13 says so itself; 2.11's
    rule is inside the descent: not templates, user or fixed configs, nor reductions in
    deterministic mode, whose numerics their block sizes change)."""
    if isinstance(getattr(type(autotuner), "_should_coordesc_tune", None), functools.cached_property):
        return bool(autotuner._should_coordesc_tune)
    kinds = triton_heuristics.HeuristicType
    if autotuner.heuristic_type in (kinds.TEMPLATE, kinds.USER_AUTOTUNE, kinds.FIXED):
        return False
    reductions = (kinds.REDUCTION, kinds.PERSISTENT_REDUCTION, kinds.SPLIT_SCAN)
    return not (getattr(autotuner, "deterministic_mode", False) and autotuner.heuristic_type in reductions)


def _ask_node(autotuner):
    """The launcher of the config another rank of the node chose for this kernel (waiting while it
    tunes), or None: this rank tunes it (it leads, or the choice cannot be shared)."""
    try:
        return _node_choice(autotuner)
    except Exception as error:  # noqa: BLE001 - an Inductor kiln does not know: tune here
        log.info("kiln: no node-wide autotuning choice for %s (%s: %s)", getattr(autotuner.fn, "__name__", "?"),
                 type(error).__name__, error)
        return None


def _node_choice(autotuner):
    from torch._inductor.runtime.autotune_cache import _load_cached_autotuning

    cache = getattr(getattr(autotuner, "save_cache_hook", None), "__self__", None)
    remote = getattr(cache, "remote_cache", None)
    if not remote:
        return None
    remote_cache, key = remote
    _flight.asking = True
    try:
        best = remote_cache.get(key)
    finally:
        _flight.asking = False
    if not isinstance(best, dict):
        return None
    configs = [launcher.config for launcher in autotuner.launchers]
    config = _load_cached_autotuning(dict(best), cache.configs_hash, configs, autotuner.inductor_meta)
    if config is None:
        return None
    chosen = next((launcher for launcher in autotuner.launchers if launcher.config is config), None)
    return chosen if chosen is not None else _launcher_of(autotuner, config)


def _launcher_of(autotuner, config):
    """A launcher of `config`, a config the kernel was not given (the leader's descent found it): its
    compile, as the descent's own, then kept with the kernel's other compile results."""
    load = getattr(autotuner, "_ensure_kernel_loaded", None)
    if load is not None:
        load()
    elif getattr(autotuner.fn, "fn", True) is None and callable(getattr(autotuner, "_reload_kernel", None)):
        autotuner.fn = autotuner._reload_kernel().fn  # compiled in a worker: the parent loads it
    with autotuner.lock:
        result = autotuner._precompile_config(config)
        launcher = result.make_launcher()
    if isinstance(getattr(autotuner, "compile_results", None), list):
        autotuner.compile_results.append(result)
    return launcher
