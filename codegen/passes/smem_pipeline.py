"""Software pipelining through shared memory, for dots that run on Hopper's wgmma and,
on the other targets from sm_80 on, on mma.sync (`mma_dot`, see the end).

In a `for` loop (constant positive step, its body storing nothing or only to arguments none of its
loads reads: `analysis.pointer_roots.stores_unread`) a `dot` (fp16,
bf16, fp8 or fp32 at tf32 precision into fp32; int8 into int32) runs on wgmma when each
operand comes one of four ways:
    ring:  a block load in the body (its address a pure function of the induction
           variable and of carried values that advance by pure ops), or tl.trans of one,
           copied ahead with cp.async through a ring of S + 1 swizzled tiles, S = the
           loop's `num_stages`; one ring per load, whichever dots read it, as is or
           transposed (`local_trans`: attention's backward reads Q^T and dO both ways);
           what else reads the load reads it back from the tile (`local_load`: fla's b_k,
           a dot's operand and scaled by its gates);
    once:  a value defined before the loop (attention's Q), stored to a tile once (a
           later loop reading the same value reuses the tile);
    regs:  A only, a 16-bit value computed in the body (attention's P), read from
           registers: wgmma's A fragment is the accumulator layout's register order; the 2-D
           loads it is computed from (`(a * s).to(fp16)`) come through rings too where they
           fit, read back in that fragment layout (`local_load`), and so do its vectors
           (attention backward's M and Delta: one-row tiles, read back just before their use)
           and its scalars (a per-step scale: tiles of one, read back as a scalar);
    staged: any other value computed in the body (fp8 attention's P: an 8-bit A fragment
           is not the accumulator's register order; int8 likewise; a dequantized B),
           stored each iteration into a ring of 2 or 3 tiles (`staged_slots`; K-major, a
           16-bit B N-major), then a fence and a barrier. The 2-D loads it is computed from come
           through rings too and are read back from their tiles (`local_load`), and in a loop
           that stores its vectors and scalars too (fla's gates, the chunk's last gate); the
           loop's other loads are then carried one iteration ahead in registers (prefetch).

The rewritten loop:
    before the loop:  the rings; the copies of iterations 0 .. S-2 issued (`async_copy`,
                      one group each); then the `once` tiles stored, so that their
                      loads' latency and the first copies' overlap
    each iteration i: wait until iteration i's group has landed (`async_wait`, S-2
                      groups may stay in flight), `fence_async_shared` and a barrier;
                      each dot issued where it was (`warp_group_dot`); after the last one,
                      the copies of iteration i + S-1 into tile (i + S-1) % (S+1)
    after the loop:   wait for the dots still in flight and drain the copies.
In a loop nested in another (a persistent matmul's K loop in its tile loop) the prologue counts
its iterations from the (constant) lower bound passed through a volatile move, its divisibility kept
by a `multiple_of`, so LLVM keeps the prologue's
copy masks inside the outer loop instead of hoisting them into predicates live across it.

A dot whose result is only carried to the next iteration (matmul's accumulator) is left
in flight: its wait leaves one group pending. Any other result is awaited at once. A
carried value still in flight that the next iteration reads other than as another dot's
accumulator (attention's `acc * alpha`) is awaited before that read, by the latest wait
with nothing pending (one more operand of it) or a new one, which leaves pending the dots the
iteration issued before it (a hand-pipelined attention's next scores, issued ahead of this
block's softmax).

The copy of iteration i + S-1 overwrites the tile that the dots of iteration i - 2 read:
every warpgroup finished those before the barrier of iteration i (it waited for them in
iteration i - 1), which is why the ring has one tile more than there are stages. Where
S + 1 tiles do not fit even at S = 2 (a 256x128 fp16 matmul tile pair is 96 KB), or where
S tiles fit one more CTA per SM than S + 1 for a loop that stages an operand, or a second CTA
for a lone one of one warpgroup (smem_plan.tight_for_company; for a GEMM's, with S lowered to 3
if that is what it takes: stages_for_company), the ring has S tiles
("tight"): the copy of iteration i + S-1 then overwrites what the dots of iteration i - 1
read, so it waits until they retired: every dot's wait comes before it, then a barrier,
since each warp waits for its own part only. Where TMA alone fills the rings and only dots read
them (nothing staged, nothing read back into registers) the top of the body takes no fence: each
thread's mbarrier wait makes the tiles visible to its warpgroup's wgmma (both the async proxy);
and a tight ring there takes no barrier either: the one before the copies orders the slots'
reuse. Where no dot of the loop stays in
flight (each one's result read in its iteration, or its A computed in registers from no dot's
result: `_after_drain`) the ring has S tiles with neither: the dots of i - 1 retired before
iteration i's first barrier (smem_plan's `drained`).

On two warpgroups or more, where TMA fills every ring of a loop that is not nested in another
(nothing staged), the slots go back through a second mbarrier per slot instead of those
barriers (`smem_plan.released_ring`): once the first wait of iteration i retired the dots of
i - 1, each warpgroup's first thread arrives on the slot they read (count: the warpgroups), and
before the copies of iteration i + S-1 every thread waits for the write slot's release (the phase
parity from the read phase and whether the write slot wrapped): with a spare slot, the release
made an iteration before; in a tight ring, the one made after this iteration's first wait. A
warpgroup may then run up to an iteration ahead of another (half of one, tight), its softmax under
the other's dots (tutorial 06's forward at 8 warps, H200: up to 9% faster). A barrier after the
loop precedes the mbarriers' invalidation.

A ring load may also be a `descriptor_load` (2-D, its map a kernel argument or made by
the kernel, `tensormap_create`, whose `box` this pass sets; a 2-D block of a map of up to 5 dims,
`lead_dims`, the others a box of 1): its ring is filled by TMA instead, thread 0 announcing each slot's
bytes on the slot's mbarrier (`tma_expect`) and copying one box per swizzle-wide column
chunk (`tma_copy`); the top of iteration i then also waits on that mbarrier's phase
(`mbarrier_wait`, the parity carried by the loop), and the loop's mbarriers are
invalidated after it. The descriptor loads no ring takes become their pointer loads
(the `descriptor_loads` pass).

Masked-off elements are copied as zeros, so a load's `other` must be absent or zero.
A copy of up to 16 bytes takes one mask bit where the mask is constant over them; where
the mask is only proved a prefix of each such run (a K edge read from memory, `cols <
k`: mask_prefix), the copy keeps its width and carries each run's count of true
elements (`async_copy ptrs, tile, mask, count {prefix_run = w}`), its src-size.
Each ring tile is stored with the loaded pointer's contiguous dim innermost, a `once`
tile K-major, in rows of up to 128 bytes swizzled as wgmma reads them
(kiln.ir.types.shared_type).

Without wgmma (`ring_kind` "mma": targets sm_80 - sm_89 and later non-Hopper ones, kernels of
fewer than 4 warps, portable builds; on sm_90a, a loop whose dots wgmma cannot run, as fla's 16-row
sub-chunk dots) the same rings feed `mma_dot`, which loads each thread's
fragments from the tiles by ldmatrix and is done when it returns. So the ring has S tiles:
at the top of iteration i, after the wait and the barrier, the copies of iteration i + S-1
go into the slot iteration i-1 read (every warp is past it), ahead of the dots. A 16-bit A
computed in the body stays in registers where every warp holds whole rows of it and of the
accumulator (`mma_layout(rows_only=True)`); other values computed there are staged (two
slots). There are no fences (the async proxy exists from sm_90 on) but on sm_90a, where TMA may fill
the rings (`smem_plan.tma_rings`): each thread fences after its ldmatrix reads of a slot, before the
barrier after which TMA writes it again. fp8 tiles there come through the rings as they are and
`lower/mma.py` upcasts each fragment (`analysis.dots.fp8_fragments_upcast`).
"""
from __future__ import annotations

from kiln.ir.core import Operation, Value
from kiln.ir.types import block_type, int1, int32, int64, shared_type

from ..analysis import axis_info
from . import descriptor_loads, prefetch
from ..analysis import Analysis
from .rewrite import append_const, append_op, clone_op, const_int, in_loop, insert_ops, loop_trips, slot_after
from .smem_plan import copy_box, is_tma, plan_loop, ring_kind, staging_key, tma_ok, tma_rings


def apply(fn, ctx) -> None:
    kind = ring_kind(ctx)
    if kind is None:
        return
    ctx = Analysis(fn, ctx)  # the options, and the pointers' contiguity before the rewrite
    stored = {}  # (value, tile) -> its tile, for later loops that read the same value
    in_registers = set()  # the values earlier loops' wgmmas read as register A (smem_plan._company)
    for loop in [op for op in fn.walk() if op.name == "for"]:
        stages = _useful_stages(loop, int(loop.attrs.get("num_stages", ctx.num_stages)))
        if stages >= 2:
            body = loop.regions[0]
            descriptor_loads.strip(fn, [op for op in body.ops if op.name == "descriptor_load" and
                                        not (tma_rings(ctx) and tma_ok(op, fn))])
            plan, loop_kind = plan_loop(loop, stages, fn, ctx, kind, in_registers), kind
            if plan is None and kind == "wgmma" and "warp_specialize" not in loop.attrs:
                # dots wgmma cannot run (fewer rows than a warpgroup's 64, say: fla's 16-row sub-chunks)
                # on mma.sync from the same rings, as Triton pipelines its MMAv2 dots on Hopper
                plan, loop_kind = plan_loop(loop, stages, fn, ctx, "mma", in_registers), "mma"
            if plan is not None:
                in_registers.update(src[1] for sources in plan.sources.values() for src in sources
                                    if src[0] == "regs" and loop_kind == kind)
                _rewrite(loop, plan, stored, kind=loop_kind, portable=ctx.portable, num_warps=ctx.num_warps)
                if plan.fetched_tiles:  # a dequantized operand, or fla's gated chunk: the loop's other loads
                    # (1-D scales, gates) one iteration ahead, past the stores of a loop whose stores no load reads
                    prefetch.pipeline(loop, shared_ok=True, stores_ok=plan.storing, threads=32 * ctx.num_warps,
                                      unread=plan.storing)


# --- the rewrite -----------------------------------------------------------------------

def _issue(out, copies, rings, slot, iv_at, ub, mapping, loc, bars=None):
    """The copies of one iteration (its cone ops cloned under `mapping`): the cp.async ones
    as one group, the TMA ones completing on the slot's mbarrier of `bars`."""
    inside = append_op(out, "cmp", [iv_at, ub], [int1], loc, pred="lt")
    tma_bytes = sum(c.tile.nbytes for c in copies if is_tma(c.load))
    if tma_bytes:
        bar = append_op(out, "local_index", [bars, slot], [bars.type.tile()], loc)
        append_op(out, "tma_expect", [bar, inside], (), loc, bytes=tma_bytes)
    for copy, ring in zip(copies, rings):
        load, tile, prefix = copy.load, copy.tile, copy.prefix
        out.extend(clone_op(o, mapping) for o in copy.cone)
        operands = [mapping.get(v, v) for v in load.operands]
        view = append_op(out, "local_index", [ring, slot], [tile], loc)
        if is_tma(load):
            boxes = {k: load.attrs[k] for k in ("wrap_dim", "lead_dims") if k in load.attrs}
            rows = copy_box(load, tile)[1]
            if rows != tile.tma_box()[1]:
                boxes["box_rows"] = rows
            append_op(out, "tma_copy", [operands[0], view, bar, inside, *operands[1:-1]], (), loc, **boxes)
            continue
        if not isinstance(load.results[0].type, block_type):  # a scalar, copied as a vector of one
            operands = [append_op(out, "splat", [v], [block_type(v.type, (1,))], loc) for v in operands[:2]]
        shape = operands[0].type.shape
        inside_all = append_op(out, "splat", [inside], [block_type(int1, shape)], loc)
        mask = append_op(out, "and", [operands[1], inside_all], [inside_all.type], loc) if len(operands) > 1 else inside_all
        if prefix is None:
            append_op(out, "async_copy", [operands[0], view, mask], (), loc)
            continue
        run, build = prefix
        count = build(lambda name, args, t, **attrs: append_op(out, name, args, [t], loc, **attrs),
                      lambda v: mapping.get(v, v))
        count = append_op(out, "select", [inside_all, count, append_const(out, 0, loc, count.type)], [count.type], loc)
        append_op(out, "async_copy", [operands[0], view, mask, count], (), loc, prefix_run=run)
    if tma_bytes < sum(c.tile.nbytes for c in copies):
        append_op(out, "async_commit", [], (), loc)


def _advance(out, copies, body, arg_index, current, iv_at):
    """The carried values the copies use, one iteration further: {arg id: value}."""
    used = sorted({a for c in copies for a in c.args}, key=arg_index.get)  # by position: deterministic
    advance_ops = {id(o) for c in copies for o in c.advance}
    args, yields = body.args[1:], body.ops[-1].operands
    mapping = {body.args[0]: iv_at, **{args[arg_index[a]]: current[a] for a in used}}
    out.extend(clone_op(o, mapping) for o in body.ops if id(o) in advance_ops)
    return {a: mapping.get(yields[arg_index[a]], yields[arg_index[a]]) for a in used}


def _useful_stages(loop, stages: int) -> int:
    """`stages`, no more than one past a loop over constant bounds' trips (and at least 2, the fewest a
    ring runs on): at trips + 1 every trip's copies go out before the loop, a slot each (smem_plan's
    `all_ahead`), where fewer stages would issue the last trips' copies only after the first trips' data
    came (fla's chunk_fwd_kernel_o, two trips of its K loop at 3 stages: Triton's build has both in
    flight at once); more stages would only add copies past the last trip, predicated off (fla's
    chunk_gla_bwd_kernel_dA, `range(cdiv(V, BV))` at V == BV on 4 warps and 4 stages: 80 KB of ring for one
    trip, 2 CTAs per SM where Triton's build, 16 KB, holds more)."""
    trips = loop_trips(loop)
    return stages if trips is None else min(stages, max(2, trips + 1))


def _rewrite(loop, plan, stored_earlier, kind="wgmma", portable=False, num_warps=4):
    dots, copies, stages, step, ring_size, slots = plan.sources, plan.copies, plan.stages, plan.step, plan.ring_size, plan.slots
    fetched = plan.fetched
    body = loop.regions[0]
    iv, args = body.args[0], body.args[1:]
    arg_index = {id(a): i for i, a in enumerate(args)}
    n_yields = len(body.ops[-1].operands)
    lb, ub = loop.operands[0], loop.operands[1]
    loc = loop.loc
    tight = ring_size == stages and not plan.drained
    order = [op for op in body.ops if id(op) in dots]
    used = sorted({a for c in copies for a in c.args}, key=arg_index.get)  # by position: deterministic

    # before the loop: the rings, iterations 0 .. S-2 in flight, then the operands from outside
    # stored once (or by an earlier loop: the two loops of causal attention read the same Q)
    pre, stores = [], []
    stored = _store_once(pre, stores, order, dots, stored_earlier, loop, loc)
    hopper = kind == "wgmma"  # wgmma reads shared memory through the async proxy: fences
    rings = {id(load): append_op(pre, "local_alloc", [], [shared_type(t.element_ty, (ring_size,) + t.shape, t.swizzle, t.order)], loc)
             for load, t in ((c.load, c.tile) for c in copies)}
    staged = {}  # value id -> its ring of `slots` tiles
    # a transposed dot's B: its load's fetched tile, read by the dot itself (smem_plan._transposed_dots)
    read_by_dot = {id(load) for loads in plan.transposed.values() for load in loads}
    for op in order:
        for src in dots[id(op)][:1] if id(op) in plan.transposed else dots[id(op)]:
            if src[0] == "staged" and staging_key(src) not in staged:
                t = src[2]
                ring = shared_type(t.element_ty, (slots,) + t.shape, t.swizzle, t.order)
                staged[staging_key(src)] = append_op(pre, "local_alloc", [], [ring], loc)
    ring_list = [rings[id(c.load)] for c in copies]
    tma = any(is_tma(c.load) for c in copies)
    pointer_copies = not all(is_tma(c.load) for c in copies)
    bars = empty = None
    released = plan.released
    if tma:  # one mbarrier per ring slot: its TMA copies complete on it
        bars = append_op(pre, "local_alloc", [], [shared_type(int64, (ring_size, 1, 1))], loc)
        append_op(pre, "mbarrier_init", [bars], (), loc, count=1)
    if released:  # and one the warpgroups release it on, once their dots that read it retired
        empty = append_op(pre, "local_alloc", [], [shared_type(int64, (ring_size, 1, 1))], loc)
        append_op(pre, "mbarrier_init", [empty], (), loc, count=num_warps // 4)
    if tma:
        append_op(pre, "fence_async_shared", [], (), loc)
        append_op(pre, "barrier", [], (), loc)
    current = {a: loop.operands[3 + arg_index[a]] for a in used}
    nested = in_loop(loop) and copies and const_int(lb) is not None and not portable  # (no inline PTX)
    iv_at = _opaque(pre, lb, loc) if nested else lb
    for s in range(stages - 1 if copies else 0):
        mapping = {iv: iv_at, **{args[arg_index[a]]: current[a] for a in used}}
        _issue(pre, copies, ring_list, append_const(pre, s, loc), iv_at, ub, mapping, loc, bars)
        current = _advance(pre, copies, body, arg_index, current, iv_at)
        iv_at = append_op(pre, "add", [iv_at, append_const(pre, step, loc, iv.type)], [iv.type], loc)
    # The once operands' stores follow the first copies, so the loads they wait on and those copies are in
    # flight together. The top of the body fences and waits at a barrier before its dots read shared memory
    # except where TMA alone fills the rings: there the stores need their own.
    pre.extend(stores)
    generic = pointer_copies or bool(staged) or bool(fetched) or bool(plan.read_back)
    if stores and (not copies or (hopper and not generic)):
        if hopper:
            append_op(pre, "fence_async_shared", [], (), loc)
        append_op(pre, "barrier", [], (), loc)
    if copies:
        # carried: the look-ahead values, the slot read and the slot written
        ahead = {a: body.add_arg(current[a].type) for a in used}
        read_slot, write_slot = body.add_arg(int32), body.add_arg(int32)
        loop.operands.extend([current[a] for a in used])
        loop.operands.extend([append_const(pre, 0, loc), append_const(pre, (stages - 1) % ring_size, loc)])
    if tma:  # the parity of the read slot's barrier phase: flips each time the slots wrap
        phase = body.add_arg(int32)
        loop.operands.append(append_const(pre, 0, loc))
    if staged:
        staged_slot = body.add_arg(int32)
        loop.operands.append(append_const(pre, 0, loc))
    insert_ops(loop.parent, loop.parent.ops.index(loop), pre)

    # the body: each dot issued where it was; after the first, the copies of iteration i + S-1
    new = []
    if pointer_copies:
        append_op(new, "async_wait", [], (), loc, pending=stages - 2)
    if tma:
        bar = append_op(new, "local_index", [bars, read_slot], [bars.type.tile()], loc)
        append_op(new, "mbarrier_wait", [bar, phase], (), loc)
    # The wait makes TMA's bytes visible to this thread's wgmma, both the async proxy: the fence is
    # for what the generic proxy writes (cp.async, a staged store) or reads back (a fetched tile)
    # in the slots; the barrier orders the reuse of a spare slot (a tight ring's is before the copies)
    # Without wgmma, TMA's next copies (the async proxy) overwrite the slot ldmatrix read (the generic
    # proxy) in iteration i - 1: each thread's fence orders its reads before them
    if copies and (hopper and generic or not hopper and tma):
        append_op(new, "fence_async_shared", [], (), loc)
    if copies and not released and (generic or not tight or not hopper):
        append_op(new, "barrier", [], (), loc)
    tail = []  # what the yield carries on for the copies: look-ahead values, slots, phase
    if copies and not hopper:  # the slot iteration i - 1 read is free: every warp passed the barrier
        tail = _issue_ahead(new, copies, ring_list, body, arg_index, ahead, used, iv, step, stages,
                            ub, (read_slot, write_slot), ring_size, loc, bars)
        if tma:
            tail.append(_next_phase(new, tail, phase, loc))
    ring_loads = {id(c.load) for c in copies}
    copied = ring_loads | {id(v.defining_op) for op in order for v, src in zip(op.operands[:2], dots[id(op)])
                           if src[0] == "ring" and src[2]}  # the tl.trans of a ring load
    copied |= {id(c.load.operands[-1].defining_op) for c in copies if is_tma(c.load)}  # their pointer loads
    replaced, deferred, tiles, staged_now = {}, [], {}, {}
    in_flight = _carried_dots(body, order)
    for op in body.ops[:-1]:
        if id(op) in read_by_dot:
            continue
        if id(op) in fetched or id(op) in plan.read_back:  # read back from its ring's tile
            tile = _read_tile(new, rings[id(op)], read_slot, tiles, loc)
            replaced[op.results[0]] = append_op(new, "local_load", [tile], [op.results[0].type], op.loc)
            continue
        if id(op) in copied:
            continue
        for inner in op.walk():
            inner.operands = [replaced.get(v, v) for v in inner.operands]
        if id(op) not in dots:
            new.append(op)
            continue
        views = []
        for v, src in zip(op.operands[:2], dots[id(op)]):
            if src is dots[id(op)][1] and id(op) in plan.transposed:
                views.append(_read_tile(new, rings[id(plan.transposed[id(op)][0])], read_slot, tiles, loc))
            elif src[0] == "ring":
                tile = _read_tile(new, rings[id(src[1])], read_slot, tiles, loc)
                views.append(append_op(new, "local_trans", [tile], [tile.type.transposed()], loc) if src[2] else tile)
            elif src[0] == "staged":
                views.append(_stage_operand(new, v, src, staged, staged_slot, staged_now, hopper, loc))
            else:
                views.append(stored[(src[1], src[2])] if src[0] == "once" else v)
        acc = op.operands[2]
        if not hopper:  # done when it returns
            replaced[op.results[0]] = append_op(new, "mma_dot", views + [acc], [acc.type], op.loc)
            continue
        # an fp8 dot's partial accumulators (Triton's max_num_imprecise_acc) are the lowering's
        imprecise = {"max_num_imprecise_acc": op.attrs["max_num_imprecise_acc"]} \
            if "max_num_imprecise_acc" in op.attrs else {}
        if id(op) in plan.transposed:
            imprecise["transposed"] = 1
        issued = append_op(new, "warp_group_dot", views + [acc], [acc.type], op.loc, **imprecise)
        # a result only carried to the next iteration may stay in flight (that dot's wait
        # leaves its run of such dots pending: a fused gate and up projection keeps both of
        # its dots in flight); one read in this iteration is awaited here, and the copies are
        # issued while the tensor cores work on it
        carried_only = id(op) in in_flight  # (only the yield reads its result)
        if carried_only and dots[id(op)][0][0] == "regs" and not _after_drain(views[0], new):
            carried_only = False  # see _after_drain
        wait = Operation("warp_group_dot_wait", [issued], [acc.type], {"pending": in_flight[id(op)] if carried_only else 0},
                         loc=op.loc)
        if carried_only or tight:
            new.append(wait)
        if copies and not tail and op is order[-1]:
            if tight and not released:  # every warp's part of the dots of i - 1 retired
                append_op(new, "barrier", [], (), loc)
            if released:  # every warpgroup released the write slot (the dots of i - 2 that read it retired)
                _await_release(new, empty, read_slot, write_slot, phase, loc)
            tail = _issue_ahead(new, copies, ring_list, body, arg_index, ahead, used, iv, step, stages,
                                ub, (read_slot, write_slot), ring_size, loc, bars)
            if tma:
                tail.append(_next_phase(new, tail, phase, loc))
        if not carried_only and not tight:
            new.append(wait)
        wait = wait.results[0]
        replaced[op.results[0]] = wait
        if carried_only:
            deferred.append(wait)
    if staged:
        tail = tail + [_next_slot(new, staged_slot, slots, loc)]
    _read_vectors_at_use(new)
    terminator = body.ops[-1]
    terminator.operands = [replaced.get(v, v) for v in terminator.operands] + tail
    body.ops[:] = []
    for op in new + [terminator]:
        body.append(op)
    for i, v in enumerate(tail):
        loop.results.append(Value(v.type, loop, len(loop.results)))
    in_flight = [i for i, v in enumerate(terminator.operands[:n_yields]) if v in deferred]
    for i in in_flight:
        _await_before_reads(body, args[i])
    if released:
        _release_previous_slot(body, empty, read_slot, iv, lb, ring_size, loc)

    _after_loop(loop, in_flight, pointer_copies, released, bars, empty, loc)


def _read_vectors_at_use(ops):
    """Each vector or scalar read back from a ring (a row statistic, a gate) moved to just before its first reader:
    read where the load was, ptxas keeps its registers live across the dots in between (attention
    backward's Delta across dP^T's dot: spills at 255 registers); shared memory's latency is short."""
    for op in [o for o in ops if o.name == "local_load" and len(getattr(o.results[0].type, "shape", ())) <= 1]:
        at = ops.index(op)
        first = next((k for k in range(at + 1, len(ops))
                      if any(u is op.results[0] for inner in ops[k].walk() for u in inner.operands)), None)
        if first is not None and first > at + 1:
            ops.insert(first - 1, ops.pop(at))


def _store_once(pre, stores, order, dots, stored_earlier, loop, loc):
    """The tiles of the `once` operands, allocated in `pre` and stored in `stores`, or the tiles an
    earlier loop stored them to (the two loops of causal attention read the same Q): {(value, tile
    type): tile}."""
    stored = {}
    for op in order:
        for src in dots[id(op)]:
            key = (src[1], src[2]) if src[0] == "once" else None
            if key is None or key in stored:
                continue
            earlier = stored_earlier.get(key)
            if earlier is not None and _dominates(earlier.defining_op, loop):
                stored[key] = earlier
                continue
            tile = stored[key] = stored_earlier[key] = append_op(pre, "local_alloc", [], [src[2]], loc)
            append_op(stores, "local_store", [src[1], tile], (), loc)
    return stored


def _read_tile(out, ring, read_slot, tiles, loc):
    """The tile of `ring` this iteration reads (one `local_index` per ring and iteration)."""
    if id(ring) not in tiles:
        tiles[id(ring)] = append_op(out, "local_index", [ring, read_slot], [ring.type.tile()], loc)
    return tiles[id(ring)]


def _stage_operand(out, v, src, staged, staged_slot, staged_now, hopper, loc):
    """The tile staged operand `v` is stored to this iteration: stored once (an order, where that matters:
    `smem_plan.staging_key`), for the first dot that reads it (a fence for the async proxy, a barrier),
    then read by every dot."""
    key = staging_key(src)
    if key not in staged_now:
        tile = staged_now[key] = append_op(out, "local_index", [staged[key], staged_slot], [src[2]], loc)
        append_op(out, "local_store", [v, tile], (), loc)
        if hopper:
            append_op(out, "fence_async_shared", [], (), loc)
        append_op(out, "barrier", [], (), loc)
    return staged_now[key]


def _after_loop(loop, in_flight, pointer_copies, released, bars, empty, loc):
    """After the loop: the dots still in flight awaited (the results at `in_flight` read through that
    wait), no copy left in flight, the mbarriers (`bars`: TMA's; `empty`: released slots')
    invalidated once no warpgroup uses them."""
    after = []
    if in_flight:
        results = [loop.results[i] for i in in_flight]
        waited = append_op(after, "warp_group_dot_wait", results, [v.type for v in results], loc, pending=0)
        swap = dict(zip(results, waited.defining_op.results))
    else:
        swap = {}
    if pointer_copies:
        append_op(after, "async_wait", [], (), loc, pending=0)
    if released:  # no warpgroup still waits on or arrives at the mbarriers
        append_op(after, "barrier", [], (), loc)
    if bars is not None:  # every copy issued was awaited in the loop; the bytes may go to another buffer
        append_op(after, "mbarrier_inval", [bars], (), loc)
    if released:
        append_op(after, "mbarrier_inval", [empty], (), loc)
    parent = loop.parent
    at = parent.ops.index(loop) + 1
    for later in parent.ops[at:]:
        for op in later.walk():
            op.operands = [swap.get(v, v) for v in op.operands]
    insert_ops(parent, at, after)


def _opaque(out, v, loc):
    """`v` through a volatile move: LLVM cannot hoist what the prologue computes from it out of
    an enclosing loop (a persistent matmul's tile loop). Hoisted, the prologue's copy masks are
    predicates live across the whole K loop, more than a thread's seven; ptxas then rebuilds one
    per copy inside the K loop, a chain of dependent instructions per copy."""
    bits, reg = ("64", "l") if v.type.itemsize == 8 else ("32", "r")
    moved = append_op(out, "inline_asm", [v], [v.type], loc, asm=f"mov.b{bits} $0, $1;", constraints=f"={reg},{reg}",
                pack=1, volatile=True)
    # what axis info knew of the constant (the copies' widths depend on it)
    return append_op(out, "multiple_of", [moved], [v.type], loc, values=[axis_info.pow2_divisor(const_int(v))])


def _dominates(op, later) -> bool:
    """Does `op` come before `later` in its block, or before the op there that holds it?"""
    block = op.parent
    while later is not None and later.parent is not block:
        later = later.parent.parent if later.parent is not None else None
        later = later if isinstance(later, Operation) else None
    return later is not None and block.ops.index(op) < block.ops.index(later)


def _after_drain(a, issued_before) -> bool:
    """Is register operand `a` of a wgmma computed, in this iteration, from the result of a wait
    that leaves no group pending (`issued_before`: the iteration's ops so far)? wgmma reads A's
    registers until a wait retires it, and the registers' allocator does not know: a dot left in
    flight into the next iteration would have its A overwritten by that iteration's A unless A
    is computed only after such a wait, which retires it (attention's P, computed from QK^T's
    result; a matmul of an A scaled in the loop got NaNs on the H200)."""
    ours = {id(o) for o in issued_before}
    stack, seen = [a], set()
    while stack:
        op = stack.pop().defining_op
        if op is None or id(op) not in ours or id(op) in seen:
            continue
        seen.add(id(op))
        if op.name == "warp_group_dot_wait" and op.attrs["pending"] == 0:
            return True
        stack.extend(op.operands)
    return False


def _carried_dots(body, order) -> dict:
    """For each dot whose result is only carried to the next iteration: the groups its wait
    leaves pending, the number of such dots in its run (dots in program order between two
    awaited at once). After a run's last dot exactly that run is in flight, so every dot
    issued before it has retired there (what the copies into the slots read before need); a
    dot counted that is awaited after all (an A from registers, `_after_drain`) only retires
    more."""
    runs, run = {}, []
    for op in order + [None]:
        if op is not None and all(u is body.ops[-1] for u in _users(body, op.results[0])):
            run.append(op)
            continue
        runs.update({id(d): len(run) for d in run})
        run = []
    return runs


def _users(block, v):
    return [op for op in block.walk() if any(u is v for u in op.operands)]


def _issue_ahead(out, copies, rings, body, arg_index, ahead, used, iv, step, stages, ub, slots, ring_size, loc,
                 bars=None):
    """The copies of iteration i + S-1 into the write slot; returns what the yield
    carries on: the look-ahead values one iteration further and the next slots. Where every trip's
    copies went out before the loop (a ring smaller than the stages: smem_plan's `all_ahead`), those
    would all be past the last trip, and a masked-off copy still fills its slot with zeros: an empty
    group instead, which keeps the count the waits leave pending."""
    if ring_size < stages:
        append_op(out, "async_commit", [], (), loc)
        return [ahead[a] for a in used] + [_next_slot(out, slot, ring_size, loc) for slot in slots]
    args = body.args[1:]
    iv_ahead = append_op(out, "add", [iv, append_const(out, (stages - 1) * step, loc, iv.type)], [iv.type], loc)
    mapping = {iv: iv_ahead, **{args[arg_index[a]]: ahead[a] for a in used}}
    _issue(out, copies, rings, slots[1], iv_ahead, ub, mapping, loc, bars)
    following = _advance(out, copies, body, arg_index, ahead, iv_ahead)
    return [following[a] for a in used] + [_next_slot(out, slot, ring_size, loc) for slot in slots]


def _next_phase(out, tail, phase, loc):
    """The read slot's barrier phase for the next iteration (`tail` ends with the next read and
    write slots): it flips where the read slot wraps to 0."""
    wrapped = append_op(out, "cmp", [tail[-2], append_const(out, 0, loc)], [int1], loc, pred="eq")
    flip = append_op(out, "cast", [wrapped], [int32], loc)
    return append_op(out, "xor", [phase, flip], [int32], loc)


def _await_release(out, empty, read_slot, write_slot, phase, loc):
    """Wait until the write slot's last reads were released. Its fill n waits for release n - 1,
    phase parity (n - 1) & 1; n & 1 is the phase the slot will be read in: the current read phase,
    flipped where the write slot has wrapped past the end (write slot < read slot). So the parity
    is the read phase flipped where the write slot is ahead. A fresh mbarrier passes a wait for
    parity 1, so the first fills go at once."""
    ahead = append_op(out, "cmp", [write_slot, read_slot], [int1], loc, pred="gt")
    parity = append_op(out, "xor", [phase, append_op(out, "cast", [ahead], [int32], loc)], [int32], loc)
    bar = append_op(out, "local_index", [empty, write_slot], [empty.type.tile()], loc)
    append_op(out, "mbarrier_wait", [bar, parity], (), loc)


def _release_previous_slot(body, empty, read_slot, iv, lb, ring_size, loc):
    """After the first wait that retires every dot issued before this iteration (one left pending
    per dot issued since), each warpgroup arrives on the slot the iteration before read."""
    issued = 0
    for k, op in enumerate(body.ops):
        if op.name == "warp_group_dot":
            issued += 1
        elif op.name == "warp_group_dot_wait" and op.attrs["pending"] <= issued:
            out = []
            previous = slot_after(out, read_slot, ring_size - 1, ring_size, loc)
            later = append_op(out, "cmp", [iv, lb], [int1], loc, pred="gt")
            bar = append_op(out, "local_index", [empty, previous], [empty.type.tile()], loc)
            append_op(out, "mbarrier_arrive", [bar, later], (), loc)
            insert_ops(body, k + 1, out)
            return
    raise AssertionError("a released ring's loop retires its dots")  # every dot has a wait (above)


def _next_slot(out, slot, size, loc):
    """(slot + 1) % size, as a compare and select."""
    bumped = append_op(out, "add", [slot, append_const(out, 1, loc)], [int32], loc)
    wraps = append_op(out, "cmp", [bumped, append_const(out, size, loc)], [int1], loc, pred="eq")
    return append_op(out, "select", [wraps, append_const(out, 0, loc), bumped], [int32], loc)


def _await_before_reads(body, arg):
    """`arg` may still be a dot's accumulator in flight: anything but another dot's
    accumulator reads it only after a wait with no dot pending (the latest one before the
    first read takes it as one more operand, or a new one is placed there)."""
    ops = body.ops
    def reads(op):
        return any(u is arg and not (inner.name == "warp_group_dot" and i == 2)
                   for inner in op.walk() for i, u in enumerate(inner.operands))
    first = next((k for k, op in enumerate(ops) if reads(op)), None)
    if first is None:
        return
    waits = [k for k in range(first) if ops[k].name == "warp_group_dot_wait" and ops[k].attrs["pending"] == 0]
    if waits:
        wait = ops[waits[-1]]
        wait.operands.append(arg)
        ready = Value(arg.type, wait, len(wait.results))
        wait.results.append(ready)
        later = ops[waits[-1] + 1:]
    else:
        # the dots this iteration issued before the read (each in the body itself, as this pass issues
        # them) committed their groups after `arg`'s: they may stay in flight (the next key block's
        # scores issued before this block's softmax run under it)
        pending = sum(op.name == "warp_group_dot" for op in ops[:first])
        wait = Operation("warp_group_dot_wait", [arg], [arg.type], {"pending": pending}, loc=ops[first].loc)
        wait.parent = body
        ops.insert(first, wait)
        ready = wait.results[0]
        later = ops[first + 1:]
    for op in later:
        for inner in op.walk():
            inner.operands = [ready if u is arg else u for u in inner.operands]
