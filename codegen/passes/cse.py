"""Common subexpression elimination for pure ops, scoped by region nesting: an op may
reuse an identical op of its own block or of an enclosing one."""
from __future__ import annotations

from kiln.ir.printer import format_attrs

from .rewrite import is_pure, replace_uses

name = "cse"


def apply(fn, ctx=None) -> None:
    mapping = {}
    _visit(fn.body, {}, mapping)
    replace_uses(fn, mapping)


def _key(op, mapping):
    operands = tuple(id(_find(mapping, v)) for v in op.operands)
    return (op.name, operands, format_attrs(op.attrs), tuple(str(r.type) for r in op.results))


def _find(mapping, v):
    while v in mapping:
        v = mapping[v]
    return v


def _visit(block, seen, mapping):
    seen = dict(seen)
    for op in block.ops:
        for region in op.regions:
            _visit(region, seen, mapping)
        if not is_pure(op) or not op.results:
            continue
        key = _key(op, mapping)
        if key in seen:
            for old, new in zip(op.results, seen[key].results):
                mapping[old] = new
        else:
            seen[key] = op
