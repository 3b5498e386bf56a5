"""The CUDA driver through cuda-python: errors, the primary context, devices and streams.

Everything here is imported lazily: a machine with no GPU (or no driver) can still
import kiln, compile and interpret.
"""
from __future__ import annotations

import functools
import os
import sys

from ..errors import NoGPUError


class CudaError(RuntimeError):
    """A driver call that failed; `code` is its CUresult where one is known."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


@functools.lru_cache(maxsize=None)
def cuda():
    from cuda.bindings import driver
    return driver


def _error_text(code) -> str:
    drv = cuda()
    code = drv.CUresult(int(code))
    err, name = drv.cuGetErrorName(code)
    err2, text = drv.cuGetErrorString(code)
    name = name.decode() if isinstance(name, bytes) else str(code)
    text = text.decode() if isinstance(text, bytes) else ""
    return f"{name}: {text}" if text else name


def check(result, what: str):
    """Unpack a cuda-python result tuple, raising CudaError with the driver's message on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaError(f"{what} failed: {_error_text(err)}")
    return values[0] if len(values) == 1 else (tuple(values) if values else None)


@functools.lru_cache(maxsize=None)
def _initialized():
    try:
        result = cuda().cuInit(0)
    except Exception as e:  # noqa: BLE001 - cuda-python found no libcuda (DynamicLibNotFoundError, ...)
        raise NoGPUError(f"no NVIDIA driver was found ({type(e).__name__})") from None
    if result[0] == cuda().CUresult.CUDA_ERROR_NO_DEVICE:
        raise NoGPUError("the NVIDIA driver sees no GPU")
    check(result, "cuInit")
    return True


_gpu_seen = False  # once a GPU was found it stays: `warmup` asks on every call (Triton's tutorial 02 per launch)


def is_available() -> bool:
    global _gpu_seen
    if _gpu_seen:
        return True
    try:
        _initialized()
        _gpu_seen = check(cuda().cuDeviceGetCount(), "cuDeviceGetCount") > 0
    except Exception:
        return False
    return _gpu_seen


_torch_getters = None  # PyTorch's raw device and stream getters, once it has initialized CUDA


def device_and_stream() -> tuple[int, int]:
    """The current device and PyTorch's current stream on it (the default stream without PyTorch)."""
    global _torch_getters
    if _torch_getters is None:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return 0, 0
        _torch_getters = (torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream)
    get_device, get_stream = _torch_getters
    device = get_device()
    return device, get_stream(device)


@functools.lru_cache(maxsize=None)
def _primary_context(device: int):
    dev = check(cuda().cuDeviceGet(device), "cuDeviceGet")
    return check(cuda().cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")


def ensure_context(device: int):
    """Make the device's primary context (the one PyTorch uses) current on this thread."""
    _initialized()
    ctx = check(cuda().cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(ctx) == 0:
        check(cuda().cuCtxSetCurrent(_primary_context(device)), "cuCtxSetCurrent")


def _device_attribute(device: int, name: str) -> int:
    drv = cuda()
    _initialized()
    dev = check(drv.cuDeviceGet(device), "cuDeviceGet")
    return check(drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, name), dev), f"cuDeviceGetAttribute({name})")


@functools.lru_cache(maxsize=None)
def max_shared_memory(device: int) -> int:
    """The most shared memory one block may have on the device, with the opt-in above 48 KB."""
    return _device_attribute(device, "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")


@functools.lru_cache(maxsize=None)
def sm_count(device: int) -> int:
    return _device_attribute(device, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")


def compile_target(device: int) -> str:
    """The target kiln compiles the device's kernels for: the device's own, or `KILN_TARGET`
    where set to an older one (sm_80 on a Hopper, to run the code an A100 would get: the
    cubin then does not load and the driver JIT-compiles its PTX), else Triton's
    TRITON_OVERRIDE_ARCH (`sm80`)."""
    from kiln.cache import env
    forced, arch = env.forced_target(), env.override_arch()
    if not forced and not arch:
        return target(device)
    from kiln.codegen.target import arch_target, parse_target
    forced = forced or arch_target(arch)
    parse_target(forced)  # an unknown name is an error here, not a failed compile later
    return forced


def current_compile_target() -> str:
    """compile_target of the current device (the one a launch here would use)."""
    return compile_target(device_and_stream()[0])


@functools.lru_cache(maxsize=None)
def target(device: int) -> str:
    """The PTX target for a device (`kiln.codegen.target.target_name`: sm_90a on Hopper)."""
    from kiln.codegen.target import target_name
    major = _device_attribute(device, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
    minor = _device_attribute(device, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
    return target_name(10 * major + minor)

