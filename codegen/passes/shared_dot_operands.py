"""Values several mma.sync dots read (outside pipelined loops) -> stored to a shared tile once, every dot
reading it there (`mma_dot`, by ldmatrix).

A dot smem_pipeline did not take is lowered by staging both of its operands through shared memory (a store,
a barrier, then ldmatrix; dot_staging). Where one value feeds several such dots it was stored once per dot:
fla's kkt_solve reads each chunk's k block as A of up to four 16x16 dots and, transposed, as B of up to four
more (20 operand stores a K step for 4 blocks), and its block merge reads each inverse in two or three.
Triton stores such a value once (`local_alloc`) and reads it as each dot needs (`local_load`).

A dot whose A is computed from a dot's product (`computed_from`), already in the accumulator's layout, with
whole rows per warp, reads A from registers instead (16-bit as attention's P; tf32 with k permuted): only B
goes to a tile (kkt_solve's block merge at one warp: every A an inverse or a product, 164 stores to shared
memory -> 104, 57 barriers -> 42). At one warp a tf32 B computed so stays in registers as well, its
fragments gathered by shuffles (the merge: no tile left to store; the kernel's stores to shared memory
112 -> 16, barriers 42 -> 19).

Each shared value is stored right after it is computed into a tile of its own (a barrier first where a loop
runs it again: a slower warp may still read the last iteration's; a barrier after it: every warp's part is
stored), and each dot reading it, or its transpose (`tl.trans`: a `local_trans` view), becomes an `mma_dot`
on that tile; the dot's other operand, where no other dot shares it, is stored beside it the same way. The
tiles are K-major for every use where the type is not 16-bit (ldmatrix transposes 16-bit elements only): a
value read in both orders is then not shared. `shared_type` tiles, so smem_alloc places them by liveness.

    %t = local_alloc ; local_store %k0, %t ; barrier
    %kt = local_trans %t
    %a00 = mma_dot %t, %kt, %acc00
    %a10 = mma_dot %t1, %kt, %acc10
"""
from __future__ import annotations

from kiln.ir.layout import mma_layout
from kiln.ir.types import scalar_of

from ..analysis.dots import mma_eligible
from .layouts import computed_from
from .rewrite import append_op, in_loop, insert_ops, is_transpose, replace_uses
from .smem_plan import _stored_tile

name = "shared_dot_operands"
TYPES = ("fp16", "bf16", "fp32")  # fp32: tf32 products (mma_eligible says which fp32 dots are)


def apply(fn, ctx) -> None:
    if ctx.target.capability < 80 or any(op.name == "warp_group_dot" for op in fn.walk()):
        return  # (beside wgmma dots of a shape, the layouts pass would give that shape wgmma's layout)
    dots = [op for op in fn.walk() if op.name == "dot" and _candidate(op, ctx)]
    in_registers = {dot: (_a_in_registers(dot, ctx), _b_in_registers(dot, ctx)) for dot in dots}
    reads: dict = {}  # source value -> [(dot, operand index, read transposed)]
    for dot in dots:
        for i in (0, 1):
            if in_registers[dot][i]:
                continue
            source, transposed = _source(dot.operands[i])
            reads.setdefault(source, []).append((dot, i, transposed))
    shared = {}
    for source, uses in reads.items():
        inner = _inner_dim(source, uses)
        if len(uses) >= 2 and inner is not None and source.defining_op is not None:
            shared[source] = _stored_tile(source.type, "ab"[1 - inner])  # dim `inner` innermost
    if not shared and not any(a or b for a, b in in_registers.values()):
        return
    tiles = {source: _store_after(source, t) for source, t in shared.items()}
    replaced = {}
    for dot in dots:
        if not any(in_registers[dot]) and not any(_source(v)[0] in tiles for v in dot.operands[:2]):
            continue
        views, before = [], []
        for i in (0, 1):
            source, transposed = _source(dot.operands[i])
            if in_registers[dot][i]:
                views.append(dot.operands[i])
            elif source in tiles:
                tile = tiles[source]
                views.append(append_op(before, "local_trans", [tile], [tile.type.transposed()], dot.loc)
                             if transposed else tile)
            else:  # a tile of its own, K-major
                v = dot.operands[i]
                views.append(_stage(before, v, _stored_tile(v.type, "ab"[i]), in_loop(dot), dot.loc))
        at = dot.parent.ops.index(dot)
        issued = append_op(before, "mma_dot", views + [dot.operands[2]], [dot.results[0].type], dot.loc)
        dot.parent.ops.pop(at)
        insert_ops(dot.parent, at, before)
        replaced[dot.results[0]] = issued
    replace_uses(fn, replaced)


def _candidate(dot, ctx) -> bool:
    """A 2-D dot the tensor cores' mma.sync runs, of a type these tiles serve, whose rows fit its warps."""
    a, b, acc = dot.operands
    return len(acc.type.shape) == 2 and scalar_of(a.type).name in TYPES and mma_eligible(dot, ctx) and \
        mma_layout(acc.type.shape, ctx.num_warps) is not None


def _a_in_registers(dot, ctx) -> bool:
    """Does the dot read A from registers (`mma_dot` on a block A): A computed from a dot's result, so
    already in the accumulator's layout, that layout whole rows per warp for A's shape and the
    result's (so the layouts pass keeps it: kkt_solve's merge at one warp, each A an inverse or a
    product)? tf32 A is then read with k permuted (kiln.codegen.lower.mma)."""
    a, _, acc = dot.operands
    if _source(a)[1] or not computed_from(a, ("dot", "mma_dot")):
        return False
    for shape in (acc.type.shape, a.type.shape):
        rows = mma_layout(shape, ctx.num_warps, rows_only=True)
        if rows is None or rows != mma_layout(shape, ctx.num_warps, replicate=True):
            return False
    return True


def _b_in_registers(dot, ctx) -> bool:
    """Does the dot read a tf32 B from registers: at one warp (which holds the whole of B), B computed from
    a dot's product, so in the accumulator's layout? Lowering gathers each fragment by shuffles (four a
    register pair), which beats storing B to a tile and reading it back after a barrier: kkt_solve's
    block merge, each B an inverse or a product."""
    b = dot.operands[1]
    return ctx.num_warps == 1 and scalar_of(b.type).name == "fp32" and not _source(b)[1] and \
        computed_from(b, ("dot", "mma_dot")) and mma_layout(b.type.shape, 1, rows_only=True) is not None


def _source(v):
    """(the value stored, whether the dot reads its transpose)."""
    op = v.defining_op
    if is_transpose(op):
        return op.operands[0], True
    return v, False


def _inner_dim(source, uses):
    """The dim of `source` stored innermost: K of its first read; None where a read needs the other
    (a type ldmatrix does not transpose) or rows too narrow for a 32-byte swizzle."""
    def k_dim(i, transposed):  # A [M, K] reads K along dim 1 of its source, B [K, N] along dim 0
        return (1 if i == 0 else 0) ^ int(transposed)
    dims = {k_dim(i, t) for _, i, t in uses}
    inner = k_dim(uses[0][1], uses[0][2])
    if len(dims) > 1 and scalar_of(source.type).itemsize != 2:
        return None
    return inner if source.type.shape[inner] * scalar_of(source.type).itemsize >= 32 else None


def _store_after(source, tile_type):
    """The tile `source` is stored to, just after its definition."""
    op = source.defining_op
    ops = []
    tile = _stage(ops, source, tile_type, in_loop(op), op.loc)
    block = op.parent
    insert_ops(block, block.ops.index(op) + 1, ops)
    return tile


def _stage(ops, v, tile_type, looping: bool, loc):
    """[barrier,] local_alloc, local_store, barrier appended to `ops`: the tile."""
    if looping:  # the last iteration's readers first
        append_op(ops, "barrier", [], (), loc)
    tile = append_op(ops, "local_alloc", [], [tile_type], loc)
    append_op(ops, "local_store", [v, tile], (), loc)
    append_op(ops, "barrier", [], (), loc)
    return tile
