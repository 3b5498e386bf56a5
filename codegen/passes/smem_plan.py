"""Which loops smem_pipeline rewrites and how (kiln.codegen.passes.smem_pipeline says what the
rewritten loop is): how each dot operand reaches the tensor cores (a ring, once, registers or
staged), the rings' tiles and swizzles, each ring's copy (its address's cone, a prefix mask), the
TMA boxes the maps are encoded with, and the stages and ring size the shared memory allows.
`plan_loop` gives a `Plan`, or None where the loop stays as it is.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kiln.ir.core import Operation, is_zero_constant
from kiln.ir.ops import mixed_fp8
from kiln.ir.types import ROW_XOR_32, block_type, scalar_of, shared_type

from kiln.ir.layout import mma_layout, transposed_wgmma_layout, wgmma_layout
from ..occupancy import ctas_by_shared, ctas_per_sm, max_shared_per_cta
from . import mask_prefix
from ..analysis.access import copied_inner_dim, memory_width
from ..analysis.dots import mma_eligible
from .layouts import ELEMENTWISE_BETWEEN, computed_from
from .prefetch import address_cone
from .rewrite import const_int, has_side_effects, in_loop, is_pure, loop_trips, swaps_tile_dims
from ..analysis.partitions import dot_replicas
from ..analysis.pointer_roots import stores_unread
from ..analysis.shared_buffers import ALIGN


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
    ring_size: int  # stages, plus a spare slot where wgmma keeps a group in flight; the trips where fewer (all_ahead)
    slots: int  # tiles per staged operand
    drained: bool  # every wgmma retires in its own iteration (`_drained`): no spare slot, none "tight"
    released: bool  # the slots go back through mbarriers, not a barrier per iteration (`released_ring`)
    fetched: set  # ids of the loads fetched for staged and register operands
    read_back: set  # ids of ring loads other ops read too: read back from the tile (`_unshared_loads`)
    storing: bool  # the loop stores, only to arguments none of its loads reads (`stores_unread`)
    transposed: dict  # id of a dot run as C^T = B^T A^T -> the loads whose ring tile it reads B from (its
    # fetched load first, then the descriptor loads its box is behind: `_transposed_dots`)

    @property
    def fetched_tiles(self) -> bool:
        """Are 2-D loads among those fetched (not only vectors)?"""
        return any(id(c.load) in self.fetched and len(c.load.results[0].type.shape) == 2 for c in self.copies)


name = "smem_pipeline"

# input type -> accumulator types; fp32 is read as tf32 (input_precision="tf32"). Triton
# takes int8 dots only (no uint8), on .s32.s8.s8; fp16 accumulators (out_dtype=float16) with
# fp16 and fp8 operands.
WGMMA_INPUTS = {"fp16": ("fp32", "fp16"), "bf16": ("fp32",), "fp8e4nv": ("fp32", "fp16"), "fp8e5": ("fp32", "fp16"),
                "fp32": ("fp32",), "int8": ("int32",)}
TRANSPOSABLE = ("fp16", "bf16")  # wgmma reads M- or N-major tiles of 16-bit types only
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


def tma_rings(ctx) -> bool:
    """May TMA fill a ring (the loop's host or in-kernel descriptor loads)? On sm_90a, for wgmma and
    for mma.sync alike (Triton copies a descriptor's blocks by TMA at any warp count): kernels of fewer
    than 4 warps and dots of fewer rows than wgmma's read them by ldmatrix. Elsewhere, and in portable
    builds (the CPU emulator has no TMA), the descriptor's pointer loads are the loads."""
    return ctx.target.name == "sm_90a" and not ctx.portable


def tma_ok(op, fn) -> bool:
    """Can a TMA box copy this descriptor_load's block: a 2-D block of a host descriptor
    (its map a kernel argument) or of a map the kernel makes (`tensormap_create`), with at
    most 256 rows (a box's limit)?"""
    t = op.results[0].type
    return (op.operands[0] in fn.args or _created_map(op.operands[0]) is not None) \
        and len(t.shape) == 2 and t.shape[0] <= 256


def _created_map(tmap):
    op = tmap.defining_op
    return op if op is not None and op.name == "tensormap_create" else None


def is_tma(load) -> bool:
    return load.name == "descriptor_load"


# TMA reads a box that reaches past the tensor slowly: Triton's own descriptor matmul (tutorial 03's
# 128x64x64 tile) ran 81 µs at M = 64 against 58 at M = 128, twice the work (H200, 2026-12-01). Where
# the rows wrap (tutorial 03's `% M`; pointer_tma's `wrap_dim`), they are copied in boxes of this many,
# each starting at its row mod the extent: past the extent only the box the extent falls in reads
# zeros; the boxes after it read rows the dot's unseen rows may hold (pointer_tma: never stored).
WRAPPED_BOX_ROWS = 32


def copy_box(load, tile) -> tuple[int, int, int]:
    """(inner elements, rows, swizzle) of the TMA boxes that fill `tile` from descriptor load `load`."""
    inner, rows, swizzle = tile.tma_box()
    if load.attrs.get("wrap_dim") == tile.order[1] and rows > WRAPPED_BOX_ROWS and rows % WRAPPED_BOX_ROWS == 0:
        rows = WRAPPED_BOX_ROWS
    return inner, rows, swizzle


def load_address(load) -> list:
    """The operands a later iteration's copy recomputes: a pointer load's pointers and
    mask, a descriptor load's offsets."""
    return load.operands[1:-1] if is_tma(load) else load.operands[:2]


# --- which loops ---------------------------------------------------------------------

def _transposed_load(v, body):
    """The load in `body` whose tile `v` is read transposed (`tl.trans(load)`; each batch's tile of a
    3-D load), or None."""
    op = v.defining_op
    if not swaps_tile_dims(op) or op.parent is not body:
        return None
    src = op.operands[0].defining_op
    return src if src is not None and src.parent is body and src.name in ("load", "descriptor_load") else None


def _ring_tile(load, role, transposed, instr_extent, ctx, mma=False):
    """(swizzle, inner): the widest swizzle with which a dot can read the loaded tile as its
    `role` ("a" is [M, K], "b" is [K, N]; `transposed` when it reads tl.trans of the load) and
    the load's dim stored innermost in the ring's tile; None where no ring serves.

    The tile is stored with the pointer's contiguous dim inner where the dot can read it so:
    K-major reads (the read view's K inner) for every input type, M/N-major ones for 16-bit
    types, with swizzle rows no wider than what one instruction reads. A 32-bit operand
    contiguous along M (a tl.trans'd tf32 A) is stored K-major instead, element by element
    (cp.async's smallest copy is one such element): wgmma reads tf32 K-major only, and so the
    dot stays on the tensor cores, as Triton's does. Such a B [K, N] (row-major `x @ W`) gets no
    ring here: the staged path copies it 16 bytes at a time and the dot reads it as the
    transposed product's A (`_transposed_dots`): 2.7-4.2x Triton's element copies (H100,
    2026-12-07). mma.sync (`mma`)
    reads such a B N-major as it is copied (by cp.async or TMA), a fragment register a load
    (lower/mma.py), as Triton's MMAv2 does: the element-by-element copies cost a one-warp
    16x128x32 tile 6 KB of spills, and a descriptor's blocks left to its pointer loads ran at a
    tenth of Triton's speed. A cp.async ring stores such a B in whole rows XORed in 32-byte units
    (ROW_XOR_32), which those loads read without bank conflicts (in a TMA swizzle two lanes share a
    bank: the one-warp 16x128x32 tile ran at half the speed)."""
    t = load.results[0].type
    elem = scalar_of(t)
    if len(t.shape) == 3:
        return _batched_ring_tile(load, role, transposed, ctx) if mma and not is_tma(load) else None
    order, vec = ((1, 0), 16) if is_tma(load) else _copy_width(load, ctx)
    if vec * elem.itemsize < 4:  # cp.async moves 4, 8 or 16 bytes
        return None
    k_dim = (1 if role == "a" else 0) ^ int(transposed)  # K in the load's dims
    inner = order[0]
    n_major_b = mma and role == "b" and elem.itemsize == 4
    if inner != k_dim and elem.name not in TRANSPOSABLE and not n_major_b:
        if is_tma(load) or elem.itemsize != 4 or role == "b":
            return None
        inner = k_dim
    row_bytes = t.shape[inner] * elem.itemsize
    if n_major_b and inner != k_dim and not is_tma(load) and row_bytes >= 128:
        return ROW_XOR_32, inner
    if inner != k_dim:
        row_bytes = min(row_bytes, instr_extent * elem.itemsize)
    swizzle = min(128, row_bytes)
    return (swizzle, inner) if swizzle >= 32 else None


def _batched_ring_tile(load, role, transposed, ctx):
    """(swizzle, inner) of the ring of a batched dot's 3-D `load` ([B, M, K] or [B, K, N]; `transposed`:
    the dot reads each batch's tile transposed) on mma.sync, or None: each batch's 2-D tile after the
    last's (`inner`: a dim of the 2-D tile), stored with memory's contiguous dim inner, as cp.async copies
    it in runs of 4 bytes or more. K-major for every type, M/N-major for 16-bit ones (ldmatrix transposes
    those); swizzled by the row's bytes, up to 128 (any swizzle serves ldmatrix's 16-byte rows)."""
    t = load.results[0].type
    elem = scalar_of(t)
    order, vec = _copy_width(load, ctx)
    if vec * elem.itemsize < 4 or order[0] == 0:
        return None
    inner = order[0] - 1
    if inner != (1 if role == "a" else 0) ^ int(transposed) and elem.name not in TRANSPOSABLE:
        return None
    swizzle = min(128, t.shape[1 + inner] * elem.itemsize)
    return (swizzle, inner) if swizzle >= 32 else None


def _common_swizzle(first, other):
    """The swizzle of a ring two dots read, one wanting `first` (None: no other reader yet), the other
    `other`: the narrower TMA swizzle, which every reader can read; row-XOR where both want it."""
    if first is None or first == other:
        return other
    return min(s if s != ROW_XOR_32 else 128 for s in (first, other))


def _stored_tile(t, role):
    """The K-major shared tile that a register operand of type `t` is stored into."""
    elem = scalar_of(t)
    inner = 1 if role == "a" else 0
    return shared_type(elem, t.shape, min(128, t.shape[inner] * elem.itemsize), (inner, 1 - inner))


_SAME_DIMS = ELEMENTWISE_BETWEEN | {"cmp"}  # ops whose result's dims are their block operands' dims


def _memory_inner_dim(v, ctx, depth: int = 32, seen=None):
    """The dim of block value `v` along which the memory it is computed from was contiguous (through
    elementwise ops, transposes, joins and reshapes back to a load), or None where that is unknown.
    A join's new dim is finer than its operands' inner last dim (two nibbles of one byte, unpacked).
    Each value is asked once (`seen`): a value read twice by one op (x * x) doubles no work."""
    seen = set() if seen is None else seen
    op = v.defining_op
    if op is None or depth == 0 or not isinstance(v.type, block_type) or id(v) in seen:
        return None
    seen.add(id(v))
    if op.name == "load":
        return memory_width(ctx, op)[0][0]
    if op.name == "permute":
        inner = _memory_inner_dim(op.operands[0], ctx, depth - 1, seen)
        return None if inner is None else list(op.attrs["order"]).index(inner)
    if op.name == "join":
        inner = _memory_inner_dim(op.operands[0], ctx, depth - 1, seen)
        last = len(op.operands[0].type.shape) - 1
        return None if inner is None else (last + 1 if inner == last else inner)
    if op.name == "reshape" and not op.attrs.get("can_reorder"):
        inner = _memory_inner_dim(op.operands[0], ctx, depth - 1, seen)
        return None if inner is None else _reshaped_dim(op.operands[0].type.shape, v.type.shape, inner)
    if op.name not in _SAME_DIMS:
        return None
    for x in op.operands:  # the data, not a factor broadcast over it
        if isinstance(x.type, block_type) and x.defining_op is not None and \
                x.defining_op.name not in ("broadcast", "splat", "constant"):
            inner = _memory_inner_dim(x, ctx, depth - 1, seen)
            if inner is not None:
                return inner
    return None


def _reshaped_dim(before, after, dim: int):
    """The dim of a row-major reshape's result whose neighbours are neighbours along `dim` before it
    (the same stride in the flat order), or None."""
    stride = 1
    for d in before[dim + 1:]:
        stride *= d
    run = 1
    for d in range(len(after) - 1, -1, -1):
        if run == stride and after[d] > 1:
            return d
        run *= after[d]
    return None


def _staged_tile(t, role, instr_extent, inner=None):
    """The tile that an operand computed in the loop is stored into each iteration: K-major,
    but a 16-bit B N-major, as it usually comes (a dequantized weight: whole 16-byte runs of
    a row per store), in rows no wider than one instruction reads; None where those rows
    would be narrower than the smallest swizzle. A 16-bit B computed from memory contiguous
    along K (`inner` 0: mxfp4 weights [N, K] read transposed) is stored K-major too, so that
    each thread stores whole 16-byte runs of a row there as well."""
    elem = scalar_of(t)
    if role == "a" or elem.name not in TRANSPOSABLE or inner == 0:
        return _stored_tile(t, role)
    swizzle = min(128, t.shape[1] * elem.itemsize, instr_extent * elem.itemsize)
    return shared_type(elem, t.shape, swizzle, (1, 0)) if swizzle >= 32 else None


def staging_key(src) -> tuple:
    """The staged ring that a ("staged", v, tile) source is stored into: one a value, but for an 8- or
    32-bit value two dots read in different orders, one an order (lightning attention's `k_trans`, B of
    q @ k_trans and A of kv += k_trans @ v: stored once, in B's order, wgmma read tf32 A from it as if
    K-major). Only 16-bit tiles are read either way (ldmatrix.trans, wgmma's transpose bits)."""
    v, tile = src[1], src[2]
    return id(v), None if scalar_of(v.type).name in TRANSPOSABLE else tile.order


def _fetched_loads(dots, body, ring_loads, ctx, fetch_regs, staged_vectors=False, staged_tiles=True):
    """The loads in the body that staged operands (a dequantized B's raw weights and scales) or,
    with `fetch_regs` (wgmma's), register A operands (`(a * s).to(fp16)`) are computed from and
    that a cp.async ring can copy ahead too: {id: (load, tile)}. The body then reads them from
    the ring's tile (`local_load`) instead of from memory: no load's latency in the iteration,
    and an A read back in wgmma's fragment layout (kiln.codegen.passes.layouts) needs no
    conversion. A vector a register A is computed from (attention backward's row statistics M
    and Delta, broadcast against the scores) is fetched on every target, `fetch_regs` or not:
    loaded in the iteration, its latency lands between two dots (ptxas sinks the load to its use
    where registers are short), where Triton's pipeliner reads it from shared memory too. With
    `staged_vectors` (a loop that stores: fla's recurrences) so is a vector a staged operand is
    computed from (the chunk's gates): carried in registers past the loop's stores instead (prefetch),
    it cost fla's chunk_fwd_kernel_h 15-22 registers at 4 and 8 warps, the ring 5-7. So is a scalar
    (the chunk's last gate), in a tile of one: carried, loaded at the top of iteration i for i + 1, it
    arrived behind the ring copies in flight (one SM's requests, in order), and the register
    move that carries it waited for it at the end of the iteration: 11% of fla's fwd_h's warp stalls
    on an H100 (ncu, 2026-12-05), where Triton copies it into a ring too. Without `staged_tiles` a staged
    operand's tiles (not its vectors and scalars) are left out: loaded in the iteration."""
    found, seen = {}, set()
    # (value, read in a dot's fragment layout, met a dot's result of its shape on the way: fla's `v - w @ h`,
    # the load then read in the accumulator's layout, pairs of elements along eight rows at a time)
    stack = [(src[1], src[0] == "regs", False) for _, sources in dots.values() for src, _ in sources
             if src[0] in ("staged", "regs")]
    staged_as_loaded = set()  # staged operands as loaded (or the pointer loads behind their boxes)
    for v in (src[1] for _, sources in dots.values() for src, _ in sources if src[0] == "staged"):
        staged_as_loaded |= _with_fallbacks(v)
    while stack:
        v, fragment, beside_acc = stack.pop()
        op = v.defining_op
        if op is None or op.parent is not body or (id(op), fragment, beside_acc) in seen:
            continue
        seen.add((id(op), fragment, beside_acc))
        if op.name == "load":
            if _scalar_or_vector(op):
                tile = _small_tile(op, ctx) if fragment or staged_vectors else None
            elif fragment:
                tile = _fetch_tile(op, ctx, swizzled=True) if fetch_regs else None
            else:  # on sm_90 a staged 8-bit load is read by ldmatrix 8 rows at a time, a 32-bit one in 4x4 squares
                # (lower/tile_transpose): swizzled, neither read has bank conflicts (tf32 1.1-1.2x, session 96)
                swizzled = beside_acc or (v in staged_as_loaded and scalar_of(v.type).itemsize in (1, 4)
                                          and ctx.target.capability >= 90)
                tile = _fetch_tile(op, ctx, swizzled=swizzled) if staged_tiles else None
            if id(op) not in ring_loads and tile is not None and (id(op) not in found or fragment or beside_acc):
                found[id(op)] = (op, tile)
        elif op.name != "dot":  # a dot's operands are its own business
            shape = getattr(op.results[0].type, "shape", None) if op.results else None
            acc = op.name in ELEMENTWISE_BETWEEN and any(
                isinstance(u.type, block_type) and u.type.shape == shape and computed_from(u, ("dot",))
                for u in op.operands)
            stack.extend((u, fragment, beside_acc or acc) for u in op.operands)
    for op in _scaling_products(dots, body):
        tile = _small_tile(op, ctx)
        if id(op) not in ring_loads and id(op) not in found and tile is not None:
            found[id(op)] = (op, tile)
    return found


def _scaling_products(dots, body) -> list:
    """The scalar and vector loads in the body that scale a dot's product or its accumulator on the way
    around the loop (a block-scaled GEMM's `acc += dot(a, b) * a_scale[:, None] * b_scale`, fla's decay
    `h * exp(g_last)` as the next dot's accumulator). Loaded in the iteration, each waited for global
    memory beside the dot; carried one iteration ahead, it came in behind the rings' copies (fla's fwd_h).
    Through rings of their own they come with the iteration's tiles."""
    users = {}
    for op in body.walk():
        for v in op.operands:
            users.setdefault(v, []).append(op)
    beside, seen = [], set()
    forward = [dot.results[0] for dot, _ in dots.values()]  # what each product meets on its way
    while forward:
        v = forward.pop()
        for op in users.get(v, ()):
            if op.parent is body and op.name in ELEMENTWISE_BETWEEN and id(op) not in seen:
                seen.add(id(op))
                beside += [u for u in op.operands if u is not v]
                forward.append(op.results[0])
    beside += [dot.operands[2] for dot, _ in dots.values() if len(dot.operands) > 2]  # its accumulator's past
    loads, stack, seen = [], beside, set()
    while stack:
        op = stack.pop().defining_op
        if op is None or op.parent is not body or id(op) in seen or op.name == "dot":
            continue
        seen.add(id(op))
        if op.name == "load":
            if _scalar_or_vector(op):
                loads.append(op)
        elif is_pure(op):
            stack.extend(op.operands)
    return loads


def _with_fallbacks(v) -> set:
    """`v` and, where it is a descriptor_load's block, that block's fallback, its fallback's... (the
    pointer load the frontend or pointer_tma put beside a box, which a ring copies where TMA does not)."""
    found = {v}
    while v.defining_op is not None and v.defining_op.name == "descriptor_load":
        v = v.defining_op.operands[-1]
        found.add(v)
    return found


def _fetch_tile(load, ctx, swizzled=False):
    """The ring tile for a load the body reads back into registers, or None where cp.async cannot
    copy it: unswizzled, where its threads read whole rows of 16-byte runs; `swizzled` (rows of up
    to 128 bytes, as wgmma's tiles) where they read wgmma's A fragments or an accumulator's layout,
    pairs of elements along the rows of eight rows at a time, which the swizzle spreads over every
    bank (unswizzled 64-byte rows: four lanes a bank, fla's fwd_h)."""
    t = load.results[0].type
    if not isinstance(t, block_type) or len(t.shape) != 2 or load.attrs.get("volatile") \
            or scalar_of(t).is_ptr() or scalar_of(t).name == "int1":
        return None
    if len(load.operands) == 3 and not is_zero_constant(load.operands[2]):
        return None
    order, vec = _copy_width(load, ctx)
    if vec * scalar_of(t).itemsize < 4:
        return None
    swizzle = min(128, t.shape[order[0]] * scalar_of(t).itemsize) if swizzled else 0
    return shared_type(scalar_of(t), t.shape, swizzle if swizzle >= 32 else 0, (order[0], 1 - order[0]))


def _vector_tile(load, ctx):
    """The ring tile of one row for 1-D `load` (`async_copy` and `local_load` take a vector as a
    tile of one row), or None where cp.async cannot copy it: 4 bytes or more per copy, no `other`
    but zero, not volatile."""
    t = load.results[0].type
    if load.attrs.get("volatile") or scalar_of(t).is_ptr() or scalar_of(t).name == "int1":
        return None
    if len(load.operands) == 3 and not is_zero_constant(load.operands[2]):
        return None
    if _copy_width(load, ctx)[1] * scalar_of(t).itemsize < 4:
        return None
    return shared_type(scalar_of(t), (1, t.shape[0]), 0, (1, 0))


def _scalar_or_vector(load) -> bool:
    t = load.results[0].type
    return not isinstance(t, block_type) or len(t.shape) == 1


def _small_tile(load, ctx):
    """The ring tile of a scalar or vector `load` (`_scalar_tile`, `_vector_tile`)."""
    return _vector_tile(load, ctx) if isinstance(load.results[0].type, block_type) else _scalar_tile(load)


def _scalar_tile(load):
    """The ring tile of a scalar `load` (a 1x1 tile; the copy a vector of one), or None where cp.async
    cannot copy it: under 4 bytes, an `other` but zero, volatile."""
    t = scalar_of(load.results[0].type)
    if load.attrs.get("volatile") or t.is_ptr() or t.name == "int1" or t.itemsize < 4:
        return None
    if len(load.operands) == 3 and not is_zero_constant(load.operands[2]):
        return None
    return shared_type(t, (1, 1), 0, (1, 0))


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


def _operand(v, role, body, instr_extent, ctx, regs=True, mma=False):
    """How operand `v` (role "a" or "b") of a dot in loop `body` reaches the tensor cores,
    or None:
    ("ring", load, transposed, swizzle, inner): a load in the body (or tl.trans of one),
        copied ahead through a ring whose tiles store the load's dim `inner` innermost;
    ("once", v, tile): defined before the loop, stored to shared memory once;
    ("regs", v): computed in the body, read from registers (A, where `regs`);
    ("staged", v, tile): computed in the body otherwise (or loaded where no ring can copy it),
        stored each iteration."""
    load = _transposed_load(v, body)
    transposed = load is not None
    if not transposed:
        load = v.defining_op if v.defining_op is not None and v.defining_op.parent is body else None
    if load is not None and load.name == "load" and \
            (load.attrs.get("volatile") or (len(load.operands) == 3 and not is_zero_constant(load.operands[2]))):
        return None
    if load is not None and load.name in ("load", "descriptor_load"):
        tile = _ring_tile(load, role, transposed, instr_extent, ctx, mma)
        if tile:
            return ("ring", load, transposed, *tile)
        if scalar_of(load.results[0].type).name in TRANSPOSABLE:
            return None  # (rows too narrow for cp.async: mma.sync, whose lowering stages them)
        # no copy lays it out as the dot reads it (an 8-bit B N-major: wgmma reads K-major, and
        # cp.async moves 4 bytes at least): loaded into registers and stored as the dot reads it
        # (a transpose in the store, as Triton's; lowered as one copy by warps: lower/tile_transpose), like an
        # operand the loop computes
    if len(v.type.shape) == 3:
        return None  # (a batched operand: rings only)
    if not _inside(v, body):
        return ("once", v, _stored_tile(v.type, role))
    if role == "a" and regs:
        return ("regs", v)
    tile = _staged_tile(v.type, role, instr_extent, _memory_inner_dim(v, ctx) if role == "b" else None)
    return ("staged", v, tile) if tile is not None else None


def _wgmma_sources(dot, body, ctx):
    """The sources of a and b (see `_operand`) when `dot` can run on wgmma, else None."""
    a, b, acc = dot.operands
    elem = scalar_of(a.type)
    if elem.name not in WGMMA_INPUTS or (scalar_of(b.type) != elem and not mixed_fp8(elem, scalar_of(b.type))):
        return None
    if len(acc.type.shape) != 2 or scalar_of(acc.type).name not in WGMMA_INPUTS[elem.name]:
        return None
    if elem.name == "fp32" and dot.attrs.get("input_precision") != "tf32":
        return None  # ieee keeps fp32's precision: not one tf32 product (tf32x3 was split into tf32 dots)
    K = a.type.shape[1]
    if K * elem.itemsize % 32:  # one instruction reads 32 bytes of k
        return None
    layout = wgmma_layout(acc.type.shape, ctx.num_warps, int8=elem.name == "int8")
    if layout is None:
        return None
    # A from registers: 16-bit types, and fp8 (lowering exchanges its bytes within each quad of lanes)
    regs = elem.itemsize == 2 or elem.is_fp8()
    sources = (_operand(a, "a", body, 64, ctx, regs=regs), _operand(b, "b", body, layout.instr_n, ctx, regs=False))
    return sources if None not in sources else None


def _mma_sources(dot, body, ctx):
    """The sources of a and b when `dot` can run on mma.sync reading its operands from
    shared tiles by ldmatrix, else None. Every tile is read 16 bytes per row at a time, so
    any swizzle serves: no instruction extent limits it. A 16-bit A computed in the loop
    stays in registers where every warp can hold whole rows of it and of the accumulator
    (`mma_layout(rows_only=True)`: attention's P)."""
    a, b, acc = dot.operands
    warps = ctx.num_warps
    if not mma_eligible(dot, ctx, rings=True) or mma_layout(acc.type.shape, warps) is None:
        return None
    regs = a.type.scalar.itemsize == 2 and None not in (mma_layout(acc.type.shape, warps, rows_only=True),
                                                        mma_layout(a.type.shape, warps, rows_only=True))
    anywhere = 1 << 30
    sources = (_operand(a, "a", body, anywhere, ctx, regs=regs, mma=True),
               _operand(b, "b", body, anywhere, ctx, regs=False, mma=True))
    return sources if None not in sources else None


def _unshared_loads(dots, uses):
    """(bad, read_back): the ring loads whose transposes something other than the planned dots reads
    (then the load must stay in registers), and those whose value itself is read elsewhere too (fla's
    `b_k` in a dot and scaled by its gates): those the body reads back from the ring's tile
    (`local_load`), as Triton reads a pipelined load's shared buffer for each of its uses."""
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
    bad, read_back = set(), set()
    for key, load in loads.items():
        trans_ops = transposes.get(key, set())
        if any(uses.get(t.results[0], 0) != via[id(t)] for t in trans_ops):
            bad.add(key)
        elif uses.get(load.results[0], 0) != direct.get(key, 0) + len(trans_ops):
            # a wrapped TMA copy fills rows past the extent with what only the dot's unseen rows may hold; a
            # batched tile is read by its dot alone (no local_load of one)
            bad_reads = load.attrs.get("wrap_dim") is not None or len(load.results[0].type.shape) == 3
            (bad if bad_reads else read_back).add(key)
    return bad, read_back


def _drained(dots, body) -> bool:
    """Does every planned wgmma retire in its own iteration? smem_pipeline waits for one there
    with nothing pending where its result is read in the iteration, or where its A comes from
    registers computed from no dot's result (`_after_drain`: a wgmma left in flight would read A's
    registers after the next iteration overwrote them). Then the slot iteration i - 1 read is free
    once every warp passed iteration i's first barrier, and the copies of i + S-1 may go there: a
    ring of S slots serves, without the spare slot (or the extra barrier of a "tight" ring)."""
    for dot, sources in dots.values():
        result = dot.results[0]
        carried_only = all(u is body.ops[-1] for u in body.walk() if any(v is result for v in u.operands))
        a = sources[0][0]
        if carried_only and not (a[0] == "regs" and not _reads_a_dot(a[1], body)):
            return False
    return True


def _reads_a_dot(v, body) -> bool:
    """Is `v` computed, in `body`, from a dot's result?"""
    stack, seen = [v], set()
    while stack:
        op = stack.pop().defining_op
        if op is None or op.parent is not body or id(op) in seen:
            continue
        seen.add(id(op))
        if op.name == "dot":
            return True
        stack.extend(op.operands)
    return False


def _split_inners(dots) -> set:
    """The ring loads whose dots want their tiles stored with different dims inner (a 32-bit
    tile read K-major by one dot and M/N-major by another): one ring cannot serve them."""
    inners = {}
    for _, sources in dots.values():
        for src, _ in sources:
            if src[0] == "ring":
                inners.setdefault(id(src[1]), set()).add(src[4])
    return {key for key, found in inners.items() if len(found) > 1}


def plan_loop(loop, stages, fn, ctx, kind, in_registers=frozenset()):
    """`in_registers`: the values earlier loops' wgmmas read as register A."""
    body = loop.regions[0]
    step = const_int(loop.operands[2])
    if step is None or step <= 0:
        return None
    storing = any(has_side_effects(o) for o in body.ops)
    if storing and not stores_unread(body, fn):
        return None  # (copies issued ahead of an iteration's stores: only where none reads what they write)
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
        bad, read_back = _unshared_loads(dots, uses)
        for _, sources in dots.values():
            for src, _ in sources:
                if src[0] == "ring" and id(src[1]) not in cones:
                    cones[id(src[1])] = address_cone(src[1], load_address(src[1]), body, closed=True)
        bad |= {key for key, cone in cones.items() if cone is None}
        bad |= _split_inners(dots)
        dropped = [key for key, (_, sources) in dots.items()
                   if any(src[0] == "ring" and id(src[1]) in bad for src, _ in sources)]
        if not dropped:
            break
        for key in dropped:
            del dots[key]
    if not dots:
        return None
    loads, swizzles, inners = {}, {}, {}  # in the order the dots first read them
    for _, sources in dots.values():
        for src, _ in sources:
            if src[0] == "ring":
                swizzles[id(src[1])] = _common_swizzle(swizzles.get(id(src[1])), src[3])
                inners[id(src[1])] = src[4]
                loads.setdefault(id(src[1]), src[1])
    rings = []
    for key, load in loads.items():
        t = load.results[0].type
        inner = inners[key]
        tile = shared_type(scalar_of(t), t.shape, swizzles[key], (inner, 1 - inner))
        rings.append(Copy(load, tile, *cones[key], _prefix_copy(load, copied_inner_dim(tile, t.shape), ctx)))
    # a register A's loads fetched too where the rings then fit (a warp-specialized loop's reserve may
    # leave room for the dot's own rings only); else loaded in the iteration, as before; and last, a staged
    # operand's tiles loaded in the iteration too, not the dot left to mma.sync (triton_kernels' bf16 x fp8
    # matmul with mx scales, 128x256x128: its fp8 weights' 32 KB a stage did not fit beside the dequantized
    # B's two 64 KB slots; on mma.sync it spilled 2,380 bytes, on wgmma none)
    for fetch_regs, staged_tiles in ((True, True), (False, True), (False, False)) if kind == "wgmma" else ((False, True),):
        fetched = {}
        all_rings = list(rings)
        for key, (load, tile) in _fetched_loads(dots, body, loads, ctx, fetch_regs, storing, staged_tiles).items():
            cone = address_cone(load, load_address(load), body, closed=True)
            if cone is not None:
                fetched[key] = load
                small = _scalar_or_vector(load)  # (a mask bit per copy)
                all_rings.append(Copy(load, tile, *cone, None if small else _prefix_copy(load, tile.order[0], ctx)))
        transposed = _transposed_dots(dots, fetched, all_rings, uses, ctx) if kind == "wgmma" else {}
        fragment_loads = {id(loads[0]) for loads in transposed.values()}
        all_rings = [_fragment_ring(c) if id(c.load) in fragment_loads else c for c in all_rings]
        sized = _sized(all_rings, dots, body, loop, stages, fn, ctx, kind, in_registers, transposed)
        if sized is not None:
            break
    else:
        return None
    rings, (stages, ring_size, slots, drained, released) = all_rings, sized
    boxes = _agreed_boxes(rings, fn, ctx)
    if boxes is None:
        return None
    plan = {key: [src for src, _ in sources] for key, (_, sources) in dots.items()}
    for key, box in boxes.items():
        if isinstance(key, Operation):
            key.attrs["box"] = list(box)
        else:
            fn.arg_attrs[key]["tma_box"] = list(box)
    return Plan(plan, rings, stages, step, ring_size, slots, drained, released, set(fetched), read_back, storing,
                transposed)


def _transposed_dots(dots, fetched, rings, uses, ctx) -> dict:
    """The dots whose staged B is an 8- or 32-bit load along N (`x @ W`, W row-major) that its ring can
    serve as copied: wgmma reads such a B K-major only, and a staged tile is stored transposed every
    iteration (lower/tile_transpose, a barrier); computed as C^T = B^T A^T instead, B^T is wgmma's A,
    read from the ring into registers in the fragment's order (lower/transposed_dot), and A's K-major
    tile is its B. Where A is in shared memory too, the load is read by that dot alone, the dot keeps no
    partial sums and its accumulator's shape suits `transposed_wgmma_layout`. {dot id: [the fetched load, the
    descriptor loads between it and the dot]}."""
    tiles = {id(c.load): c.tile for c in rings}
    out = {}
    for key, (dot, sources) in dots.items():
        (a_src, _), (b_src, b) = sources
        if b_src[0] != "staged" or a_src[0] not in ("ring", "once"):
            continue
        chain = sorted(_with_fallbacks(b), key=lambda v: id(v.defining_op) not in fetched)  # the fetched one first
        load, acc, elem = chain[0].defining_op, dot.operands[2], scalar_of(b.type)
        if load is None or id(load) not in fetched or any(uses.get(v, 0) != 1 for v in chain) \
                or elem.itemsize not in (1, 4) or tiles[id(load)].order[0] != 1:
            continue
        if a_src[0] == "ring" and a_src[4] != 1 - int(a_src[2]):
            continue  # A's tile not K-major
        if "max_num_imprecise_acc" in dot.attrs:
            continue  # partial sums: 0.92-1.06x of the staged path (H100, 2026-12-07), left staged
        if transposed_wgmma_layout(acc.type.shape, ctx.num_warps, elem.name == "int8") is not None:
            out[key] = [v.defining_op for v in chain]
    return out


def _fragment_ring(copy):
    """The ring a transposed dot reads B^T's fragments from: a 32-bit one in whole rows XORed in 32-byte units
    (ROW_XOR_32) where its rows are 128 bytes or wider, as mma.sync's N-major tf32 B: a fragment's 8-byte loads
    (four rows of k, 64 bytes of each) then fall in distinct banks a half warp, where the 128-byte swizzle keeps
    the four rows in the same four 16-byte units (two lanes a bank). Other rings as they are."""
    t = copy.tile
    if t.element_ty.itemsize != 4 or t.shape[t.order[0]] * 4 < 128 or is_tma(copy.load):
        return copy
    return replace(copy, tile=shared_type(t.element_ty, t.shape, ROW_XOR_32, t.order))


def _sized(rings, dots, body, loop, stages, fn, ctx, kind, in_registers, transposed=()):
    """(stages, ring size, staged slots, drained, released) that fit the shared memory, or None.
    A transposed dot's B has no staged tile, but its slots are not released through mbarriers: the
    generic proxy reads them, as a staged operand's load."""
    stage_bytes = sum(ring.tile.nbytes for ring in rings)
    reserve = ALIGN if any(is_tma(r.load) for r in rings) else 0  # the mbarriers' buffer
    specialized = kind == "wgmma" and specializable(loop, dots)
    if specialized:
        reserve += specialized_scratch(loop, ctx.num_warps)
    once = {(id(src[1]), src[2]): src[2].nbytes for _, sources in dots.values() for src, _ in sources if src[0] == "once"}
    staged = {staging_key(src): src[2].nbytes for key, (_, sources) in dots.items() for src, _ in sources
              if src[0] == "staged" and not (key in transposed and src is sources[1][0])}
    slots = staged_slots(kind, ringed=bool(rings))
    fixed = sum(once.values()) + slots * sum(staged.values()) + reserve  # the shared bytes beside the rings
    budget = max_shared_per_cta(ctx.target.capability) - fixed - fn.attrs.get("shared_reserve", 0)
    drained = kind == "wgmma" and _drained(dots, body)
    spare = 1 if kind == "wgmma" and not drained else 0  # mma.sync dots are done when their loads are
    released = released_ring(kind == "wgmma", bool(rings) and all(is_tma(r.load) for r in rings),
                             bool(staged) or bool(transposed),
                             ctx.num_warps, in_loop(loop))
    trips = loop_trips(loop)
    if trips is not None and 0 < trips < stages:
        if all_ahead(rings, loop, trips, stage_bytes, budget, released or specialized):
            return stages, trips, slots, drained, False
        stages = max(2, trips)
    # the slots S - 1 + spare would take (released: a ring to fill, so stage_bytes > 0): see released_ring
    deep = spare and released and stages + 1 > budget // stage_bytes >= 3
    while stages > 2 and (stages + spare) * stage_bytes > budget and not deep:
        stages -= 1
    ring_size = stages + spare
    if deep:
        stages = ring_size = min(stages, budget // stage_bytes)
    elif ring_size * stage_bytes > budget:
        ring_size = stages  # tight: see the module's docstring
        if ring_size * stage_bytes > budget:
            return None
    elif spare or kind != "wgmma":  # (an mma.sync ring has no spare slot; its dots are done when they return)
        if tight_for_company(fixed, stages, stage_bytes, bool(staged), ctx.num_warps, ctx.target.capability):
            ring_size = stages
        elif not staged and len(dots) == 1:  # (measured on GEMM tiles)
            fewer = stages_for_company(fixed, stages, stage_bytes, ctx.num_warps, ctx.target.capability)
            if fewer:
                stages = ring_size = fewer
    if kind == "wgmma" and fn.attrs.get("company", 1) != 0 and not specialized:
        freed, tight = _company(dots, fixed, stages, ring_size, stage_bytes, ctx, in_registers)
        if freed:
            drained = _drained(dots, body)
            ring_size = stages if tight or drained else ring_size
            fn.attrs["company"] = max(fn.attrs.get("company", 0), freed)  # (loops' rings share their bytes)
    return stages, ring_size, slots, drained, released


def all_ahead(rings, loop, trips: int, stage_bytes: int, budget: int, released: bool) -> bool:
    """Do every trip's copies of a loop over constant bounds go out before it (smem_pipeline._useful_stages
    asked trips + 1 stages), each trip into a slot of its own, the ring no bigger than the trips? Where
    cp.async alone fills the rings, those slots fit and no loop encloses this one: no slot is written
    twice, so no spare slot is kept and no barrier waits before a copy (the loop's own copies are dead:
    an empty group instead). Otherwise the stages are the trips, as before: TMA's slot barriers count on
    a ring's wraps, and an enclosing loop's next trip would copy into the slot this loop read last."""
    return bool(rings) and not released and not in_loop(loop) and not any(is_tma(r.load) for r in rings) and \
        trips * stage_bytes <= budget


def released_ring(hopper, tma_only, staged, num_warps, nested) -> bool:
    """Are a ring's slots handed back through mbarriers instead of a barrier per iteration
    (smem_pipeline)? Where TMA fills every ring of a loop, nothing is staged, and the loop runs on
    two warpgroups or more, outside another loop (a persistent GEMM's K loop keeps its barriers: the
    tile loop's epilogue and next copies are ordered by them). Such a ring where S + 1 slots do not
    fit but three or more do takes as many as fit (up to S) with no spare, its copies one iteration
    further ahead than the stages and spare slot in those bytes would be: the copy of iteration
    i + S-1 then waits for the release of the slot iteration i - 1 read, made after this
    iteration's first wait. Tutorial 06's forward at D128 in 128x128 blocks, 3 stages, 8 warps
    (three 64 KB slots, so two stages and the spare before; H200, 2026-12-04, N 4096 and 16384,
    causal and not, pointer and host-descriptor forwards): 405-490 -> 470-564 TFLOP/s, from
    0.88-0.92 of the 128x64 blocks' to 1.04-1.06 (copies one step ahead, issued at the end of the
    iteration before, had nothing to hide their latency under: ncu put 30% of the warps' samples
    on the K slot's mbarrier wait)."""
    return hopper and tma_only and not staged and num_warps >= 8 and not nested


# Registers a thread of a tensor-core loop holds besides its dots' results and register operands (addresses,
# row statistics, the loop's state): tutorial 06's forward at D64 in 64x64 blocks on 4 warps, 123 registers for
# 64 + 16 counted
REGISTER_OVERHEAD = 40


def _company(dots, fixed: int, stages: int, ring_size: int, stage_bytes: int, ctx,
             in_registers) -> tuple[int, bool]:
    """Where shared memory keeps another CTA off the SM that registers would let on: each A operand
    defined before the loop read from registers (as A computed in the loop is) instead of stored to
    shared memory once, and the ring tight (S slots, a barrier before the copies). Rewrites those
    sources in `dots`; (the bytes freed, the ring made tight), or (0, False) where nothing is gained. An
    operand that an earlier loop reads from registers (`in_registers`) is read so here too, gain or not:
    stored once for this loop it would take back the bytes that loop freed (bench's dQ kernel at D128 in
    64-row blocks: its coarse loop and its tail read Q and dO, 164864 bytes a CTA with the tail's copies,
    99328 with none). Tutorial 06's forward at D64,
    64x64 blocks, 3 stages, 4 warps (H200, N 1024-4096): 3 -> 4 CTAs a SM, 232 -> 260 TFLOP/s causal
    at N 1024 (Triton 258), 367 -> 391 at 4096 (Triton 357); 128x64 on 8 warps, which registers hold to 2 CTAs
    either way, ran 1-2% slower so. An estimate, before registers are known: the compile builds the
    kernel again without it (`company = 0`) where the link shows no CTA gained (kiln.codegen.compiler)."""
    invariant = {}
    for dot, sources in dots.values():
        a = sources[0][0]
        elem = scalar_of(dot.operands[0].type)
        if a[0] == "once" and elem.itemsize == 2:  # (an 8-bit A loaded so is not measured: registers cap those kernels)
            invariant[(a[1], a[2])] = a[2].nbytes
    if not invariant:
        return 0, False
    capability, threads = ctx.target.capability, 32 * ctx.num_warps
    freed = sum(invariant.values()) + (ring_size - stages) * stage_bytes
    now = ctas_by_shared(fixed + ring_size * stage_bytes, capability)
    shared = fixed + ring_size * stage_bytes - freed
    held = sum(dot.results[0].type.numel * scalar_of(dot.results[0].type).itemsize for dot, _ in dots.values())
    registers = (held + sum(invariant.values())) // (4 * threads) + REGISTER_OVERHEAD
    tight = ctas_per_sm(registers, threads, shared, capability) > now
    if not tight:
        invariant = {key: size for key, size in invariant.items() if key[0] in in_registers}
        freed = sum(invariant.values())
    for _, sources in dots.values():
        a, v = sources[0]
        if a[0] == "once" and (a[1], a[2]) in invariant:
            sources[0] = (("regs", a[1]), v)
    return freed, tight


def tight_for_company(fixed: int, stages: int, stage_bytes: int, staged: bool, num_warps: int,
                      capability: int) -> bool:
    """Does a tight ring (S tiles and a barrier before the copies, instead of S + 1) let another
    CTA share the SM where it counts? A loop that stages an operand already meets at a barrier
    between its stores and its dots, so it takes any CTA more (W8A16, 128x128 tiles over 8 warps:
    2 CTAs, 1.25x). Otherwise a CTA of one warpgroup that the spare slot leaves alone on its SM:
    alone it neither hides its loads' latency behind another's dots nor its epilogue. Tutorial
    03's 128x64x64 and 64x128x64 tiles, 4 warps, 4 stages (H200, 2026-12-01): 1.14-1.55x at
    M = 192-1024, N = K = 8192 and 1.19-1.37x at 4096³, from 0.70-0.90 of Triton to 0.98-1.23;
    0.92x at 8192³ for 128x64x64 alone. Not measured yet on two warpgroups, whose spare slots go
    back through mbarriers without a CTA-wide barrier (released_ring)."""
    tight = ctas_by_shared(fixed + stages * stage_bytes, capability)
    spare = ctas_by_shared(fixed + (stages + 1) * stage_bytes, capability)
    return tight > spare and (staged or (spare == 1 and num_warps <= 4))


def stages_for_company(fixed: int, stages: int, stage_bytes: int, num_warps: int, capability: int) -> int:
    """The stages (3 or more) of a tight ring that let a second CTA of one warpgroup share the SM
    where `stages` stages, spare slot or not, leave it alone; 0 where none does. Fewer k-steps in
    flight against another CTA's dots hiding this one's waits and epilogue: tutorial 03's kernel at
    4 stages, 4 warps, 32 KB a stage (H200, 2026-12-04, bench/matmul_waves.py, 4096³ / 8192³): fp16
    128x128x64 517 / 504 -> 632 / 628 TFLOP/s (host descriptors +1-3%), tf32 128x128x32 311 / 304
    -> 325 / 320. An mma.sync ring alike (one warp, 16x256x64 at 4 stages: 139,264 -> 104,448 bytes, as
    Triton's; an H100, 2026-12-06: 2x on grids of more than a wave, level on one; the 32x256 tile, which
    spills, 0.5-0.6x on a wave or less and 1.2x on more)."""
    if num_warps > 4 or ctas_by_shared(fixed + stages * stage_bytes, capability) > 1:
        return 0
    return next((s for s in range(stages - 1, 2, -1) if ctas_by_shared(fixed + s * stage_bytes, capability) > 1), 0)


def specializable(loop, dots) -> bool:
    """May `warp_specialize` take this loop? It asks (`tl.range(..., warp_specialize=True)`) and is
    what that pass takes at most: a K loop of one dot in another loop (the persistent tile loop).
    Any other loop runs as written whatever its hint, so its plan reserves nothing for the pass:
    tutorial 06's forward on Hopper asks (its non-causal benchmark, through the descriptors the
    kernel makes), and at D128 in 128-key blocks the 32 KB reserved for an epilogue beside its
    rings left them two 64 KB slots, not three."""
    return bool(loop.attrs.get("warp_specialize")) and in_loop(loop) and len(dots) == 1


def specialized_scratch(loop, num_warps: int) -> int:
    """Shared bytes a warp-specialized loop's kernel needs beside its rings (kiln.codegen.passes.
    warp_specialize): the empty mbarriers, and the epilogue's conversion of the block it stores
    after the loop, which can no longer take the rings' bytes (at 4 warps, one per replica).
    An estimate made before layouts (a conversion pads its rows: a sixteenth at most), so that
    one run of the pass list plans rings that fit."""
    after = loop.parent.ops[loop.parent.ops.index(loop) + 1:]
    stored = [op.operands[1].type for op in after if op.name == "store" and isinstance(op.operands[1].type, block_type)]
    largest = max((t.numel * scalar_of(t).itemsize for t in stored), default=0)
    areas = dot_replicas(num_warps)
    return ALIGN + areas * (largest * 17 // 16 + 15) // 16 * 16


def _prefix_copy(load, inner, ctx):
    """(w, count) where a pointer load's mask is proved a prefix of every aligned run of
    w elements along the tile's inner dim (w: the copy's width) but not constant over
    them: its copies then zero-fill each run's tail through cp.async's src-size, and
    `count(emit, value)` builds the runs' true-element counts (mask_prefix.count_true).
    Else None: a mask bit per copy."""
    if is_tma(load) or len(load.operands) < 2 or inner != memory_width(ctx, load)[0][0]:
        return None  # (element copies, the tile's inner dim not memory's: a mask bit each)
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
        box = copy_box(load, tile)
        made = _created_map(load.operands[0])
        if made is not None:  # a map the kernel makes: keyed by its op, the box in its attrs
            key, known = made, made.attrs.get("box")
            boxes.setdefault(key, tuple(known) if known else box)
        else:
            key = fn.args.index(load.operands[0])
            boxes.setdefault(key, box)
        if boxes[key] != box:
            return None
    return boxes
