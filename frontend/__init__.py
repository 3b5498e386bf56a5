"""kiln: a Triton-compatible GPU kernel language (`import kiln as triton`).

The package loads its user API when one of its names is first asked for (PEP 562): a process that
imports only `kiln.codegen` or `kiln.daemon` (a compile worker, the CLI) loads neither the language
nor the JIT; `kiln.jit`, `kiln.language`, `from kiln import autotune` load what they name.
"""
import importlib as _importlib
import sys as _sys
import types as _types

from kiln.cache import env as _env

if _env.remote_cache_url() is not None and not _env.interpret():
    # redis-py takes ~100 ms to import: started first, in the background, off the first call's path
    from kiln.cache.remote import import_client_in_background
    import_client_in_background()

# the package's names: (the module, its attribute), or (the module, None) for a submodule
_NAMES = {
    "language": ("kiln.language", None), "compiler": ("kiln.compiler", None), "runtime": ("kiln.runtime", None),
    "testing": ("kiln.testing", None), "tools": ("kiln.tools", None), "knobs": ("kiln.knobs", None),
    "CompilationError": ("kiln.errors", "CompilationError"), "InterpreterError": ("kiln.errors", "InterpreterError"),
    "KilnError": ("kiln.errors", "KilnError"), "OutOfResources": ("kiln.errors", "OutOfResources"),
    "TritonError": ("kiln.errors", "KilnError"),  # Triton's name for the base class
    "JITFunction": ("kiln.jit", "JITFunction"), "KernelInterface": ("kiln.jit", "KernelInterface"),
    "constexpr_function": ("kiln.jit", "constexpr_function"), "jit": ("kiln.jit", "jit"),
    "AsyncCompileMode": ("kiln.runtime._async_compile", "AsyncCompileMode"),  # Triton 3.6's names
    "FutureKernel": ("kiln.runtime._async_compile", "FutureKernel"),
    "Config": ("kiln.autotuner", "Config"), "autotune": ("kiln.autotuner", "autotune"),
    "heuristics": ("kiln.autotuner", "heuristics"),
    "compile": ("kiln.compiler", "compile"),  # Triton's triton.compile
    "MockTensor": ("kiln.tensor_wrapper", "MockTensor"), "TensorWrapper": ("kiln.tensor_wrapper", "TensorWrapper"),
    "reinterpret": ("kiln.tensor_wrapper", "reinterpret"),
    "must_use_result": ("kiln.language.core", "must_use_result"),
    "aggregate": ("kiln.language.core", "_aggregate"),  # Triton 3.9's triton.aggregate
}


def __getattr__(name: str):
    where = _NAMES.get(name)
    if where is None:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    module, attribute = where
    value = _importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # found once
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


class _Package(_types.ModuleType):
    """`kiln.jit` is the decorator, though a module `kiln.jit` defines it: importing that module binds
    its name in the package to the module, which the package keeps to the decorator."""

    @property
    def jit(self):
        return __getattr__("jit") if "jit" not in self.__dict__ else self.__dict__["jit"]

    @jit.setter
    def jit(self, value):
        if not isinstance(value, _types.ModuleType):
            self.__dict__["jit"] = value


_sys.modules[__name__].__class__ = _Package


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
