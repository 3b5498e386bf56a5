"""Software pipelining of loads in loops (with `num_stages` >= 2): each iteration issues
the loads of the next one before it computes, so their latency overlaps the work.

Every `load` (a block or a scalar) at the top of a `for` loop's body (before its first store, or
anywhere in a loop whose stores write only what none of its loads reads) whose address and mask
are pure functions of the induction variable and of carried values (themselves advanced by pure
ops, like `ptrs += BLOCK_K * stride`) becomes a carried value:

    before the loop:   x0 = load(addr(lb, init), mask & lb in range)
    top of the body:   x_next = load(addr(iv + step, advanced args), mask & iv + step in range)
    the body uses the carried x; the yield passes x_next on.

"In range" is `< ub` for a positive step and `> ub` for a negative one (a step known only at
run time picks between the two, as the loop's own test does).

Which loops: see `_wanted`. A loop the pipeliner picks by default may store only to arguments
none of its loads reads (`analysis.pointer_roots.stores_unread`), so that no iteration reads what
another wrote. A loop that asks for stages (`tl.range(...,
num_stages=n)`) may also store, as under Triton's pipeliner, which loads ahead of an earlier
iteration's stores (Triton's softmax tutorial: a row loop that loads one row and stores
another); atomics, barriers and prints still keep a loop as it is. This is the register form
of Triton's pipeliner; its shared-memory stages for dots are smem_pipeline's.
"""
from __future__ import annotations

from kiln.ir import OPS
from kiln.ir.core import Operation, Value
from kiln.ir.ops import GPU_STAGE_OPS
from kiln.ir.types import block_type, int1, scalar_of

from ..analysis.pointer_roots import stores_unread
from ..occupancy import MAX_REGISTERS
from .rewrite import clone_op, const_int, has_side_effects, is_pure

name = "prefetch"
SHARED_ONLY = GPU_STAGE_OPS | {"barrier"}  # side effects on shared memory and barriers only
STORES = {"store", "tma_store"}  # what a loop that asks for stages may also do (global stores)
# A loop that stores carries its next loads only while they add at most this many 32-bit registers
# a thread: past it the occupancy lost costs more than the latency hidden (Triton's softmax tutorial's
# row loop on an H200, 2026-11-30: kernel time -5..-9% at 4-16 registers, +1% at 32, +2.5% at 64;
# Triton stages such rows through shared memory instead).
STORING_LOOP_REGISTERS = 16


def apply(fn, ctx) -> None:
    for op in list(fn.walk()):
        if op.name == "for" and _wanted(op, ctx):
            unread = stores_unread(op.regions[0], fn)
            pipeline(op, stores_ok="num_stages" in op.attrs or unread, threads=32 * ctx.num_warps, unread=unread)


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


def address_cone(load, operands, body, closed=False):
    """How `operands` of `load` (a top-level op of loop body `body`) are computed, if a
    later iteration's can be: (the pure body ops they need in body order, the ids of the
    carried args those use, the pure body ops that advance those args), or None. `closed`:
    the carried args the advance reads count as used too, and must advance purely as well
    (smem_pipeline advances the args before the loop, where the body's are not defined: a
    pointer stepped by an increment the loop loads, a block-sparse LUT's, has no such value)."""
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
    todo = list(used)
    while todo:  # the carried values the address needs must advance purely
        got = _cone(yields[arg_index[todo.pop()]], order)
        if got is None:
            return None
        advance |= got
        if closed:
            more = _args_used([by_id[i] for i in got], body) - used - {id(iv)}
            used |= more
            todo.extend(more)
    return cone_ops, used, [by_id[i] for i in sorted(advance, key=order.get)]


def _wanted(loop, ctx) -> bool:
    """As Triton: a loop asks for it with `tl.range(..., num_stages=n)`, and by default
    (the `num_stages` option) only loops that feed tensor cores are pipelined; a
    row-at-a-time loop would only trade occupancy for nothing."""
    stages = loop.attrs.get("num_stages")
    if stages is not None:
        return int(stages) >= 2
    return ctx.num_stages >= 2 and any(op.name == "dot" for op in loop.regions[0].ops)


def pipeline(loop, shared_ok=False, stores_ok=False, threads=128, unread=False):
    """Carry loop `loop`'s loads one iteration ahead (see the module's docstring). With
    `shared_ok` the body may hold the GPU stage's shared-memory ops (a loop that
    smem_pipeline rewrote): they write no global memory that a load could read. With
    `stores_ok` it may store to global memory (the loop asked for stages, or `unread`),
    within STORING_LOOP_REGISTERS for the `threads` of a program. `unread`: its stores write
    only arguments none of its loads reads (`stores_unread`, asked before smem_pipeline's
    rewrite), so a load after a store is carried too: fla's recurrences store the state at
    the top of each iteration, then load the chunk's gates."""
    body = loop.regions[0]
    allowed = (SHARED_ONLY if shared_ok else set()) | (STORES if stores_ok else set())
    step = const_int(loop.operands[2])
    if step == 0 or not all(_effects_within(o, allowed) for o in body.ops):
        return
    iv, args = body.args[0], body.args[1:]
    yields = body.ops[-1].operands
    arg_index = {id(a): i for i, a in enumerate(args)}
    candidates = []
    read = {id(v) for o in body.walk() for v in o.operands}  # (smem_pipeline leaves the loads its rings replaced)
    for op in body.ops:
        if has_side_effects(op) and not (shared_ok and op.name in SHARED_ONLY) and not unread:
            break  # a load after a store of its own iteration stays after it
        if op.name != "load" or op.attrs.get("volatile") or "sem" in op.attrs or id(op.results[0]) not in read:
            continue
        got = address_cone(op, op.operands, body)
        if got is not None:
            candidates.append((op, *got))
    if not candidates:
        return
    if any(o.name in STORES for o in body.walk()):
        words = sum(_words(op.results[0].type, threads) for op, *_ in candidates)
        if words > STORING_LOOP_REGISTERS * threads:
            return
    candidates = _within_registers(candidates, threads)
    if not candidates:
        return
    lb = loop.operands[0]
    parent = loop.parent
    at = parent.ops.index(loop)
    prologue, top = [], []
    if step is None:  # known at run time only: the loop's own operand, defined before the loop
        iv_next = Operation("add", [iv, loop.operands[2]], [iv.type], loc=loop.loc)
    else:
        steps = Operation("constant", (), [iv.type], {"value": step}, loc=loop.loc)
        iv_next = Operation("add", [iv, steps.results[0]], [iv.type], loc=loop.loc)
        top.append(steps)
    top.append(iv_next)
    for load, cone_ops, used, advance in candidates:
        # before the loop: iteration lb's values
        pre_map = {iv: lb}
        pre_map.update({args[arg_index[a]]: loop.operands[3 + arg_index[a]] for a in used})
        prologue += [clone_op(o, pre_map) for o in cone_ops]
        first = _guarded_load(load, pre_map, lb, loop, prologue)
        # top of the body: advance the carried values, then load the next iteration
        advanced = {}
        top += [clone_op(o, advanced) for o in advance]
        next_map = {iv: iv_next.results[0]}
        for a in used:
            y = yields[arg_index[a]]
            next_map[args[arg_index[a]]] = advanced.get(y, y)
        top += [clone_op(o, next_map) for o in cone_ops]
        following = _guarded_load(load, next_map, iv_next.results[0], loop, top)
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


def _within_registers(candidates, threads: int) -> list:
    """The candidates, in body order, while the loads carried ahead fit a thread's registers
    together: a carried load holds its registers through the whole body, beside the one the body
    uses, so one past the register file only spills (triton_kernels' 1-warp 16x256x128 fp8 matmul
    with unaligned strides loads its 128x256 B tile element by element: 1,024 registers a thread;
    carried, its build spilled 88,988 bytes, 60,154 with the tile loaded in place). The rest stay
    where they are."""
    kept, words = [], 0
    for candidate in candidates:
        more = _words(candidate[0].results[0].type, threads)
        if words + more <= MAX_REGISTERS * threads:
            kept.append(candidate)
            words += more
    return kept


def _words(t, threads: int) -> int:
    """The 32-bit registers a value of type `t` takes over a program's `threads` (a pointer: two;
    a scalar: every thread's copy)."""
    element = scalar_of(t)
    bits = 64 if element.is_ptr() else element.primitive_bitwidth
    return (t.numel if isinstance(t, block_type) else threads) * max(bits, 32) // 32


def _effects_within(op, allowed) -> bool:
    """Whether every side effect of `op` (its regions' included) is an op named in `allowed`."""
    if not has_side_effects(op):
        return True
    if op.regions:
        return not op.attrs.get("volatile") and not OPS[op.name].side_effects and all(
            _effects_within(inner, allowed) for region in op.regions for inner in region.ops)
    return op.name in allowed and not op.attrs.get("volatile")


def _in_range(index, loop, out):
    """An int1 scalar: whether `index` is an iteration of `loop` (its test: `index < ub` going
    up, `index > ub` going down); appends its ops to `out`."""
    ub, step, loc = loop.operands[1], loop.operands[2], loop.loc
    below = Operation("cmp", [index, ub], [int1], {"pred": "lt"}, loc=loc)
    out.append(below)
    known = const_int(step)
    if not index.type.is_int_signed() or (known is not None and known > 0):
        return below.results[0]
    above = Operation("cmp", [index, ub], [int1], {"pred": "gt"}, loc=loc)
    out.append(above)
    if known is not None:
        return above.results[0]
    zero = Operation("constant", (), [step.type], {"value": 0}, loc=loc)
    up = Operation("cmp", [step, zero.results[0]], [int1], {"pred": "gt"}, loc=loc)
    pick = Operation("select", [up.results[0], below.results[0], above.results[0]], [int1], loc=loc)
    out += [zero, up, pick]
    return pick.results[0]


def _guarded_load(load, mapping, index, loop, out):
    """A clone of `load` whose mask also requires `index` to be an iteration of `loop`; appends
    its ops to `out`."""
    loaded = load.results[0].type
    loc = load.loc
    mask = _in_range(index, loop, out)
    if isinstance(loaded, block_type):
        spread = Operation("splat", [mask], [block_type(int1, loaded.shape)], loc=loc)
        out.append(spread)
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
