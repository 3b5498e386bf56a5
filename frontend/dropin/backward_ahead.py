"""A training graph's backward, compiled ahead by the first rank that waits (drop-in mode,
KILN_SHARE_GRAPHS on, KILN_BACKWARD_AHEAD not 0).

PyTorch compiles a training graph's backward lazily, in the first `loss.backward()`, after its
forward compiled and ran. With single flight one rank, the leader, compiles both in turn while
the others wait for its AOTAutograd entry. Instead, the first rank to find the leader busy on
that entry (`kiln.daemon.artifacts`: FIRST_FOLLOWER) traces the graph too (AOTAutograd's joint
graph and partition) and compiles the backward at once, while the leader compiles the forward.
The result lands in the node cache under Inductor's own FX graph key, where the leader's lazy
backward compile finds it; this rank then takes the leader's forward and goes on as a follower.

The backward compiled ahead sees the saved activations with their traced strides; the lazy one
restrides them to what the compiled forward returns. Where those differ, so do the keys, and
the leader compiles its own: a wasted compile, never a wrong program. Nothing else changes: the
ahead compile's result is dropped (its cache entry is what counts), and a failure is logged and
forgotten. Graphs whose backward PyTorch compiles at once (dynamic shapes) and CUDA-graph modes
(whose backward key carries the forward's device) are left alone.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import threading

log = logging.getLogger("kiln.dropin")

# what the hook wraps in torch._functorch._aot_autograd.graph_compile, and the parameters it reads
# (PyTorch 2.11 and 2.13 alike; 2.13 also passes the compilers as arguments, not in aot_config)
WRAPPED = {
    "aot_stage2_autograd": ("aot_state", "aot_graph_capture"),
    "_aot_stage2a_partition": ("fx_g", "joint_inputs", "maybe_subclass_meta", "fw_metadata", "aot_config"),
    "_aot_stage2b_fw_compile": ("fw_module",),
    "_aot_stage2b_bw_compile": ("bw_module", "maybe_subclass_meta", "fw_metadata", "fwd_output_strides",
                                "num_symints_saved_for_bw", "aot_config"),
}
counts = dict.fromkeys(("armed", "compiled", "skipped", "failed"), 0)
installed: str | None = None  # None, or why the hook left PyTorch as it is
_state = threading.local()


@dataclasses.dataclass
class _Plan:
    bw_compiler: object  # None where AOTAutograd reads it from aot_config
    partition: tuple | None = None  # (bw_module, num_symints_saved_for_bw, maybe_subclass_meta, fw_metadata, aot_config)
    done: bool = False


def arm(first_follower: bool) -> None:
    """Called on each AOTAutograd cache lookup of this thread: whether the compile that follows
    (if it misses) is the first follower's, which compiles the backward ahead."""
    _state.armed = first_follower
    if first_follower:
        counts["armed"] += 1


def install(graph_compile) -> None:
    """Run when `torch._functorch._aot_autograd.graph_compile` is imported."""
    global installed
    missing = [name for name, params in WRAPPED.items() if not _has_params(getattr(graph_compile, name, None), params)]
    if missing:
        installed = f"this PyTorch's AOTAutograd differs ({', '.join(missing)})"
        return
    bw_compile = graph_compile._aot_stage2b_bw_compile
    graph_compile.aot_stage2_autograd = _planning(graph_compile.aot_stage2_autograd)
    graph_compile._aot_stage2a_partition = _noting_partition(graph_compile._aot_stage2a_partition)
    graph_compile._aot_stage2b_fw_compile = _backward_first(graph_compile._aot_stage2b_fw_compile, bw_compile)
    installed = "on"


def _has_params(fn, names) -> bool:
    if not callable(fn):
        return False
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return params[:len(names)] == list(names)


def _planning(stage2):
    signature = inspect.signature(stage2)

    @functools.wraps(stage2)
    def aot_stage2_autograd(*args, **kwargs):
        armed, _state.armed = getattr(_state, "armed", False), False
        if not armed or _cudagraphs():
            return stage2(*args, **kwargs)
        _state.plan = _Plan(signature.bind(*args, **kwargs).arguments.get("bw_compiler"))
        try:
            return stage2(*args, **kwargs)
        finally:
            _state.plan = None
    return aot_stage2_autograd


def _noting_partition(partition):
    signature = inspect.signature(partition)

    @functools.wraps(partition)
    def _aot_stage2a_partition(*args, **kwargs):
        result = partition(*args, **kwargs)
        plan = getattr(_state, "plan", None)
        if plan is not None and plan.partition is None:
            bound = signature.bind(*args, **kwargs).arguments
            _fw_module, bw_module, _saved, num_symints, *_ = result
            plan.partition = (bw_module, num_symints, bound["maybe_subclass_meta"], bound["fw_metadata"],
                              bound["aot_config"])
        return result
    return _aot_stage2a_partition


def _backward_first(fw_compile, bw_compile):
    @functools.wraps(fw_compile)
    def _aot_stage2b_fw_compile(*args, **kwargs):
        plan = getattr(_state, "plan", None)
        if plan is not None and plan.partition is not None and not plan.done:
            plan.done = True
            _compile_backward(bw_compile, plan)
        return fw_compile(*args, **kwargs)
    return _aot_stage2b_fw_compile


def _compile_backward(bw_compile, plan: _Plan) -> None:
    bw_module, num_symints, subclass_meta, fw_metadata, aot_config = plan.partition
    if num_symints or getattr(aot_config, "force_non_lazy_backward_lowering", False):
        counts["skipped"] += 1  # PyTorch compiles this backward at once itself
        return
    try:
        at_once = dataclasses.replace(aot_config, force_non_lazy_backward_lowering=True)
        compilers = () if plan.bw_compiler is None else (plan.bw_compiler,)
        bw_compile(bw_module, subclass_meta, fw_metadata, None, num_symints, at_once, *compilers)
    except Exception as error:  # noqa: BLE001 - the lazy compile then does it, as without kiln
        counts["failed"] += 1
        log.info("kiln: the backward compiled ahead failed (%s: %s); it compiles lazily", type(error).__name__, error)
        return
    counts["compiled"] += 1


def _cudagraphs() -> bool:
    from torch._inductor import config
    return bool(config.triton.cudagraphs)
