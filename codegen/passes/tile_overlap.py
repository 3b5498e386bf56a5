"""sm_90a: a persistent GEMM issues its next tile's first copies before this tile's epilogue.

After `persistent` and `smem_pipeline`, each iteration of the tile loop allocates the K
loop's TMA rings and mbarriers, copies the first S-1 k-steps, runs the K loop, waits for its
dots, invalidates the mbarriers and only then runs the epilogue (conversion, stores): the
tensor cores idle through the epilogue and until the next tile's first copies land. Here the
rings and mbarriers live across the tile loop and the next tile's first copies follow this
tile's last dots, so they land while the epilogue runs:

    rings, mbarriers (init)                         // once
    <the first S-1 copies of tile lb>              // slots 0 .. S-2, predicated lb < ub
    for %v = lb to ub step st, %base = 0, %parity = 0 {
      <the K loop, reading from slot %base with parity %parity>  -> %read, %phase after it
      warp_group_dot_wait {pending = 0}
      barrier                                       // every warp's part of the dots retired
      <the first S-1 copies of tile %v + st>       // slots %read .., predicated %v + st < ub
      <the epilogue of tile %v>
      yield %read, %phase
    }
    mbarrier_inval

Slots and parities count k-steps across tiles. A K loop of n steps reads n slots in turn
from %base; its last S-1 copies, past its end, were predicated off, so the next tile's
first copy takes the slot the K loop would have read next and each mbarrier still
completes one phase per slot read. The epilogue's scratch can no longer take the rings'
bytes (`smem_alloc` sees them live across the tile loop); where both do not fit, or only at
a CTA per SM less (`costs`), the kernel keeps its rings in the tile loop (tutorial 03's 128x256
fp16 tile: a 192 KB ring and a 66 KB conversion; see codegen/README for what making room cost).
The pass runs after `layouts`, where the epilogue's conversions and their scratch are known, and
weighs the rewrite on a copy first: the copy rewritten, its buffers placed (`smem_alloc`) and its
scratch planned (`scratch_barriers`), the shared memory that plan adds up to decides, and the
function itself is rewritten only where it pays. So the pass list runs once for either variant.

Only the form tutorial 03 and 09's GEMMs take: one K loop in the tile loop, its operands
all from TMA rings (no tile stored once or staged, no look-ahead values carried), the
prologue's addresses pure arithmetic on the tile index.
"""
from __future__ import annotations

from kiln.ir import copy_function
from kiln.ir.core import Value
from kiln.ir.types import int1, int32

from .. import occupancy
from ..analysis.scratch_use import planned_shared_bytes
from ..analysis.shared_buffers import allocated_bytes
from . import scratch_barriers, smem_alloc
from .rewrite import append_op, clone_op, const_int, has_side_effects, insert_ops, recomputable_cone, slot_after
from .smem_plan import enabled

name = "tile_overlap"
ISSUES = ("tma_expect", "tma_copy")  # the ops a prologue issues its copies with
PREDICATE = {"tma_expect": 1, "tma_copy": 3}  # the index of each one's predicate operand


def tile_loop(fn):
    """The tile loop the `persistent` pass made (`for program_id to ... step num_programs`), or None."""
    if not any("launch_grid" in attrs for attrs in fn.arg_attrs):
        return None
    loops = [op for op in fn.body.ops if op.name == "for"]
    if len(loops) != 1:
        return None
    lb, step = loops[0].operands[0].defining_op, loops[0].operands[2].defining_op
    if lb is None or step is None or (lb.name, step.name) != ("program_id", "num_programs"):
        return None
    return loops[0]


def apply(fn, ctx) -> None:
    if not enabled(ctx) or fn.attrs.get("tile_overlap", 1) == 0:
        return
    tiles = tile_loop(fn)
    gemm = match_tile_gemm(tiles) if tiles is not None else None
    if gemm is None:
        return
    if _costs_on_a_copy(fn, ctx):
        fn.attrs["tile_overlap"] = 0  # the variant it is, in its dumped IR
    else:
        _rewrite(tiles, gemm)  # (its clones untidied: LLVM merges them, the PTX is the same as after cse)


def _costs_on_a_copy(fn, ctx) -> bool:
    """Does the rewrite cost `fn` (`costs`), by the shared memory the rest of the plan gives a
    rewritten copy: its buffers placed and its scratch planned as the passes after this one do?"""
    trial = copy_function(fn)
    tiles = tile_loop(trial)
    _rewrite(tiles, match_tile_gemm(tiles))
    smem_alloc.apply(trial, ctx)
    scratch_barriers.apply(trial, ctx)
    return costs(planned_shared_bytes(trial), allocated_bytes(trial), ctx.target)


def costs(shared: int, allocated: int, target) -> bool:
    """Does keeping the rings live through the epilogue, at `shared` bytes with `allocated` of them
    the buffers', take the kernel past the SM's shared memory or cost it a CTA per SM? The scratch
    would otherwise reuse the rings' bytes. (A tight ring that made room for tutorial 03's 128x256
    fp16 epilogue ran 3% slower at 8192³; a second CTA per SM overlaps one CTA's epilogue with
    another's dots anyway.)"""
    alone = max(allocated, shared - allocated)
    return shared > occupancy.max_shared_per_cta(target.capability) or \
        occupancy.ctas_by_shared(shared, target.capability) < occupancy.ctas_by_shared(alone, target.capability)


def overlapped(fn) -> bool:
    """Did this pass rewrite `fn` (read from the IR: the mbarriers are invalidated after the tile
    loop, not in each tile)? `compile` then weighs the variant against the plain one."""
    tiles = tile_loop(fn)
    if tiles is None:
        return False
    after = tiles.parent.ops[tiles.parent.ops.index(tiles) + 1:]
    return any(op.name == "mbarrier_inval" for op in after)


class TileGemm:
    """The parts of a persistent GEMM's tile loop in the form this pass (and warp_specialize) take."""
    __slots__ = ("tiles", "k_loop", "hoisted", "prologue_only", "cone", "wait", "inval", "ring_size", "first_write")

    def __init__(self, tiles, k_loop, hoisted, prologue_only, cone, wait, inval, ring_size, first_write):
        self.tiles, self.k_loop = tiles, k_loop
        self.hoisted = hoisted              # the rings, the mbarriers and their init, fence and barrier
        self.prologue_only = prologue_only  # the prologue's ops nothing but its copies needs
        self.cone = cone                    # the prologue's copies as computed from the tile index
        self.wait, self.inval = wait, inval  # the dots' wait after the K loop, the mbarriers' inval
        self.ring_size, self.first_write = ring_size, first_write  # the K loop's first write slot

    @property
    def bars(self):
        return self.inval.operands[0]

    def outer_after(self) -> list[str]:
        """The names of the ops after the tile loop in its block."""
        ops = self.tiles.parent.ops
        return [op.name for op in ops[ops.index(self.tiles) + 1:]]


def match_tile_gemm(tiles):
    """The TileGemm of tile loop `tiles`, or None where it is not of that form."""
    body = tiles.regions[0]
    ops = body.ops
    loops = [op for op in ops if op.name == "for"]
    if len(loops) != 1:
        return None
    k_loop = loops[0]
    at = ops.index(k_loop)
    if at + 2 >= len(ops):
        return None
    wait, inval = ops[at + 1], ops[at + 2]
    if wait.name != "warp_group_dot_wait" or wait.attrs.get("pending") != 0 or inval.name != "mbarrier_inval":
        return None
    bars = inval.operands[0]
    inits = [i for i, op in enumerate(ops[:at]) if op.name == "mbarrier_init"]
    if len(inits) != 1 or ops[inits[0]].operands[0] is not bars:
        return None
    init = inits[0]
    if [op.name for op in ops[init + 1:init + 3]] != ["fence_async_shared", "barrier"]:
        return None
    allocs = [op for op in ops[:at] if op.name == "local_alloc"]
    if any(ops.index(a) > init for a in allocs) or bars.defining_op not in allocs:
        return None
    if any(op.name in ("local_store", "async_copy", "local_load") for op in body.walk()):
        return None  # a tile stored once or staged, a cp.async ring, a read-back: not this form
    ring_size = bars.type.shape[0]
    if any(a.results[0].type.shape[0] != ring_size for a in allocs):
        return None
    starts = [const_int(v) for v in k_loop.operands[-3:]]  # read slot, write slot, parity
    if None in starts or starts[0] != 0 or starts[2] != 0:
        return None
    prologue = ops[init + 3:at]
    issuing = [op for op in prologue if has_side_effects(op)]
    if any(op.name not in ISSUES and op.name != "inline_asm" for op in issuing):
        return None
    used_later = {id(v) for op in ops[at:] for inner in op.walk() for v in inner.operands}
    if any(id(r) in used_later for op in issuing for r in op.results):
        return None
    if any(v.defining_op in prologue for v in k_loop.operands[3:-3]):
        return None  # look-ahead values carried into the K loop
    cone = _cone(issuing, ops[:at])
    if cone is None:
        return None
    hoisted = allocs + ops[init:init + 3]
    return TileGemm(tiles, k_loop, hoisted, _unneeded(prologue, ops), cone, wait, inval, ring_size, starts[1])


def _unneeded(prologue, ops):
    """The prologue's ops that nothing outside it needs (its copies and what they alone use)."""
    inside = {id(op) for op in prologue}
    keep = set()
    todo = [v.defining_op for op in ops if id(op) not in inside for inner in op.walk() for v in inner.operands]
    while todo:
        op = todo.pop()
        if op is not None and id(op) in inside and id(op) not in keep:
            keep.add(id(op))
            todo.extend(v.defining_op for v in op.operands)
    return [op for op in prologue if id(op) not in keep]


def _cone(issuing, before):
    """`issuing` and the ops of `before` they need, in order, or None where one is not plain
    arithmetic (a load, a region) that may be computed again for another tile."""
    cone = recomputable_cone([v for op in issuing for v in op.operands], before)
    if cone is None:
        return None
    need = {id(op) for op in cone} | {id(op) for op in issuing}
    return [op for op in before if id(op) in need]


def _rewrite(tiles, gemm):
    k_loop, hoisted, cone, wait, inval = gemm.k_loop, gemm.hoisted, gemm.cone, gemm.wait, gemm.inval
    ring_size, unneeded = gemm.ring_size, gemm.prologue_only
    body = tiles.regions[0]
    loc = tiles.loc
    iv = body.args[0]
    lb, ub, step = tiles.operands[:3]
    rings = {id(op.results[0]) for op in hoisted if op.name == "local_alloc"}
    outer = tiles.parent
    removed = {id(op) for op in hoisted + unneeded + [inval]}
    body.ops[:] = [op for op in body.ops if id(op) not in removed]

    before = list(hoisted)
    zero = append_op(before, "constant", [], [int32], loc, value=0)
    first = append_op(before, "cmp", [lb, ub], [int1], loc, pred="lt")
    _issue_for(before, cone, rings, ring_size, {iv: lb}, None, first, loc)
    base, parity = body.add_arg(int32), body.add_arg(int32)
    tiles.operands.extend([zero, zero])
    insert_ops(outer, outer.ops.index(tiles), before)
    insert_ops(outer, outer.ops.index(tiles) + 1, [inval])

    # the K loop starts where the last one stopped
    start = []
    k_loop.operands[-3] = base
    k_loop.operands[-2] = slot_after(start, base, gemm.first_write, ring_size, loc)
    k_loop.operands[-1] = parity
    insert_ops(body, body.ops.index(k_loop), start)

    after = []
    append_op(after, "barrier", [], (), loc)
    following = append_op(after, "add", [iv, step], [int32], loc)
    exists = append_op(after, "cmp", [following, ub], [int1], loc, pred="lt")
    read, phase = k_loop.results[-3], k_loop.results[-1]
    _issue_for(after, cone, rings, ring_size, {iv: following}, read, exists, loc)
    insert_ops(body, body.ops.index(wait) + 1, after)
    body.ops[-1].operands.extend([read, phase])
    for v in (read, phase):
        tiles.results.append(Value(v.type, tiles, len(tiles.results)))


def _issue_for(out, cone, rings, ring_size, mapping, base, exists, loc):
    """`cone` cloned under `mapping`: a ring slot s becomes (base + s) % ring_size, and each
    copy is also predicated on `exists` (the tile is one of this CTA's)."""
    mapping = dict(mapping)
    predicates = {}
    for op in cone:
        clone = clone_op(op, mapping)
        if op.name == "local_index" and id(op.operands[0]) in rings and base is not None:
            clone.operands[1] = slot_after(out, base, const_int(op.operands[1]), ring_size, loc)
        if op.name in PREDICATE:
            i = PREDICATE[op.name]
            if id(clone.operands[i]) not in predicates:
                predicates[id(clone.operands[i])] = append_op(out, "and", [clone.operands[i], exists], [int1], loc)
            clone.operands[i] = predicates[id(clone.operands[i])]
        out.append(clone)


