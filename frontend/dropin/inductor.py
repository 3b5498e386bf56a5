"""torch.compile's rank-local work, served by the node (drop-in mode, KILN_SHARE_GRAPHS on).

What every rank of a job otherwise does for itself:
- Its caches. Inductor's FX graph cache, the AOTAutograd cache and the autotuning caches get
  a backend on the node cache through PyTorch's own remote-cache interface
  (`RemoteCache.backend_override_cls`); the hook turns those caches on before torch reads its
  configuration. A rank that misses a graph another rank is compiling waits for it
  (`kiln.daemon.artifacts`): one compile per graph on the node.
- Its backward graphs. The first rank to wait for a training graph compiles its backward
  while the leader compiles the forward (`kiln.dropin.backward_ahead`, KILN_BACKWARD_AHEAD).
- Its autotuning. The first rank to launch a kernel of several configs times them, and under
  max-autotune descends from the fastest; the others, launching it at the same moment, wait for
  its choice and launch that (`kiln.dropin.autotune_once`, KILN_AUTOTUNE_ONCE).
- Its foreach kernels, split into groups the daemon's workers compile at once (KILN_FOREACH_ARGS).
- Its collector. The full passes of Python's cycle collector, which walk the whole heap, wait until
  a frame compile ends (`kiln.dropin.collector`, KILN_DEFER_FULL_GC).
- Its torch_key, the hash of PyTorch's own source in every cache key, read from the node cache under
  a fingerprint of those files instead of hashed afresh (`kiln.dropin.torch_key`, KILN_SHARE_TORCH_KEY).
- Its guards' text. Dynamo's identity guards describe a parameter without printing its values,
  which waits for the GPU (`kiln.dropin.guard_text`, KILN_BRIEF_GUARD_TEXT).
- Its compile-worker pool (one process per core, in every rank). Inductor's kernel compiles
  go to threads of the rank instead, which hand each kernel to the node daemon's pool; the
  Python part left in the rank (loading the kernel's module, building kiln's IR) is small.

And in every drop-in process, sharing or not, Inductor launches kiln's kernels as compiled ones
under TRITON_INTERPRET=1 too (`launch_compiled_when_interpreting`).

PyTorch's own keys decide what is shared: they cover its version and configuration, the
graph, its inputs (devices included) and the GPU, so a rank only gets what it would have
compiled itself.
"""
from __future__ import annotations

import functools
import re
from concurrent.futures import ThreadPoolExecutor

from kiln.cache import env
from kiln.daemon.artifacts import FIRST_FOLLOWER, node_artifacts

from . import autotune_once, backward_ahead

# graph caches: single flight across ranks; autotuning results: shared, each rank may benchmark
AOTAUTOGRAD = "autograd-experimental"
SINGLE_FLIGHT = ("fx-graph-v1", AOTAUTOGRAD)
SERVED = ("RemoteFxGraphCache", "RemoteAOTAutogradCache", "RemoteAutotuneCache", "RemoteBundledAutotuneCache")
_NAMESPACE = re.compile(r"pt2:([^:]+)::")


def namespace_of(key: str) -> str:
    """The cache a key is of: PyTorch formats them as `pt2:<cache id>::<key>:c<version>`."""
    match = _NAMESPACE.match(key)
    return match.group(1) if match else "other"


def defer_full_collections(convert_frame) -> None:
    """Run when `torch._dynamo.convert_frame` is imported (KILN_DEFER_FULL_GC): each frame compile
    (Dynamo, AOTAutograd, Inductor and the kernel waits) runs without the collector's full passes
    (`kiln.dropin.collector`)."""
    if env.defer_full_gc():
        from . import collector
        convert_frame._compile = collector.around(convert_frame._compile)


def describe_guards_briefly(guards) -> None:
    """Run when `torch._dynamo.guards` is imported (KILN_BRIEF_GUARD_TEXT): its identity guards describe
    tensors by kind, shape, dtype and device, not by their values (`kiln.dropin.guard_text`)."""
    if env.brief_guard_text():
        from . import guard_text
        guard_text.install(guards)


def share_torch_key(codecache) -> None:
    """Run when `torch._inductor.codecache` is imported (KILN_SHARE_TORCH_KEY): `torch_key()` comes
    from the node cache when PyTorch's files are as they were when a process stored it."""
    if env.share_torch_key():
        from . import torch_key
        torch_key.install(codecache)


def split_foreach_kernels(config) -> None:
    """Run when `torch._inductor.config` is imported (KILN_FOREACH_ARGS, with the node daemon): Inductor's
    foreach kernels take at most that many arguments. An AdamW step over a model's parameters is
    otherwise one kernel of up to 250 (19 parameters of the MLP: 1.3-1.5 s to compile on an H200 host,
    two thirds of it ptxas, on the critical path of the first step); in kernels of ~4 parameters the
    daemon's workers compile them at once. The arithmetic per element is the same: so are the
    results. A value the user sets after the import is theirs."""
    from kiln.daemon import launch

    limit = env.foreach_args()
    if limit is not None and launch.configured_address() is not None and hasattr(config, "combo_kernel_max_num_args"):
        config.combo_kernel_max_num_args = min(limit, config.combo_kernel_max_num_args)


def serve_caches(remote_cache) -> None:
    """Run when `torch._inductor.remote_cache` is imported: its remote caches use the node cache."""

    class NodeCacheBackend(remote_cache.RemoteCacheBackend):
        def _get(self, key):
            namespace = namespace_of(key)
            if autotune_once.asking():  # a launch about to tune: single flight
                autotune_once.asked(namespace)
                return node_artifacts().get(namespace, key, single_flight=True, kind="autotune")
            if namespace != AOTAUTOGRAD or backward_ahead.installed != "on":
                return node_artifacts().get(namespace, key, single_flight=namespace in SINGLE_FLIGHT)
            value, part = node_artifacts().lookup(namespace, key, first_follower_goes_on=True,
                                                  followers_go_on=env.followers_trace())
            backward_ahead.arm(part == FIRST_FOLLOWER)
            return value

        def _put(self, key, data):
            if autotune_once.store_now(key, data):
                node_artifacts().put(namespace_of(key), key, data)

    for name in SERVED:
        cache_class = getattr(remote_cache, name, None)
        if cache_class is not None:
            cache_class.backend_override_cls = NodeCacheBackend


def compile_backward_ahead(graph_compile) -> None:
    """Run when `torch._functorch._aot_autograd.graph_compile` is imported (KILN_BACKWARD_AHEAD;
    unless KILN_FOLLOWERS_TRACE=0 every follower traces a training graph itself and takes its
    forward and backward from the node cache, instead of waiting for the leader's AOTAutograd
    entry, which comes only after the leader's first backward)."""
    if env.backward_ahead():
        backward_ahead.install(graph_compile)
    else:
        backward_ahead.installed = "off (KILN_BACKWARD_AHEAD=0)"


def benchmark_once(triton_heuristics) -> None:
    """Run when `torch._inductor.runtime.triton_heuristics` is imported (KILN_AUTOTUNE_ONCE): each
    kernel's configs are timed, and under max-autotune descended from, by one rank of the node; the
    others launch its choice (`kiln.dropin.autotune_once`)."""
    if env.autotune_once():
        autotune_once.install(triton_heuristics, lambda key, data: node_artifacts().put(namespace_of(key), key, data))


def launch_compiled_when_interpreting(triton_heuristics) -> None:
    """Run when `torch._inductor.runtime.triton_heuristics` is imported, in every drop-in process.
    Under TRITON_INTERPRET=1 Inductor calls a kernel itself, passing only the constexprs of its
    config: enough for Triton's interpreted functions, which Dynamo never traces from user code,
    but a user's kiln kernel (a JITFunction, traced) lost the constexprs given at its call. kiln's
    compiled kernels already run in the interpreter in that mode, so Inductor takes its compiled
    path, as under KILN_INTERPRET=1, with every constant the compile recorded. (Inductor's
    `__init__` sets the flag from the environment; the property ignores that.)"""
    triton_heuristics.CachingAutotuner.triton_interpret = property(lambda self: False, lambda self, value: None)


class _RankThreads(ThreadPoolExecutor):
    """What Inductor takes for its process pool: threads whose compiles the daemon does."""

    def submit(self, fn, /, *args, **kwargs):
        if getattr(fn, "__name__", "") == "_worker_compile_triton":
            fn = _compile_triton_here
        return super().submit(fn, *args, **kwargs)


def _compile_triton_here(load_kernel, extra_env, extra_config):
    """Inductor's worker task, for a thread of the rank: the kernel's compile, without what a worker
    process does for its own sake. It does not strip the kernel for pickling, as the kernel object
    is the rank's own (a worker's is a copy: stripping the shared one broke the rank's next compile
    of it), nor set the environment and configuration, which are the rank's already."""
    import time
    start = time.time_ns()
    kernel = load_kernel()
    kernel.precompile(warm_cache_only=True)
    return kernel, (time.time_ns() - start) // 1000


def use_node_pool(async_compile) -> None:
    """Run when `torch._inductor.async_compile` is imported: its pool becomes threads of this rank,
    where a daemon compiles (KILN_DAEMON=off keeps Inductor's processes: they compile in parallel)."""
    from kiln.daemon import launch
    from kiln.daemon.server import default_workers

    if launch.configured_address() is None:
        return

    def process_pool():
        pool = _RankThreads(default_workers(), thread_name_prefix="kiln-inductor-compile")
        getattr(async_compile, "_pool_set", set()).add(pool)
        return pool

    async_compile.AsyncCompile.process_pool = staticmethod(functools.lru_cache(1)(process_pool))
