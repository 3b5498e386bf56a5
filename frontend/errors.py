"""kiln's errors: one base class, and the errors that point at the user's kernel source."""
from __future__ import annotations


class KilnError(Exception):
    """The base of every error kiln raises on purpose (Triton's `TritonError`)."""


class OutOfResources(KilnError):
    """A compiled kernel needs more of a resource than the GPU has (Triton's signature)."""

    def __init__(self, required: int, limit: int, name: str):
        self.required, self.limit, self.name = required, limit, name
        super().__init__(f"out of resource: {name}, Required: {required}, Hardware limit: {limit}. "
                         "Reducing block sizes or `num_stages` may help.")

    def __reduce__(self):
        return (type(self), (self.required, self.limit, self.name))


class InterpreterError(KilnError, RuntimeError):
    """A kernel failed under the interpreter: bad memory access, failed assert, or an op
    that could not be evaluated. The message names the kernel and the op's source line."""


class CompilationError(KilnError):
    """A kernel could not be turned into block IR.

    The message shows `file:line:col`, the offending source line and a caret under the
    column, then the reason, and nothing from inside kiln.
    """

    def __init__(self, file: str, line: int, col: int, source_line: str | None, reason: str):
        self.file, self.line, self.col, self.reason = file, line, col, reason
        self.source_line = source_line
        text = f"{file}:{line}:{col}: error: {reason}"
        if source_line is not None:
            stripped = source_line.rstrip()
            text += f"\n    {stripped}\n    {' ' * col}^"
        super().__init__(text)

    def __reduce__(self):
        return (type(self), (self.file, self.line, self.col, self.source_line, self.reason))


class KernelError(CompilationError):
    """Raised for errors that the user's code raised on purpose (static_assert)."""


class InterpretedCompilationError(CompilationError, InterpreterError):
    """A CompilationError of a kernel launched under KILN_INTERPRET=1: also an InterpreterError,
    since Triton's interpreter raises that for every error of a kernel (its __cause__ the error)."""
