"""Dots that no loop pipelined, on Hopper -> wgmma: fp8 ones on both operands stored to shared tiles, 16-bit
ones chained to a wgmma dot's result with A from registers.

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

A 16-bit dot outside every loop whose A is computed from a wgmma dot's result runs there too: on
mma.sync its operand came out of wgmma's layout through shared memory, and its result, meeting wgmma's
again, went back the same way (fla's chunk_fwd_kernel_o adds `tl.dot(b_A.to(bf16), b_v)`, b_A summed
by wgmma in its K loop, to that loop's other accumulator: 17 KB and two barriers).
As Triton does, A stays in registers (wgmma's A fragment holds what a wgmma accumulator of the same
rows holds: no data movement) and B is stored as its memory runs (N-major where its rows were).

The tiles' bytes are smem_alloc's to place by liveness: a later buffer reusing them takes a barrier
there (a warpgroup done with its part may not store over what another still reads).
"""
from __future__ import annotations

from kiln.ir.core import Operation
from kiln.ir.layout import wgmma_layout
from kiln.ir.ops import mixed_fp8
from kiln.ir.types import scalar_of

from ..analysis import Analysis
from ..analysis.dots import fp8_mma
from ..occupancy import max_shared_per_cta
from .fp8_dot_upcast import FP8
from .layouts import computed_from
from .rewrite import append_op, in_loop, insert_ops, replace_uses
from .smem_plan import TRANSPOSABLE, WGMMA_INPUTS, _memory_inner_dim, _staged_tile, _stored_tile, enabled

name = "standalone_wgmma"


def apply(fn, ctx) -> None:
    if not enabled(ctx):
        return
    ctx = Analysis(fn, ctx)  # the options, and the pointers' contiguity (a 16-bit B's tile follows it)
    replaced = {}
    fp8_on_mma = fp8_mma(ctx)  # (then fp8 dots stay there)
    for dot in [op for op in fn.walk() if op.name == "dot"]:
        tiles = None if fp8_on_mma else _tiles(dot, ctx)
        if tiles is None and not in_loop(dot):
            tiles = _half_tiles(dot, ctx)
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


def _half_tiles(dot, ctx):
    """For a 16-bit dot chained to a wgmma one (`computed_from`: its A computed from a wgmma result):
    [None (A stays in registers), B's tile] where wgmma can run it, else None. Other 16-bit dots stay
    on mma.sync: a load's layout follows its dot's result where shapes agree, and wgmma's fragment
    layout is no load's (fp32 split into bf16 parts: 4-byte loads, 254 registers); an A from an
    mma.sync dot (a hand-pipelined attention's last P V) would go through shared memory instead."""
    a, b, acc = dot.operands
    ea = scalar_of(a.type)
    if ea.name not in TRANSPOSABLE or scalar_of(b.type) != ea or len(acc.type.shape) != 2 or \
            scalar_of(acc.type).name not in WGMMA_INPUTS[ea.name] or a.type.shape[1] % 16:
        return None
    layout = wgmma_layout(acc.type.shape, ctx.num_warps)
    if layout is None or not computed_from(a, ("warp_group_dot",)):
        return None
    b_tile = _staged_tile(b.type, "b", layout.instr_n, _memory_inner_dim(b, ctx))
    if b_tile is None or b_tile.nbytes > max_shared_per_cta(ctx.target.capability) // 2:
        return None
    return [None, b_tile]


def _issue(dot, tile_types):
    """The stores, the fence and barrier, the wgmma and its wait in place of `dot`: the wait's result.
    An operand whose tile type is None is read from registers (A)."""
    a, b, acc = dot.operands
    loc, block = dot.loc, dot.parent
    ops = []
    tiles = []
    for v, t in zip((a, b), tile_types):
        if t is None:
            tiles.append(v)
            continue
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
