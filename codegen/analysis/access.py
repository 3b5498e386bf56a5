"""How wide a memory op's accesses are: from its pointers' contiguity and alignment (the axis
analysis) and the layout its threads hold them in. The layouts pass chooses layouts by it,
smem_pipeline sizes its copies by it and lowering emits the vector accesses it allows.

Each function takes `ctx`, the compile's options with the function's `axis` (kiln.codegen.analysis).
"""
from __future__ import annotations

from kiln.ir.layout import Blocked, Slice, blocked_for, default_order
from kiln.ir.types import block_type, scalar_of


def memory_width(ctx, op) -> tuple[tuple[int, ...], int]:
    """(order, elements per thread in a row) that the axis info allows for `op`'s pointer."""
    ptr = op.operands[0]
    shape = ptr.type.shape
    info = ctx.axis.get(ptr)
    rank = len(shape)
    order = tuple(sorted(range(rank), key=lambda d: (-info.contiguity[d], -d)))
    if info.contiguity[order[0]] == 1:
        order = default_order(rank)
    d = order[0]
    elem = max(1, scalar_of(ptr.type).element_ty.itemsize)
    align = max(1, info.divisibility[d] // elem)
    vec = min(info.contiguity[d], align, max(1, 16 // elem))
    return order, max(1, vec)


def register_run(layout) -> tuple[int, int]:
    """(dim, n): a thread's registers come in runs of n consecutive elements along dim,
    each run starting at a multiple of n; (-1, 1) where none does. A slice keeps its
    parent's runs (a 1-D scale row in a slice of the weights' layout loads as vectors)."""
    if isinstance(layout, Blocked):
        return layout.order[0], layout.size_per_thread[layout.order[0]]
    if isinstance(layout, Slice):
        d = layout.vector_dim()
        if d >= 0:
            return d, register_run(layout.parent)[1]
    return -1, 1


def access_width(ctx, op, layout, shape, elem_bits) -> int:
    """Elements per vector access for memory op `op` reading or writing in `layout`."""
    d, run = register_run(layout)
    order, vec = memory_width(ctx, op)
    if d < 0 or order[0] != d:
        return 1
    vec = min(vec, run, shape[d], max(1, 128 // elem_bits))
    mask_index = 1 if op.name == "load" else 2
    if len(op.operands) > mask_index and op.name in ("load", "store", "async_copy"):
        # one mask bit per access; a copy whose mask is a prefix of each run (it carries
        # the runs' counts, smem_pipeline) may take the run: a src-size
        run = ctx.axis.get(op.operands[mask_index]).constancy[d]
        vec = min(vec, max(run, op.attrs.get("prefix_run", 1)))
    while vec & (vec - 1):
        vec -= 1
    return max(1, vec)


def store_layout(ctx, op, layout, elem_bits):
    """The layout a block store writes in: the value's `layout`, or a coalesced one when
    that one would store in pieces of less than 16 bytes that the pointers allow (a
    tensor-core accumulator, say): one trip through shared memory buys full-width,
    coalesced stores."""
    shape = op.operands[1].type.shape
    have = access_width(ctx, op, layout, shape, elem_bits)
    order, vec = memory_width(ctx, op)
    vec = min(vec, max(1, op.operands[1].type.numel // (32 * ctx.num_warps)))
    if vec <= have or have * elem_bits >= 128:
        return layout
    better = blocked_for(shape, order, vec, ctx.num_warps)
    return better if access_width(ctx, op, better, shape, elem_bits) > have else layout


def copied_inner_dim(t, shape) -> int:
    """The dim of a copied block of `shape` that shared tile type `t` stores innermost: a batched block's
    tile dims are its last two (of a tile's coordinates where the block is a vector: a tile of one row)."""
    return t.order[0] + (1 if len(shape) == 3 else 0)


def copy_layout(ctx, op, have):
    """The layout an `async_copy` reads its pointers in: theirs (`have`) if its threads
    hold runs along the tile's inner dim, else a coalesced one (the pointer math is then
    recomputed in it)."""
    ptr, tile = op.operands[:2]
    vector = len(ptr.type.shape) == 1  # it fills a tile of one row
    inner = 0 if vector else copied_inner_dim(tile.type, ptr.type.shape)  # (a dim of the pointers)
    order, vec = memory_width(ctx, op)
    if order[0] != inner and tile.type.element_ty.itemsize == 4:
        return _element_copy_layout(ptr.type.shape, inner, ctx.num_warps)
    vec = max(1, min(vec, ptr.type.numel // (32 * ctx.num_warps)))
    d, run = register_run(have)
    if isinstance(have, Blocked) and d == inner and run * tile.type.element_ty.itemsize >= 4:
        return have  # (cp.async moves 4 bytes at least: a layout of single fp16s along it is not kept)
    return blocked_for(ptr.type.shape, tile_order(ptr.type.shape, inner), vec, ctx.num_warps)


def tile_order(shape, inner: int) -> tuple:
    """The order of a block that fills a tile whose inner dim is `inner` (a dim of the block): that
    dim first, or a vector's only dim (a vector fills a tile of one row); a batched tile's batch last."""
    if len(shape) == 3:
        return (inner, 3 - inner, 0)
    return (0,) if len(shape) == 1 else (inner, 1 - inner)


def _element_copy_layout(shape, inner, num_warps):
    """Copies of single 32-bit elements into a tile whose inner dim (`inner`) is not memory's
    contiguous one (smem_plan stores a tf32 operand K-major so), in Triton's shape: each thread 4
    consecutive elements of memory's contiguous dim, its lanes along that dim, the warps along the
    tile's. A thread's copies then land in 4 consecutive rows of the tile at offsets the same for
    every thread but the swizzle's top bit: two shared addresses and immediates (ptxas finds them).
    The 4-byte copies meet in banks where lanes 8 along memory's rows by 4 along the tile's inner dim
    met in none, but those kept eight addresses and a 64-bit pointer a copy live: tutorial 03's tf32
    `x @ W` at 128x128x32 on 4 warps spilled 732 bytes, none so (session 94, while that B took element
    copies; since session 95 its box is staged: lower/tile_transpose)."""
    outer = 1 - inner
    spt = [1, 1]
    spt[outer] = min(4, shape[outer])
    tpw = [1, 1]
    tpw[outer] = min(32, max(1, shape[outer] // spt[outer]))
    tpw[inner] = 32 // tpw[outer]
    wpc, warps = [1, 1], num_warps
    for d in (inner, outer):
        wpc[d] = min(warps, max(1, shape[d] // tpw[d]))
        warps //= wpc[d]
    wpc[outer] *= warps
    return Blocked(tuple(spt), tuple(tpw), tuple(wpc), (outer, inner))


def read_back_through_memory(op) -> bool:
    """Is memory op `op` half of a store and a later load in one block through the same pointers (flash-attn's
    `tl.store(t_ptrs, x); x = tl.load(t_ptrs)`, no barrier between)? Such a pair is laid out alike, in the
    pointers' coalesced layout, as Triton's are, so each element is loaded by the thread that stored it."""
    if op.name not in ("load", "store") or not isinstance(op.operands[0].type, block_type):
        return False
    block = op.parent
    at = block.ops.index(op)
    other, ops = ("load", block.ops[at + 1:]) if op.name == "store" else ("store", block.ops[:at])
    return any(o.name == other and o.operands[0] is op.operands[0] for o in ops)
