"""GPU conformance mode: a kernel launched with NumPy arrays runs on copies in GPU memory.

For each launch, the whole memory span under each array argument (its base buffer, so
strided and transposed views keep their layout) is copied to the GPU, the kernel gets a
pointer at the same offset inside the copy, and the span is copied back afterwards. A
conformance test written for the interpreter thus checks the compiled kernel against the
same NumPy reference.
"""
import ctypes

import numpy as np


class DevicePointer:
    """What the launcher needs of a tensor argument: its address."""

    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def _host_span(array: np.ndarray) -> tuple[np.ndarray, int]:
    """The bytes under `array` (a view on its memory) and the array's offset into them."""
    low, high = np.lib.array_utils.byte_bounds(array)
    span = np.ctypeslib.as_array((ctypes.c_uint8 * max(1, high - low)).from_address(low))
    return span, array.ctypes.data - low


def launch_with_device_copies(launch):
    import torch

    def launch_on_gpu(self, grid, args, stream=None):
        copies, device_args = [], []
        for arg in args:
            if hasattr(arg, "data_ptr") and isinstance(getattr(arg, "base", None), np.ndarray):
                arg = arg.base  # kiln.reinterpret of an array: the same bytes travel
            if hasattr(arg, "data_ptr") and not getattr(arg, "is_cuda", True):
                arg = _numpy_view(torch, arg)  # the same memory, strides kept
            if isinstance(arg, np.ndarray):
                span, offset = _host_span(arg)
                device = torch.from_numpy(span.copy()).cuda()
                copies.append((span, device, arg.flags.writeable))
                device_args.append(DevicePointer(device.data_ptr() + offset))
            else:
                device_args.append(arg)
        launch(self, grid, device_args, stream)
        torch.cuda.synchronize()
        for host, device, writeable in copies:
            if writeable:
                host[...] = device.cpu().numpy()
    return launch_on_gpu


def _numpy_view(torch, tensor):
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)  # no NumPy dtype; only the bytes travel
    elif tensor.dtype.is_floating_point and tensor.dtype.itemsize == 1:
        tensor = tensor.view(torch.uint8)
    return tensor.numpy()
