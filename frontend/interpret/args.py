"""Turn the caller's arguments into the kernel's initial values and registered memory.

A pointer argument is a NumPy array, a PyTorch CPU tensor (torch is never imported
here: tensors are recognised by their methods), anything with `__array_interface__`, a
raw integer address or None (the null pointer). Its value in the kernel is the address
of its first element; the bytes of the allocation under it are registered with `Memory`. Scalar arguments
are converted to the argument's type with wraparound, as a C cast would.
"""
from __future__ import annotations


import numpy as np

from kiln.ir.types import dtype as ir_dtype, half_float_bits, tensormap

from .convert import scalar_to
from .errors import InterpreterError
from .live_buffers import buffers_holding, storage_span
from .memory import Memory, byte_span


def _is_torch_tensor(obj) -> bool:
    return hasattr(obj, "data_ptr") and hasattr(obj, "element_size") and hasattr(obj, "stride")


def register_buffer(memory: Memory, obj, label: str) -> int:
    """Register the bytes of an array-like `obj` and return its data address. A view registers the whole
    allocation under it (a tensor's storage, the array it was sliced from), as a GPU kernel may touch all of
    it: libraries allocate rounded up and pass a slice (triton_kernels' row sums add into 32 columns of a
    slice of fewer); past the allocation is still a fault."""
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise InterpreterError(f"{label}: the interpreter needs CPU tensors, got one on {obj.device}")
        size = obj.element_size()
        address = obj.data_ptr()
        lo, hi = _with_allocation(byte_span(address, tuple(obj.shape), [s * size for s in obj.stride()], size),
                                  storage_span(obj))
    else:
        if not isinstance(obj, np.ndarray):
            obj = np.asarray(obj)  # no copy for objects exposing __array_interface__
        address, readonly = obj.__array_interface__["data"]
        lo, hi = _with_allocation(byte_span(address, obj.shape, obj.strides, obj.itemsize), _root_bounds(obj))
        if readonly or not obj.flags.writeable:
            memory.add(lo, hi, label, obj, writable=False)
            return address
    memory.add(lo, hi, label, obj)
    return address


def _with_allocation(span: tuple[int, int], allocation: tuple[int, int] | None) -> tuple[int, int]:
    if allocation is None or span[0] == span[1]:
        return span
    return min(span[0], allocation[0]), max(span[1], allocation[1])


def _root_bounds(array: np.ndarray) -> tuple[int, int] | None:
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is array:
        return None
    return byte_span(root.__array_interface__["data"][0], root.shape, root.strides, root.itemsize)


def pointer_value(memory: Memory, obj, label: str) -> int:
    if obj is None:
        return 0
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return int(obj)
    if hasattr(obj, "data_ptr") and getattr(obj, "base", None) is not None and not isinstance(obj, np.ndarray):
        register_buffer(memory, obj.base, label)  # a reinterpreting wrapper (kiln.reinterpret) around a tensor
        return int(obj.data_ptr())
    if hasattr(obj, "__cuda_array_interface__") and not isinstance(obj, np.ndarray) and not _is_torch_tensor(obj):
        raise InterpreterError(f"{label}: the interpreter cannot read GPU memory")
    if not _is_torch_tensor(obj) and not isinstance(obj, np.ndarray) and not hasattr(obj, "__array_interface__"):
        raise InterpreterError(f"{label}: a pointer argument must be an array, a tensor, an address "
                               f"or None, not {type(obj).__name__}")
    return register_buffer(memory, obj, label)


def _python_scalar(obj):
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:
        return obj.item()  # NumPy scalar, 0-d array or 0-d tensor
    return obj


def bind_arguments(fn, args, extra_memory=()) -> tuple[list[np.ndarray], Memory]:
    """The kernel's argument values, aligned with `fn.args`, and the sealed memory map."""
    if len(args) != len(fn.args):
        raise InterpreterError(f"kernel '{fn.name}' takes {len(fn.args)} arguments, got {len(args)}")
    memory = Memory(find=buffers_holding)
    values = []
    for value, name, obj in zip(fn.args, fn.arg_names, args):
        t: ir_dtype = value.type
        if t.is_ptr():
            values.append(np.array(pointer_value(memory, obj, f"argument '{name}'"), np.uint64))
            continue
        if t == tensormap:  # a host TensorDescriptor's TMA map: only codegen reads it
            values.append(None)
            continue
        try:
            if t.name in ("fp16", "bf16"):  # the bits a GPU launch packs (an annotated parameter)
                values.append(np.array(half_float_bits(_python_scalar(obj), t.name), np.uint16).view(t.to_numpy()))
                continue
            values.append(scalar_to(_python_scalar(obj), t))
        except (TypeError, ValueError, OverflowError) as e:
            raise InterpreterError(f"argument '{name}': cannot pass {obj!r} as {t}: {e}") from None
    for i, obj in enumerate(extra_memory):
        register_buffer(memory, obj, f"extra_memory[{i}]")
    memory.seal()
    return values, memory


