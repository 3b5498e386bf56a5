"""`tl.range(..., loop_unroll_factor=N)`: the loop's body N times per iteration, as Triton's TTIR
has it (its LoopUnroll pass runs where its frontend ends, so `asm["ttir"]` shows the copies).

    for iv in range(lb, ub, step): body
becomes
    for iv in range(lb, lb + max(ub - lb, 0) // (N * step) * (N * step), N * step):
        body(iv); body(iv + step); ... body(iv + (N - 1) * step)      (carried values chained)
    for iv in range(that bound, ub, step): body                          (the remainder, num_stages=1)

on block IR, after the frontend built it. The remainder loop is left out where the bounds are
constants and the trip count is a multiple of N. A loop whose step is not a positive constant
keeps its single body (the factor is a hint; the rewrite above assumes the loop counts up).
"""
from __future__ import annotations

from kiln.ir.core import Block, Function, Operation, Value, const_int

HINT = "loop_unroll_factor"


def unroll_loops(fn: Function) -> None:
    """Unroll, in place, every `for` of `fn` that carries a factor above 1 (innermost first)."""
    _unroll_in(fn.body)


def _unroll_in(block: Block) -> None:
    i = 0
    while i < len(block.ops):
        op = block.ops[i]
        for region in op.regions:
            _unroll_in(region)
        made = _unrolled(op) if op.name == "for" else None
        if made is None:
            i += 1
            continue
        for new in made:
            new.parent = block
        block.ops[i:i + 1] = made
        i += len(made)


def _unrolled(loop: Operation) -> list[Operation] | None:
    """The ops that replace `loop`, or None where it stays as it is."""
    factor = loop.attrs.get(HINT)
    step = const_int(loop.operands[2])
    if not isinstance(factor, int) or factor <= 1 or step is None or step <= 0:
        return None
    lb, ub = loop.operands[:2]
    iv_type, loc = lb.type, loop.loc
    attrs = {k: v for k, v in loop.attrs.items() if k != HINT}
    out: list[Operation] = []

    def emit(name, operands, **op_attrs):
        op = Operation(name, operands, [iv_type], op_attrs, loc=loc)
        out.append(op)
        return op.results[0]

    stride = factor * step
    first, last = const_int(lb), const_int(ub)
    if first is not None and last is not None:
        main_end = emit("constant", [], value=first + max(last - first, 0) // stride * stride)
        remainder = (max(last - first, 0) + step - 1) // step % factor != 0
    else:
        span = emit("max", [emit("sub", [ub, lb]), emit("constant", [], value=0)])
        main_end = emit("add", [lb, emit("mul", [emit("div", [span, emit("constant", [], value=stride)]),
                                                 emit("constant", [], value=stride)])])
        remainder = True
    body = loop.regions[0]
    main = Block([a.type for a in body.args])
    carried = list(main.args[1:])
    for k in range(factor):
        iv = main.args[0]
        if k:
            iv = _append(main, "add", [iv, _append(main, "constant", [], iv_type, loc, value=k * step)], iv_type, loc)
        carried = _inline(body, [iv] + carried, main)
    main.append(Operation("yield", carried, (), {}, loc=body.terminator.loc))
    main_loop = Operation("for", [lb, main_end, emit("constant", [], value=stride)] + list(loop.operands[3:]),
                          [r.type for r in loop.results], attrs, [main], loc)
    out.append(main_loop)
    results = main_loop.results
    if remainder:
        rest = Operation("for", [main_end, ub, loop.operands[2]] + list(results), [r.type for r in loop.results],
                         {**attrs, "num_stages": 1}, [body], loc)  # as Triton's: the remainder is not pipelined
        out.append(rest)
        results = rest.results
    _replace_after(loop, dict(zip(loop.results, results)))
    return out


def _append(block: Block, name, operands, result_type, loc, **attrs) -> Value:
    return block.append(Operation(name, operands, [result_type], attrs, loc=loc)).results[0]


def _inline(body: Block, args: list[Value], into: Block) -> list[Value]:
    """A copy of `body` (up to its yield) appended to `into`, its arguments bound to `args`; the
    values its yield gives."""
    mapping = dict(zip(body.args, args))
    for op in body.ops[:-1]:
        into.append(_clone(op, mapping))
    return [mapping.get(v, v) for v in body.terminator.operands]


def _clone(op: Operation, mapping: dict) -> Operation:
    regions = []
    for region in op.regions:
        block = Block([a.type for a in region.args])
        mapping.update(zip(region.args, block.args))
        for inner in region.ops:
            block.append(_clone(inner, mapping))
        regions.append(block)
    new = Operation(op.name, [mapping.get(v, v) for v in op.operands], [r.type for r in op.results],
                    dict(op.attrs), regions, op.loc)
    mapping.update(zip(op.results, new.results))
    return new


def _replace_after(loop: Operation, mapping: dict) -> None:
    """Every use of the loop's results after it (in its block and the blocks around) reads `mapping`'s."""
    block = loop.parent
    while block is not None:
        start = block.ops.index(loop) + 1 if loop in block.ops else 0
        for op in block.ops[start:]:
            for inner in op.walk():
                inner.operands = [mapping.get(v, v) for v in inner.operands]
        owner = block.parent
        if not isinstance(owner, Operation):
            return
        loop, block = owner, owner.parent
