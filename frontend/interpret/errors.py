"""The one error the interpreter raises, and how it names the place that failed."""
from __future__ import annotations

from ..errors import InterpreterError  # noqa: F401  (defined with kiln's other errors)


class OpFault(Exception):
    """Raised inside an op's implementation; the walker adds kernel, op and location.
    `position` is the index, within the addresses of one access, of the faulting one."""

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message)
        self.position = position


def describe_loc(loc) -> str:
    if loc is None:
        return "<unknown location>"
    return f"{loc.file}:{loc.line}" + (f":{loc.col}" if loc.col else "")


def located(kernel: str, op, message: str, pid=None) -> InterpreterError:
    program = f" in program {tuple(pid)}" if pid is not None else ""
    return InterpreterError(f"kernel '{kernel}', {op.name} at {describe_loc(op.loc)}{program}: {message}")
