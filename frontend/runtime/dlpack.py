"""Pointer arguments given as DLPack: a `dltensor` capsule, or any object with `__dlpack__`.

The capsule is only read (its data pointer, byte offset and dtype), never consumed, so
the producer keeps ownership of the memory.
"""
from __future__ import annotations

import ctypes

from kiln.ir.types import dtype


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


# DLPack dtype codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
_DTYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
           (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64", (2, 16): "fp16", (2, 32): "fp32",
           (2, 64): "fp64", (4, 16): "bf16", (6, 8): "int1", (1, 1): "int1"}

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def is_dlpack(obj) -> bool:
    return type(obj).__name__ == "PyCapsule" or (hasattr(obj, "__dlpack__") and not hasattr(obj, "data_ptr"))


def dlpack_info(obj) -> tuple[dtype, int]:
    """(element dtype, address of the first element) of a DLPack capsule or producer."""
    capsule = obj if type(obj).__name__ == "PyCapsule" else obj.__dlpack__()
    if _is_valid(capsule, b"dltensor_versioned"):
        tensor = _DLManagedTensorVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned")).dl_tensor
    elif _is_valid(capsule, b"dltensor"):
        tensor = _DLTensor.from_address(_get_pointer(capsule, b"dltensor"))  # DLManagedTensor starts with it
    else:
        raise TypeError("not a DLPack capsule (already consumed?)")
    if tensor.dtype.lanes != 1:
        raise TypeError("vector (multi-lane) DLPack dtypes are not supported")
    name = _DTYPES.get((tensor.dtype.code, tensor.dtype.bits))
    if name is None:
        raise TypeError(f"unsupported DLPack dtype code {tensor.dtype.code}, {tensor.dtype.bits} bits")
    return dtype(name), (tensor.data or 0) + tensor.byte_offset
