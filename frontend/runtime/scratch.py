"""Global scratch memory for a launch: where a kernel writes the TMA maps it makes itself
(`tensormap_create`, kiln.codegen.lower.tma), 128 bytes per map per CTA.

As in Triton, `kiln.set_allocator(fn)` names who provides it: `fn(size, alignment, stream)`
returns a buffer (a torch tensor, anything with `data_ptr()` or the CUDA array interface),
held until the launch call returns; the caching allocator behind it orders reuse on the
stream. Without one, kiln takes the bytes from the driver's stream-ordered pool
(`cuMemAllocAsync`) and hands them back after the kernel on the same stream.
"""
from __future__ import annotations

import ctypes
import functools

from .cuda_driver import CudaError, _error_text

ALIGNMENT = 128
_allocator = None


def set_allocator(allocator) -> None:
    """Who provides global scratch: `allocator(size, alignment, stream)`, or None for kiln's own."""
    if allocator is not None and not callable(allocator):
        raise TypeError(f"an allocator is called as allocator(size, alignment, stream), not a {type(allocator).__name__}")
    global _allocator
    _allocator = allocator


class _Pooled:
    """Bytes of the driver's pool, handed back on the launch's stream."""
    __slots__ = ("address",)

    def __init__(self, address):
        self.address = address


def take(nbytes: int, stream):
    """(device address, holder) of `nbytes` of scratch for a launch on `stream`."""
    from .launcher import _pointer_value
    if _allocator is not None:
        buffer = _allocator(nbytes, ALIGNMENT, stream)
        address = _pointer_value(buffer)
        if not address or address % ALIGNMENT:
            raise ValueError(f"the allocator set with kiln.set_allocator gave {buffer!r:.60} for {nbytes} bytes of "
                             f"global scratch: not GPU memory {ALIGNMENT}-byte aligned")
        return address, buffer
    address = ctypes.c_uint64()
    err = _driver("cuMemAllocAsync")(ctypes.byref(address), nbytes, stream)
    if err:
        raise CudaError(f"allocating {nbytes} bytes of global scratch failed: {_error_text(err)}")
    return address.value, _Pooled(address.value)


def give_back(holder, stream) -> None:
    """After the launch call: pooled bytes go back on the stream (after the kernel)."""
    if isinstance(holder, _Pooled):
        err = _driver("cuMemFreeAsync")(holder.address, stream)
        if err:
            raise CudaError(f"freeing global scratch failed: {_error_text(err)}")


@functools.lru_cache(maxsize=None)
def _driver(name):
    from .launcher import _libcuda
    fn = getattr(_libcuda(), name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p] if name == "cuMemAllocAsync" \
        else [ctypes.c_uint64, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn
