"""Pointer arithmetic, loads, stores and atomics over `Memory`.

Only active lanes (mask true) are translated, checked and touched. Atomics must be
right when several lanes of one block hit the same address, so they run in rounds:
round k updates the k-th lane of every address, vectorized across addresses, and lanes
see the values left by the lanes before them in lane order.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from kiln.ir.types import scalar_of

from .arith import BOOL_BINARY, INT_BINARY
from .convert import float_op
from .errors import OpFault


def _pointee(op, i=0):
    return scalar_of(op.operands[i].type).element_ty


def _storage(elem) -> np.dtype:
    # int1 lives in memory as one byte, 0 or 1.
    return np.dtype(np.uint8) if elem.is_bool() else elem.to_numpy()


@contextmanager
def _naming_lanes(lanes: np.ndarray, shape):
    """Add the block index of a faulting lane; `lanes` are the flat lane numbers of the
    addresses in the access."""
    try:
        yield
    except OpFault as e:
        if e.position is None or not shape:
            raise
        index = np.unravel_index(int(lanes[e.position]), shape)
        raise OpFault(f"{e} (lane {', '.join(str(int(i)) for i in index)})") from None


def _read(ctx, addrs, elem, access, lanes, shape):
    with _naming_lanes(lanes, shape):
        values = ctx.memory.read(addrs, _storage(elem), access)
    return values != 0 if elem.is_bool() else values


def _write(ctx, addrs, values, elem, access, lanes, shape):
    with _naming_lanes(lanes, shape):
        ctx.memory.write(addrs, np.asarray(values).astype(_storage(elem)), access)


def _flat(x, shape):
    return np.broadcast_to(x, shape).reshape(-1)


def addptr(ctx, op, ptr, offset):
    size = _pointee(op).itemsize
    step = offset.astype(np.int64) * np.int64(size)  # wraps like 64-bit pointer math
    return ptr + step.astype(np.uint64)


def load(ctx, op, ptr, mask=None, other=None):
    elem = _pointee(op)
    if mask is None:
        lanes = np.arange(ptr.size)
        return _read(ctx, ptr.reshape(-1), elem, "load", lanes, ptr.shape).reshape(ptr.shape)
    active = _flat(mask, ptr.shape)
    if other is None:
        out = np.zeros(active.shape, elem.to_numpy())
    else:
        out = _flat(other, ptr.shape).copy()
    lanes = np.flatnonzero(active)
    if lanes.size:
        out[lanes] = _read(ctx, ptr.reshape(-1)[lanes], elem, "load", lanes, ptr.shape)
    return out.reshape(ptr.shape)


def store(ctx, op, ptr, value, mask=None):
    elem = _pointee(op)
    lanes = np.arange(ptr.size) if mask is None else np.flatnonzero(_flat(mask, ptr.shape))
    if lanes.size:
        values = _flat(value, ptr.shape)[lanes]
        _write(ctx, ptr.reshape(-1)[lanes], values, elem, "store", lanes, ptr.shape)


# --- atomics -------------------------------------------------------------------------------
def occurrence_rank(addrs: np.ndarray) -> np.ndarray:
    """For each lane, how many earlier lanes use the same address."""
    n = len(addrs)
    order = np.argsort(addrs, kind="stable")
    ordered = addrs[order]
    starts = np.ones(n, bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - group_start
    return rank


def _atomic(ctx, elem, ptr, active, operands, update, access):
    """Apply `update(old, *operands) -> new` at every active lane's address; the old values."""
    old = np.zeros(ptr.size, elem.to_numpy())
    lanes = np.flatnonzero(active)
    if lanes.size:
        addrs = ptr.reshape(-1)[lanes]
        args = [_flat(v, ptr.shape)[lanes] for v in operands]
        rank = occurrence_rank(addrs)
        for k in range(int(rank.max()) + 1):
            pick = np.flatnonzero(rank == k)
            current = _read(ctx, addrs[pick], elem, access, lanes[pick], ptr.shape)
            old[lanes[pick]] = current
            new = update(current, *(a[pick] for a in args))
            _write(ctx, addrs[pick], new, elem, access, lanes[pick], ptr.shape)
    return old.reshape(ptr.shape)


def _rmw_update(kind, elem):
    if kind == "xchg":
        return lambda old, value: value
    if elem.is_floating():
        fn = {"add": np.add, "max": np.maximum, "min": np.minimum}[kind]
        return lambda old, value: float_op(fn, old.dtype, old, value)
    table = BOOL_BINARY if elem.is_bool() else INT_BINARY
    return table[kind]


def atomic_rmw(ctx, op, ptr, value, mask):
    elem = _pointee(op)
    update = _rmw_update(op.attrs["kind"], elem)
    return _atomic(ctx, elem, ptr, _flat(mask, ptr.shape), [value], update, f"atomic_{op.attrs['kind']}")


def _same_bits(a, b):
    if a.dtype == np.bool_:
        return a == b
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    return np.asarray(a).view(unsigned) == np.asarray(b).view(unsigned)


def atomic_cas(ctx, op, ptr, expected, value):
    elem = _pointee(op)
    update = lambda old, want, new: np.where(_same_bits(old, want), new, old)  # noqa: E731
    return _atomic(ctx, elem, ptr, np.ones(ptr.size, bool), [expected, value], update, "atomic_cas")
