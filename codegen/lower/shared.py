"""Moving block elements between threads through shared memory.

`exchange` is the one mechanism: each source writes its registers at flat positions
computed from their logical indices, a barrier, then each destination reads the flat
positions it needs. Layout conversion, reshape, permute, join, split and cat are all
an exchange with a different index map.
"""
from __future__ import annotations

import functools

import numpy as np

from kiln.ir.types import scalar_of

from kiln.ir import layout as lay
from .types import reg_type

BANKS, BANK_BYTES = 32, 4
ROW_PAD_BYTES = 16  # keeps every row 16-byte aligned, so vector accesses stay vectors


def store_elements(lw, base, elem_ty, regs, flats, byte_offset=0):
    for r, f in zip(regs, flats):
        lw.b.store(r, lw.smem_ptr(base, elem_ty, f, byte_offset))


def load_elements(lw, base, elem_ty, flats, byte_offset=0):
    return [lw.b.load(lw.smem_ptr(base, elem_ty, f, byte_offset), typ=elem_ty) for f in flats]


def elem_bytes(elem_ty) -> int:
    from .types import GLOBAL_PTR
    if elem_ty == GLOBAL_PTR:
        return 8
    return max(1, elem_ty.width // 8) if hasattr(elem_ty, "width") else {"half": 2, "bfloat": 2, "float": 4, "double": 8}[str(elem_ty)]


def exchange(lw, elem_ty, total: int, writes, reads):
    """writes: [(regs, flat indices)], reads: [flat indices] -> [registers per read]."""
    base = lw.smem(total * elem_bytes(elem_ty))
    for regs, flats in writes:
        store_elements(lw, base, elem_ty, regs, flats)
    lw.barrier()
    return [load_elements(lw, base, elem_ty, flats) for flats in reads]


def flats_of(lw, layout, shape, index_map=None):
    """Flat row-major positions of each register; `index_map` maps a logical index first."""
    out = []
    for idx in lw.indices(layout, shape):
        idx, target_shape = index_map(idx) if index_map else (idx, shape)
        out.append(lw.flat_index(idx, target_shape))
    return out


def convert(lw, regs, src, dst, t):
    shape = tuple(t.shape)
    elem_ty = reg_type(scalar_of(t))
    stored = stored_shape(src, dst, shape, elem_bytes(elem_ty), lw.num_warps)

    def padded(idx):
        return idx, stored
    total = 1
    for n in stored:
        total *= n
    (out,) = exchange(lw, elem_ty, total, [(regs, flats_of(lw, src, shape, padded))],
                      [flats_of(lw, dst, shape, padded)])
    return out


def stored_shape(src, dst, shape, es: int, num_warps: int) -> tuple:
    """The scratch tile of a conversion: rows `row_pad` elements apart beyond their length."""
    return shape[:-1] + (shape[-1] + row_pad(src, dst, shape, es, num_warps),)


def conversion_bytes(t, dst, num_warps: int) -> int:
    """Scratch bytes of converting a block of type `t` (its encoding) to layout `dst`."""
    es = elem_bytes(reg_type(scalar_of(t)))
    total = es
    for n in stored_shape(t.encoding, dst, tuple(t.shape), es, num_warps):
        total *= n
    return total


@functools.lru_cache(maxsize=1024)
def row_pad(src, dst, shape, es: int, num_warps: int) -> int:
    """Elements of padding after each row of a conversion's scratch tile: 16 bytes where
    that makes fewer shared-memory wavefronts than none (rows whose length is a multiple
    of the 128-byte bank period all start in bank 0, so an accumulator layout, writing 8
    rows at once, conflicts 8 ways), else 0."""
    if len(shape) < 2 or (shape[-1] * es) % (BANKS * BANK_BYTES) or ROW_PAD_BYTES % es:
        return 0
    pad = ROW_PAD_BYTES // es
    if wavefronts(src, dst, shape, es, pad, num_warps) < wavefronts(src, dst, shape, es, 0, num_warps):
        return pad
    return 0


def wavefronts(src, dst, shape, es: int, pad: int, num_warps: int) -> int:
    """Shared-memory wavefronts of warp 0 writing `src` and reading `dst` with rows padded by
    `pad` elements: per register, the most distinct 4-byte words any one bank serves."""
    row = shape[-1] + pad
    total = 0
    for layout in (src, dst):
        idx = _warp0_indices(layout, shape, num_warps)  # [thread, register, dim]
        flat = np.zeros(idx.shape[:2], np.int64)
        for d in range(len(shape) - 1):
            flat = flat * shape[d] + idx[:, :, d]
        words = np.sort((flat * row + idx[:, :, -1]) * es // BANK_BYTES, axis=0)  # each register's column
        distinct = np.ones(words.shape, bool)
        distinct[1:] = words[1:] != words[:-1]
        registers = np.broadcast_to(np.arange(words.shape[1]), words.shape)
        served = np.bincount((registers * BANKS + words % BANKS)[distinct], minlength=words.shape[1] * BANKS)
        total += int(served.reshape(words.shape[1], BANKS).max(axis=1).sum())
    return total


@functools.lru_cache(maxsize=256)
def _warp0_indices(layout, shape, num_warps: int) -> np.ndarray:
    """The logical indices of warp 0's registers, [thread, register, dim] (read-only: cached)."""
    idx = np.array(lay.thread_elements(layout, shape, num_warps, threads=32), np.int64)
    idx.flags.writeable = False
    return idx
