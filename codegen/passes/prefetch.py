"""Software pipelining of loads in loops (with `num_stages` >= 2): each iteration issues
the loads of the next one before it computes, so their latency overlaps the work.

For a `for` loop whose body stores nothing (so no iteration can read what another
wrote), every block `load` at the top of the body whose address and mask are pure
functions of the induction variable and of carried values (themselves advanced by pure
ops, like `ptrs += BLOCK_K * stride`) becomes a carried value:

    before the loop:   x0 = load(addr(lb, init), mask & lb < ub)
    top of the body:   x_next = load(addr(iv + step, advanced args), mask & iv + step < ub)
    the body uses the carried x; the yield passes x_next on.

The loop's step must be a positive constant. Which loops: see `_wanted`. This is the register form of Triton's
pipeliner; shared-memory stages (`cp.async`) would be the next step.
"""
from __future__ import annotations

from kiln.ir.core import Operation, Value
from kiln.ir.ops import GPU_STAGE_OPS
from kiln.ir.types import block_type, int1

from .rewrite import clone_op, const_int, has_side_effects, is_pure

name = "prefetch"
SHARED_ONLY = GPU_STAGE_OPS | {"barrier"}  # side effects on shared memory and barriers only


def apply(fn, ctx) -> None:
    for op in list(fn.walk()):
        if op.name == "for" and _wanted(op, ctx):
            pipeline(op)


def _cone(value, local_ops):
    """The body ops `value` depends on, in body order; None if one of them is not pure."""
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        op = v.defining_op
        if op is None or id(op) not in local_ops or id(op) in seen:
            continue
        if not is_pure(op):
            return None
        seen.add(id(op))
        stack.extend(op.operands)
    return seen


def _args_used(ops, body):
    args = {id(a): a for a in body.args}
    return {id(v) for op in ops for v in op.operands if id(v) in args}


def address_cone(load, operands, body):
    """How `operands` of `load` (a top-level op of loop body `body`) are computed, if a
    later iteration's can be: (the pure body ops they need in body order, the ids of the
    carried args those use, the pure body ops that advance those args), or None."""
    order = {id(o): i for i, o in enumerate(body.ops)}
    by_id = {id(o): o for o in body.ops}
    iv, args = body.args[0], body.args[1:]
    yields = body.ops[-1].operands
    arg_index = {id(a): i for i, a in enumerate(args)}
    cone = set()
    for v in operands:
        got = _cone(v, order)
        if got is None:
            return None
        cone |= got
    cone_ops = [by_id[i] for i in sorted(cone, key=order.get)]
    used = _args_used(cone_ops + [load], body) - {id(iv)}
    advance = set()
    for a in used:  # the carried values the address needs must advance purely
        got = _cone(yields[arg_index[a]], order)
        if got is None:
            return None
        advance |= got
    return cone_ops, used, [by_id[i] for i in sorted(advance, key=order.get)]


def _wanted(loop, ctx) -> bool:
    """As Triton: a loop asks for it with `tl.range(..., num_stages=n)`, and by default
    (the `num_stages` option) only loops that feed tensor cores are pipelined; a
    row-at-a-time loop would only trade occupancy for nothing."""
    stages = loop.attrs.get("num_stages")
    if stages is not None:
        return int(stages) >= 2
    return ctx.num_stages >= 2 and any(op.name == "dot" for op in loop.regions[0].ops)


def pipeline(loop, shared_ok=False):
    """Carry loop `loop`'s loads one iteration ahead (see the module's docstring). With
    `shared_ok` the body may hold the GPU stage's shared-memory ops (a loop that
    smem_pipeline rewrote): they write no global memory that a load could read."""
    body = loop.regions[0]
    step = const_int(loop.operands[2])
    if step is None or step <= 0 or any(has_side_effects(o) and not (shared_ok and o.name in SHARED_ONLY)
                                        for o in body.ops):
        return
    iv, args = body.args[0], body.args[1:]
    yields = body.ops[-1].operands
    arg_index = {id(a): i for i, a in enumerate(args)}
    candidates = []
    for op in body.ops:
        if op.name != "load" or op.attrs.get("volatile") or not isinstance(op.results[0].type, block_type):
            continue
        got = address_cone(op, op.operands, body)
        if got is not None:
            candidates.append((op, *got))
    if not candidates:
        return
    lb, ub = loop.operands[0], loop.operands[1]
    parent = loop.parent
    at = parent.ops.index(loop)
    prologue, top = [], []
    steps = Operation("constant", (), [iv.type], {"value": step}, loc=loop.loc)
    iv_next = Operation("add", [iv, steps.results[0]], [iv.type], loc=loop.loc)
    top += [steps, iv_next]
    for load, cone_ops, used, advance in candidates:
        # before the loop: iteration lb's values
        pre_map = {iv: lb}
        pre_map.update({args[arg_index[a]]: loop.operands[3 + arg_index[a]] for a in used})
        prologue += [clone_op(o, pre_map) for o in cone_ops]
        first = _guarded_load(load, pre_map, lb, ub, prologue)
        # top of the body: advance the carried values, then load the next iteration
        advanced = {}
        top += [clone_op(o, advanced) for o in advance]
        next_map = {iv: iv_next.results[0]}
        for a in used:
            y = yields[arg_index[a]]
            next_map[args[arg_index[a]]] = advanced.get(y, y)
        top += [clone_op(o, next_map) for o in cone_ops]
        following = _guarded_load(load, next_map, iv_next.results[0], ub, top)
        # carry it: a new loop operand, body argument, yield operand and result
        carried = body.add_arg(load.results[0].type)
        loop.operands.append(first)
        body.ops[-1].operands.append(following)
        loop.results.append(Value(load.results[0].type, loop, len(loop.results)))
        _replace_in(body, load.results[0], carried)
        body.ops.remove(load)
    for i, op in enumerate(prologue):
        op.parent = parent
        parent.ops.insert(at + i, op)
    for i, op in enumerate(top):
        op.parent = body
        body.ops.insert(i, op)


def _guarded_load(load, mapping, index, ub, out):
    """A clone of `load` whose mask also requires `index < ub`; appends its ops to `out`."""
    shape = load.results[0].type.shape
    loc = load.loc
    inside = Operation("cmp", [index, ub], [int1], {"pred": "lt"}, loc=loc)
    spread = Operation("splat", [inside.results[0]], [block_type(int1, shape)], loc=loc)
    out += [inside, spread]
    mask = spread.results[0]
    operands = [mapping.get(v, v) for v in load.operands]
    if len(operands) > 1:
        both = Operation("and", [operands[1], mask], [mask.type], loc=loc)
        out.append(both)
        mask = both.results[0]
    new = Operation("load", [operands[0], mask] + operands[2:], [load.results[0].type], dict(load.attrs), loc=loc)
    out.append(new)
    return new.results[0]


def _replace_in(block, old, new):
    for op in block.walk():
        op.operands = [new if v is old else v for v in op.operands]
