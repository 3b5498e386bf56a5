"""fp8 dots that no loop pipelined, on Hopper -> wgmma reading both operands from shared tiles.

sm_90a's PTX (8.0) has no fp8 mma.sync, so an fp8 dot that smem_pipeline did not take (one outside
any loop: a chained dot's epilogue, a kernel of one K step; or in a loop it left as written) would
otherwise run on fp16 mma.sync (fp8_dot_upcast, half of fp8's rate). Where its accumulator has a
wgmma layout, each operand is stored K-major to a tile of its own (wgmma reads 8-bit operands
K-major only), then a fence for the async proxy, a barrier (every warp's part is stored), the dot
issued (`warp_group_dot`) and awaited at once:

    %ta = local_alloc  ; local_store %a, %ta
    %tb = local_alloc  ; local_store %b, %tb
    fence_async_shared ; barrier
    %d = warp_group_dot %ta, %tb, %acc
    %r = warp_group_dot_wait %d {pending = 0}

The tiles' bytes are smem_alloc's to place by liveness: a later buffer reusing them takes a barrier
there (a warpgroup done with its part may not store over what another still reads).
"""
from __future__ import annotations

from kiln.ir.core import Operation
from kiln.ir.layout import wgmma_layout
from kiln.ir.ops import mixed_fp8
from kiln.ir.types import scalar_of

from ..analysis.dots import fp8_mma
from ..occupancy import max_shared_per_cta
from .fp8_dot_upcast import FP8
from .rewrite import append_op, insert_ops, replace_uses
from .smem_plan import WGMMA_INPUTS, _stored_tile, enabled

name = "standalone_wgmma"


def apply(fn, ctx) -> None:
    if not enabled(ctx) or fp8_mma(ctx):
        return
    replaced = {}
    for dot in [op for op in fn.walk() if op.name == "dot"]:
        tiles = _tiles(dot, ctx)
        if tiles is not None:
            replaced[dot.results[0]] = _issue(dot, tiles)
    if replaced:
        replace_uses(fn, replaced)


def _tiles(dot, ctx):
    """The K-major tile types of A and B where wgmma can run `dot`, else None: fp8 operands (one type,
    or e4m3 with e5m2), an accumulator type wgmma sums fp8 into, K a whole number of 32-byte
    instruction steps, a wgmma layout for the accumulator at the kernel's warps, and both tiles in at
    most half of a CTA's shared memory (the rest for the kernel's other buffers and scratch)."""
    a, b, acc = dot.operands
    ea, eb = scalar_of(a.type), scalar_of(b.type)
    if ea.name not in FP8 or eb.name not in FP8 or (ea != eb and not mixed_fp8(ea, eb)):
        return None
    if len(acc.type.shape) != 2 or scalar_of(acc.type).name not in WGMMA_INPUTS[ea.name]:
        return None
    if a.type.shape[1] % 32 or wgmma_layout(acc.type.shape, ctx.num_warps) is None:
        return None
    tiles = [_stored_tile(a.type, "a"), _stored_tile(b.type, "b")]
    return tiles if sum(t.nbytes for t in tiles) <= max_shared_per_cta(ctx.target.capability) // 2 else None


def _issue(dot, tile_types):
    """The stores, the fence and barrier, the wgmma and its wait in place of `dot`: the wait's result."""
    a, b, acc = dot.operands
    loc, block = dot.loc, dot.parent
    ops = []
    tiles = []
    for v, t in zip((a, b), tile_types):
        tile = append_op(ops, "local_alloc", [], [t], loc)
        append_op(ops, "local_store", [v, tile], (), loc)
        tiles.append(tile)
    append_op(ops, "fence_async_shared", [], (), loc)
    append_op(ops, "barrier", [], (), loc)
    # an fp8 dot's partial accumulators (Triton's max_num_imprecise_acc) are the lowering's
    imprecise = {"max_num_imprecise_acc": dot.attrs["max_num_imprecise_acc"]} \
        if "max_num_imprecise_acc" in dot.attrs else {}
    issued = append_op(ops, "warp_group_dot", tiles + [acc], [acc.type], dot.loc, **imprecise)
    wait = Operation("warp_group_dot_wait", [issued], [acc.type], {"pending": 0}, loc=dot.loc)
    ops.append(wait)
    at = block.ops.index(dot)
    block.ops.pop(at)
    insert_ops(block, at, ops)
    return wait.results[0]
