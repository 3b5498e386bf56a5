"""Errors that point at the user's kernel source."""
from __future__ import annotations


class CompilationError(Exception):
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
