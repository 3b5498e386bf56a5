"""Which layout an op reads each block operand in, and the check that a GPU-stage
function's encodings follow it.

After codegen's layout passes every block value's type carries an encoding (a
`kiln.ir.layout` layout), and every operand already is in the layout its op reads it in:
where a value is needed in another one, an explicit `convert_layout` gives it there.
`reads_in` is the rule per op; `check_layouts` holds a function to it, so lowering never
has to move data between layouts on its own.
"""
from __future__ import annotations

from .core import Function
from .layout import Blocked, Slice, Wgmma, same_distribution
from .types import block_type

# read in whatever layout they come in (through shared memory, or not at all)
ANY_LAYOUT = frozenset({"reshape", "permute", "join", "split", "cat", "local_store", "local_load", "warp_group_dot_wait",
                        "descriptor_load", "convert_layout", "assert", "return"})
# every block operand in the first operand's layout (the result follows from it)
FIRST_OPERANDS = frozenset({"reduce", "print", "histogram"})
# every block operand in the pointers' layout (the codegen pass may choose another one
# for them all: a coalesced store of an accumulator, a copy along the tile's inner dim)
POINTERS = frozenset({"store", "async_copy"})


def _encoding(v):
    return v.type.encoding if isinstance(v.type, block_type) else None


def reads_in(op, layout_of=_encoding) -> list:
    """Per operand of `op`, the layout it must be in (None: any, or not a block), given
    `layout_of(value)` for the values around it."""
    n = len(op.operands)
    name = op.name
    if name in ANY_LAYOUT:
        return [None] * n
    if name in FIRST_OPERANDS or name in POINTERS:
        first = layout_of(op.operands[0]) if n else None
        return [None] + [first] * (n - 1) if n else []
    if name == "expand_dims":
        out, src = layout_of(op.results[0]), layout_of(op.operands[0])
        if isinstance(src, Blocked) and src.insert_dim(op.attrs["axis"]) == out:
            return [None]
        return [Slice(op.attrs["axis"], out) if out is not None else None]
    if name == "gather":
        return [None, layout_of(op.results[0])]
    if name in ("dot", "warp_group_dot", "mma_dot"):
        out = layout_of(op.results[0])
        a = op.operands[0]
        if name == "warp_group_dot" and isinstance(a.type, block_type) and isinstance(out, Wgmma):
            return [Wgmma(out.warps, a.type.shape[1]), None, out]  # A in registers: wgmma's A fragment
        if name == "mma_dot":  # A or B in registers: the accumulator's distribution, whole rows per warp
            return [out if isinstance(v.type, block_type) else None for v in op.operands[:2]] + [out]
        return [None, None, out]
    if name == "for":
        return [None] * 3 + [layout_of(a) for a in op.regions[0].args[1:]]
    if name == "while":
        return [layout_of(a) for a in op.regions[0].args]
    if name in ("yield", "condition"):
        return _yielded(op, layout_of)
    if op.results and isinstance(op.results[0].type, block_type):  # elementwise and the like
        return [layout_of(op.results[0])] * n
    return [None] * n


def _yielded(op, layout_of) -> list:
    parent = op.parent.parent if op.parent is not None else None
    if parent is None:
        return [None] * len(op.operands)
    if op.name == "condition":  # while's before region: the condition, then the after region's args
        return [None] + [layout_of(a) for a in parent.regions[1].args]
    if parent.name == "for":
        return [layout_of(a) for a in parent.regions[0].args[1:]]
    if parent.name == "while":
        return [layout_of(a) for a in parent.regions[0].args]
    if parent.name == "if":
        return [layout_of(r) for r in parent.results]
    return [None] * len(op.operands)  # reduce and scan combine scalars


class LayoutError(ValueError):
    pass


def _describe(v) -> str:
    op = v.defining_op
    return f"{op.name}'s result" if op is not None else "a block argument"


def check_layouts(fn: Function, num_warps: int) -> None:
    """Raise LayoutError unless every block value of `fn` has an encoding and every op
    reads its operands in the layouts `reads_in` gives (or ones that put the same
    elements in the same threads' registers)."""
    for op in fn.walk():
        where = f"'{op.name}'" + (f" at {op.loc}" if op.loc else "")
        for v in op.defined_values():
            if isinstance(v.type, block_type) and v.type.encoding is None:
                raise LayoutError(f"{where}: {_describe(v)} of type {v.type} has no layout")
        for i, (v, want) in enumerate(zip(op.operands, reads_in(op))):
            if want is None or not isinstance(v.type, block_type):
                continue
            if not same_distribution(v.type.encoding, want, tuple(v.type.shape), num_warps):
                raise LayoutError(f"{where}: operand {i} is in {v.type.encoding} but is read in {want}; "
                                  f"a convert_layout must give it there")
        if op.name == "for":
            _same_as_carried(where, op.results, [_encoding(a) for a in op.regions[0].args[1:]], num_warps)
        elif op.name == "while":
            _same_as_carried(where, op.results, [_encoding(a) for a in op.regions[1].args], num_warps)


def _same_as_carried(where, results, carried, num_warps):
    for r, want in zip(results, carried):
        if isinstance(r.type, block_type) and \
                not same_distribution(r.type.encoding, want, tuple(r.type.shape), num_warps):
            raise LayoutError(f"{where}: a result in {r.type.encoding}, its carried value in {want}")
