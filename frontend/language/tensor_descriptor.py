"""Tensor descriptors (`tl.make_tensor_descriptor` and host TensorDescriptor arguments).

A descriptor names a strided tensor (base, shape, strides) and the `block_shape` that its
loads and stores move. `desc.load(offsets)` is a block-pointer load with every dimension
bounds-checked, so out-of-bounds elements read as zero (or NaN with padding_option="nan")
and out-of-bounds stores are dropped, exactly what TMA does. A host descriptor also
carries its TMA map (a kernel argument): its loads are `descriptor_load` ops naming the
map and offsets beside that pointer load, so that codegen can copy the block with TMA on
Hopper (kiln.codegen's smem_pipeline); the interpreter and other targets use the pointer
load. Device-side descriptors and all stores stay pointer accesses. A host descriptor made with
`round_f32_to_tf32=True` rounds what its loads read to tf32 in the kernel, as TMA does through
a TFLOAT32 map.
"""
from __future__ import annotations

from . import semantic
from .block_pointer import BlockPointer, load as block_load, store as block_store
from .core import block_type, builtin, float32, int1, int32, int64, tensor, uint32
from .semantic import unwrap

# The elements Triton's descriptor reductions take (those of TMA's reductions): no 64-bit integer add,
# no fp32 min or max, bitwise operations on integers only. fp16/bf16 min and max, which Triton's pointer
# atomics refuse, run as compare-and-swap loops (max.f16 and the like: a NaN loses, as in TMA's reduce).
_REDUCE_ELEMENTS = {
    "add": ("uint32", "int32", "uint64", "fp32", "fp16", "bf16"),
    "min": ("uint32", "int32", "uint64", "int64", "fp16", "bf16"),
    "max": ("uint32", "int32", "uint64", "int64", "fp16", "bf16"),
    "and": ("uint32", "int32", "uint64", "int64"),
    "or": ("uint32", "int32", "uint64", "int64"),
    "xor": ("uint32", "int32", "uint64", "int64"),
}


class TensorDescriptor:
    def __init__(self, base: tensor, shape, strides, block_shape, padding, tensormap=None, round_f32_to_tf32=False):
        # tuples, as Triton's (`desc.strides[:-1] + (1,)` builds another descriptor's strides)
        self.base, self.shape, self.strides = base, tuple(shape), tuple(strides)
        self._block_shape, self.padding = tuple(block_shape), padding
        self.tensormap = tensormap  # a host descriptor's TMA map (a kernel argument), else None
        self.round_f32_to_tf32 = round_f32_to_tf32  # a host descriptor's: its loads round to tf32

    @property
    def dtype(self):
        return self.base.dtype.element_ty

    @property
    def block_shape(self) -> list:
        """The block's shape as a list, as Triton's (`desc.block_shape == [M, N]` holds in a kernel)."""
        return list(self._block_shape)

    @property
    def block_type(self):
        return block_type(self.dtype, self._block_shape)

    def leaves(self) -> list[tensor]:
        return [self.base, *self.shape, *self.strides] + ([self.tensormap] if self.tensormap is not None else [])

    def rebuild(self, leaves) -> "TensorDescriptor":
        n = len(self._block_shape)
        tensormap = leaves[1 + 2 * n] if len(leaves) > 1 + 2 * n else None
        return TensorDescriptor(leaves[0], leaves[1:1 + n], leaves[1 + n:1 + 2 * n], self._block_shape, self.padding,
                                tensormap, self.round_f32_to_tf32)

    def signature(self):
        return ("tensor_descriptor", self._block_shape, self.padding, self.round_f32_to_tf32)

    def _block(self, offsets) -> BlockPointer:
        offsets = unwrap(offsets)
        if not isinstance(offsets, (list, tuple)) or len(offsets) != len(self._block_shape):
            raise ValueError(f"a {len(self._block_shape)}-D tensor descriptor needs {len(self._block_shape)} offsets")
        offsets = [semantic.cast(semantic.to_tensor(o), int32) for o in offsets]
        order = tuple(range(len(self._block_shape) - 1, -1, -1))
        return BlockPointer(self.base, self.shape, self.strides, offsets, self._block_shape, order)

    def _all_dims(self):
        return tuple(range(len(self._block_shape)))

    @builtin
    def load(self, offsets):
        """The block at `offsets`; elements outside the tensor read as the padding (zero or NaN).

        Loaded through pointers; a host descriptor's load also names its TMA map and
        offsets (`descriptor_load`), so that codegen can copy the block with TMA instead."""
        value = block_load(self._block(offsets), self._all_dims(), self.padding, "", "", False)
        if self.tensormap is not None and self.padding == "zero":
            tma_offsets = [semantic.cast(semantic.to_tensor(o), int32) for o in unwrap(offsets)]
            lead = len(self._block_shape) - 2
            if lead <= 0 or any(d != 1 for d in self._block_shape[:lead]):
                lead = 0
            # a 2-D block of a batched (ragged, ...) descriptor is loaded as the 2-D block TMA can copy, given its
            # shape back; the `reshape(BM, BK)` a kernel then writes cancels that one (canonicalize)
            fallback = semantic.reshape(value, self._block_shape[lead:]) if lead else value
            loaded = semantic._emit("descriptor_load", [self.tensormap, *tma_offsets, fallback], fallback.type,
                                    **({"lead_dims": lead} if lead else {}))
            value = semantic.reshape(loaded, self._block_shape) if lead else loaded
        return _rounded_to_tf32(value) if self.round_f32_to_tf32 else value

    @builtin
    def store(self, offsets, value):
        """Store the block `value` at `offsets`; elements outside the tensor are not written."""
        value = semantic.cast(semantic.to_tensor(value), self.dtype)
        return block_store(self._block(offsets), value, self._all_dims(), "", "")

    def _atomic(self, kind, offsets, value):
        if self.dtype.name not in _REDUCE_ELEMENTS[kind]:
            raise TypeError(f"a tensor descriptor's atomic_{kind} does not take {self.dtype.name} "
                            f"(it takes {', '.join(_REDUCE_ELEMENTS[kind])}, as Triton's)")
        ptrs, mask = self._block(offsets).pointers_and_mask(self._all_dims())
        semantic.atomic_rmw(kind, ptrs, value, mask, half_min_max=True)

    @builtin
    def atomic_add(self, offsets, value):
        """Atomically add the block `value` at `offsets` (inside the tensor)."""
        self._atomic("add", offsets, value)

    @builtin
    def atomic_min(self, offsets, value):
        self._atomic("min", offsets, value)

    @builtin
    def atomic_max(self, offsets, value):
        self._atomic("max", offsets, value)

    @builtin
    def atomic_and(self, offsets, value):
        self._atomic("and", offsets, value)

    @builtin
    def atomic_or(self, offsets, value):
        self._atomic("or", offsets, value)

    @builtin
    def atomic_xor(self, offsets, value):
        self._atomic("xor", offsets, value)

    def _rows(self, x_offsets, y_offset):
        """Pointers and in-bounds mask of the rows `x_offsets`, columns y_offset .. + block_shape[1]."""
        if len(self._block_shape) != 2 or self._block_shape[0] != 1:
            raise ValueError(f"gather/scatter need a 2-D descriptor with block_shape [1, N], not {list(self._block_shape)}")
        rows = semantic.to_tensor(x_offsets)
        if len(rows.type.shape) != 1 or not rows.dtype.is_int():
            raise ValueError("gather/scatter need a 1-D integer block of row offsets")
        rows = semantic.expand_dims(semantic.cast(rows, int64), 1)
        cols = semantic.add(semantic.cast(semantic.arange(0, self._block_shape[1]), int64),
                            semantic.cast(semantic.to_tensor(y_offset), int64))
        cols = semantic.expand_dims(cols, 0)
        inside = semantic.logical_and(_within(rows, self.shape[0]), _within(cols, self.shape[1]))
        ptrs = semantic.add(semantic.add(self.base, semantic.mul(rows, self.strides[0])),
                            semantic.mul(cols, self.strides[1]))
        return semantic.broadcast_pair(ptrs, semantic.cast(inside, int1))

    @builtin
    def gather(self, x_offsets, y_offset):
        """Rows `x_offsets` of the tensor, block_shape[1] columns from `y_offset`."""
        ptrs, mask = self._rows(x_offsets, y_offset)
        return semantic.load(ptrs, mask, _padding_value(self), "", "", False)

    @builtin
    def scatter(self, value, x_offsets, y_offset):
        """Store the rows of `value` at rows `x_offsets`, columns from `y_offset`."""
        ptrs, mask = self._rows(x_offsets, y_offset)
        semantic.store(ptrs, value, mask, "", "")


def _within(index, size):
    return semantic.logical_and(semantic.greater_equal(index, 0), semantic.less(index, size))


def _rounded_to_tf32(value: tensor) -> tensor:
    """fp32 values rounded to tf32 (10 mantissa bits, to nearest, ties to even; Inf and NaN kept),
    as a TMA load through a TFLOAT32 map gives them."""
    bits = semantic.cast(value, uint32, bitcast=True)
    bias = semantic.add(semantic.and_(semantic.shr(bits, 13), 1), 0xFFF)  # half an ulp, less where even
    rounded = semantic.and_(semantic.add(bits, bias), 0xFFFFE000)
    special = semantic.equal(semantic.and_(bits, 0x7F800000), 0x7F800000)
    return semantic.cast(semantic.where(special, bits, rounded), float32, bitcast=True)


def _padding_value(desc):
    return float("nan") if desc.padding == "nan" else 0


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero"):
    """A descriptor of the tensor at `base` with `shape` and `strides`, moving `block_shape` blocks."""
    base = semantic.to_tensor(base)
    if not base.dtype.is_ptr() or base.type.shape:
        raise TypeError(f"make_tensor_descriptor needs a scalar pointer as its base, not {base.type}")
    shape, strides = list(unwrap(shape)), list(unwrap(strides))
    block_shape = semantic.check_shape([unwrap(d) for d in unwrap(block_shape)])
    ndim = len(shape)
    if not 1 <= ndim <= 5:
        raise ValueError(f"a tensor descriptor has 1 to 5 dimensions, not {ndim}")
    if len(strides) != ndim or len(block_shape) != ndim:
        raise ValueError(f"shape, strides and block_shape must have one entry per dimension ({ndim}), got "
                         f"{len(strides)} strides and {len(block_shape)} block dimensions")
    elem_bytes = base.dtype.element_ty.primitive_bitwidth // 8
    if block_shape[-1] * elem_bytes < 16:
        raise ValueError(f"Descriptor block shape must have at least 16 bytes in the last dimension, but got "
                         f"{block_shape[-1]} * {elem_bytes} = {block_shape[-1] * elem_bytes} bytes")
    last_stride = unwrap(strides[-1])
    if not isinstance(last_stride, tensor) and last_stride != 1:
        raise ValueError(f"a tensor descriptor's last dimension must be contiguous (stride 1), not {last_stride}")
    padding = unwrap(padding_option)
    desc = descriptor(base, shape, strides, block_shape, padding)
    # What a descriptor promises (TMA needs it, Triton documents it): a 16-byte aligned base and
    # every stride but the last a multiple of 16 bytes. Known here, the block's rows are aligned
    # 16-byte runs for the pointer loads that stand in for TMA (vector loads, cp.async rings).
    desc.base = semantic.hint("multiple_of", desc.base, [16])
    desc.strides = (*[semantic.hint("multiple_of", s, [max(1, 16 // elem_bytes)]) for s in desc.strides[:-1]],
                    desc.strides[-1])
    return desc


def descriptor(base, shape, strides, block_shape, padding="zero") -> TensorDescriptor:
    """A descriptor from its pieces (also how a host TensorDescriptor argument arrives)."""
    if padding not in ("zero", "nan"):
        raise ValueError(f"padding_option must be 'zero' or 'nan', not {padding!r}")
    if padding == "nan" and not base.dtype.element_ty.is_floating():
        raise ValueError("padding_option='nan' needs a floating-point tensor")
    shape = [semantic.cast(semantic.to_tensor(d), int32) for d in shape]
    strides = [semantic.cast(semantic.to_tensor(s), int64) for s in strides]
    return TensorDescriptor(base, shape, strides, block_shape, padding)


class DescriptorArgument:
    """How a host TensorDescriptor kernel argument is specialized: its pieces' (type, attrs), in
    launch order (base, shape..., strides...), and the compile-time block shape and padding;
    which sizes are multiples of 16 is part of the specialization (as for integer arguments)."""

    def __init__(self, elem, rank, block_shape, padding, shape_multiples_of_16=(), round_f32_to_tf32=False):
        from kiln.ir.types import pointer_type, tensormap
        self._block_shape, self.padding = tuple(block_shape), padding
        self.round_f32_to_tf32 = bool(round_f32_to_tf32)
        # what the host TensorDescriptor guarantees (it refuses anything else), as Triton's TMA
        # descriptors require: a 16-byte aligned base, every stride but the last a multiple of
        # 16 bytes, the last stride 1. Known at compile time, they make the block's rows
        # aligned 16-byte runs: vector loads and cp.async, as for a device-side descriptor.
        row_align = max(1, 16 // max(1, elem.primitive_bitwidth // 8))
        sixteens = tuple(shape_multiples_of_16) or (False,) * rank
        # the last piece is the TMA map the launcher encodes (zeros where the kernel reads none)
        self.pieces = ([(pointer_type(elem), {"divisibility": 16})]
                       + [(int32, {"divisibility": 16} if m else {}) for m in sixteens]
                       + [(int64, {"divisibility": row_align})] * (rank - 1) + [(int64, {}), (tensormap, {})])

    def build(self, values) -> TensorDescriptor:
        rank = len(self._block_shape)
        strides = list(values[1 + rank:-2]) + [1]  # the last one is 1 (checked on the host)
        desc = descriptor(values[0], values[1:1 + rank], strides, self._block_shape, self.padding)
        desc.tensormap, desc.round_f32_to_tf32 = values[-1], self.round_f32_to_tf32
        return desc


@builtin
def load_tensor_descriptor(desc, offsets):
    """`desc.load(offsets)`."""
    return desc.load(offsets)


@builtin
def store_tensor_descriptor(desc, offsets, value):
    """`desc.store(offsets, value)`."""
    return desc.store(offsets, value)


tensor_descriptor = TensorDescriptor  # Triton's name for the type
