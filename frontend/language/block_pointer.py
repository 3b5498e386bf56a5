"""Block pointers (`tl.make_block_ptr`, `tl.advance`), lowered to pointer blocks and masks.

A block pointer names a `block_shape` window at `offsets` of a strided tensor of `shape`.
kiln keeps it in the frontend: a load or store through it becomes ordinary pointer
arithmetic with a mask for the dimensions in `boundary_check`, so codegen and the
interpreter see only the ops they already know. Inside loops and branches it is carried
as its tensors (base, shape, strides, offsets).
"""
from __future__ import annotations

from kiln.ir.types import block_type, pointer_type

from . import semantic
from .core import builtin, int32, int64, tensor
from .semantic import unwrap


class block_pointer_type(pointer_type):
    """A block pointer's `type` and `dtype`, as Triton's `pointer_type(block_type(...))`: its `element_ty` is
    the block, so `x.to(bp.type.element_ty)` converts to the pointee's element type (a cast takes a block
    type's scalar). Only the frontend sees it: loads and stores go through the base pointer's blocks."""

    __slots__ = ()

    def __init__(self, base: pointer_type, block_shape):
        self.name, self.kind, self.primitive_bitwidth, self.signed = (
            f"ptr<{block_type(base.element_ty, block_shape)}>", "ptr", 64, False)
        self.element_ty_ = block_type(base.element_ty, block_shape)
        self.address_space, self.const = base.address_space, base.const

    def __reduce__(self):
        return block_pointer_type, (pointer_type(self.element_ty_.element_ty), self.element_ty_.shape)

    def __repr__(self):
        return f"pointer<{self.element_ty_!r}>"


class BlockPointer:
    def __init__(self, base: tensor, shape, strides, offsets, block_shape, order):
        self.base, self.shape, self.strides, self.offsets = base, list(shape), list(strides), list(offsets)
        self.block_shape, self.order = tuple(block_shape), tuple(order)

    @property
    def type(self):
        return block_pointer_type(self.base.dtype, self.block_shape)

    @property
    def dtype(self):
        return self.type

    @property
    def element_ty(self):
        """The pointee's scalar type."""
        return self.base.dtype.element_ty

    def advance(self, offsets):
        """`ptr.advance(offsets)`: Triton's method form of tl.advance."""
        return advance(self, offsets)

    def leaves(self) -> list[tensor]:
        return [self.base, *self.shape, *self.strides, *self.offsets]

    def rebuild(self, leaves) -> "BlockPointer":
        n = len(self.block_shape)
        return BlockPointer(leaves[0], leaves[1:1 + n], leaves[1 + n:1 + 2 * n], leaves[1 + 2 * n:1 + 3 * n],
                            self.block_shape, self.order)

    def signature(self):
        return ("block_ptr", self.block_shape, self.order)

    def pointers_and_mask(self, boundary_check):
        """The block of element pointers, and the in-bounds mask of the checked dimensions (or None)."""
        rank = len(self.block_shape)
        checks = sorted({int(unwrap(d)) for d in (unwrap(boundary_check) or ())})
        for d in checks:
            if not 0 <= d < rank:
                raise ValueError(f"boundary_check dimension {d} is out of range for a {rank}-D block pointer")
        ptrs, mask = self.base, None
        for d, size in enumerate(self.block_shape):
            index = semantic.add(semantic.cast(semantic.arange(0, size), int64), semantic.cast(self.offsets[d], int64))
            index = _along(index, d, rank)
            ptrs = semantic.add(ptrs, semantic.mul(index, self.strides[d]))
            if d in checks:
                inside = semantic.logical_and(semantic.greater_equal(index, 0), semantic.less(index, self.shape[d]))
                mask = inside if mask is None else semantic.logical_and(mask, inside)
        ptrs = semantic.broadcast_to(ptrs, self.block_shape)
        return ptrs, (semantic.broadcast_to(mask, self.block_shape) if mask is not None else None)


def _along(index: tensor, dim: int, rank: int) -> tensor:
    """A 1-D index block placed on dimension `dim` of a rank-`rank` block."""
    other = [d for d in range(rank) if d != dim]
    return semantic.expand_dims(index, other) if other else index


def _int_list(values, t, what):
    values = unwrap(values)
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"make_block_ptr's {what} must be a list or tuple")
    return [semantic.cast(semantic.to_tensor(v), t) for v in values]


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order):
    """A pointer to the `block_shape` block at `offsets` of a tensor of `shape` and `strides`."""
    base = semantic.to_tensor(base)
    if not base.dtype.is_ptr() or base.type.shape:
        raise TypeError(f"make_block_ptr needs a scalar pointer as its base, not {base.type}")
    block_shape = semantic.check_shape([unwrap(d) for d in unwrap(block_shape)])
    order = tuple(int(unwrap(o)) for o in unwrap(order))
    shape, strides = _int_list(shape, int64, "shape"), _int_list(strides, int64, "strides")
    offsets = _int_list(offsets, int32, "offsets")
    rank = len(block_shape)
    if not (len(shape) == len(strides) == len(offsets) == rank) or sorted(order) != list(range(rank)):
        raise ValueError("make_block_ptr: shape, strides, offsets, block_shape and order must agree in length, "
                         "and order must be a permutation")
    return BlockPointer(base, shape, strides, offsets, block_shape, order)


@builtin
def advance(base, offsets):
    """The block pointer `base` moved by `offsets` elements along each dimension."""
    if not isinstance(base, BlockPointer):
        raise TypeError("advance needs a block pointer made by tl.make_block_ptr")
    deltas = _int_list(offsets, int32, "offsets")
    if len(deltas) != len(base.offsets):
        raise ValueError(f"advance needs {len(base.offsets)} offsets, got {len(deltas)}")
    moved = [semantic.add(o, d) for o, d in zip(base.offsets, deltas)]
    return BlockPointer(base.base, base.shape, base.strides, moved, base.block_shape, base.order)


def load(bp: BlockPointer, boundary_check, padding_option, cache_modifier, eviction_policy, volatile):
    padding_option = unwrap(padding_option) or ""
    if padding_option not in ("", "zero", "nan"):
        raise ValueError(f"padding_option must be 'zero' or 'nan', not {padding_option!r}")
    ptrs, mask = bp.pointers_and_mask(boundary_check)
    other = None
    if mask is not None:
        elem = bp.element_ty
        if padding_option == "nan" and not elem.is_floating():
            raise ValueError("padding_option='nan' needs a floating-point block pointer")
        other = float("nan") if padding_option == "nan" else 0
    return semantic.load(ptrs, mask, other, cache_modifier, eviction_policy, volatile)


def store(bp: BlockPointer, value, boundary_check, cache_modifier, eviction_policy):
    ptrs, mask = bp.pointers_and_mask(boundary_check)
    value = semantic.to_tensor(value)
    if value.type.shape and tuple(value.type.shape) != bp.block_shape:
        raise ValueError(f"storing a block of shape {list(value.type.shape)} through a block pointer of "
                         f"block_shape {list(bp.block_shape)}")
    return semantic.store(ptrs, value, mask, cache_modifier, eviction_policy)
