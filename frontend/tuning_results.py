"""Autotuning choices shared by every process of the node, and of the cluster (`@autotune(cache_results=
True)`, or TRITON_CACHE_AUTOTUNING=1 as in Triton): the first process to tune a kernel for a key
benchmarks its configs; the others, on this node or another, launch its choice. Of the ranks that
ask at once, one benchmarks and the others wait for it (`kiln.daemon.artifacts`' single flight).

The choice is named by what decides it: the kernel's source, the tuning key's values, the configs
tried, the device (its name and target; the interpreter is a device of its own) and kiln's version.
Any config is a correct program, so a choice that is stale is at worst a slower one; what is read
back is validated (an index into the configs tried), never executed.
"""
from __future__ import annotations

import functools
import hashlib
import json

NAMESPACE = "kiln-autotune"


def requested(cache_results: bool) -> bool:
    """`cache_results=True`, or `triton.knobs.autotuning.cache` (TRITON_CACHE_AUTOTUNING=1)."""
    from .dropin.knobs import autotuning
    return bool(cache_results or autotuning.cache)


def name(fn, key: tuple, configs: list) -> str | None:
    """The choice's name for kernel `fn` (a JITFunction, or heuristics around one), tuning `key` and
    `configs` on this device; None where the device cannot be named (then this process tunes for itself)."""
    import kiln
    while not hasattr(fn, "src"):
        fn = fn.fn
    try:
        device = _device()
    except Exception:  # noqa: BLE001 - sharing is worth less than the launch
        return None
    what = {"kernel": fn.__name__, "source": fn.src, "key": [repr(k) for k in key],
            "configs": [str(c) for c in configs], "device": device, "kiln": kiln.__version__}
    return "kiln-autotune:" + hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def shared_choice(choice_name: str, configs: list):
    """The config another process chose, or None: this process is to benchmark and `publish`."""
    from kiln.daemon.artifacts import node_artifacts
    value = node_artifacts().get(NAMESPACE, choice_name)
    try:
        index = json.loads(value)["config"] if value is not None else None
    except (ValueError, TypeError, KeyError):
        return None
    return configs[index] if type(index) is int and 0 <= index < len(configs) else None


def publish(choice_name: str, configs: list, best, timings: dict) -> None:
    from kiln.daemon.artifacts import node_artifacts
    record = {"config": configs.index(best), "timings_ms": [timings.get(c) for c in configs]}
    node_artifacts().put(NAMESPACE, choice_name, json.dumps(record, allow_nan=True).encode())


def abandon() -> None:
    """This process will not publish the choice it claimed (its benchmark failed): the others tune."""
    from kiln.daemon.artifacts import node_artifacts
    node_artifacts().abandon(NAMESPACE)


@functools.lru_cache(maxsize=1)
def _device() -> str:
    from . import config
    if config.interpret():
        return "interpreter"
    from .runtime import cuda_driver as drv
    from .runtime import driver
    active = driver.active
    cu = drv.cuda()
    device = drv.check(cu.cuDeviceGet(active.get_current_device()), "cuDeviceGet")
    raw = bytes(drv.check(cu.cuDeviceGetName(256, device), "cuDeviceGetName"))
    gpu = raw.split(bytes(1))[0].decode(errors="replace")
    return f"{gpu} sm_{active.get_current_target().arch}"
