"""Which fp8 formats a CUDA target takes, decided as Triton decides it, when a kernel is built for it.

kiln's block IR is built once for all targets, so the check runs when a binary is built for one:
- fp8e5 and fp8e4b15 everywhere; fp8e4nv from sm_89 (its conversions are in hardware there);
- fp8e4b8 and fp8e5b16 (AMD's formats) never: a kernel using them is a CompilationError at the
  first op that does, as Triton refuses it (the interpreter runs every format);
- a dot of fp8e4b15 operands on sm_90 and later warns that the format is deprecated there.
"""
from __future__ import annotations

import warnings

from kiln.ir.types import pointer_type, scalar_of

from .errors import CompilationError


def supported(capability: int) -> tuple[str, ...]:
    return tuple(sorted({"fp8e5", "fp8e4b15"} | ({"fp8e4nv"} if capability >= 89 else set())))


def check(ir, capability: int, source=None) -> None:
    """Raise a CompilationError at the first use of an fp8 format `capability` lacks; warn of
    fp8e4b15 dots on Hopper. `source` (the kernel's SourceInfo) shows the line and gives Triton's locator."""
    allowed = supported(capability)
    for arg_name, arg in zip(ir.arg_names, ir.args):
        name = _fp8_name(arg.type)
        if name is not None and name not in allowed:
            raise _unsupported(name, allowed, None, source, ir.name, f"argument {arg_name!r}: ")
    e4b15_upcasts = set()
    for op in ir.walk():
        for value in (*op.operands, *op.results):
            name = _fp8_name(value.type)
            if name is not None and name not in allowed:
                raise _unsupported(name, allowed, op.loc, source, ir.name)
            if name == "fp8e4b15" and op.name == "bitcast" and value in op.operands:
                e4b15_upcasts.add(_where(op.loc))  # the frontend widens a dot's fp8e4b15 operands at the dot
        if capability >= 90 and op.name == "dot" and _where(op.loc) in e4b15_upcasts:
            warnings.warn("the use of fp8e4b15 is deprecated on Hopper and later architectures: kiln widens "
                          "its dot operands to fp16, which is slow; use fp8e4nv or fp8e5", UserWarning, stacklevel=2)
            e4b15_upcasts.clear()  # once per kernel


def _fp8_name(type_) -> str | None:
    scalar = scalar_of(type_)
    while isinstance(scalar, pointer_type):  # a pointer's pointee
        scalar = scalar.element_ty_
    name = getattr(scalar, "name", "")
    return name if name.startswith("fp8") else None


def _where(loc):
    return None if loc is None else (loc.file, loc.line, loc.col)


def _unsupported(name, allowed, loc, source, kernel: str, prefix="") -> CompilationError:
    cause = ValueError(f"type {name} not supported in this architecture. The supported fp8 dtypes are {allowed}")
    if loc is None and source is not None:  # an argument: at the kernel's first line
        loc_file, line, col = source.file, source.first_line, source.indent
    elif loc is not None:
        loc_file, line, col = loc.file, loc.line, loc.col
    else:
        loc_file, line, col = "<unknown>", 0, 0
    text = source.line_text(line) if source is not None and loc_file == source.file else None
    at = None
    if source is not None and loc_file == source.file:
        at = (line - source.first_line + 1, col - source.indent, kernel)
    error = CompilationError(loc_file, line, col, text, f"{prefix}{cause}", at)
    error.__cause__ = cause
    return error
