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
from .autotuner import Config, autotune, heuristics  # noqa: F401
from .dropin import knobs  # noqa: F401  (triton.knobs; `import kiln.knobs` too, below)
from . import compiler, runtime, testing, tools  # noqa: F401  (triton.runtime.driver, triton.compiler.errors after `import kiln as triton`)
from .compiler import compile  # noqa: F401,A001  (Triton's triton.compile)
from .tensor_wrapper import MockTensor, TensorWrapper, reinterpret  # noqa: F401
from .language.core import must_use_result  # noqa: F401

__version__ = "0.1.0"


def cdiv(x: int, y: int) -> int:
    """Ceiling division."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n; 0 for n <= 0, as Triton's bit trick gives."""
    n = int(n)
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def set_allocator(allocator) -> None:
    """Accepted for Triton's device-side tensor descriptors: kiln lowers them to plain loads and
    stores, so they need no global scratch memory and the allocator is never called."""

_sys.modules[__name__ + ".knobs"] = knobs
