"""`kiln.reinterpret(tensor, dtype)`: a tensor or array seen as another element type.

Triton's tests pass fp8 and unsigned data this way (`triton.reinterpret(t_uint8,
tl.float8e5)`): the wrapper has the base's memory and shape and reports the kiln dtype,
so the kernel's pointer argument gets that element type.
"""
from __future__ import annotations

import sys

import numpy as np

from kiln.ir.types import dtype as kiln_dtype


class TensorWrapper:
    def __init__(self, base, dtype: kiln_dtype):
        self.base, self.dtype = base, dtype
        self.shape = tuple(base.shape)
        self.device = getattr(base, "device", "cpu")

    @property
    def data(self):
        """The memory seen through the wrapper (torch's `.data` of the base; a NumPy base itself).
        Setting it wraps the tensor given instead, as `t.data = view` does for a torch tensor."""
        return self.base if isinstance(self.base, np.ndarray) else self.base.data

    @data.setter
    def data(self, value):
        if not (isinstance(value, np.ndarray) or hasattr(value, "data_ptr")):
            raise TypeError(f"a TensorWrapper's data is a tensor or an array, not a {type(value).__name__}")
        self.base = value
        self.shape = tuple(value.shape)
        self.device = getattr(value, "device", "cpu")

    def new_empty(self, sizes):
        """An uninitialized tensor of `sizes` like the base (its torch dtype and device), seen as this dtype."""
        if isinstance(self.base, np.ndarray):
            return TensorWrapper(np.empty(sizes, self.base.dtype), self.dtype)
        return TensorWrapper(self.base.new_empty(sizes), self.dtype)

    def new_zeros(self, sizes):
        if isinstance(self.base, np.ndarray):
            return TensorWrapper(np.zeros(sizes, self.base.dtype), self.dtype)
        return TensorWrapper(self.base.new_zeros(sizes), self.dtype)

    def data_ptr(self) -> int:
        return self.base.ctypes.data if isinstance(self.base, np.ndarray) else self.base.data_ptr()

    def element_size(self) -> int:
        return self.base.itemsize if isinstance(self.base, np.ndarray) else self.base.element_size()

    def stride(self, *dim):
        strides = (tuple(s // self.base.itemsize for s in self.base.strides) if isinstance(self.base, np.ndarray)
                   else tuple(self.base.stride()))
        return strides[dim[0]] if dim else strides

    def numel(self) -> int:
        return int(np.prod(self.shape))

    def dim(self) -> int:
        return len(self.shape)

    def size(self, *dim):
        return self.shape[dim[0]] if dim else self.shape

    def cpu(self):
        return self if isinstance(self.base, np.ndarray) else TensorWrapper(self.base.cpu(), self.dtype)

    def to(self, device):
        return TensorWrapper(self.base.to(device), self.dtype)

    def clone(self):
        return TensorWrapper(self.base.copy() if isinstance(self.base, np.ndarray) else self.base.clone(), self.dtype)

    def copy_(self, other):
        source = other.base if isinstance(other, TensorWrapper) else other
        if isinstance(self.base, np.ndarray):
            self.base[...] = source
        else:
            self.base.copy_(source)
        return self

    def __repr__(self):
        return f"TensorWrapper[{self.dtype}]({self.base!r})"

    __str__ = __repr__


def reinterpret(tensor, dtype: kiln_dtype):
    """`tensor` (a torch tensor, NumPy array or wrapper) seen as elements of `dtype`."""
    if isinstance(tensor, TensorWrapper):
        return tensor.base if dtype == getattr(tensor.base, "dtype", None) else TensorWrapper(tensor.base, dtype)
    if not (isinstance(tensor, np.ndarray) or hasattr(tensor, "data_ptr")):
        raise TypeError(f"cannot reinterpret a {type(tensor).__name__}: pass a tensor or an array")
    return TensorWrapper(tensor, dtype)


class MockTensor:
    """A stand-in for a tensor of `dtype` where only its type matters, as Triton's: compiling
    with `kernel.warmup(torch.float32, ..., grid=...)` passes one for each torch dtype given.
    Its address is 0 (so it counts as 16-byte aligned)."""

    @staticmethod
    def wrap_dtypes(args) -> list:
        """`args` with each torch dtype replaced by a MockTensor of it (no torch imported: none is one)."""
        torch_dtype = getattr(sys.modules.get("torch"), "dtype", None)
        if torch_dtype is None:
            return list(args)
        return [MockTensor(a) if type(a) is torch_dtype else a for a in args]

    def __init__(self, dtype, shape=None):
        self.dtype = dtype
        self.shape = [1] if shape is None else shape

    def stride(self):
        strides = [1]
        for size in self.shape[1:]:
            strides.append(strides[-1] * size)
        return tuple(reversed(strides))

    @staticmethod
    def data_ptr():
        return 0

    @property
    def is_cuda(self) -> bool:
        """Where the kernels run: the GPU's memory, or the host's under the interpreter (so a warmup
        with a dtype and a launch with a tensor there make one specialization, as in Triton)."""
        from . import config
        return not config.interpret()

    @staticmethod
    def is_pinned() -> bool:
        return False
