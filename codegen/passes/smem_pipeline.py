"""Software pipelining through shared memory, for dots that run on Hopper's wgmma and,
on the other targets from sm_80 on, on mma.sync (`mma_dot`, see the end).

In a `for` loop (constant positive step, nothing stored in its body) a `dot` (fp16,
bf16, fp8 or fp32 at tf32 precision into fp32; int8 into int32) runs on wgmma when each
operand comes one of four ways:
    ring:  a block load in the body (its address a pure function of the induction
           variable and of carried values that advance by pure ops), or tl.trans of one,
           copied ahead with cp.async through a ring of S + 1 swizzled tiles, S = the
           loop's `num_stages`; one ring per load, whichever dots read it, as is or
           transposed (`local_trans`: attention's backward reads Q^T and dO both ways);
    once:  a value defined before the loop (attention's Q), stored to a tile once (a
           later loop reading the same value reuses the tile);
    regs:  A only, a 16-bit value computed in the body (attention's P), read from
           registers: wgmma's A fragment is the accumulator layout's register order;
    staged: any other value computed in the body (fp8 attention's P: an 8-bit A fragment
           is not the accumulator's register order; int8 likewise; a dequantized B),
           stored each iteration into a ring of 2 or 3 tiles (`staged_slots`; K-major, a
           16-bit B N-major), then a fence and a barrier. The 2-D loads it is computed from come
           through rings too and are read back from their tiles (`local_load`); the loop's
           other loads are then carried one iteration ahead in registers (prefetch).

The rewritten loop:
    before the loop:  the `once` tiles stored; the rings; the copies of iterations
                      0 .. S-2 issued (`async_copy`, one group each)
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
with nothing pending (one more operand of it) or a new one.

The copy of iteration i + S-1 overwrites the tile that the dots of iteration i - 2 read:
every warpgroup finished those before the barrier of iteration i (it waited for them in
iteration i - 1), which is why the ring has one tile more than there are stages. Where
S + 1 tiles do not fit even at S = 2 (a 256x128 fp16 matmul tile pair is 96 KB), or where
a loop that stages an operand fits one more CTA per SM with S tiles than with S + 1, the ring
has S tiles ("tight"): the copy of iteration i + S-1 then overwrites what the dots of
iteration i - 1 read, so it waits until they retired: every dot's wait comes before it,
then a barrier, since each warp waits for its own part only.

A ring load may also be a `descriptor_load` (2-D, its map a kernel argument or made by
the kernel, `tensormap_create`, whose `box` this pass sets): its ring is filled by TMA instead, thread 0 announcing each slot's
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
fewer than 4 warps, portable builds) the same rings feed `mma_dot`, which loads each thread's
fragments from the tiles by ldmatrix and is done when it returns. So the ring has S tiles:
at the top of iteration i, after the wait and the barrier, the copies of iteration i + S-1
go into the slot iteration i-1 read (every warp is past it), ahead of the dots. A 16-bit A
computed in the body stays in registers where every warp holds whole rows of it and of the
accumulator (`mma_layout(rows_only=True)`); other values computed there are staged (two
slots). There are no fences: the async proxy exists from sm_90 on.
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.ir.core import Operation, Value
from kiln.ir.types import block_type, int1, int32, int64, scalar_of, shared_type

from kiln.ir.layout import mma_layout, wgmma_layout
from ..occupancy import ctas_by_shared, max_shared_per_cta
from . import axis_info, descriptor_loads, mask_prefix, prefetch
from .access import memory_width
from .analysis import Analysis
from .layouts import mma_eligible
from .prefetch import address_cone
from .rewrite import append_const, append_op, clone_op, const_int, has_side_effects, in_loop, insert_ops


@dataclass(slots=True)
class Copy:
    """What one ring is filled with each iteration: the load it replaces, the shared tile it fills,
    how its address is computed (the pure body ops, the ids of the carried args they read, the ops
    that advance those args: prefetch.address_cone) and a pointer copy's mask prefix or None."""
    load: Operation
    tile: object
    cone: list
    args: set
    advance: list
    prefix: object


@dataclass(slots=True)
class Plan:
    """How `_rewrite` pipelines one loop."""
    sources: dict  # dot id -> [its operands' sources: ("ring" | "once" | "staged" | "regs", ...)]
    copies: list  # [Copy], one per ring, in the order the dots first read them
    stages: int
    step: int
    ring_size: int  # stages, plus a spare slot where wgmma keeps a group in flight
    slots: int  # tiles per staged operand
    fetched: set  # ids of the loads fetched for dequantized operands

name = "smem_pipeline"

# input type -> accumulator type; fp32 is read as tf32 (input_precision="tf32"). Triton
# takes int8 dots only (no uint8), on .s32.s8.s8.
WGMMA_INPUTS = {"fp16": "fp32", "bf16": "fp32", "fp8e4nv": "fp32", "fp8e5": "fp32", "fp32": "fp32", "int8": "int32"}
TRANSPOSABLE = ("fp16", "bf16")  # wgmma reads M- or N-major tiles of 16-bit types only
ALIGN = 1024  # a 128-byte swizzle repeats every 8 rows of 128 bytes
def staged_slots(kind, ringed: bool) -> int:
    """Tiles of a staged operand's ring; the store of iteration i reuses the tile of
    iteration i - slots. An mma.sync dot has read its tile once its ldmatrix loads
    returned: two slots. A wgmma dot left in flight is retired by each warp's wait in the
    next iteration, and a warp knows the other warps' parts retired (the ISA promises a
    warp's wait no more than its own part) only after a barrier that follows their waits: two slots where the loop has rings (the barrier at the top of iteration i follows
    the waits of iteration i-1), else three (the staging barrier of iteration i-1)."""
    return 3 if kind == "wgmma" and not ringed else 2


def enabled(ctx) -> bool:
    """Do pipelined dots run on wgmma (sm_90a, whole warpgroups)?"""
    return ctx.target.name == "sm_90a" and not ctx.portable and ctx.num_warps % 4 == 0


def ring_kind(ctx):
    """"wgmma" where `enabled`; "mma" (mma.sync fed by ldmatrix from the ring tiles) on
    every other target from sm_80 on, and in portable builds, whose CPU emulator runs
    mma.sync and ldmatrix but not wgmma; else None."""
    if enabled(ctx):
        return "wgmma"
    return "mma" if ctx.target.capability >= 80 else None


def apply(fn, ctx) -> None:
    kind = ring_kind(ctx)
    if kind is None:
        return
    ctx = Analysis(fn, ctx)  # the options, and the pointers' contiguity before the rewrite
    stored = {}  # (value, tile) -> its tile, for later loops that read the same value
    for loop in [op for op in fn.walk() if op.name == "for"]:
        stages = int(loop.attrs.get("num_stages", ctx.num_stages))
        if stages >= 2:
            body = loop.regions[0]
            descriptor_loads.strip(fn, [op for op in body.ops
                                        if op.name == "descriptor_load" and not (kind == "wgmma" and _tma_ok(op, fn))])
            plan = _plan(loop, stages, fn, ctx, kind)
            if plan is not None:
                _rewrite(loop, plan, stored, kind=kind, portable=ctx.portable)
                fetched = plan.fetched
                if fetched:  # a dequantized operand: the loop's other loads (1-D scales) one iteration ahead
                    prefetch.pipeline(loop, shared_ok=True)


def _tma_ok(op, fn) -> bool:
    """Can a TMA box copy this descriptor_load's block: a 2-D block of a host descriptor
    (its map a kernel argument) or of a map the kernel makes (`tensormap_create`), with at
    most 256 rows (a box's limit)?"""
    t = op.results[0].type
    return (op.operands[0] in fn.args or _created_map(op.operands[0]) is not None) \
        and len(t.shape) == 2 and t.shape[0] <= 256


def _created_map(tmap):
    op = tmap.defining_op
    return op if op is not None and op.name == "tensormap_create" else None


def tma_box(t) -> tuple[int, int, int]:
    """(inner elements, rows, swizzle bytes) of the TMA box that fills tile type `t` one
    swizzle-wide column chunk at a time (kiln.ir.types.shared_type: a chunk is every row's
    `swizzle` bytes of the inner dim)."""
    return t.swizzle // t.element_ty.itemsize, t.shape[t.order[1]], t.swizzle


def is_tma(load) -> bool:
    return load.name == "descriptor_load"


def load_address(load) -> list:
    """The operands a later iteration's copy recomputes: a pointer load's pointers and
    mask, a descriptor load's offsets."""
    return load.operands[1:-1] if is_tma(load) else load.operands[:2]


# --- which loops ---------------------------------------------------------------------

def is_zero_constant(v) -> bool:
    """Is `v` a constant zero (a number, not False)?"""
    op = v.defining_op
    return op is not None and op.name == "constant" and op.attrs["value"] in (0, 0.0) \
        and not isinstance(op.attrs["value"], bool)


def _transposed_load(v, body):
    """The load in `body` whose tile `v` is read transposed (`tl.trans(load)`), or None."""
    op = v.defining_op
    if op is None or op.parent is not body or op.name != "permute" or list(op.attrs["order"]) != [1, 0]:
        return None
    src = op.operands[0].defining_op
    return src if src is not None and src.parent is body and src.name in ("load", "descriptor_load") else None


def _ring_swizzle(load, role, transposed, instr_extent, ctx):
    """The widest swizzle with which a dot can read the loaded tile as its `role` ("a" is
    [M, K], "b" is [K, N]; `transposed` when it reads tl.trans of the load), or None.

    The tile is stored with the pointer's contiguous dim inner. K-major reads (the read
    view's K inner) work for every input type; M/N-major ones for 16-bit types, with
    swizzle rows no wider than what one instruction reads."""
    t = load.results[0].type
    elem = scalar_of(t)
    order, vec = ((1, 0), 16) if is_tma(load) else _copy_width(load, ctx)
    if vec * elem.itemsize < 4:  # cp.async moves 4, 8 or 16 bytes
        return None
    inner = order[0] if not transposed else 1 - order[0]  # in the dot's view
    k_inner = (role == "a" and inner == 1) or (role == "b" and inner == 0)
    if not k_inner and elem.name not in TRANSPOSABLE:
        return None
    row_bytes = t.shape[order[0]] * elem.itemsize
    if not k_inner:
        row_bytes = min(row_bytes, instr_extent * elem.itemsize)
    swizzle = min(128, row_bytes)
    return swizzle if swizzle >= 32 else None


def _stored_tile(t, role):
    """The K-major shared tile that a register operand of type `t` is stored into."""
    elem = scalar_of(t)
    inner = 1 if role == "a" else 0
    return shared_type(elem, t.shape, min(128, t.shape[inner] * elem.itemsize), (inner, 1 - inner))


def _staged_tile(t, role, instr_extent):
    """The tile that an operand computed in the loop is stored into each iteration: K-major,
    but a 16-bit B N-major, as it usually comes (a dequantized weight: whole 16-byte runs of
    a row per store), in rows no wider than one instruction reads; None where those rows
    would be narrower than the smallest swizzle."""
    elem = scalar_of(t)
    if role == "a" or elem.name not in TRANSPOSABLE:
        return _stored_tile(t, role)
    swizzle = min(128, t.shape[1] * elem.itemsize, instr_extent * elem.itemsize)
    return shared_type(elem, t.shape, swizzle, (1, 0)) if swizzle >= 32 else None


def _fetched_loads(dots, body, ring_loads, ctx):
    """The loads in the body that staged operands are computed from (a dequantized B's raw
    weights and scales) and that a cp.async ring can copy ahead too: {id: (load, tile)}.
    The body then reads them from the ring's tile (`local_load`) instead of from memory."""
    found, seen = {}, set()
    stack = [src[1] for _, sources in dots.values() for src, _ in sources if src[0] == "staged"]
    while stack:
        op = stack.pop().defining_op
        if op is None or op.parent is not body or id(op) in seen:
            continue
        seen.add(id(op))
        if op.name == "load":
            tile = _fetch_tile(op, ctx)
            if id(op) not in ring_loads and tile is not None:
                found[id(op)] = (op, tile)
        elif op.name != "dot":  # a dot's operands are its own business
            stack.extend(op.operands)
    return found


def _fetch_tile(load, ctx):
    """The ring tile for a load the body reads back into registers (unswizzled: its
    threads read whole rows of 16-byte runs), or None where cp.async cannot copy it."""
    t = load.results[0].type
    if not isinstance(t, block_type) or len(t.shape) != 2 or load.attrs.get("volatile") \
            or scalar_of(t).is_ptr() or scalar_of(t).name == "int1":
        return None
    if len(load.operands) == 3 and not is_zero_constant(load.operands[2]):
        return None
    order, vec = _copy_width(load, ctx)
    if vec * scalar_of(t).itemsize < 4:
        return None
    return shared_type(scalar_of(t), t.shape, 0, (order[0], 1 - order[0]))


def _copy_width(load, ctx):
    """(order, elements per cp.async) of a pointer load's copies: contiguous, under one mask
    bit or one prefix's length, and no more than each thread's share of the block."""
    order, vec = memory_width(ctx, load)
    if len(load.operands) > 1:
        vec = min(vec, mask_prefix.prefix_run(load.operands[1], order[0], ctx.axis))
    return order, min(vec, max(1, load.results[0].type.numel // (32 * ctx.num_warps)))


def _inside(v, block) -> bool:
    """Is `v` defined in `block` or in a region nested in it?"""
    op = v.defining_op
    where = op.parent if op is not None else v.owner
    while where is not None:
        if where is block:
            return True
        owner = where.parent
        where = owner.parent if isinstance(owner, Operation) else None
    return False


def _operand(v, role, body, instr_extent, ctx, regs=True):
    """How operand `v` (role "a" or "b") of a dot in loop `body` reaches the tensor cores,
    or None:
    ("ring", load, transposed, swizzle): a load in the body (or tl.trans of one), copied
        ahead through a ring;
    ("once", v, tile): defined before the loop, stored to shared memory once;
    ("regs", v): computed in the body, read from registers (A of 16-bit types only, where
        `regs`);
    ("staged", v, tile): A computed in the body otherwise, stored each iteration."""
    load = _transposed_load(v, body)
    transposed = load is not None
    if not transposed:
        load = v.defining_op if v.defining_op is not None and v.defining_op.parent is body else None
    if load is not None and is_tma(load):
        swizzle = _ring_swizzle(load, role, transposed, instr_extent, ctx)
        return ("ring", load, transposed, swizzle) if swizzle else None
    if load is not None and load.name == "load":
        if load.attrs.get("volatile") or (len(load.operands) == 3 and not is_zero_constant(load.operands[2])):
            return None
        swizzle = _ring_swizzle(load, role, transposed, instr_extent, ctx)
        return ("ring", load, transposed, swizzle) if swizzle else None
    if not _inside(v, body):
        return ("once", v, _stored_tile(v.type, role))
    if role == "a" and regs and scalar_of(v.type).itemsize == 2:
        return ("regs", v)
    tile = _staged_tile(v.type, role, instr_extent)
    return ("staged", v, tile) if tile is not None else None


def _wgmma_sources(dot, body, ctx):
    """The sources of a and b (see `_operand`) when `dot` can run on wgmma, else None."""
    a, b, acc = dot.operands
    elem = scalar_of(a.type)
    if elem.name not in WGMMA_INPUTS or scalar_of(b.type) != elem:
        return None
    if len(acc.type.shape) != 2 or scalar_of(acc.type).name != WGMMA_INPUTS[elem.name]:
        return None
    if elem.name == "fp32" and dot.attrs.get("input_precision") != "tf32":
        return None  # ieee and tf32x3 keep fp32's precision: not one tf32 product
    K = a.type.shape[1]
    if K * elem.itemsize % 32:  # one instruction reads 32 bytes of k
        return None
    layout = wgmma_layout(acc.type.shape, ctx.num_warps, int8=elem.name == "int8")
    if layout is None:
        return None
    sources = (_operand(a, "a", body, 64, ctx), _operand(b, "b", body, layout.instr_n, ctx))
    return sources if None not in sources and sources[1][0] != "regs" else None


def _mma_sources(dot, body, ctx):
    """The sources of a and b when `dot` can run on mma.sync reading its operands from
    shared tiles by ldmatrix, else None. Every tile is read 16 bytes per row at a time, so
    any swizzle serves: no instruction extent limits it. A 16-bit A computed in the loop
    stays in registers where every warp can hold whole rows of it and of the accumulator
    (`mma_layout(rows_only=True)`: attention's P)."""
    a, b, acc = dot.operands
    warps = ctx.num_warps
    if not mma_eligible(dot, ctx) or mma_layout(acc.type.shape, warps) is None:
        return None
    regs = a.type.scalar.itemsize == 2 and None not in (mma_layout(acc.type.shape, warps, rows_only=True),
                                                        mma_layout(a.type.shape, warps, rows_only=True))
    anywhere = 1 << 30
    sources = (_operand(a, "a", body, anywhere, ctx, regs=regs), _operand(b, "b", body, anywhere, ctx, regs=False))
    return sources if None not in sources else None


def _unshared_loads(dots, uses):
    """The ring loads that something other than the planned dots reads (then the load
    must stay in registers): a ring load may feed several dots, directly or through
    tl.trans, and nothing else."""
    direct, via = {}, {}  # load id -> operand uses; trans op id -> operand uses
    loads, transposes = {}, {}
    for _, sources in dots.values():
        for src, v in sources:
            if src[0] == "ring":
                load = src[1]
                loads[id(load)] = load
                if src[2]:
                    transposes.setdefault(id(load), set()).add(v.defining_op)
                    via[id(v.defining_op)] = via.get(id(v.defining_op), 0) + 1
                else:
                    direct[id(load)] = direct.get(id(load), 0) + 1
    bad = set()
    for key, load in loads.items():
        trans_ops = transposes.get(key, set())
        if uses.get(load.results[0], 0) != direct.get(key, 0) + len(trans_ops) \
                or any(uses.get(t.results[0], 0) != via[id(t)] for t in trans_ops):
            bad.add(key)
    return bad


def _plan(loop, stages, fn, ctx, kind):
    body = loop.regions[0]
    step = const_int(loop.operands[2])
    if step is None or step <= 0:
        return None
    if any(has_side_effects(o) for o in body.ops):
        return None
    uses = {}
    for op in body.walk():
        for v in op.operands:
            uses[v] = uses.get(v, 0) + 1
    dots = {}
    for dot in body.ops:
        if dot.name == "dot":
            sources = (_wgmma_sources if kind == "wgmma" else _mma_sources)(dot, body, ctx)
            if sources is not None:
                dots[id(dot)] = (dot, list(zip(sources, dot.operands[:2])))
    cones = {}
    while True:  # drop the dots that read a load which cannot be a ring, until none does
        bad = _unshared_loads(dots, uses)
        for _, sources in dots.values():
            for src, _ in sources:
                if src[0] == "ring" and id(src[1]) not in cones:
                    cones[id(src[1])] = address_cone(src[1], load_address(src[1]), body)
        bad |= {key for key, cone in cones.items() if cone is None}
        dropped = [key for key, (_, sources) in dots.items()
                   if any(src[0] == "ring" and id(src[1]) in bad for src, _ in sources)]
        if not dropped:
            break
        for key in dropped:
            del dots[key]
    if not dots:
        return None
    loads, swizzles = {}, {}  # in the order the dots first read them
    for _, sources in dots.values():
        for src, _ in sources:
            if src[0] == "ring":
                swizzles[id(src[1])] = min(swizzles.get(id(src[1]), 128), src[3])
                loads.setdefault(id(src[1]), src[1])
    rings = []
    for key, load in loads.items():
        t = load.results[0].type
        inner = 1 if is_tma(load) else memory_width(ctx, load)[0][0]
        rings.append(Copy(load, shared_type(scalar_of(t), t.shape, swizzles[key], (inner, 1 - inner)), *cones[key],
                          _prefix_copy(load, inner, ctx)))
    fetched = {}
    for key, (load, tile) in _fetched_loads(dots, body, loads, ctx).items():
        cone = address_cone(load, load_address(load), body)
        if cone is not None:
            fetched[key] = load
            rings.append(Copy(load, tile, *cone, _prefix_copy(load, tile.order[0], ctx)))
    boxes = _agreed_boxes(rings, fn, ctx)
    if boxes is None:
        return None
    stage_bytes = sum(ring.tile.nbytes for ring in rings)
    reserve = ALIGN * (2 if any(is_tma(r.load) for r in rings) else 1)  # alignment; the mbarriers
    budget = max_shared_per_cta(ctx.target.capability) - reserve - ctx.shared_reserve
    once = {(id(src[1]), src[2]): src[2].nbytes for _, sources in dots.values() for src, _ in sources if src[0] == "once"}
    budget -= sum(once.values())
    staged = {id(src[1]): src[2].nbytes for _, sources in dots.values() for src, _ in sources if src[0] == "staged"}
    slots = staged_slots(kind, ringed=bool(rings))
    budget -= slots * sum(staged.values())
    spare = 1 if kind == "wgmma" else 0  # mma.sync dots are done when their loads are: no spare tile
    while stages > 2 and (stages + spare) * stage_bytes > budget:
        stages -= 1
    ring_size = stages + spare
    if ring_size * stage_bytes > budget:
        ring_size = stages  # tight: see the module's docstring
        if ring_size * stage_bytes > budget:
            return None
    elif staged and spare:
        # a dot of a staged operand: a CTA's warps already meet at a barrier between its
        # stores and its dots, so a tight ring's barrier costs little where it lets one
        # more CTA share the SM (W8A16, 128x128 tiles over 8 warps: 2 CTAs, 1.25x)
        fixed = sum(once.values()) + slots * sum(staged.values()) + reserve
        capability = ctx.target.capability
        if ctas_by_shared(fixed + stages * stage_bytes, capability) > ctas_by_shared(fixed + ring_size * stage_bytes,
                                                                                     capability):
            ring_size = stages
    plan = {key: [src for src, _ in sources] for key, (_, sources) in dots.items()}
    for key, box in boxes.items():
        if isinstance(key, Operation):
            key.attrs["box"] = list(box)
        else:
            fn.arg_attrs[key]["tma_box"] = list(box)
    return Plan(plan, rings, stages, step, ring_size, slots, set(fetched))


def _prefix_copy(load, inner, ctx):
    """(w, count) where a pointer load's mask is proved a prefix of every aligned run of
    w elements along the tile's inner dim (w: the copy's width) but not constant over
    them: its copies then zero-fill each run's tail through cp.async's src-size, and
    `count(emit, value)` builds the runs' true-element counts (mask_prefix.count_true).
    Else None: a mask bit per copy."""
    if is_tma(load) or len(load.operands) < 2:
        return None
    mask = load.operands[1]
    run = min(memory_width(ctx, load)[1], mask_prefix.prefix_run(mask, inner, ctx.axis))
    if ctx.axis.get(mask).constancy[inner] % run == 0:
        return None
    return run, lambda emit, value: mask_prefix.count_true(mask, inner, run, ctx.axis, emit, value)


def tma_boxes(fn) -> dict[int, tuple[int, int, int]]:
    """{argument index: (inner, rows, swizzle)} of the tensormap arguments whose TMA box a pass
    chose (their `tma_box` attribute): what the launcher encodes each map with."""
    return {i: tuple(attrs["tma_box"]) for i, attrs in enumerate(fn.arg_attrs) if "tma_box" in attrs}


def _agreed_boxes(rings, fn, ctx):
    """One TMA map per descriptor argument or `tensormap_create`, so every ring it fills
    must use one box and swizzle: the boxes (argument index or the create op -> (inner,
    rows, swizzle)) with those already recorded in an argument's `tma_box` (which the launcher
    encodes the maps with) or in a create's `box`, or None where two disagree."""
    boxes = tma_boxes(fn)
    for ring in rings:
        load, tile = ring.load, ring.tile
        if not is_tma(load):
            continue
        made = _created_map(load.operands[0])
        if made is not None:  # a map the kernel makes: keyed by its op, the box in its attrs
            key, known = made, made.attrs.get("box")
            boxes.setdefault(key, tuple(known) if known else tma_box(tile))
        else:
            key = fn.args.index(load.operands[0])
            boxes.setdefault(key, tma_box(tile))
        if boxes[key] != tma_box(tile):
            return None
    return boxes


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
            append_op(out, "tma_copy", [operands[0], view, bar, inside, *operands[1:-1]], (), loc)
            continue
        shape = load.results[0].type.shape
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


def _rewrite(loop, plan, stored_earlier, kind="wgmma", portable=False):
    dots, copies, stages, step, ring_size, slots = plan.sources, plan.copies, plan.stages, plan.step, plan.ring_size, plan.slots
    fetched = plan.fetched
    body = loop.regions[0]
    iv, args = body.args[0], body.args[1:]
    arg_index = {id(a): i for i, a in enumerate(args)}
    n_yields = len(body.ops[-1].operands)
    lb, ub = loop.operands[0], loop.operands[1]
    loc = loop.loc
    tight = ring_size == stages
    order = [op for op in body.ops if id(op) in dots]
    used = sorted({a for c in copies for a in c.args}, key=arg_index.get)  # by position: deterministic

    # before the loop: operands from outside stored once (or by an earlier loop: the two
    # loops of causal attention read the same Q), the rings, iterations 0 .. S-2 in flight
    pre, stored, fresh = [], {}, False
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
            append_op(pre, "local_store", [src[1], tile], (), loc)
            fresh = True
    hopper = kind == "wgmma"  # wgmma reads shared memory through the async proxy: fences
    if fresh and not copies:  # else the barrier at the top of the body orders them
        if hopper:
            append_op(pre, "fence_async_shared", [], (), loc)
        append_op(pre, "barrier", [], (), loc)
    rings = {id(load): append_op(pre, "local_alloc", [], [shared_type(t.element_ty, (ring_size,) + t.shape, t.swizzle, t.order)], loc)
             for load, t in ((c.load, c.tile) for c in copies)}
    staged = {}  # value id -> its ring of `slots` tiles
    for op in order:
        for src in dots[id(op)]:
            if src[0] == "staged" and id(src[1]) not in staged:
                t = src[2]
                staged[id(src[1])] = append_op(pre, "local_alloc", [],
                                         [shared_type(t.element_ty, (slots,) + t.shape, t.swizzle, t.order)],
                                         loc)
    ring_list = [rings[id(c.load)] for c in copies]
    tma = any(is_tma(c.load) for c in copies)
    pointer_copies = not all(is_tma(c.load) for c in copies)
    bars = None
    if tma:  # one mbarrier per ring slot: its TMA copies complete on it
        bars = append_op(pre, "local_alloc", [], [shared_type(int64, (ring_size, 1, 1))], loc)
        append_op(pre, "mbarrier_init", [bars], (), loc, count=1)
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
    if copies:
        # carried: the look-ahead values, the slot read and the slot written
        ahead = {a: body.add_arg(current[a].type) for a in used}
        read_slot, write_slot = body.add_arg(int32), body.add_arg(int32)
        loop.operands.extend([current[a] for a in used])
        loop.operands.extend([append_const(pre, 0, loc), append_const(pre, stages - 1, loc)])
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
    if copies:
        if hopper:
            append_op(new, "fence_async_shared", [], (), loc)
        append_op(new, "barrier", [], (), loc)
    tail = []  # what the yield carries on for the copies: look-ahead values, slots, phase
    if copies and not hopper:  # the slot iteration i - 1 read is free: every warp passed the barrier
        tail = _issue_ahead(new, copies, ring_list, body, arg_index, ahead, used, iv, step, stages,
                            ub, (read_slot, write_slot), ring_size, loc)
    ring_loads = {id(c.load) for c in copies}
    copied = ring_loads | {id(v.defining_op) for op in order for v, src in zip(op.operands[:2], dots[id(op)])
                           if src[0] == "ring" and src[2]}  # the tl.trans of a ring load
    copied |= {id(c.load.operands[-1].defining_op) for c in copies if is_tma(c.load)}  # their pointer loads
    replaced, deferred, tiles = {}, [], {}
    for op in body.ops[:-1]:
        if id(op) in fetched:  # read back from its ring's tile
            ring = rings[id(op)]
            if id(ring) not in tiles:
                tiles[id(ring)] = append_op(new, "local_index", [ring, read_slot], [ring.type.tile()], loc)
            replaced[op.results[0]] = append_op(new, "local_load", [tiles[id(ring)]], [op.results[0].type], op.loc)
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
            if src[0] == "ring":
                ring = rings[id(src[1])]
                if id(ring) not in tiles:
                    tiles[id(ring)] = append_op(new, "local_index", [ring, read_slot], [ring.type.tile()], loc)
                tile = tiles[id(ring)]
                views.append(append_op(new, "local_trans", [tile], [tile.type.transposed()], loc) if src[2] else tile)
            elif src[0] == "staged":
                tile = append_op(new, "local_index", [staged[id(src[1])], staged_slot], [src[2]], loc)
                append_op(new, "local_store", [v, tile], (), loc)
                if hopper:
                    append_op(new, "fence_async_shared", [], (), loc)
                append_op(new, "barrier", [], (), loc)
                views.append(tile)
            else:
                views.append(stored[(src[1], src[2])] if src[0] == "once" else v)
        acc = op.operands[2]
        if not hopper:  # done when it returns
            replaced[op.results[0]] = append_op(new, "mma_dot", views + [acc], [acc.type], op.loc)
            continue
        issued = append_op(new, "warp_group_dot", views + [acc], [acc.type], op.loc)
        # a result only carried to the next iteration may stay in flight (that dot's wait
        # leaves one group pending); one read in this iteration is awaited here, and the
        # copies are issued while the tensor cores work on it
        carried_only = all(u is body.ops[-1] for u in _users(body, op.results[0]))
        wait = Operation("warp_group_dot_wait", [issued], [acc.type], {"pending": int(carried_only)}, loc=op.loc)
        if carried_only or tight:
            new.append(wait)
        if copies and not tail and op is order[-1]:
            if tight:  # every warp's part of the dots of i - 1 retired
                append_op(new, "barrier", [], (), loc)
            tail = _issue_ahead(new, copies, ring_list, body, arg_index, ahead, used, iv, step, stages,
                                ub, (read_slot, write_slot), ring_size, loc, bars)
            if tma:
                wrapped = append_op(new, "cmp", [tail[-2], append_const(new, 0, loc)], [int1], loc, pred="eq")
                flip = append_op(new, "cast", [wrapped], [int32], loc)
                tail.append(append_op(new, "xor", [phase, flip], [int32], loc))
        if not carried_only and not tight:
            new.append(wait)
        wait = wait.results[0]
        replaced[op.results[0]] = wait
        if carried_only:
            deferred.append(wait)
    if staged:
        tail = tail + [_next_slot(new, staged_slot, slots, loc)]
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

    # after the loop: the dots still in flight, and no copy left in flight
    after = []
    if in_flight:
        results = [loop.results[i] for i in in_flight]
        waited = append_op(after, "warp_group_dot_wait", results, [v.type for v in results], loc, pending=0)
        swap = dict(zip(results, waited.defining_op.results))
    else:
        swap = {}
    if pointer_copies:
        append_op(after, "async_wait", [], (), loc, pending=0)
    if tma:  # every copy issued was awaited in the loop; the bytes may go to another buffer
        append_op(after, "mbarrier_inval", [bars], (), loc)
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


def _users(block, v):
    return [op for op in block.walk() if any(u is v for u in op.operands)]


def _issue_ahead(out, copies, rings, body, arg_index, ahead, used, iv, step, stages, ub, slots, ring_size, loc,
                 bars=None):
    """The copies of iteration i + S-1 into the write slot; returns what the yield
    carries on: the look-ahead values one iteration further and the next slots."""
    args = body.args[1:]
    iv_ahead = append_op(out, "add", [iv, append_const(out, (stages - 1) * step, loc, iv.type)], [iv.type], loc)
    mapping = {iv: iv_ahead, **{args[arg_index[a]]: ahead[a] for a in used}}
    _issue(out, copies, rings, slots[1], iv_ahead, ub, mapping, loc, bars)
    following = _advance(out, copies, body, arg_index, ahead, iv_ahead)
    return [following[a] for a in used] + [_next_slot(out, slot, ring_size, loc) for slot in slots]


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
        wait = Operation("warp_group_dot_wait", [arg], [arg.type], {"pending": 0}, loc=ops[first].loc)
        wait.parent = body
        ops.insert(first, wait)
        ready = wait.results[0]
        later = ops[first + 1:]
    for op in later:
        for inner in op.walk():
            inner.operands = [ready if u is arg else u for u in inner.operands]
