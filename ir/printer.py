"""The text form of block IR.

    kernel @add(%0: ptr<fp32> {divisibility = 16}, %1: int32) {
      %2 = program_id {axis = 0} : int32 loc("add.py":4:10)
      %3 = for %4, %5, %6, %7 : fp32 {
      ^(%8: int32, %9: fp32):
        yield %9
      }
      return
    }

Every op prints in one generic form: results, name, operands, attributes, result types,
location, regions. Values are numbered in order of definition, so printing is
deterministic and the printed text is what the compile key hashes.
"""
from __future__ import annotations

import json
import math

from .core import Block, Function, Operation, Value


def format_attr(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


def format_attrs(attrs: dict) -> str:
    if not attrs:
        return ""
    return "{" + ", ".join(f"{k} = {format_attr(v)}" for k, v in sorted(attrs.items())) + "}"


class _Printer:
    def __init__(self, locs: bool):
        self.names: dict[int, str] = {}
        self.locs = locs
        self.lines: list[str] = []

    def name(self, v: Value) -> str:
        key = id(v)
        if key not in self.names:
            self.names[key] = f"%{len(self.names)}"
        return self.names[key]

    def use(self, v: Value) -> str:
        name = self.names.get(id(v))
        return name if name is not None else f"%<undefined {v.type}>"

    def loc(self, op: Operation) -> str:
        if not self.locs or op.loc is None:
            return ""
        return f" loc({json.dumps(op.loc.file)}:{op.loc.line}:{op.loc.col})"

    def block_header(self, block: Block, indent: str):
        args = ", ".join(f"{self.name(a)}: {a.type}" for a in block.args)
        self.lines.append(f"{indent}^({args}):")

    def op(self, op: Operation, indent: str):
        head = ""
        if op.results:
            head = ", ".join(self.name(r) for r in op.results) + " = "
        text = head + op.name
        if op.operands:
            text += " " + ", ".join(self.use(v) for v in op.operands)
        if op.attrs:
            text += " " + format_attrs(op.attrs)
        if op.results:
            text += " : " + ", ".join(str(r.type) for r in op.results)
        text += self.loc(op)
        if not op.regions:
            self.lines.append(indent + text)
            return
        self.lines.append(indent + text + " {")
        for i, region in enumerate(op.regions):
            if i:
                self.lines.append(indent + "} {")
            self.block_header(region, indent)
            for inner in region.ops:
                self.op(inner, indent + "  ")
        self.lines.append(indent + "}")

    def function(self, fn: Function) -> str:
        args = []
        for value, name, attrs in zip(fn.args, fn.arg_names, fn.arg_attrs):
            attrs = dict(attrs, name=name)
            args.append(f"{self.name(value)}: {value.type} {format_attrs(attrs)}")
        header = f"kernel @{fn.name}(" + ", ".join(args) + ")"
        if fn.attrs:
            header += " attributes " + format_attrs(fn.attrs)
        self.lines.append(header + " {")
        for op in fn.body.ops:
            self.op(op, "  ")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"


def print_function(fn: Function, locs: bool = True) -> str:
    """The text form of `fn`; with `locs=False` the source locations are left out."""
    return _Printer(locs).function(fn)


def print_op(op: Operation, names: dict | None = None) -> str:
    """One op (with its regions) for error messages; unknown values print as %?."""
    printer = _Printer(locs=False)
    if names:
        printer.names.update(names)
    printer.op(op, "")
    return "\n".join(printer.lines)
