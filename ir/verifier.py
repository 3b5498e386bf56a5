"""Check that a `Function` is well-formed block IR.

Every value is defined before use and visible where it is used (regions see the values
of the blocks around them), each op has the operands, results, regions and attributes
its definition in `kiln.ir.ops` asks for and passes that op's type rule, and every block
ends in the terminator its parent expects. An error names the op and prints the ops
around it.
"""
from __future__ import annotations

import re

from .core import Block, Function, Operation
from .ops import OPS, SHAPE_CHECK, attr_type_error
from .printer import _Printer
from .types import int1


class VerificationError(ValueError):
    pass


_TERMINATORS = {"for": ("yield",), "if": ("yield",), "reduce": ("yield",), "scan": ("yield",),
                "while": ("condition", "yield"), "warp_specialize": ("yield",)}


class _Verifier:
    def __init__(self, fn: Function):
        self.fn = fn

    def fail(self, op: Operation, block: Block, msg: str):
        names = _Printer(locs=True)
        names.function(self.fn)  # names every value as the text form does, for the message
        index = block.ops.index(op) if op in block.ops else 0
        lines = []
        for i in range(max(0, index - 3), min(len(block.ops), index + 3)):
            p = _Printer(locs=False)
            p.names = names.names
            p.op(block.ops[i], "")
            marker = ">> " if i == index else "   "
            lines.extend(marker + line for line in p.lines[:1])
        where = f" at {op.loc}" if op.loc else ""
        raise VerificationError(f"invalid '{op.name}'{where}: {msg}\n" + "\n".join(lines))

    def block(self, block: Block, visible: set, terminators):
        visible = set(visible) | {id(a) for a in block.args}
        if not block.ops or block.ops[-1].name not in terminators:
            last = block.ops[-1] if block.ops else None
            if last is None:
                raise VerificationError(f"empty block where one of {terminators} is needed")
            self.fail(last, block, f"block must end in {' or '.join(terminators)}")
        for op in block.ops:
            self.op(op, block, visible)
            visible.update(id(r) for r in op.results)
        return visible

    def op(self, op: Operation, block: Block, visible: set):
        spec = OPS.get(op.name)
        if spec is None:
            self.fail(op, block, "unknown op")
        if spec.terminator and op is not block.ops[-1]:
            self.fail(op, block, "terminator in the middle of a block")
        for v in op.operands:
            if id(v) not in visible:
                self.fail(op, block, f"operand of type {v.type} is not defined before this use")
        n, lo_hi = len(op.operands), spec.operands
        if not lo_hi[0] <= n <= lo_hi[1]:
            self.fail(op, block, f"takes {lo_hi[0]}..{lo_hi[1]} operands, got {n}")
        r = len(op.results)
        if not spec.results[0] <= r <= spec.results[1]:
            self.fail(op, block, f"has {spec.results} results, got {r}")
        if len(op.regions) != spec.regions:
            self.fail(op, block, f"needs {spec.regions} regions, has {len(op.regions)}")
        for attr in spec.attrs:
            if attr not in op.attrs:
                self.fail(op, block, f"missing attribute '{attr}'")
        for attr, value in op.attrs.items():
            wrong = attr_type_error(attr, value)
            if wrong:
                self.fail(op, block, wrong)
        err = SHAPE_CHECK(op) or (spec.check(op) if spec.check else None)
        if err:
            self.fail(op, block, err)
        for i, region in enumerate(op.regions):
            ends = _TERMINATORS[op.name]
            if op.name == "while":
                ends = (ends[i],)
            self.block(region, visible, ends)
            self.region_yields(op, i, region, block)

    def region_yields(self, op, i, region, block):
        term = region.ops[-1]
        got = [v.type for v in term.operands]
        if op.name in ("for", "if"):
            want = [r.type for r in op.results]
        elif op.name == "warp_specialize":
            want = []
        elif op.name in ("reduce", "scan"):
            want = [a.type for a in region.args[: len(op.results)]]
        elif i == 0:  # while: condition %c, values passed to the after region
            if not got or got[0] != int1:
                self.fail(op, block, "while's condition must start with an int1 scalar")
            got, want = got[1:], [r.type for r in op.results]
        else:
            want = [v.type for v in op.operands]
        if got != want:
            self.fail(op, block, f"region {i} yields ({', '.join(map(str, got))}) "
                                 f"but ({', '.join(map(str, want))}) is expected")


# a kernel's name as PTX takes it (letters, digits, _; not a digit first, nor a lone _), without PTX's $
_KERNEL_NAME = re.compile(r"(?:[A-Za-z]|_[A-Za-z0-9_])[A-Za-z0-9_]*", re.ASCII)


def verify(fn: Function) -> None:
    """Raise `VerificationError` if `fn` is not well-formed."""
    if not isinstance(fn.name, str) or not _KERNEL_NAME.fullmatch(fn.name):
        raise VerificationError(f"kernel name {str(fn.name)[:60]!r} is not an identifier (ASCII letters, digits and _)")
    v = _Verifier(fn)
    v.block(fn.body, set(), ("return",))
