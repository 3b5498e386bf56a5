"""Dead code elimination: drop ops without side effects whose results nobody uses, and
loop-carried values of `for` loops that only feed their own next value (a pointer the
smem_pipeline pass no longer loads through, still advanced every iteration)."""
from __future__ import annotations

from kiln.ir import OPS
from kiln.ir.core import Operation

from .rewrite import has_side_effects

name = "dce"
KEPT = {"assume"}  # no result and no side effect, but what it says stays true where it stands


def apply(fn, ctx=None) -> None:
    while _sweep(fn.body) or _drop_dead_carried(fn):
        pass


def _drop_dead_carried(fn) -> bool:
    """Drop every dead loop-carried cycle there is now (one found may free another in its loop),
    so that a sweep follows each round of them, not each one."""
    used = _used(fn.body, set())  # a loop's results are read after it: dropping its body's ops keeps this
    dropped = False
    for loop in [op for op in fn.walk() if op.name == "for"]:
        body = loop.regions[0]
        term = body.ops[-1]
        i = 0
        while i < len(loop.results):
            arg, result = body.args[1 + i], loop.results[i]
            cycle = None if id(result) in used else _only_feeds(body, arg, term, i)
            if cycle is None:
                i += 1
                continue
            body.ops[:] = [op for op in body.ops if id(op) not in cycle]
            del term.operands[i]
            del body.args[1 + i]
            del loop.operands[3 + i]
            del loop.results[i]
            for j, a in enumerate(body.args):
                a.index = j
            for j, r in enumerate(loop.results):
                r.index = j
            dropped, i = True, 0  # the ops dropped may have been all that kept an earlier one
    return dropped


def _only_feeds(body, arg, term, i):
    """The ids of the body ops computed from `arg` if they are pure, top-level and used
    only by each other and by the yield's operand `i`; else None."""
    members, values, changed = set(), {id(arg)}, True
    while changed:
        changed = False
        for op in body.ops:
            if id(op) not in members and any(id(v) in values for v in op.operands) and op is not term:
                if op.regions or has_side_effects(op):
                    return None
                members.add(id(op))
                values.update(id(r) for r in op.results)
                changed = True
    for op in body.walk():
        if id(op) in members:
            continue
        for k, v in enumerate(op.operands):
            if id(v) in values and not (op is term and k == i):
                return None
    return members


def _used(block, out):
    for op in block.ops:
        out.update(id(v) for v in op.operands)
        for region in op.regions:
            _used(region, out)
    return out


def _sweep(root) -> bool:
    """Drop every removable op (no terminator, no side effects within) whose results nothing
    kept uses, and then what only they used, in one walk: a use count per value, lowered as
    ops die, an op in a dead op's regions dying with it. (The fixpoint of sweeping unused ops
    again and again, which cost a sweep of the whole function per link of a dead chain.)"""
    uses, removable, order = {}, {}, []

    def count(block) -> bool:
        """Count the uses in `block`; does anything in it have side effects?"""
        any_effects = False
        for op in block.ops:
            for v in op.operands:
                uses[id(v)] = uses.get(id(v), 0) + 1
            spec = OPS[op.name]
            effects = bool(spec.side_effects or op.attrs.get("volatile"))
            for region in op.regions:
                effects = count(region) or effects
            removable[id(op)] = not effects and not spec.terminator and op.name not in KEPT
            any_effects = any_effects or effects
            order.append(op)
        return any_effects

    count(root)
    dead = set()

    def unused(op) -> bool:
        return removable[id(op)] and id(op) not in dead and not any(uses.get(id(r)) for r in op.results)

    def kill(op, work) -> None:
        stack = [op]
        while stack:
            inner = stack.pop()
            dead.add(id(inner))
            for v in inner.operands:
                uses[id(v)] -= 1
                if not uses[id(v)] and isinstance(v.owner, Operation) and unused(v.owner):
                    work.append(v.owner)
            for region in inner.regions:
                stack.extend(o for o in region.ops if id(o) not in dead)

    for op in reversed(order):  # users before what they use
        work = [op] if unused(op) else []
        while work:
            victim = work.pop()
            if id(victim) not in dead:
                kill(victim, work)
    if not dead:
        return False

    def drop(block) -> None:
        block.ops[:] = [op for op in block.ops if id(op) not in dead]
        for op in block.ops:
            for region in op.regions:
                drop(region)

    drop(root)
    return True
