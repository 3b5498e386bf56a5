"""sm_90a: a store of a 2-D block through a tensor descriptor (both bounds of both dims
masked, as `desc.store` spells it) becomes a TMA store: the block goes to a swizzled shared
tile, then thread 0 copies the tile to global memory with `cp.async.bulk.tensor`, which
writes whole lines and drops what falls past the tensor's extents, exactly as the mask does.

The pointer store of the same block writes each thread's elements one by one wherever the
mask may change at any element (an extent read from memory: tutorial 08's grouped GEMM),
two bytes per instruction across eight rows. What is proved, with pointer_tma's forms:
the address is base + X_1 + s * X_0 (a 16-byte aligned base, a row stride of 16-byte
multiples), X_d = a_d + idx_d (a_1 a 16-byte multiple: TMA faults on a box that starts
between), and the mask is exactly `X_d >= 0` and `X_d < E_d` for both
dims. The map is derived from the arguments by the launcher where base, stride and extents
are arguments, else made by the kernel (`tensormap_create`). TMA stores take no negative
start: where a start is not proved non-negative the store is kept behind an `if` for
those programs.

    %tile = local_alloc : smem<64x128xfp16:swizzle128:order1.0>
    local_store %value, %tile ; fence_async_shared ; barrier
    tma_store %map, %tile, %row, %col       // thread 0: box copies, commit, wait until read
    barrier                                  // the tile's bytes may be reused

Stores in the body of a loop that pipelines dots keep their pointers (their tile would
share the SM's shared memory with the rings).
"""
from __future__ import annotations

from kiln.ir.core import Block, Operation
from kiln.ir.types import block_type, int1, int32, scalar_of, shared_type, tensormap

from . import affine
from .pointer_tma import (base_and_offset, bound_dim, create_map, emit_poly, from_arguments, hinted_divisors,
                          inner_start_aligned, mask_terms, nonnegative, split_strided)
from .smem_plan import enabled

name = "tma_store"


def apply(fn, ctx) -> None:
    if not enabled(ctx):
        return
    divisors = hinted_divisors(fn)
    forms = affine.Forms()
    for store in [op for op in fn.walk() if op.name == "store" and len(op.operands) == 3 and "sem" not in op.attrs]:
        box = _StoreBox.prove(store, fn, forms, divisors)
        if box is not None and (fn.attrs.get("derived_args", 1) != 0 or not box.host(fn)):
            box.rewrite(fn, ctx)


def tile_type(t):
    """The swizzled shared tile a TMA store copies block type `t` from, or None where TMA
    takes no such box (rows under 32 bytes, more than 256 rows, bools, pointers)."""
    elem = scalar_of(t)
    if elem.name == "int1" or elem.is_ptr():  # bools are stored as bytes; TMA moves no pointers
        return None
    swizzle = min(128, t.shape[1] * elem.itemsize)
    if swizzle < 32 or t.shape[0] > 256:
        return None
    return shared_type(elem, t.shape, swizzle, (1, 0))


class _StoreBox:
    def __init__(self, store, base, stride, starts, extents, tile, forms):
        self.store, self.base, self.stride, self.starts, self.extents = store, base, stride, starts, extents
        self.tile, self.forms = tile, forms

    @classmethod
    def prove(cls, store, fn, forms, divisors):
        ptr, value, mask = store.operands
        t = value.type
        if not isinstance(t, block_type) or len(t.shape) != 2 or _in_pipelined_loop(store):
            return None
        tile = tile_type(t)
        if tile is None:
            return None
        found = base_and_offset(ptr, forms)
        if found is None:
            return None
        base, poly = found
        split = split_strided(poly, fn, base, forms, divisors)
        if split is None or split[2]:  # no wrapped dims
            return None
        stride, starts, _ = split
        terms = mask_terms(mask, forms)
        if not terms:
            return None
        extents, floored = [None, None], set()
        for term in terms:
            if bound_dim(term, starts, {}, extents, forms, store, floored) is None:
                return None
        if floored != {0, 1} or None in extents:
            return None
        if any(a[0] != "v" or forms.values[a[1]].type != int32 for c in starts.values() for a in affine.atoms_of(c)):
            return None
        if not inner_start_aligned(starts[1], base.type.element_ty.itemsize, fn, forms, divisors):
            return None
        return cls(store, base, stride, starts, extents, tile, forms)

    def host(self, fn) -> bool:
        return from_arguments(fn, self.base, self.stride, self.extents)

    def rewrite(self, fn, ctx) -> None:
        store, loc = self.store, self.store.loc
        block = store.parent
        before: list[Operation] = []

        def emit(op_name, operands, t, **attrs):
            op = Operation(op_name, operands, [t], attrs, loc=loc)
            before.append(op)
            return op.results[0]

        starts = [emit_poly(self.starts[d], None, self.forms, emit) for d in range(2)]
        box = self.tile.tma_box()
        host = self.host(fn)
        if host:
            index = fn.args.index
            tmap = fn.body.add_arg(tensormap)
            fn.arg_names.append(f"{fn.arg_names[index(self.base)]}.tma_store")
            fn.arg_attrs.append({"tma_of": [index(self.base), index(self.extents[1]), index(self.extents[0]),
                                            index(self.stride)], "tma_box": list(box)})
        else:
            tmap = create_map(fn, store, self.base, self.extents, self.stride, loc, box)
        known = {*self.extents, self.stride} if host else set()
        copy = Block()
        tile = Operation("local_alloc", [], [self.tile], loc=loc)
        for op in (tile, Operation("local_store", [store.operands[1], tile.results[0]], loc=loc),
                   Operation("fence_async_shared", loc=loc), Operation("barrier", loc=loc),
                   Operation("tma_store", [tmap, tile.results[0], *starts], loc=loc), Operation("barrier", loc=loc)):
            copy.append(op)
        at = block.ops.index(store)
        if all(nonnegative(self.starts[d], self.forms, known) for d in range(2)):
            block.ops[at:at + 1] = before + copy.ops
            for op in before + copy.ops:
                op.parent = block
            return
        # a negative start (rows before the tensor, masked off) is no TMA store: those
        # programs keep the pointer store
        zero = emit("constant", [], int32, value=0)
        ok = emit("and", [emit("cmp", [starts[0], zero], int1, pred="ge"),
                          emit("cmp", [starts[1], zero], int1, pred="ge")], int1)
        copy.append(Operation("yield", loc=loc))
        kept = Block()
        block.ops.remove(store)
        kept.append(store)
        kept.append(Operation("yield", loc=loc))
        branch = Operation("if", [ok], [], regions=[copy, kept], loc=loc)
        block.ops[at:at] = before + [branch]
        for op in before + [branch]:
            op.parent = block


def _in_pipelined_loop(op) -> bool:
    """Is `op` in the body of a loop whose dots run on rings (the body issues them itself)?"""
    node = op.parent
    while node is not None and isinstance(node.parent, Operation):
        loop = node.parent
        if loop.name == "for" and any(o.name in ("warp_group_dot", "mma_dot") for o in node.ops):
            return True
        node = loop.parent
    return False
