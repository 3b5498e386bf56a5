"""Software pipelining through shared memory, for dots that run on Hopper's wgmma.

A `for` loop (constant positive step, nothing stored in its body) whose `dot` takes
both operands straight from block loads becomes, with S = the loop's `num_stages`:

    before the loop:  a ring of S + 1 tiles per operand (`local_alloc`); the copies of
                      iterations 0 .. S-2 issued (`async_copy`, one group each)
    each iteration i: wait until iteration i's group has landed (`async_wait`, S-2
                      groups may stay in flight), `fence_async_shared` and a barrier;
                      `warp_group_dot` on tile i % (S+1) of each ring, then wait until
                      only that dot is in flight; then the copies of iteration i + S-1
                      into tile (i + S-1) % (S+1), committed as one group
    after the loop:   wait for the last dot and drain the copies.

The copy of iteration i + S-1 overwrites the tile that the dot of iteration i - 2 read:
every warpgroup finished that dot before the barrier of iteration i (it waited for it in
iteration i - 1), which is why the ring has one tile more than there are stages.

The address and mask of a load are cloned for iteration i + S-1: they may use the
induction variable, values from outside the loop and carried values that advance by
pure ops (`ptrs += BLOCK_K * stride`); those get a look-ahead copy carried S-1 iterations
ahead. Masked-off elements are copied as zeros, so `other` must be absent or zero.

Each tile is stored with the loaded pointer's contiguous dim innermost, in rows of up to
128 bytes, swizzled as wgmma reads them (kiln.ir.types.shared_type).
"""
from __future__ import annotations

from kiln.ir.core import Operation, Value
from kiln.ir.types import block_type, int1, int32, scalar_of, shared_type

from ..layout import wgmma_layout
from ..occupancy import max_shared_per_cta
from . import axis_info
from .layouts import memory_width
from .prefetch import _clone, _const_int, address_cone
from .rewrite import has_side_effects

name = "smem_pipeline"

WGMMA_INPUTS = ("fp16", "bf16", "fp8e4nv", "fp8e5")
TRANSPOSABLE = ("fp16", "bf16")  # wgmma reads M- or N-major tiles of 16-bit types only
ALIGN = 1024  # a 128-byte swizzle repeats every 8 rows of 128 bytes


def enabled(ctx) -> bool:
    return ctx.target.name == "sm_90a" and not ctx.portable and ctx.num_warps % 4 == 0


def apply(fn, ctx) -> None:
    if not enabled(ctx):
        return
    axis_info.apply(fn, ctx)
    for loop in [op for op in fn.walk() if op.name == "for"]:
        stages = int(loop.attrs.get("num_stages", ctx.num_stages))
        if stages >= 2:
            plan = _plan(loop, stages, ctx)
            if plan is not None:
                _rewrite(loop, *plan)


# --- which loops ---------------------------------------------------------------------

def _zero(v) -> bool:
    op = v.defining_op
    return op is not None and op.name == "constant" and op.attrs["value"] in (0, 0.0) \
        and not isinstance(op.attrs["value"], bool)


def _operand_tile(load, role, instr_extent, ctx):
    """The shared tile type a loaded dot operand is copied into, or None.

    role "a" is [M, K], "b" is [K, N]; the pointer's contiguous dim is the tile's inner
    dim. K-major tiles (A's K, B's K inner) work for every input type; M/N-major ones
    for 16-bit types, with swizzle rows no wider than what one instruction reads."""
    t = load.results[0].type
    elem = scalar_of(t)
    order, vec = memory_width(ctx, load)
    inner = order[0]
    if vec * elem.itemsize < 4:  # cp.async moves 4, 8 or 16 bytes
        return None
    k_inner = (role == "a" and inner == 1) or (role == "b" and inner == 0)
    if not k_inner and elem.name not in TRANSPOSABLE:
        return None
    row_bytes = t.shape[inner] * elem.itemsize
    if not k_inner:
        row_bytes = min(row_bytes, instr_extent * elem.itemsize)
    swizzle = min(128, row_bytes)
    if swizzle < 32:
        return None
    return shared_type(elem, t.shape, swizzle, (inner, 1 - inner))


def _wgmma_dot(dot, ctx):
    """(A tile type, B tile type) when `dot` can run on wgmma from shared tiles."""
    a, b, acc = dot.operands
    if len(acc.type.shape) != 2 or scalar_of(acc.type).name != "fp32":
        return None
    elem = scalar_of(a.type)
    if elem.name not in WGMMA_INPUTS or scalar_of(b.type) != elem:
        return None
    K = a.type.shape[1]
    if K * elem.itemsize % 32:  # one instruction reads 32 bytes of k
        return None
    layout = wgmma_layout(acc.type.shape, ctx.num_warps)
    if layout is None:
        return None
    loads = [v.defining_op for v in (a, b)]
    if any(op is None or op.name != "load" or op.parent is not dot.parent or op.attrs.get("volatile")
           or (len(op.operands) == 3 and not _zero(op.operands[2])) for op in loads):
        return None
    tiles = (_operand_tile(loads[0], "a", 64, ctx), _operand_tile(loads[1], "b", layout.instr_n, ctx))
    return tiles if None not in tiles else None


def _plan(loop, stages, ctx):
    body = loop.regions[0]
    step = _const_int(loop.operands[2])
    if step is None or step <= 0:
        return None
    if any(has_side_effects(o) for o in body.ops):
        return None
    uses = {}
    for op in body.walk():
        for v in op.operands:
            uses[v] = uses.get(v, 0) + 1
    top_level = {id(o) for o in body.ops}
    arg_index = {id(a): i for i, a in enumerate(body.args[1:])}
    dots, stage_bytes = [], 0
    for dot in body.ops:
        if dot.name != "dot":
            continue
        tiles = _wgmma_dot(dot, ctx)
        acc_op = dot.operands[2].defining_op
        if tiles is None or any(uses[v] != 1 for v in dot.operands[:2]) or (acc_op is not None and id(acc_op) in top_level):
            continue  # the dot moves to the top of the body: its accumulator must be carried or from outside
        copies = []
        for v, tile in zip(dot.operands[:2], tiles):
            load = v.defining_op
            got = address_cone(load, load.operands[:2], body)
            if got is None:
                break
            copies.append((load, tile, *got))
        if len(copies) == 2:
            dots.append((dot, copies))
            stage_bytes += sum(tile.nbytes for _, tile, *_ in copies)
    if not dots:
        return None
    budget = max_shared_per_cta(ctx.target.capability) - ALIGN
    while stages > 2 and (stages + 1) * stage_bytes > budget:
        stages -= 1
    if (stages + 1) * stage_bytes > budget:
        return None
    return dots, stages, step, arg_index


# --- the rewrite -----------------------------------------------------------------------

def _op(out, name, operands, result_types=(), loc=None, **attrs):
    op = Operation(name, operands, result_types, attrs, loc=loc)
    out.append(op)
    return op.results[0] if op.results else op


def _const(out, value, loc, t=int32):
    return _op(out, "constant", [], [t], loc, value=value)


def _issue(out, copies, rings, slot, iv_at, ub, mapping, loc):
    """The copies of one iteration (its cone ops cloned under `mapping`) as one group."""
    inside = _op(out, "cmp", [iv_at, ub], [int1], loc, pred="lt")
    for (load, tile, cone_ops, _, _), ring in zip(copies, rings):
        out.extend(_clone(o, mapping) for o in cone_ops)
        operands = [mapping.get(v, v) for v in load.operands]
        shape = load.results[0].type.shape
        mask = _op(out, "splat", [inside], [block_type(int1, shape)], loc)
        if len(operands) > 1:
            mask = _op(out, "and", [operands[1], mask], [mask.type], loc)
        view = _op(out, "local_index", [ring, slot], [tile], loc)
        _op(out, "async_copy", [operands[0], view, mask], (), loc)
    _op(out, "async_commit", [], (), loc)


def _advance(out, copies, body, arg_index, current, iv_at):
    """The carried values the copies use, one iteration further: {arg id: value}."""
    used = sorted({a for c in copies for a in c[3]}, key=arg_index.get)  # by position: deterministic
    advance_ops = {id(o) for c in copies for o in c[4]}
    args, yields = body.args[1:], body.ops[-1].operands
    mapping = {body.args[0]: iv_at, **{args[arg_index[a]]: current[a] for a in used}}
    out.extend(_clone(o, mapping) for o in body.ops if id(o) in advance_ops)
    return {a: mapping.get(yields[arg_index[a]], yields[arg_index[a]]) for a in used}


def _rewrite(loop, dots, stages, step, arg_index):
    body = loop.regions[0]
    iv, args = body.args[0], body.args[1:]
    yields = list(body.ops[-1].operands)
    lb, ub = loop.operands[0], loop.operands[1]
    loc = loop.loc
    ring_size = stages + 1
    copies = [c for _, cs in dots for c in cs]
    used = sorted({a for c in copies for a in c[3]}, key=arg_index.get)  # by position: deterministic

    # before the loop: the rings, and iterations 0 .. S-2 in flight
    pre = []
    rings = [_op(pre, "local_alloc", [], [shared_type(t.element_ty, (ring_size,) + t.shape, t.swizzle, t.order)], loc)
             for _, t, *_ in copies]
    current = {a: loop.operands[3 + arg_index[a]] for a in used}
    iv_at = lb
    for s in range(stages - 1):
        mapping = {iv: iv_at, **{args[arg_index[a]]: current[a] for a in used}}
        _issue(pre, copies, rings, _const(pre, s, loc), iv_at, ub, mapping, loc)
        current = _advance(pre, copies, body, arg_index, current, iv_at)
        iv_at = _op(pre, "add", [iv_at, _const(pre, step, loc, iv.type)], [iv.type], loc)
    at = loop.parent.ops.index(loop)
    for i, op in enumerate(pre):
        op.parent = loop.parent
        loop.parent.ops.insert(at + i, op)

    # carried: the look-ahead values, the slot read and the slot written
    ahead = {a: body.add_arg(current[a].type) for a in used}
    loop.operands.extend(current[a] for a in used)
    read_slot, write_slot = body.add_arg(int32), body.add_arg(int32)
    zero = Operation("constant", [], [int32], {"value": 0}, loc=loc)
    last = Operation("constant", [], [int32], {"value": stages - 1}, loc=loc)
    for i, op in enumerate((zero, last)):
        op.parent = loop.parent
        loop.parent.ops.insert(loop.parent.ops.index(loop), op)
    loop.operands.extend([zero.results[0], last.results[0]])

    # the top of the body: consume iteration i, then issue iteration i + S-1
    top = []
    _op(top, "async_wait", [], (), loc, pending=stages - 2)
    _op(top, "fence_async_shared", [], (), loc)
    _op(top, "barrier", [], (), loc)
    replaced = {}
    k = 0
    for dot, cs in dots:
        views = [_op(top, "local_index", [rings[k + j], read_slot], [cs[j][1]], loc) for j in range(2)]
        k += 2
        acc = dot.operands[2]
        issued = _op(top, "warp_group_dot", [views[0], views[1], acc], [acc.type], dot.loc)
        replaced[dot.results[0]] = _op(top, "warp_group_dot_wait", [issued], [acc.type], dot.loc, pending=1)
    iv_ahead = _op(top, "add", [iv, _const(top, (stages - 1) * step, loc, iv.type)], [iv.type], loc)
    mapping = {iv: iv_ahead, **{args[arg_index[a]]: ahead[a] for a in used}}
    _issue(top, copies, rings, write_slot, iv_ahead, ub, mapping, loc)
    following = _advance(top, copies, body, arg_index, ahead, iv_ahead)
    next_slots = []
    for slot in (read_slot, write_slot):
        bumped = _op(top, "add", [slot, _const(top, 1, loc)], [int32], loc)
        wraps = _op(top, "cmp", [bumped, _const(top, ring_size, loc)], [int1], loc, pred="eq")
        next_slots.append(_op(top, "select", [wraps, _const(top, 0, loc), bumped], [int32], loc))

    # the old body without its loads and dots, after the new top
    gone = {id(c[0]) for c in copies} | {id(d) for d, _ in dots}
    rest = [op for op in body.ops if id(op) not in gone]
    for op in rest:
        op.operands = [replaced.get(v, v) for v in op.operands]
    body.ops[:] = []
    for op in top + rest:
        body.append(op)
    terminator = body.ops[-1]
    terminator.operands.extend([following[a] for a in used] + next_slots)
    for a in used:
        loop.results.append(Value(following[a].type, loop, len(loop.results)))
    for _ in next_slots:
        loop.results.append(Value(int32, loop, len(loop.results)))

    # after the loop: the last dots' results, and no copy left in flight
    after = []
    accs = [loop.results[i] for i, y in enumerate(terminator.operands[:len(yields)])
            if y in replaced.values()]
    if accs:
        waited = Operation("warp_group_dot_wait", accs, [v.type for v in accs], {"pending": 0}, loc=loc)
        after.append(waited)
        swap = dict(zip(accs, waited.results))
    else:
        swap = {}
    _op(after, "async_wait", [], (), loc, pending=0)
    parent = loop.parent
    at = parent.ops.index(loop) + 1
    for later in parent.ops[at:]:
        for op in later.walk():
            op.operands = [swap.get(v, v) for v in op.operands]
    for i, op in enumerate(after):
        op.parent = parent
        parent.ops.insert(at + i, op)
