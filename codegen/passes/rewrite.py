"""Small helpers the rewriting passes share: purity of ops, use replacement, and building ops
(appended to a list, inserted into a block, cloned under a value mapping)."""
from __future__ import annotations

from kiln.ir import OPS, Function
from kiln.ir.core import Block, Operation, Value, const_int  # noqa: F401  (the passes take it from here)
from kiln.ir.types import int1, int32

# Ops that read memory: they can be removed when unused but must not be merged (a store
# in between may change what they read).
READS_MEMORY = {"load"}


def has_side_effects(op: Operation) -> bool:
    if OPS[op.name].side_effects or op.attrs.get("volatile"):
        return True
    return any(has_side_effects(inner) for region in op.regions for inner in region.walk())


def is_pure(op: Operation) -> bool:
    """Can be merged with an identical op or dropped when unused."""
    return not op.regions and not has_side_effects(op) and op.name not in READS_MEMORY


def is_transpose(op) -> bool:
    """Is `op` a 2-D transpose (`tl.trans`: a permute of order [1, 0])?"""
    return op is not None and op.name == "permute" and list(op.attrs["order"]) == [1, 0]


def swaps_tile_dims(op) -> bool:
    """Is `op` a permute swapping a block's last two dims: `tl.trans` of a 2-D block, or of each batch's
    tile of a 3-D one (order [0, 2, 1])?"""
    return op is not None and op.name == "permute" and list(op.attrs["order"]) in ([1, 0], [0, 2, 1])


def replace_uses(fn: Function, mapping: dict[Value, Value]) -> None:
    """Make every operand that is a key of `mapping` its value, everywhere in `fn`."""
    if not mapping:
        return
    for op in fn.walk():
        op.operands = [_resolve(mapping, v) for v in op.operands]


def _resolve(mapping, v):
    while v in mapping:
        v = mapping[v]
    return v


def blocks(fn_or_block) -> list[Block]:
    """Every block of a function, outermost first."""
    root = fn_or_block.body if isinstance(fn_or_block, Function) else fn_or_block
    out = [root]
    for op in root.walk():
        out.extend(op.regions)
    return out


def in_loop(op: Operation) -> bool:
    """Whether `op` sits in the body of a `for` or `while`, at any depth."""
    owner = op.parent.parent  # the op whose region holds `op` (the Function at the top)
    while isinstance(owner, Operation):
        if owner.name in ("for", "while"):
            return True
        owner = owner.parent.parent
    return False


def append_op(out, name, operands, result_types=(), loc=None, **attrs):
    """A new op appended to `out` (a list of ops): its one result, or the op where it has none."""
    op = Operation(name, operands, result_types, attrs, loc=loc)
    out.append(op)
    return op.results[0] if op.results else op


def append_const(out, value, loc, t=int32):
    return append_op(out, "constant", [], [t], loc, value=value)


def trip_count(out, loop):
    """max(cdiv(ub - lb, step), 0) of a `for` with a constant positive step, as ops appended to `out`."""
    lb, ub, step = loop.operands[:3]
    span = append_op(out, "sub", [ub, lb], [int32], loop.loc)
    s = const_int(step)
    if s != 1:
        span = append_op(out, "add", [span, append_const(out, s - 1, loop.loc)], [int32], loop.loc)
        span = append_op(out, "div", [span, step], [int32], loop.loc)
    return append_op(out, "max", [span, append_const(out, 0, loop.loc)], [int32], loop.loc)


def insert_ops(block, at, ops):
    """`ops` into `block` from index `at` on, in order."""
    for i, op in enumerate(ops):
        op.parent = block
        block.ops.insert(at + i, op)


def clone_op(op, mapping):
    """A copy of `op` reading `mapping`'s values where it has them; its results join `mapping`."""
    new = Operation(op.name, [mapping.get(v, v) for v in op.operands], [r.type for r in op.results],
                    dict(op.attrs), loc=op.loc)
    for old, res in zip(op.results, new.results):
        mapping[old] = res
    return new


def recomputable_cone(values, before):
    """The ops of `before` that `values` need, in order (shared buffers not followed), or None
    where one is not plain arithmetic that may be computed again elsewhere: a region, a load, a
    side effect other than a volatile move (`inline_asm`)."""
    where = {id(op) for op in before}
    need, todo = set(), [v.defining_op for v in values]
    while todo:
        op = todo.pop()
        if op is None or id(op) not in where or id(op) in need or op.name == "local_alloc":
            continue
        if op.regions or op.name == "load" or (has_side_effects(op) and op.name != "inline_asm"):
            return None
        need.add(id(op))
        todo.extend(v.defining_op for v in op.operands)
    return [op for op in before if id(op) in need]


def slot_after(out, base, offset, ring_size, loc):
    """(base + offset) % ring_size for 0 <= base, offset < ring_size: an add, a compare, a select."""
    if offset == 0:
        return base
    bumped = append_op(out, "add", [base, append_op(out, "constant", [], [int32], loc, value=offset)], [int32], loc)
    wraps = append_op(out, "cmp", [bumped, append_op(out, "constant", [], [int32], loc, value=ring_size)], [int1], loc, pred="ge")
    less = append_op(out, "sub", [bumped, append_op(out, "constant", [], [int32], loc, value=ring_size)], [int32], loc)
    return append_op(out, "select", [wraps, less, bumped], [int32], loc)


def constant_trips(lb, ub, step):
    """How many times a `for` over int bounds runs, or None (a bound not known, a step not positive)."""
    if None in (lb, ub, step) or step <= 0:
        return None
    return max(0, -(-(ub - lb) // step))


def loop_trips(loop):
    """How many times `for` op `loop` runs, where its bounds and step are constants, else None."""
    return constant_trips(*(const_int(v) for v in loop.operands[:3]))
