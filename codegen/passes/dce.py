"""Dead code elimination: drop ops without side effects whose results nobody uses, and
loop-carried values of `for` loops that only feed their own next value (a pointer the
smem_pipeline pass no longer loads through, still advanced every iteration)."""
from __future__ import annotations

from kiln.ir import OPS

from .rewrite import has_side_effects

name = "dce"


def apply(fn, ctx=None) -> None:
    while _sweep(fn.body) or _drop_dead_carried(fn):
        pass


def _drop_dead_carried(fn) -> bool:
    used = _used(fn.body, set())
    for loop in [op for op in fn.walk() if op.name == "for"]:
        body = loop.regions[0]
        term = body.ops[-1]
        for i, (arg, result) in enumerate(zip(body.args[1:], loop.results)):
            if id(result) in used:
                continue
            cycle = _only_feeds(body, arg, term, i)
            if cycle is None:
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
            return True
    return False


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
    used = _used(root, set())
    changed = False

    def visit(block):
        nonlocal changed
        keep = []
        for op in block.ops:
            for region in op.regions:
                visit(region)
            removable = not OPS[op.name].terminator and not has_side_effects(op)
            if removable and not any(id(r) in used for r in op.results):
                changed = True
                continue
            keep.append(op)
        block.ops[:] = keep

    visit(root)
    return changed
