"""kiln's errors: one base class, and the errors that point at the user's kernel source.

An error kiln raises on purpose (a `KilnError`) says all there is to say in its message:
it leaves kiln's public entry points (a launch, `run`, `warmup`) with kiln's own frames cut
from its traceback (`user_facing`), so that the user's frame and the message are what is
shown. Any other exception is a bug of kiln's and keeps its whole traceback.
"""
from __future__ import annotations

import functools


class KilnError(Exception):
    """The base of every error kiln raises on purpose (Triton's `TritonError`)."""


TritonError = KilnError  # Triton's name (triton.compiler.errors is this module in the drop-in mode)


class AutotunerError(KilnError):
    """An autotuner that cannot tune (Triton's, with its `Autotuner error: ` prefix)."""

    def __init__(self, error_message: str | None = None):
        self.error_message = error_message
        super().__init__(error_message)

    def __str__(self) -> str:
        return f"Autotuner error: {self.error_message or ''}"

    def __reduce__(self):
        return (type(self), (self.error_message,))


class OutOfResources(KilnError):
    """A compiled kernel needs more of a resource than the GPU has (Triton's signature)."""

    def __init__(self, required: int, limit: int, name: str):
        self.required, self.limit, self.name = required, limit, name
        super().__init__(f"out of resource: {name}, Required: {required}, Hardware limit: {limit}. "
                         "Reducing block sizes or `num_stages` may help.")

    def __reduce__(self):
        return (type(self), (self.required, self.limit, self.name))


class PTXASError(KilnError):
    """PTX the assembler refused (Triton's signature): kiln assembles with nvJitLink, whose failures
    are this, so that Triton's and Inductor's autotuners skip the config as they do for ptxas's."""

    def __init__(self, error_message: str | None = None):
        self.error_message = error_message
        super().__init__(f"PTXAS error: {error_message or ''}")

    def __reduce__(self):
        return (type(self), (self.error_message,))


class InterpreterError(KilnError, RuntimeError):
    """A kernel failed under the interpreter: bad memory access, failed assert, or an op
    that could not be evaluated. The message names the kernel and the op's source line."""


class CompilationError(KilnError):
    """A kernel could not be turned into block IR.

    The message shows `file:line:col` with Triton's locator `at LINE:COL: in NAME` (the line and
    column within the function, its `def` line 1), the offending source line and a caret under
    the column, and last the reason, as Triton's messages end with it (its users match
    `at LINE:COL:` and take the last line); nothing from inside kiln.
    """

    def __init__(self, file: str, line: int, col: int, source_line: str | None, reason: str,
                 at: tuple[int, int, str] | None = None):
        self.file, self.line, self.col, self.reason, self.at = file, line, col, reason, at
        self.error_message = reason  # Triton's name for it
        self.source_line = source_line
        text = f"{file}:{line}:{col}: error:" + (f" at {at[0]}:{at[1]}: in {at[2]}" if at is not None else "")
        if source_line is not None:
            stripped = source_line.rstrip()
            text += f"\n    {stripped}\n    {' ' * col}^"
        super().__init__(f"{text}\n{reason}")

    def __reduce__(self):
        return (type(self), (self.file, self.line, self.col, self.source_line, self.reason, self.at))


class CompileTimeAssertionFailure(CompilationError):
    """A `tl.static_assert` that failed (Triton's name); the message is the whole story, so it has no `__cause__`."""


class UnsupportedLanguageConstruct(CompilationError):
    """Python that kernels cannot use (`for ... else`, `break`, a lambda, ...; Triton's name)."""


class InterpretedCompilationError(CompilationError, InterpreterError):
    """A CompilationError of a kernel launched under KILN_INTERPRET=1: also an InterpreterError,
    since Triton's interpreter raises that for every error of a kernel (its __cause__ the error)."""


class NoGPUError(KilnError, RuntimeError):
    """A launch on a machine with no NVIDIA GPU or driver."""

    def __init__(self, why: str):
        self.why = why
        super().__init__(f"no GPU to launch on: {why}. Set KILN_INTERPRET=1 to run kernels in kiln's NumPy "
                         "interpreter, or build binaries without a GPU with "
                         "kernel.warmup(*args, grid=..., target=\"sm_90a\")")

    def __reduce__(self):
        return (type(self), (self.why,))


def user_facing(entry):
    """Decorate a public entry point: a KilnError leaves it without kiln's frames below it.
    The one frame of its own it shows is named `<kiln>`, with no source line."""
    call = _ENTRY(entry, KilnError)
    names = {"co_name": entry.__name__}
    if hasattr(call.__code__, "co_qualname"):  # Python 3.11+
        names["co_qualname"] = entry.__qualname__
    call.__code__ = call.__code__.replace(**names)
    return functools.wraps(entry)(call)


def _compiled_entry():
    namespace: dict = {}
    exec(compile("def entry(fn, KilnError):\n"
                 "    def call(*args, **kwargs):\n"
                 "        try:\n"
                 "            return fn(*args, **kwargs)\n"
                 "        except KilnError as error:\n"
                 "            raise error.with_traceback(None)\n"
                 "    return call\n", "<kiln>", "exec"), namespace)
    return namespace["entry"]


_ENTRY = _compiled_entry()
