"""A prepacked launch for one specialization: argument slots built once, filled per call.

The launch itself calls `cuLaunchKernel` in libcuda through ctypes: the same driver
entry point cuda-python wraps, without the wrapper's per-call argument conversion, which
costs microseconds on every launch.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

from .driver import CudaError, _error_text

_CTYPES = {
    "int1": ctypes.c_uint8, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
    "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
    "uint64": ctypes.c_uint64, "fp32": ctypes.c_float, "fp64": ctypes.c_double,
}


def _pointer_value(arg) -> int:
    try:
        return arg.data_ptr()  # the common case: a torch tensor
    except AttributeError:
        pass
    if arg is None:
        return 0
    if isinstance(arg, int):
        return arg
    iface = getattr(arg, "__cuda_array_interface__", None)
    if iface is not None:
        return iface["data"][0]
    raise TypeError(f"cannot pass {type(arg).__name__} as a GPU pointer")


class Launcher:
    """Launches one loaded kernel; `args` are the runtime arguments in IR order."""

    def __init__(self, kernel, arg_types, num_warps: int, shared: int, name: str):
        self.function = kernel.function
        self.name = name
        self.block = 32 * num_warps
        self.shared = shared
        self.slots = []
        self.setters = []
        for t in arg_types:
            if t.is_ptr():
                slot = ctypes.c_uint64()
                self.setters.append(_pointer_value)
            elif t.name in _CTYPES:
                slot = _CTYPES[t.name]()
                self.setters.append(None)
            else:
                raise TypeError(f"kernel {name}: cannot pass an argument of type {t}")
            self.slots.append(slot)
        self.params = (ctypes.c_void_p * max(1, len(self.slots)))(
            *[ctypes.addressof(s) for s in self.slots])
        self.params_address = ctypes.addressof(self.params)
        self.handle = kernel.handle
        self.launch_fn = _cu_launch_kernel()

    def __call__(self, grid, args, stream: int):
        for slot, setter, arg in zip(self.slots, self.setters, args):
            slot.value = setter(arg) if setter is not None else arg
        gx, gy, gz = grid
        if gx * gy * gz == 0:
            return
        err = self.launch_fn(self.handle, gx, gy, gz, self.block, 1, 1, self.shared, stream, self.params_address, None)
        if err:
            raise CudaError(f"launching kernel {self.name} failed: {_error_text(err)}")


@functools.lru_cache(maxsize=None)
def _cu_launch_kernel():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:  # an unusual install: let the loader's search find it
        lib = ctypes.CDLL(ctypes.util.find_library("cuda"))
    fn = lib.cuLaunchKernel
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    fn.restype = ctypes.c_int
    return fn
