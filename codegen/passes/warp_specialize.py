"""sm_90a: a persistent GEMM whose K loop asks for it (`tl.range(..., warp_specialize=True)`)
becomes a producer warpgroup issuing the TMA copies and the kernel's warps running the dots.

After `persistent` and `smem_pipeline` every warp of a tile-loop iteration waits for a ring
slot, runs its part of the dots and then, after a barrier, has thread 0 refill the slot the
dots before last read. Here the copies move to 4 warps of their own, running ahead of the
dots by as many slots as the ring has, through the tile loop's epilogues too:

    rings, full mbarriers (count 1), empty mbarriers (count = the dot warpgroups), init
    warp_specialize {warps = 4, regs = [R, 40]} {
      for tile (slot, parity carried) {             // the kernel's warps
        <tile math>
        for k { wait full[slot], parity; dots; wait for the dots before;
                arrive on empty[the slot they read]  (not in the first iteration) }
        wait for the last dots; arrive on empty[their slot]
        <epilogue>
      }
    } {
      for tile (slot, parity carried) {             // the producer warpgroup
        <the tile math the copies need>
        for k { wait empty[slot], parity ^ 1; expect and copy into slot; next slot }
      }
    }

Both sides walk the same (tile, k) sequence, so slot and parity agree without being passed.
A fresh mbarrier passes a wait for parity 1, which lets the producer fill every slot once
before it waits for the dots. The epilogue's scratch no longer takes the rings' bytes (they are
live throughout): smem_plan leaves them room (`specialized_scratch`).

With one warpgroup of dots (4 warps), a ring of 4 slots or more and K loops of the same trips in
every tile, the first region runs twice over (`replicas = 2`, ping-pong): replica r takes tiles
lb + r * step, lb + (r + 2) * step, ..., counts the other's k-steps in its slots, and the two take
turns around their K loops (`turn_wait`, `turn_pass`), so one's epilogue runs under the other's dots.

Only the form tile_overlap takes (one K loop of TMA rings in the tile loop the persistent
pass made), with one wgmma per iteration, on whole warpgroups. The registers move between the
regions (`setmaxnreg`) only where a standalone ptxas assembles the kernel (codegen/ptxas.py):
nvJitLink drops it (C7504) and every warp keeps the entry cap (168 at 8 + 4 warps, enough for a
128x256 fp32 accumulator).
"""
from __future__ import annotations

from kiln.ir.core import Block, Operation, Value
from kiln.ir.types import int1, int32

from .rewrite import append_op, clone_op, has_side_effects, insert_ops, recomputable_cone, slot_after
from ..analysis.partitions import dot_replicas
from .smem_plan import enabled
from .tile_overlap import ISSUES, match_tile_gemm, tile_loop

name = "warp_specialize"
PRODUCER_WARPS = 4
PRODUCER_REGS = 40  # the copies' loop needs few; the rest go to the dots' accumulators
REGISTER_FILE = 65536  # 32-bit registers per SM (and so per CTA, at one CTA per SM)


def apply(fn, ctx) -> None:
    if not enabled(ctx) or ctx.num_warps % 4:  # wgmma's warpgroups
        return
    tiles = tile_loop(fn)
    gemm = match_tile_gemm(tiles) if tiles is not None else None
    if gemm is None or not gemm.k_loop.attrs.get("warp_specialize"):
        return
    plan = _plan(tiles, gemm)
    if plan is not None:
        _rewrite(tiles, gemm, plan, ctx.num_warps)


def consumer_regs(num_warps: int) -> int:
    """Registers per thread the kernel's warps may take, the producer's 40 given."""
    spare = REGISTER_FILE - 32 * PRODUCER_WARPS * PRODUCER_REGS
    return min(256, spare // (32 * num_warps) // 8 * 8)


class _Plan:
    __slots__ = ("dot_wait", "copies", "tile_cone", "distance")

    def __init__(self, dot_wait, copies, tile_cone, distance):
        self.dot_wait = dot_wait    # the wait after the K loop's one wgmma
        self.copies = copies        # the K body's ops that issue the copies and compute their operands
        self.tile_cone = tile_cone  # the tile body's ops those and the K loop's bounds need
        self.distance = distance    # the copies are of iteration iv + distance * step


def _plan(tiles, gemm):
    body = gemm.k_loop.regions[0]
    if gemm.outer_after() != ["return"] or len(tiles.operands) != 3:
        return None
    dots = [op for op in body.ops if op.name == "warp_group_dot"]
    waits = [op for op in body.ops if op.name == "warp_group_dot_wait"]
    if len(dots) != 1 or len(waits) != 1 or waits[0].attrs["pending"] > 1 or waits[0].operands[0] is not dots[0].results[0]:
        return None
    if body.ops.index(waits[0]) < body.ops.index(dots[0]):
        return None
    # the copies of iteration k + D: what they need of the body, computed from the iv and the write slot only
    args = body.args
    allowed = {id(args[0]), id(args[-2])}
    inside = {id(op) for op in body.ops}
    copies, todo = set(), [op for op in body.ops if op.name in ISSUES]
    while todo:
        op = todo.pop()
        if id(op) in copies:
            continue
        if op.regions or op.name == "load" or (has_side_effects(op) and op.name not in ISSUES):
            return None
        copies.add(id(op))
        for v in op.operands:
            d = v.defining_op
            if d is not None and id(d) in inside:
                todo.append(d)
            elif d is None and v.owner is body and id(v) not in allowed:
                return None  # a carried value (a look-ahead address): not computed from k alone
    issue_ops = [op for op in body.ops if id(op) in copies]
    outside = [v for op in issue_ops for v in op.operands] + gemm.k_loop.operands[:3]
    tile_body = tiles.regions[0]
    cone = recomputable_cone(outside, tile_body.ops[:tile_body.ops.index(gemm.k_loop)])
    if cone is None:
        return None
    return _Plan(waits[0], issue_ops, cone, gemm.first_write)


def _tile_invariant(tiles, values) -> bool:
    """Are `values` the same in every iteration of the tile loop (none computed from its iv)?"""
    iv, inside = tiles.regions[0].args[0], {id(op) for op in tiles.regions[0].walk()}
    todo, seen = list(values), set()
    while todo:
        v = todo.pop()
        if v is iv:
            return False
        op = v.defining_op
        if op is not None and id(op) in inside and id(op) not in seen:
            seen.add(id(op))
            todo.extend(op.operands)
    return True


def _rewrite(tiles, gemm, plan, num_warps):
    loc = tiles.loc
    outer = tiles.parent
    k_loop = gemm.k_loop
    bars = gemm.bars
    ring_size = gemm.ring_size

    init = next(i for i, op in enumerate(gemm.hoisted) if op.name == "mbarrier_init")
    before = gemm.hoisted[:init]
    empty = append_op(before, "local_alloc", [], [bars.type], loc)
    before.append(gemm.hoisted[init])
    append_op(before, "mbarrier_init", [empty], (), loc, count=num_warps // 4)  # an arrival per dot warpgroup
    before.extend(gemm.hoisted[init + 1:])  # the fence and the barrier after both inits
    zero = append_op(before, "constant", [], [int32], loc, value=0)
    one = append_op(before, "constant", [], [int32], loc, value=1)

    producer = _producer(tiles, k_loop, plan, bars, empty, ring_size, zero, one, loc)
    tile_lb, tile_step = tiles.operands[0], tiles.operands[2]
    _consumer(tiles, gemm, plan, empty, ring_size, zero, loc)
    # one warpgroup of dots: two replicas take turns (ping-pong), where the ring keeps 4 slots
    # beside their two scratch areas (64x256x64 tiles with 3 slots ran at 0.78x, H200)
    # Each replica counts the other's k-steps as its own tile's: the K loop's trips must not
    # depend on the tile.
    replicas = dot_replicas(num_warps) if ring_size >= 4 and _tile_invariant(tiles, k_loop.operands[:3]) else 1

    default, partition = Block(), Block()
    if replicas > 1:
        _take_turns(tiles, gemm, tile_lb, tile_step, replicas, ring_size, zero, default, loc)
    for block, loop in ((default, tiles), (partition, producer)):
        block.append(loop)
        block.append(Operation("yield", [], [], loc=loc))
    attrs = {"warps": PRODUCER_WARPS, "regs": [consumer_regs(num_warps * replicas), PRODUCER_REGS]}
    if replicas > 1:
        attrs["replicas"] = replicas
    ws = Operation("warp_specialize", [], [], attrs, regions=[default, partition], loc=loc)
    at = outer.ops.index(tiles)
    ws.parent = outer
    outer.ops[at] = ws
    insert_ops(outer, at, before)


def _consumer(tiles, gemm, plan, empty, ring_size, zero, loc):
    """The tile loop as the dot warps run it: no copies, each slot released once its dots retired."""
    body, k_loop = tiles.regions[0], gemm.k_loop
    removed = {id(op) for op in gemm.hoisted + gemm.prologue_only + [gemm.inval]}
    body.ops[:] = [op for op in body.ops if id(op) not in removed]
    read, parity = body.add_arg(int32), body.add_arg(int32)
    tiles.operands.extend([zero, zero])
    k_loop.operands[-3], k_loop.operands[-2], k_loop.operands[-1] = read, read, parity

    k_body = k_loop.regions[0]
    iv, slot = k_body.args[0], k_body.args[-3]
    # no barrier (the empty mbarriers order the slots' reuse) and no proxy fence: only TMA (the
    # async proxy) writes the tiles the dots read
    dropped = {id(op) for op in plan.copies if op.name in ISSUES}
    k_body.ops[:] = [op for op in k_body.ops if id(op) not in dropped and op.name not in ("barrier", "fence_async_shared")]
    release = []
    if plan.dot_wait.attrs["pending"] == 1:  # the dots of the iteration before retired: their slot is free
        done = slot_after(release, slot, ring_size - 1, ring_size, loc)
        when = append_op(release, "cmp", [iv, k_loop.operands[0]], [int1], loc, pred="ne")
    else:
        done = slot
        when = append_op(release, "constant", [], [int1], loc, value=True)
    append_op(release, "mbarrier_arrive", [append_op(release, "local_index", [empty, done], [empty.type.tile()], loc), when], (), loc)
    insert_ops(k_body, k_body.ops.index(plan.dot_wait) + 1, release)

    last = []
    if plan.dot_wait.attrs["pending"] == 1:  # the last iteration's dots, waited for after the loop
        done = slot_after(last, k_loop.results[-3], ring_size - 1, ring_size, loc)
        ran = append_op(last, "cmp", [k_loop.operands[0], k_loop.operands[1]], [int1], loc, pred="lt")
        append_op(last, "mbarrier_arrive", [append_op(last, "local_index", [empty, done], [empty.type.tile()], loc), ran],
                  (), loc)
    insert_ops(body, body.ops.index(gemm.wait) + 1, last)
    body.ops[-1].operands.extend([k_loop.results[-3], k_loop.results[-1]])
    for v in (k_loop.results[-3], k_loop.results[-1]):
        tiles.results.append(Value(v.type, tiles, len(tiles.results)))


def _take_turns(tiles, gemm, lb, step, replicas, ring_size, zero, default, loc):
    """Ping-pong: replica r of the dot warps runs tiles lb + r * step, lb + (r + R) * step, ...; its
    K loops wait for their turn and pass it on once their last dots are issued, so one replica's
    epilogue runs under the next one's dots. Slots count the k-steps of the tiles in between too."""
    body, k_loop = tiles.regions[0], gemm.k_loop
    r = append_op(default.ops, "partition_index", [], [int32], loc)
    for op in default.ops:
        op.parent = default
    first = []
    mine = append_op(first, "add", [lb, append_op(first, "mul", [r, step], [int32], loc)], [int32], loc)
    stride = append_op(first, "mul", [step, append_op(first, "constant", [], [int32], loc, value=replicas)], [int32], loc)
    for op in first:
        default.append(op)
    tiles.operands[0], tiles.operands[2] = mine, stride

    iv = body.args[0]
    klb, kub, kstep = k_loop.operands[:3]
    before = []
    # the K loop's trips (a positive constant step, smem_pipeline's)
    span = append_op(before, "add", [append_op(before, "sub", [kub, klb], [int32], loc),
                                     append_op(before, "sub", [kstep, append_op(before, "constant", [], [int32], loc, value=1)],
                                               [int32], loc)], [int32], loc)
    trips = append_op(before, "max", [append_op(before, "div", [span, kstep], [int32], loc), zero], [int32], loc)
    others = append_op(before, "mul", [trips, append_op(before, "constant", [], [int32], loc, value=replicas - 1)],
                       [int32], loc)
    ahead = append_op(before, "mul", [trips, r], [int32], loc)
    my_first = append_op(before, "cmp", [iv, mine], [int1], loc, pred="eq")
    skip = append_op(before, "select", [my_first, ahead, others], [int32], loc)
    slot, parity = k_loop.operands[-3], k_loop.operands[-1]
    moved = append_op(before, "add", [slot, skip], [int32], loc)
    size = append_op(before, "constant", [], [int32], loc, value=ring_size)
    new_slot = append_op(before, "rem", [moved, size], [int32], loc)
    wraps = append_op(before, "and", [append_op(before, "div", [moved, size], [int32], loc),
                                      append_op(before, "constant", [], [int32], loc, value=1)], [int32], loc)
    new_parity = append_op(before, "xor", [parity, wraps], [int32], loc)
    k_loop.operands[-3], k_loop.operands[-2], k_loop.operands[-1] = new_slot, new_slot, new_parity
    not_first = append_op(before, "cmp", [iv, lb], [int1], loc, pred="ne")
    append_op(before, "turn_wait", [not_first], (), loc)
    insert_ops(body, body.ops.index(k_loop), before)

    after = []
    following = append_op(after, "add", [iv, step], [int32], loc)
    exists = append_op(after, "cmp", [following, tiles.operands[1]], [int1], loc, pred="lt")
    append_op(after, "turn_pass", [exists], (), loc)
    # passed once the last dots are issued, before waiting for them: the next replica's dots queue
    # behind them on the tensor cores
    insert_ops(body, body.ops.index(gemm.wait), after)


def _producer(tiles, k_loop, plan, bars, empty, ring_size, zero, one, loc):
    """The tile loop as the producer warpgroup runs it: the K loop's copies, each into a slot
    the dots have released."""
    mapping = {}
    body = Block([tiles.regions[0].args[0].type, int32, int32])
    mapping[tiles.regions[0].args[0]] = body.args[0]
    ops = [clone_op(op, mapping) for op in plan.tile_cone]
    lb, ub, step = (mapping.get(v, v) for v in k_loop.operands[:3])

    k_body = Block([k_loop.regions[0].args[0].type, int32, int32])
    k, slot, parity = k_body.args
    inner = []
    flipped = append_op(inner, "xor", [parity, one], [int32], loc)
    append_op(inner, "mbarrier_wait", [append_op(inner, "local_index", [empty, slot], [empty.type.tile()], loc), flipped],
              (), loc)
    # the body's copies are of iteration iv + D * step (D = the write slot's start): iv = k - D * step
    ahead = append_op(inner, "mul", [append_op(inner, "constant", [], [step.type], loc, value=plan.distance), step],
                      [step.type], loc)
    iv = append_op(inner, "sub", [k, ahead], [k.type], loc)
    k_mapping = dict(mapping)
    k_mapping[k_loop.regions[0].args[0]] = iv
    k_mapping[k_loop.regions[0].args[-2]] = slot
    inner.extend(clone_op(op, k_mapping) for op in plan.copies)
    following = slot_after(inner, slot, 1, ring_size, loc)
    wrapped = append_op(inner, "cast", [append_op(inner, "cmp", [following, zero], [int1], loc, pred="eq")], [int32], loc)
    inner.append(Operation("yield", [following, append_op(inner, "xor", [parity, wrapped], [int32], loc)], [], loc=loc))
    for op in inner:
        k_body.append(op)
    copies = Operation("for", [lb, ub, step, body.args[1], body.args[2]], [int32, int32], dict(k_loop.attrs),
                       regions=[k_body], loc=k_loop.loc)
    ops.append(copies)
    ops.append(Operation("yield", list(copies.results), [], loc=loc))
    for op in ops:
        body.append(op)
    return Operation("for", list(tiles.operands[:3]) + [zero, zero], [int32, int32], dict(tiles.attrs),
                     regions=[body], loc=loc)

