"""`triton.runtime` in the drop-in mode: kiln.runtime's driver, with Triton's other runtime names
(`triton.runtime.autotuner` and `triton.runtime.driver` are this module too; `triton.runtime.cache`
is kiln.dropin.file_cache)."""
from __future__ import annotations

import base64
import sys

from kiln.autotuner import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from kiln.errors import InterpreterError, OutOfResources  # noqa: F401
from kiln.runtime import GPUTarget, driver  # noqa: F401

from . import file_cache as cache  # noqa: F401  (triton.runtime.cache)
from .file_cache import RedisRemoteCacheBackend, RemoteCacheBackend  # noqa: F401  (triton.runtime has them)
from . import jit, knobs  # noqa: F401  (triton.runtime.jit is an attribute after `import triton`, as in Triton)
from kiln.runtime import _allocation, _async_compile, build, errors  # noqa: F401
from .backends import PTXASError, triton_key  # noqa: F401
from .jit import JITFunction  # noqa: F401
from kiln.tensor_wrapper import MockTensor, TensorWrapper, reinterpret  # noqa: F401  (triton.runtime has them)
from kiln.jit import KernelInterface  # noqa: F401

# `import triton.runtime.driver` must not replace the `driver` attribute with a module: Triton's
# own submodule is imported by its package, so the import system finds it and sets nothing.
for _name in ("driver", "autotuner"):
    sys.modules.setdefault(f"triton.runtime.{_name}", sys.modules[__name__])
sys.modules.setdefault("triton.runtime.cache", cache)
autotuner = sys.modules[__name__]  # `triton.runtime.autotuner.Config` without an import of its own, as in Triton


def _base64(key: str) -> str:
    """Triton's cache-path spelling of a hex digest (Inductor names files by it)."""
    return base64.urlsafe_b64encode(bytes.fromhex(key)).decode().rstrip("=")


def _base32(key: str) -> str:
    return base64.b32encode(bytes.fromhex(key)).decode().rstrip("=")


def _choose_active(drv) -> None:
    """As Triton's driver picks the first backend whose driver is active: the GPU if there is one,
    else the CPU backend (kiln's interpreter)."""
    from .backends import CPUDriver, CudaDriver
    if drv._active is drv.default and not CudaDriver.is_active():
        drv.set_active(CPUDriver())


driver.choose_on_first_use(_choose_active)
