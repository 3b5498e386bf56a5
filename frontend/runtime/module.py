"""Loading a compiled kernel into the current context."""
from __future__ import annotations

from .cuda_driver import CudaError, check, cuda

_SHARED_DEFAULT_LIMIT = 48 * 1024


class LoadedKernel:
    """A CUfunction and what a launch needs to know about it."""

    def __init__(self, name: str, cubin: bytes, ptx: str, shared: int):
        drv = cuda()
        try:
            self.module = check(drv.cuModuleLoadData(cubin), f"loading the cubin of {name}")
            self.loaded_from = "cubin"
        except CudaError:
            # A driver older than the cubin's toolkit can still JIT the PTX.
            self.module = check(drv.cuModuleLoadData(ptx.encode() + b"\0"), f"loading the PTX of {name}")
            self.loaded_from = "ptx"
        self.function = check(drv.cuModuleGetFunction(self.module, name.encode()), f"cuModuleGetFunction({name})")
        attr = drv.CUfunction_attribute
        if shared > _SHARED_DEFAULT_LIMIT:
            check(drv.cuFuncSetAttribute(self.function, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                  f"allowing {shared} bytes of shared memory for {name}")
        self.n_regs = check(drv.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, self.function), "cuFuncGetAttribute")
        self.handle = int(self.function)

    def resident_ctas(self, threads: int, shared: int) -> int:
        """How many CTAs of `threads` threads and `shared` bytes fit on one SM at once."""
        return check(cuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, threads, shared),
                     "cuOccupancyMaxActiveBlocksPerMultiprocessor")
