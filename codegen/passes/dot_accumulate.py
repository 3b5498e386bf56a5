"""`acc + tl.dot(a, b)` becomes `tl.dot(a, b, acc)`, as Triton's combine patterns do.

Written the first way (tutorial 06's backward: `dv += tl.dot(ppT, do)`), the product is a
block of its own next to the accumulator: 64 more registers per thread for a 128x64 fp32
tile, and a wait for the tensor cores before the add, every iteration. Accumulating in
place keeps one block, which the pipeliner can leave in flight. The rewrite applies when
the dot's accumulator is a zero constant, the product feeds only this add, and both have
the same type; the dot moves to the add's place (its operands are defined before it).
Float results round differently (the sum of products is not rounded on its own before
the add), exactly as on Triton.
"""
from __future__ import annotations

from kiln.ir.core import Operation

from .rewrite import replace_uses

name = "dot_accumulate"


def apply(fn, ctx=None) -> None:
    uses: dict = {}
    for op in fn.walk():
        for v in op.operands:
            uses[v] = uses.get(v, 0) + 1
    mapping = {}
    for add in [op for op in fn.walk() if op.name == "add" and op.results[0].type.is_block()]:
        for i in (0, 1):
            dot = add.operands[i].defining_op
            if dot is None or dot.name != "dot" or uses.get(dot.results[0]) != 1 or dot.parent is not add.parent:
                continue
            if dot.results[0].type != add.results[0].type or not _is_zero(dot.operands[2]):
                continue
            fused = Operation("dot", [dot.operands[0], dot.operands[1], add.operands[1 - i]],
                              [add.results[0].type], dict(dot.attrs), loc=dot.loc)
            ops = add.parent.ops
            fused.parent = add.parent
            ops[ops.index(add)] = fused
            ops.remove(dot)
            mapping[add.results[0]] = fused.results[0]
            break
    replace_uses(fn, mapping)


def _is_zero(v) -> bool:
    op = v.defining_op
    return op is not None and op.name == "constant" and not isinstance(op.attrs["value"], bool) \
        and op.attrs["value"] in (0, 0.0)
