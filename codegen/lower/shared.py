"""Moving block elements between threads through shared memory.

`exchange` is the one mechanism: each source writes its registers at flat positions
computed from their logical indices, a barrier, then each destination reads the flat
positions it needs. Layout conversion, reshape, permute, join, split and cat are all
an exchange with a different index map.
"""
from __future__ import annotations

from kiln.ir.types import scalar_of, shared_type

from . import stmatrix
from .types import I32, reg_type
from ..scratch_bytes import stored_shape


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


def swizzled_scratch(t, stored):
    """The tile type a conversion of block type `t` by stmatrix stores into where its rows are
    narrower than the banks' 128 bytes (32 or 64): unswizzled, a matrix's 8 rows, 16 bytes each,
    would share 4 banks four or two at a time (fla's fwd_h: 64-byte rows, 4 wavefronts a matrix);
    swizzled in 16-byte units they take every bank once, and the reads stay 16-byte runs. Else None
    (rows of 128 bytes and more are padded instead: `stored`)."""
    shape = tuple(t.shape)
    row_bytes = shape[-1] * scalar_of(t).itemsize
    if len(shape) != 2 or tuple(stored) != shape or row_bytes not in (32, 64):
        return None
    return shared_type(scalar_of(t), shape, row_bytes, (1, 0))


def convert(lw, regs, src, dst, t):
    shape = tuple(t.shape)
    elem_ty = reg_type(scalar_of(t))
    es = elem_bytes(elem_ty)
    stored = stored_shape(src, dst, shape, es, lw.num_warps)

    def padded(idx):
        return idx, stored
    total = 1
    for n in stored:
        total *= n
    groups = stmatrix.usable(lw, src, shape, es) if stored[-1] * es % 16 == 0 else None
    if groups is None:
        (out,) = exchange(lw, elem_ty, total, [(regs, flats_of(lw, src, shape, padded))],
                          [flats_of(lw, dst, shape, padded)])
        return out
    # a 16-bit accumulator: four 8x8 matrices a store
    base = lw.smem(total * es)
    tile = swizzled_scratch(t, stored)
    if tile is not None:
        from .wgmma import load_tile, store_tile
        store_tile(lw, regs, src, t, base, tile)
        lw.barrier()
        return load_tile(lw, base, tile, dst, t)
    start = lw.b.ptrtoint(base, I32)
    stmatrix.store(lw, regs, lw.indices(src, shape), groups, elem_ty,
                   lambda row, col: lw.b.add(start, lw.b.shl(lw.flat_index((row, col), stored), lw.i32(1))), src, shape)
    lw.barrier()
    return load_elements(lw, base, elem_ty, flats_of(lw, dst, shape, padded))


