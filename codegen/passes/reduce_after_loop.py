"""A loop that folds a reduction of each step's block into a carried value -> each thread's own
elements reduced in the loop, the exchange between threads once after it (Triton's
OptimizeThreadLocality does the like).

    for ...:                                 acc = splat(identity) : <32x32>
        x = load ... : <32x128>              for ...:
        s = reduce x {axis = 1} (add)    ->      x = load ... : <32x128>
        local = add local, s : <32>              p = reduce (reshape x : <32x32x4>) {axis = 2} (add)
                                                 acc = add acc, p           (no exchange between threads)
                                             s = reduce acc {axis = 1} (add)
                                             local = add local0, s

Each step's reduction exchanged its partial sums between threads (shuffles, and shared memory
across warps); now each thread folds its own elements, and the exchange happens once. Where the
reduced dim is the block's last, the one a load's 16-byte vectors run along, the step's block is
split into runs of its loads' vectors (`_run`), which the layouts pass keeps in one thread, and
each run is reduced in the loop: the accumulator holds a thread's partial sums, a vector's worth
of elements fewer. Elsewhere the blocks are folded elementwise and all of the reduction happens
after the loop. The carried value's only use in the loop is that fold, the reduction's only use is
it too, and its combine is the fold's own op: add, max or min, or and / or / xor of integers
(float sums add in another order, as on Triton). The accumulator costs each thread its elements in
registers again, so only accumulators of at most `MAX_ELEMENTS` a thread take it.
"""
from __future__ import annotations

from kiln.ir.core import Block, Operation
from kiln.ir.ops import ELEMENTWISE_OPS
from kiln.ir.types import block_type, scalar_of

from ..analysis import Analysis
from ..analysis.access import memory_width
from .rewrite import clone_op, insert_ops, replace_uses

name = "reduce_after_loop"

MAX_ELEMENTS = 32  # a thread's elements of the accumulator
_FOLDS = {"add", "max", "min"}
_INT_FOLDS = {"and", "or", "xor"}


def apply(fn, ctx) -> None:
    ctx = Analysis(fn, ctx)  # the options, and the loads' contiguity (what their vectors will be)
    for loop in [op for op in fn.walk() if op.name == "for"]:
        body = loop.regions[0]
        uses = _use_counts(body)
        for j in range(len(loop.results)):
            found = _fold(loop, j, uses, ctx)
            if found is not None:
                _rewrite(fn, loop, j, *found)


def _use_counts(body) -> dict:
    uses = {}
    for op in body.walk():
        for v in op.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    return uses


def _fold(loop, j, uses, ctx):
    """(the fold, the reduction, its runs: `_run`) where carried value `j` is `fold(arg, reduce(x))` as
    above, else None."""
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
    run = _run(x, reduce.attrs["axis"], ctx)
    if x.type.numel // run > MAX_ELEMENTS * 32 * ctx.num_warps:
        return None
    return fold, reduce, run


def _run(x, axis: int, ctx) -> int:
    """How many consecutive elements along `axis` each thread is expected to hold of block `x`: where
    `axis` is the last dim, `x` is computed elementwise from loads and each load's vectors run along
    it, the narrowest of those vectors (their 16 bytes, or what the pointers' alignment allows:
    kiln.codegen.analysis.access), as the layouts pass will lay them out; else 1 (folded whole)."""
    t = x.type
    loads = _loads(x) if axis == len(t.shape) - 1 else None
    if not loads:
        return 1
    run = t.shape[axis] // 2  # (at least two runs a step)
    for load in loads:
        order, vec = memory_width(ctx, load)
        run = min(run, vec if order[0] == axis else 1)
    return run if run > 1 else 1


def _loads(x):
    """The loads block `x` is computed from elementwise (no dot, reduction or shape op between), or None."""
    seen, todo, loads = set(), [x], []
    while todo:
        op = todo.pop().defining_op
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        if op.name == "load":
            loads.append(op)
        elif op.name in ("splat", "broadcast", "constant", "arange"):
            continue  # values the same along the run, or index math
        elif op.name in ELEMENTWISE_OPS and op.name != "addptr":
            todo.extend(v for v in op.operands if isinstance(v.type, block_type))
        else:
            return None
    return loads


def _identity(fold_name, elem):
    """The value `fold_name` leaves any element of type `elem` as it is: -0.0 for a float sum."""
    if elem.is_floating():
        return {"add": -0.0, "max": float("-inf"), "min": float("inf")}[fold_name]
    bits = elem.primitive_bitwidth
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if elem.signed else (0, (1 << bits) - 1)
    return {"add": 0, "or": 0, "xor": 0, "max": low, "min": high, "and": -1 if elem.signed else high}[fold_name]


def _rewrite(fn, loop, j, fold, reduce, run):
    body = loop.regions[0]
    arg, result = body.args[1 + j], loop.results[j]
    x = _thread_partials(body, fold, reduce, run)
    init = loop.operands[3 + j]
    parent, loc = loop.parent, fold.loc
    # before the loop: the accumulator from the fold's identity
    start = Operation("constant", [], [x.type], {"value": _identity(fold.name, scalar_of(x.type))}, loc=loc)
    insert_ops(parent, parent.ops.index(loop), [start])
    loop.operands[3 + j] = start.results[0]
    # in the loop: the block (or each thread's runs of it, reduced) folded elementwise, where the fold was
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


def _thread_partials(body, fold, reduce, run: int):
    """What the loop folds: the reduction's block, or where it splits into runs (`_run`) the block
    reshaped to [..., n / run, run] and reduced along the runs, in the loop before the fold."""
    x, axis = reduce.operands[0], reduce.attrs["axis"]
    if run == 1:
        return x
    shape = tuple(x.type.shape)
    runs = Operation("reshape", [x], [block_type(x.type.element_ty, shape[:axis] + (shape[axis] // run, run))],
                     loc=reduce.loc)
    partial = Operation("reduce", [runs.results[0]], [block_type(x.type.element_ty, shape[:axis] + (shape[axis] // run,))],
                        {"axis": axis + 1}, regions=[_copied(reduce.regions[0])], loc=reduce.loc)
    insert_ops(body, body.ops.index(fold), [runs, partial])
    return partial.results[0]


def _copied(combine: Block) -> Block:
    out = Block([a.type for a in combine.args])
    mapping = dict(zip(combine.args, out.args))
    for op in combine.ops:
        out.append(clone_op(op, mapping))
    return out
