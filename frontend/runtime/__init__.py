"""The CUDA runtime of kiln: the driver, loaded modules and launches.

`kiln.runtime.driver.active` offers the host-side queries Triton programs make of
`triton.runtime.driver.active` (the current device and stream, device properties).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class GPUTarget:
    """What `driver.active.get_current_target()` returns, as in Triton: backend ("cuda"),
    arch (the compute capability as an int, 90 for 9.0) and warp_size."""
    backend: str
    arch: int
    warp_size: int


class _Utils:
    @functools.lru_cache(maxsize=None)
    def get_device_properties(self, device: int) -> dict:
        from . import cuda_driver as drv
        cu = drv.cuda()
        drv.ensure_context(device)
        dev = drv.check(cu.cuDeviceGet(device), "cuDeviceGet")
        attr = cu.CUdevice_attribute

        def get(name):
            return drv.check(cu.cuDeviceGetAttribute(getattr(attr, name), dev), "cuDeviceGetAttribute")
        return {
            "max_shared_mem": get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            "multiprocessor_count": get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            "max_num_regs": get("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
            "warpSize": get("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
            "sm_clock_rate": get("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
            "mem_clock_rate": get("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
            "mem_bus_width": get("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
        }


class DriverBase:
    """What every driver answers (Triton's `triton.backends.driver.DriverBase`): whether its device is
    there, the target it compiles for, PyTorch's device for it and how to time a kernel on it."""

    @classmethod
    def is_active(cls) -> bool:
        raise NotImplementedError

    def get_current_target(self) -> GPUTarget:
        raise NotImplementedError

    def get_active_torch_device(self):
        raise NotImplementedError

    def get_benchmarker(self):
        """How kernels are timed on this driver's device (Triton's `do_bench`)."""
        from kiln.testing import do_bench
        return do_bench


class GPUDriver(DriverBase):
    """A driver of GPUs (Triton's `triton.backends.driver.GPUDriver`): devices and streams."""

    def get_current_device(self) -> int:
        raise NotImplementedError

    def get_current_stream(self, device: int | None = None) -> int:
        raise NotImplementedError


class _ActiveDriver(GPUDriver):
    utils = _Utils()

    def get_current_device(self) -> int:
        from . import cuda_driver as drv
        return drv.device_and_stream()[0]

    def get_current_stream(self, device: int | None = None) -> int:
        from . import cuda_driver as drv
        return drv.device_and_stream()[1]

    def get_current_target(self) -> GPUTarget:
        from . import cuda_driver as drv
        name = drv.target(self.get_current_device())  # sm_90a
        return GPUTarget("cuda", int(name[3:].rstrip("a")), 32)

    def get_active_torch_device(self):
        """PyTorch's device for this driver: the current GPU; under KILN_INTERPRET=1 on a machine
        without one, the CPU (the interpreter runs kernels on host tensors)."""
        import torch
        from .. import config
        if config.interpret() and not self.is_active():
            return torch.device("cpu")
        return torch.device("cuda", self.get_current_device())

    def get_device_interface(self):
        import torch
        return torch.cuda

    def is_active(self) -> bool:
        from . import cuda_driver as drv
        return drv.is_available()

    @staticmethod
    def map_python_to_cpp_type(ty: str) -> str:
        """The C type an ahead-of-time kernel's launch takes for signature type `ty` (`*fp32`, `i32`,
        ...; kiln.tools.aot): what the kernel reads, an fp32 scalar as `float`."""
        from kiln.tools.aot import c_type
        return c_type(ty)


class _Driver:
    """`driver.active` is the CUDA driver unless `set_active` chose another (Inductor picks the CPU
    backend's driver this way in kiln's drop-in mode); `reset_active` goes back to it."""

    def __init__(self):
        self._default = self._active = None  # made when first asked for, as Triton's
        self._choose = None

    @property
    def default(self):
        if self._default is None:
            self._default = _ActiveDriver()
        return self._default

    @property
    def active(self):
        if self._active is None:
            self._active = self.default
        if self._choose is not None:  # decided at first use, as Triton's lazy driver
            choose, self._choose = self._choose, None
            choose(self)
        return self._active

    @active.setter
    def active(self, value) -> None:
        self._choose, self._active = None, value

    def choose_on_first_use(self, choose) -> None:
        """`choose(driver)` runs when `active` is first read, not now: asking whether a GPU
        is there initializes CUDA, and a process that forks workers afterwards (Inductor's
        compile pool) leaves them unable to use it."""
        self._choose = choose

    def set_active(self, active) -> None:
        self.active = active

    def reset_active(self) -> None:
        self.active = self.default


driver = _Driver()
