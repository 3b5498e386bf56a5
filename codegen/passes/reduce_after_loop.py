"""A loop that folds a reduction of each step's block into a carried value -> the blocks folded
elementwise, one reduction after the loop (Triton's OptimizeThreadLocality does the like).

    for ...:                                 acc = splat(identity) : <32x128>
        x = load ... : <32x128>              for ...:
        s = reduce x {axis = 1} (add)    ->      x = load ... : <32x128>
        local = add local, s : <32>              acc = add acc, x          (no exchange between threads)
                                             s = reduce acc {axis = 1} (add)
                                             local = add local0, s

Each step's reduction exchanged its partial sums between threads (shuffles, and shared memory
across warps); now each thread folds its own elements, and the exchange happens once. The
carried value's only use in the loop is that fold, the reduction's only use is it too, and its
combine is the fold's own op: add, max or min, or and / or / xor of integers (float sums add in
another order, as on Triton). The accumulator costs each thread the block's elements in registers
again, so only blocks of at most `MAX_ELEMENTS` a thread take it.
"""
from __future__ import annotations

from kiln.ir.core import Operation
from kiln.ir.types import scalar_of

from .rewrite import insert_ops, replace_uses

name = "reduce_after_loop"

MAX_ELEMENTS = 32  # a thread's elements of the folded block
_FOLDS = {"add", "max", "min"}
_INT_FOLDS = {"and", "or", "xor"}


def apply(fn, ctx) -> None:
    for loop in [op for op in fn.walk() if op.name == "for"]:
        body = loop.regions[0]
        uses = _use_counts(body)
        for j in range(len(loop.results)):
            found = _fold(loop, j, uses, ctx.num_warps)
            if found is not None:
                _rewrite(fn, loop, j, *found)


def _use_counts(body) -> dict:
    uses = {}
    for op in body.walk():
        for v in op.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    return uses


def _fold(loop, j, uses, num_warps):
    """(the fold, the reduction) where carried value `j` is `fold(arg, reduce(x))` as above, else None."""
    body = loop.regions[0]
    arg, term = body.args[1 + j], body.ops[-1]
    fold = term.operands[j].defining_op
    if fold is None or fold.parent is not body or len(fold.operands) != 2 or arg not in fold.operands:
        return None
    s = fold.operands[1] if fold.operands[0] is arg else fold.operands[0]
    reduce = s.defining_op
    if reduce is None or reduce.name != "reduce" or reduce.parent is not body or len(reduce.operands) != 1:
        return None
    if uses.get(id(arg)) != 1 or uses.get(id(s)) != 1 or uses.get(id(fold.results[0])) != 1:
        return None
    x = reduce.operands[0]
    elem = scalar_of(x.type)
    if fold.name not in _FOLDS | (_INT_FOLDS if elem.is_int() else set()) or elem != scalar_of(arg.type):
        return None
    combine = reduce.regions[0]
    if len(combine.ops) != 2 or combine.ops[0].name != fold.name or combine.ops[0].attrs != fold.attrs \
            or set(map(id, combine.ops[0].operands)) != set(map(id, combine.args)) \
            or combine.ops[1].operands != [combine.ops[0].results[0]]:
        return None
    if x.type.numel > MAX_ELEMENTS * 32 * num_warps:
        return None
    return fold, reduce


def _identity(fold_name, elem):
    """The value `fold_name` leaves any element of type `elem` as it is: -0.0 for a float sum."""
    if elem.is_floating():
        return {"add": -0.0, "max": float("-inf"), "min": float("inf")}[fold_name]
    bits = elem.primitive_bitwidth
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if elem.signed else (0, (1 << bits) - 1)
    return {"add": 0, "or": 0, "xor": 0, "max": low, "min": high, "and": -1 if elem.signed else high}[fold_name]


def _rewrite(fn, loop, j, fold, reduce):
    body = loop.regions[0]
    arg, result = body.args[1 + j], loop.results[j]
    x = reduce.operands[0]
    init = loop.operands[3 + j]
    parent, loc = loop.parent, fold.loc
    # before the loop: the accumulator from the fold's identity
    start = Operation("constant", [], [x.type], {"value": _identity(fold.name, scalar_of(x.type))}, loc=loc)
    insert_ops(parent, parent.ops.index(loop), [start])
    loop.operands[3 + j] = start.results[0]
    # in the loop: the block folded elementwise, where the reduction and the fold were
    arg.type = x.type
    folded = Operation(fold.name, [arg, x], [x.type], dict(fold.attrs), loc=loc)
    at = body.ops.index(fold)
    body.ops[at] = folded
    folded.parent = body
    body.ops.remove(reduce)
    body.ops[-1].operands[j] = folded.results[0]
    # after it: the reduction, then the fold of the value the loop started from, which the loop's users read
    replace_uses(fn, {result: fold.results[0]})
    result.type = x.type
    reduce.operands = [result]
    fold.operands = [init, reduce.results[0]]
    insert_ops(parent, parent.ops.index(loop) + 1, [reduce, fold])
