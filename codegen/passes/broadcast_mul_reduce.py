"""`tl.sum(a[:, :, None] * b[None, :, :], axis=1)` becomes `tl.dot(a, b)`, as Triton's combine patterns do.

Written the first way, the product is an M x K x N block: 128 x 32 x 32 fp32 is 1024 registers a thread
on 4 warps (spilled) and a reduction through shared memory larger than the SM's. As a dot it is an M x N
accumulator on the tensor cores. Taken as Triton takes it: the sum's combine is one float add of 32 bits
or fewer, its operand a float `mul` of a broadcast `expand_dims(a, 2)` and a broadcast `expand_dims(b, 0)`
(either order), reduced along axis 1, M and N at least 16; the dot's accumulator is zeros of the
product's type, fp32 operands at tf32 (Triton's input precision for it). kiln also wants K at least 16
(the smallest K its tensor-core instructions take) and leaves fp16 and bf16 products alone where their
type is no dot's result type (bf16). The sum's value changes by rounding only (products summed in
another order, at tf32 for fp32), as on Triton; `dot_accumulate` then folds an `acc + sum` that follows.
"""
from __future__ import annotations

from kiln.ir.core import Operation
from kiln.ir.types import block_type, scalar_of

from .rewrite import replace_uses

name = "broadcast_mul_reduce"


def apply(fn, ctx=None) -> None:
    mapping = {}
    for reduce in [op for op in fn.walk() if op.name == "reduce"]:
        operands = _dot_operands(reduce)
        if operands is None:
            continue
        a, b = operands
        t = reduce.results[0].type
        zeros = Operation("constant", [], [t], {"value": 0.0}, loc=reduce.loc)
        precision = "tf32" if scalar_of(t).name == "fp32" else "ieee"
        dot = Operation("dot", [a, b, zeros.results[0]], [t], {"input_precision": precision}, loc=reduce.loc)
        ops = reduce.parent.ops
        at = ops.index(reduce)
        zeros.parent = dot.parent = reduce.parent
        ops[at:at + 1] = [zeros, dot]
        mapping[reduce.results[0]] = dot.results[0]
    replace_uses(fn, mapping)


def _dot_operands(reduce):
    """(a, b) where `reduce` is the sum over axis 1 of a[:, :, None] * b[None, :, :], else None."""
    if len(reduce.operands) != 1 or len(reduce.results) != 1 or reduce.attrs.get("axis") != 1 or not _sums(reduce):
        return None
    mul = reduce.operands[0].defining_op
    if mul is None or mul.name != "mul" or len(mul.operands) != 2:
        return None
    t = mul.results[0].type
    if not isinstance(t, block_type) or len(t.shape) != 3 or scalar_of(t).name not in ("fp32", "fp16"):
        return None
    sources = [_expanded(v) for v in mul.operands]
    if None in sources:
        return None
    by_axis = {axis: src for axis, src in sources}
    if set(by_axis) != {0, 2}:
        return None
    a, b = by_axis[2], by_axis[0]
    m, k, n = t.shape
    if m < 16 or n < 16 or k < 16 or list(a.type.shape) != [m, k] or list(b.type.shape) != [k, n]:
        return None
    return a, b


def _sums(reduce) -> bool:
    """Is the reduce's combine `add` of its two arguments, nothing else?"""
    body = reduce.regions[0]
    ops = body.ops
    if len(ops) != 2 or ops[0].name != "add" or ops[1].name != "yield":
        return False
    add, out = ops
    return set(map(id, add.operands)) == set(map(id, body.args)) and len(body.args) == 2 \
        and out.operands == [add.results[0]] and scalar_of(add.results[0].type).is_floating()


def _expanded(v):
    """(axis, source) where `v` is a broadcast of `expand_dims(source, axis)`, else None."""
    broadcast = v.defining_op
    if broadcast is None or broadcast.name != "broadcast":
        return None
    expand = broadcast.operands[0].defining_op
    if expand is None or expand.name != "expand_dims":
        return None
    return expand.attrs["axis"], expand.operands[0]
