"""The live CPU tensors whose memory a kernel reaches through addresses it loaded from memory.

Triton's tutorial 08 builds a table of `tensor.data_ptr()` values on the host and passes only the
table; the kernel loads pointers from it. An address outside every argument's memory is looked up
here: the storage of a live CPU tensor that holds it is registered with the launch's `Memory`, so
the kernel reaches that tensor's bytes (all of its storage, as on a GPU) and nothing else.

Live tensors are found by a scan of the objects the garbage collector tracks (NumPy arrays are not
among them: pass those, or list them in `run(..., extra_memory=)`). A scan's result is kept, by
weak reference, and read first on the next lookup, so a kernel launched again on the same table
does not scan again; a tensor freed since, or whose storage changed, is not used.
"""
from __future__ import annotations

import gc
import sys
import weakref

import numpy as np

# storage start -> (weak reference to a tensor over that storage, the storage's end), and the
# starts sorted; storages are distinct allocations, so an address can only be in the one below it
_found: dict[int, tuple[weakref.ref, int]] = {}
_starts = np.zeros(0, np.uint64)


def storage_span(tensor) -> tuple[int, int] | None:
    """[lo, hi) of the bytes of the storage under a strided CPU tensor, None for any other."""
    # a FakeTensor (torch.compile's tracing) has no memory, and asking for its storage's address warns
    fake = getattr(sys.modules.get("torch._subclasses.fake_tensor"), "FakeTensor", ())
    if issubclass(type(tensor), fake):
        return None
    try:
        if tensor.device.type != "cpu" or str(tensor.layout) != "torch.strided":
            return None
        storage = tensor.untyped_storage()
        lo = storage.data_ptr()
        return (lo, lo + storage.nbytes()) if lo else None
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # fake or storage-less tensors
        return None


def _scan() -> None:
    """Index the storages of every live CPU tensor (replacing what an earlier scan found)."""
    global _starts
    torch = sys.modules.get("torch")
    if torch is None:
        return
    _found.clear()
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):  # type(): not `__class__`, which some objects warn on
            span = storage_span(obj)
            if span is not None and span[1] > span[0]:  # one entry per storage
                _found.setdefault(span[0], (weakref.ref(obj), span[1]))
    _starts = np.array(sorted(_found), np.uint64)


def _lookup(addrs: np.ndarray) -> tuple[list, np.ndarray]:
    """(lo, hi, tensor) of the indexed storages that hold any of `addrs` (their tensor alive and
    still over those bytes), and the addresses none holds."""
    held, missing = [], np.ones(len(addrs), bool)
    below = np.searchsorted(_starts, addrs, side="right").astype(np.int64) - 1
    for lo in _starts[np.unique(below[below >= 0])].tolist():
        ref, hi = _found[lo]
        tensor = ref()
        if tensor is None or storage_span(tensor) != (lo, hi):
            continue
        inside = (addrs >= np.uint64(lo)) & (addrs < np.uint64(hi))
        if inside.any():
            held.append((lo, hi, tensor))
            missing &= ~inside
    return held, addrs[missing]


def buffers_holding(addrs: np.ndarray) -> list[tuple[int, int, object]]:
    """(lo, hi, tensor) of the storages of live CPU tensors that hold any of `addrs`."""
    addrs = np.unique(np.asarray(addrs, np.uint64))
    held, missing = _lookup(addrs)
    if len(missing):
        _scan()
        held += _lookup(missing)[0]
    return held
