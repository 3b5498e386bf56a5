"""The interpreter's view of global memory: the byte spans of the kernel's arguments.

Every pointer argument contributes the span of bytes of the allocation under it (a tensor's storage);
overlapping or touching spans (one storage passed twice, views of one buffer) merge into
one. An access maps each address to its span with one `searchsorted`, checks that the
whole element lies inside and is naturally aligned, and reads or writes through a dtype
view of that span, so kernels write straight into the caller's memory and can never
touch bytes outside what they were given, or outside the live tensors that addresses they
loaded from memory point into (kiln.interpret.live_buffers).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from .errors import OpFault


def byte_span(address: int, shape, byte_strides, itemsize: int) -> tuple[int, int]:
    """[lo, hi) of the bytes an array with this layout touches (empty when it has no elements)."""
    if any(n == 0 for n in shape):
        return address, address
    lo = hi = address
    for n, stride in zip(shape, byte_strides):
        reach = (n - 1) * stride
        if reach < 0:
            lo += reach
        else:
            hi += reach
    return lo, hi + itemsize


@dataclass
class Span:
    lo: int
    hi: int
    labels: list[str] = field(default_factory=list)
    owners: list = field(default_factory=list)  # keeps the memory alive while we hold views
    writable: bool = True  # False if any array over these bytes is read-only (bytes, mmap 'r')


class Memory:
    """The registered spans of one launch; `read`/`write` take 1-D arrays of uint64 addresses.

    `find` (addresses -> [(lo, hi, owner)]) names live buffers outside the registered spans that
    hold addresses a kernel uses (pointers it loaded from memory); they join the spans on first use.
    """

    def __init__(self, find=None):
        self._find = find
        self._pending: list[Span] = []
        self.spans: list[Span] = []
        self._starts = np.zeros(0, np.uint64)
        self._ends = np.zeros(0, np.uint64)
        self._bytes: list[np.ndarray] = []
        self._views: dict[tuple[int, np.dtype], tuple[np.ndarray, int]] = {}

    def add(self, lo: int, hi: int, label: str, owner, writable: bool = True) -> None:
        if hi > lo:
            self._pending.append(Span(lo, hi, [label], [owner], writable))

    def seal(self) -> None:
        """Merge the spans added so far and map their bytes; call once before any access."""
        merged: list[Span] = []
        for span in sorted(self._pending, key=lambda s: s.lo):
            if merged and span.lo <= merged[-1].hi:
                last = merged[-1]
                last.hi = max(last.hi, span.hi)
                last.labels += span.labels
                last.owners += span.owners
                last.writable &= span.writable
            else:
                merged.append(Span(span.lo, span.hi, list(span.labels), list(span.owners), span.writable))
        self.spans = merged
        self._starts = np.array([s.lo for s in merged], np.uint64)
        self._ends = np.array([s.hi for s in merged], np.uint64)
        self._bytes = [np.frombuffer((ctypes.c_ubyte * (s.hi - s.lo)).from_address(s.lo), np.uint8)
                       for s in merged]
        self._views.clear()

    # --- address translation -----------------------------------------------------------
    def locate(self, addrs: np.ndarray, itemsize: int, access: str) -> np.ndarray:
        """The span index of each address; faults on the first address that is out of
        bounds or misaligned."""
        addrs = np.asarray(addrs, np.uint64)
        inside, safe = self._inside(addrs, itemsize)
        if not inside.all() and self._admit(addrs[~inside]):
            inside, safe = self._inside(addrs, itemsize)
        if not inside.all():
            k = int(np.argmin(inside))
            bad = int(addrs[k])
            raise OpFault(f"{access} of {itemsize} byte(s) at address {bad:#x} is outside every "
                          f"argument's memory{self._nearest(bad)}", k)
        aligned = addrs % np.uint64(itemsize) == 0
        if not aligned.all():
            k = int(np.argmin(aligned))
            raise OpFault(f"misaligned {access} of {itemsize} byte(s) at address {int(addrs[k]):#x}", k)
        return safe

    def _inside(self, addrs: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
        """Whether each whole element lies in a span, and that span's index (0 where none)."""
        index = np.searchsorted(self._starts, addrs, side="right").astype(np.int64) - 1
        inside = index >= 0
        safe = np.where(inside, index, 0)
        if len(self.spans):
            inside &= addrs <= self._ends[safe] - np.uint64(itemsize)
        else:
            inside[:] = False
        return inside, safe

    def _admit(self, addrs: np.ndarray) -> bool:
        """Register the live buffers that `find` says hold some of `addrs`; whether there were any.
        One that overlaps a registered span is left out: an argument is checked against its own allocation."""
        found = [(lo, hi, owner) for lo, hi, owner in (self._find(addrs) if self._find is not None else [])
                 if not any(span.lo < hi and lo < span.hi for span in self.spans)]
        for lo, hi, owner in found:
            self.add(lo, hi, f"live {type(owner).__name__} at {lo:#x}", owner)
        if found:
            self.seal()
        return bool(found)

    def _nearest(self, addr: int) -> str:
        if addr < 4096:
            return " (null pointer)"
        if not self.spans:
            return " (no memory is registered)"
        span = min(self.spans, key=lambda s: 0 if s.lo <= addr < s.hi else min(abs(addr - s.lo), abs(addr - s.hi)))
        if addr >= span.hi:
            where = f"{addr - span.hi} bytes past the end of"
        elif addr < span.lo:
            where = f"{span.lo - addr} bytes before"
        else:
            where = "straddling the end of"
        return f" ({where} {'/'.join(span.labels)} [{span.lo:#x}, {span.hi:#x}))"

    def _view(self, span: int, dtype: np.dtype) -> tuple[np.ndarray, int]:
        """The span's bytes as `dtype` elements, starting at its first aligned byte."""
        key = (span, dtype)
        if key not in self._views:
            raw = self._bytes[span]
            head = (-self.spans[span].lo) % dtype.itemsize
            count = (len(raw) - head) // dtype.itemsize
            self._views[key] = (raw[head:head + count * dtype.itemsize].view(dtype), head)
        return self._views[key]

    def _indices(self, addrs, span: int, dtype):
        view, head = self._view(span, dtype)
        offsets = addrs - np.uint64(self.spans[span].lo + head)
        return view, (offsets // np.uint64(dtype.itemsize)).astype(np.intp)

    def _groups(self, spans: np.ndarray):
        """(span index, lane selector or None for all lanes) for every span in use."""
        if len(spans) == 0:
            return []
        first = spans[0]
        if (spans == first).all():
            return [(int(first), None)]
        return [(int(s), spans == s) for s in np.unique(spans)]

    # --- access ----------------------------------------------------------------------
    def read(self, addrs: np.ndarray, dtype: np.dtype, access: str = "load") -> np.ndarray:
        addrs = np.asarray(addrs, np.uint64)
        spans = self.locate(addrs, dtype.itemsize, access)
        out = np.empty(addrs.shape, dtype)
        for span, lanes in self._groups(spans):
            picked = addrs if lanes is None else addrs[lanes]
            view, idx = self._indices(picked, span, dtype)
            if lanes is None:
                out[...] = view[idx]
            else:
                out[lanes] = view[idx]
        return out

    def write(self, addrs: np.ndarray, values: np.ndarray, access: str = "store") -> None:
        addrs = np.asarray(addrs, np.uint64)
        values = np.asarray(values)
        spans = self.locate(addrs, values.dtype.itemsize, access)
        for span, lanes in self._groups(spans):
            if not self.spans[span].writable:
                raise OpFault(f"{access} into read-only memory ({'/'.join(self.spans[span].labels)})")
            picked = addrs if lanes is None else addrs[lanes]
            view, idx = self._indices(picked, span, values.dtype)
            view[idx] = values if lanes is None else values[lanes]
