"""Index math: block values computed from `arange`, `splat` and constants alone, which a kernel
recomputes in whatever layout an op reads them in rather than moving them through shared memory.

It is a property of the IR text: a value is index math when its op is one of INDEX_OPS and
every block operand is index math (loop-carried values never are), or when it is a
`convert_layout` of index math. The layout passes vote with it, scratch_barriers plans no
bytes for such a conversion, and lowering recomputes it: all three read it from the IR, so
a function dumped after the passes lowers as the compile lowered it.
"""
from __future__ import annotations

from .types import block_type

INDEX_OPS = frozenset({"constant", "arange", "splat", "broadcast", "expand_dims", "add", "sub", "mul", "div", "rem",
                       "and", "or", "xor", "shl", "shr", "min", "max", "cmp", "select", "cast", "addptr",
                       "multiple_of", "max_contiguous"})


def computes_index_math(op, index_values) -> bool:
    """Do `op`'s results extend `index_values` (the index math defined before it)?"""
    if op.name not in INDEX_OPS and op.name != "convert_layout":
        return False
    return all(v in index_values or not isinstance(v.type, block_type) for v in op.operands)


def index_values(fn) -> set:
    """The index-math values of `fn`, in program order (an operand is defined before its use)."""
    found: set = set()
    for op in fn.walk():
        if computes_index_math(op, found):
            found.update(op.results)
    return found
