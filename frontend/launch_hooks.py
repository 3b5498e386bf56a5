"""Triton's launch and kernel-load hooks (`knobs.runtime`) around kiln's own launches.

`launch_enter_hook(metadata)` and `launch_exit_hook(metadata)` run around every launch, on a GPU
or in the interpreter (kiln's CPU device), with a LaunchMetadata: the kernel's name, its function
handle and stream, and what its `@jit(launch_metadata=)` function returns, computed only when a
hook reads it (`metadata.get()`). `kernel_load_start_hook` and `kernel_load_end_hook` run around
loading a binary on a device, with `(module, function, name, metadata_group, hash)`; the module
and function handles are None before the load, and in the interpreter, where a kernel counts as
loaded at its first launch.
"""
from __future__ import annotations

from .dropin import knobs


class LaunchMetadata:
    """Triton's LazyDict: fixed values, and functions whose dicts are merged in at the first `get`."""

    def __init__(self, data: dict):
        self.data = data
        self.pending = []

    def add(self, func, args) -> None:
        self.pending.append((func, args))

    def get(self) -> dict:
        while self.pending:
            func, args = self.pending.pop(0)
            self.data = {**self.data, **func(*args)}
        return self.data


def launching() -> bool:
    """Whether a launch hook is set: else a launch builds no metadata. A hot path asks
    `knobs.launch_hooked or knobs.runtime is not knobs.hooked.runtime` first (no call)."""
    if knobs.runtime is not knobs.hooked.runtime:
        return knobs.recount_launch_hooks()
    return knobs.launch_hooked


def around_launch(launch, metadata) -> None:
    """`launch()` between the enter and exit hooks (a callable set in place of a chain, or None)."""
    enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    if enter:
        enter(metadata)
    launch()
    if exit_:
        exit_(metadata)


def metadata_of(name: str, function, stream, user_fn=None, grid=None, kernel_metadata=None,
                arguments=None) -> LaunchMetadata:
    """The hooks' argument: `user_fn(grid, kernel_metadata, arguments)` (the @jit launch_metadata
    function, given every argument of the kernel by name) is called only when a hook reads it."""
    metadata = LaunchMetadata({"name": name, "function": function, "stream": stream})
    if user_fn is not None:
        metadata.add(user_fn, (grid, kernel_metadata, arguments))
    return metadata


def around_load(load, name: str, hash_of, handles=lambda loaded: (None, None), metadata_group=None):
    """`load()` between the kernel-load hooks, which the end hook gets as `handles(loaded)`, its
    (module, function); `hash_of()` is asked only when a hook is set (a kernel's hash prints its IR)."""
    start, end = knobs.runtime.kernel_load_start_hook, knobs.runtime.kernel_load_end_hook
    if not (start or end):
        return load()
    group, digest = metadata_group or {}, hash_of()
    if start:
        start(None, None, name, group, digest)
    loaded = load()
    if end:
        end(*handles(loaded), name, group, digest)
    return loaded
