"""`triton.runtime._allocation`: who provides the global memory a launch needs besides its
arguments (the scratch where a kernel writes the TMA maps of its device-side descriptors).

`set_allocator(fn)` is `kiln.set_allocator` (kiln.runtime.scratch): `fn(size, alignment, stream)`
returns a buffer. `NullAllocator` is Triton's "no allocator set": called, it raises Triton's error;
set, it leaves kiln with its own (the driver's stream-ordered pool), which is where kiln departs from
Triton, whose launches then fail. The allocator is the process's, not a context variable's.
`set_profile_allocator` holds the allocator profilers use for their own buffers.
"""
from __future__ import annotations

from typing import Optional, Protocol


class Buffer(Protocol):
    def data_ptr(self) -> int: ...


class Allocator(Protocol):
    def __call__(self, size: int, alignment: int, stream: Optional[int]) -> Buffer: ...


class NullAllocator:
    """No allocator: a kernel that needs scratch cannot have it from this one."""

    def __call__(self, size: int, alignment: int, stream: Optional[int]) -> Buffer:
        raise RuntimeError("Kernel requires a runtime memory allocation, but no allocator was set. "
                           "Use triton.set_allocator to specify an allocator.")


_NULL_ALLOCATOR = NullAllocator()


def set_allocator(allocator: Allocator | None) -> None:
    """Who provides global scratch from now on: `allocator(size, alignment, stream)`; a
    NullAllocator (or None) gives the job back to kiln's own pool."""
    from .scratch import set_allocator as set_scratch
    set_scratch(None if allocator is None or isinstance(allocator, NullAllocator) else allocator)


def get_allocator() -> Allocator:
    """The allocator set, or a NullAllocator where none is (kiln then uses its pool)."""
    from . import scratch
    return scratch._allocator if scratch._allocator is not None else _NULL_ALLOCATOR


class _AllocatorWrapper:
    """An allocator that can be swapped (`get`/`set`) and called in its place."""

    def __init__(self, allocator: Allocator):
        self._allocator = allocator

    def get(self) -> Allocator:
        return self._allocator

    def set(self, allocator: Allocator) -> None:
        self._allocator = allocator

    def __call__(self, size: int, alignment: int, stream: Optional[int]) -> Buffer:
        return self._allocator(size, alignment, stream)


_profile_allocator = _AllocatorWrapper(_NULL_ALLOCATOR)


def set_profile_allocator(allocator: Allocator | None) -> None:
    """The allocator profilers call for their buffers; None: none (a call raises)."""
    if allocator is not None and not callable(allocator):
        raise TypeError(f"an allocator is called as allocator(size, alignment, stream), not a {type(allocator).__name__}")
    _profile_allocator.set(allocator if allocator is not None else _NULL_ALLOCATOR)
