"""kiln: a Triton-compatible GPU kernel language (`import kiln as triton`)."""
import sys as _sys

from . import config as _config

if _config.shared_tier_configured() and not _config.interpret():
    # redis-py takes ~100 ms to import: started first, in the background, off the first call's path
    from kiln.cache.remote import import_client_in_background
    import_client_in_background()

from . import language  # noqa: F401
from .errors import CompilationError, InterpreterError, KilnError, OutOfResources  # noqa: F401
from .errors import KilnError as TritonError  # noqa: F401  (Triton's name for the base class)
from .jit import JITFunction, KernelInterface, constexpr_function, jit  # noqa: F401
from .runtime._async_compile import AsyncCompileMode, FutureKernel  # noqa: F401  (Triton 3.6's names)
from .autotuner import Config, autotune, heuristics  # noqa: F401
from .dropin import knobs  # noqa: F401  (triton.knobs; `import kiln.knobs` too, below)
from . import compiler, runtime, testing, tools  # noqa: F401  (triton.runtime.driver, triton.compiler.errors after `import kiln as triton`)
from .compiler import compile  # noqa: F401,A001  (Triton's triton.compile)
from .tensor_wrapper import MockTensor, TensorWrapper, reinterpret  # noqa: F401
from .language.core import must_use_result  # noqa: F401
from .language.core import _aggregate as aggregate  # noqa: F401  (Triton 3.9's triton.aggregate)

__version__ = "0.1.0"


def cdiv(x: int, y: int) -> int:
    """Ceiling division."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n; 0 for n <= 0, as Triton's bit trick gives."""
    n = int(n)
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def set_allocator(allocator) -> None:
    """Triton's: who provides the global scratch in which kernels write the TMA maps of their
    device-side tensor descriptors, `allocator(size, alignment, stream)`; without one kiln
    takes it from the driver's stream-ordered pool (kiln.runtime.scratch)."""
    from .runtime._allocation import set_allocator as set_any_allocator
    set_any_allocator(allocator)

_sys.modules[__name__ + ".knobs"] = knobs
