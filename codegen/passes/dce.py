"""Dead code elimination: drop ops without side effects whose results nobody uses."""
from __future__ import annotations

from kiln.ir import OPS

from .rewrite import has_side_effects

name = "dce"


def apply(fn, ctx=None) -> None:
    while _sweep(fn.body):
        pass


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
