"""The `triton` module in kiln's drop-in mode: kiln's user API under Triton's names, plus
`triton.compile` and the other host-side names libraries and PyTorch Inductor use.

`__version__` is the Triton release whose behaviour kiln follows (code checks it to pick an API);
`kiln_version` is kiln's own.
"""
from kiln import (  # noqa: F401
    AsyncCompileMode, CompilationError, FutureKernel, InterpreterError, KernelInterface, MockTensor, OutOfResources,
    TensorWrapper, TritonError, aggregate, cdiv, constexpr_function, language, must_use_result, next_power_of_2,
    reinterpret, set_allocator, testing, tools,
)
from kiln import __version__ as kiln_version  # noqa: F401
from kiln import errors  # noqa: F401  (triton.errors: TritonError)
from kiln.autotuner import Config, autotune, heuristics  # noqa: F401

from . import backends, knobs, runtime  # noqa: F401
from . import libtriton as _C  # noqa: F401  (triton._C and triton._C.libtriton, one module)
from . import compile as compiler  # noqa: F401
from .compile import compile  # noqa: F401,A004
from .jit import JITFunction, jit  # noqa: F401

__version__ = "3.6.0"
DROPIN = True  # `kiln doctor` and tests tell kiln's `triton` from Triton's by it


def _answer_to_tritons_module_names():
    """Code that writes Triton code names classes by their module: Inductor re-emits a kernel's
    `X: tl.constexpr = ...` globals as `X: triton.language.core.constexpr = ...` in the module it
    generates, which imports triton, not kiln. In this mode that name is kiln's own class."""
    from kiln.language.core import constexpr
    constexpr.__module__ = "triton.language.core"


_answer_to_tritons_module_names()
