"""`kiln.tools.tensor_descriptor.TensorDescriptor`: a host-side tensor descriptor argument.

Passed to a kernel, it arrives as a device-side descriptor (what `tl.make_tensor_descriptor`
returns). kiln specializes it as its pieces: the base pointer (dtype and 16-byte
alignment), the shape as int32 and the strides as int64 runtime arguments, a TMA map (128
bytes, encoded at launch with the box and swizzle the compiled kernel reads), and the
block shape and padding as compile-time constants. `round_f32_to_tf32=True` (Triton 3.9's, fp32
only) makes the kernel's loads through it round each value to tf32, as a TMA load through a
TFLOAT32 map does; kiln specializes on it and rounds in the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def element_strides(tensor) -> list[int]:
    """The strides of a torch tensor or a NumPy array, in elements."""
    if isinstance(tensor, np.ndarray):
        return [s // tensor.itemsize for s in tensor.strides]
    return list(tensor.stride())


@dataclass
class TensorDescriptor:
    base: Any
    shape: list
    strides: list
    block_shape: list
    padding: str = "zero"
    round_f32_to_tf32: bool = False

    def __post_init__(self):
        from kiln.specialize import pointer_info
        self.shape, self.strides = [int(d) for d in self.shape], [int(s) for s in self.strides]
        self.block_shape = [int(d) for d in self.block_shape]
        # Triton's exception types (code written against it catches them): AssertionError for the
        # layout, ValueError for a block size that is not a power of two; raised, not asserted, so
        # that `python -O` keeps them
        rank = len(self.shape)
        if not 1 <= rank <= 5 or len(self.strides) != rank or len(self.block_shape) != rank:
            raise AssertionError(f"rank mismatch: a tensor descriptor needs 1 to 5 dimensions and one stride and block "
                                 f"size per dimension: shape {self.shape}, strides {self.strides}, "
                                 f"block_shape {self.block_shape}")
        info = pointer_info(self.base)
        if info is None:
            raise TypeError(f"a tensor descriptor's base must be a tensor or array, not {type(self.base).__name__}")
        elem, address = info
        if address % 16:
            raise AssertionError("base must be 16-byte aligned")
        for i, d in enumerate(self.block_shape):
            if not _is_power_of_two(d):
                raise ValueError(f"block_shape {self.block_shape}: Shape element {i} must be a power of 2, not {d}")
        elem_bytes = elem.primitive_bitwidth // 8
        if any(s * elem_bytes % 16 for s in self.strides[:-1]):
            raise AssertionError(f"strides {self.strides}: strides must be 16-byte aligned (every stride but the "
                                 f"last a multiple of 16 bytes)")
        if any(d <= 0 for d in self.shape):
            raise AssertionError(f"shape {self.shape}: shape must be positive in every dimension")
        if self.strides[-1] != 1:
            raise AssertionError(f"Last dimension must be contiguous, not stride {self.strides[-1]}")
        if self.padding not in ("zero", "nan"):
            raise AssertionError(f"Illegal value for padding: {self.padding!r} (must be 'zero' or 'nan')")
        if self.padding == "nan" and not elem.is_floating():
            raise AssertionError("padding='nan' needs a floating-point tensor")
        if self.round_f32_to_tf32 and elem.name != "fp32":
            raise ValueError(f"round_f32_to_tf32 needs a float32 tensor, not {elem.name}")
        self._elem, self._aligned = elem, True

    @staticmethod
    def from_tensor(tensor: Any, block_shape, padding="zero", round_f32_to_tf32=False) -> "TensorDescriptor":
        """A descriptor of the whole of `tensor` (a torch tensor or a NumPy array)."""
        return TensorDescriptor(tensor, list(tensor.shape), element_strides(tensor), list(block_shape), padding,
                                round_f32_to_tf32)

    def spec_key(self):
        """What a kernel's specialization reads of this argument."""
        return ("tensor_descriptor", self._elem.name, tuple(self.block_shape), self.padding, len(self.shape),
                self.shape_multiples_of_16(), bool(self.round_f32_to_tf32))

    def shape_multiples_of_16(self) -> tuple:
        """Per dimension, whether its size is a multiple of 16: specialized on, as Triton does
        for integer arguments, so that bounds masks keep whole 16-byte runs together."""
        return tuple(d % 16 == 0 for d in self.shape)

    def launch_pieces(self) -> list:
        """The runtime arguments it becomes: base, shape..., strides..., and itself, which
        the launcher encodes as the TMA map the kernel expects (kiln.runtime.tensormap)."""
        return [self.base, *self.shape, *self.strides, self]
