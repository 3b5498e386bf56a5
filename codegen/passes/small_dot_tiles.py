"""Dots smaller than one mma.sync tile (fewer than 16 rows or 8 columns) -> the same dot on operands
repeated up to a tile, its result's first copy taken, as Triton pads such dots to an mma tile.

Rows repeat (row i of the 16 is row i % M of A), so every row of the wide product is a row of the
product wanted, computed from the same operands in the same order; columns likewise (column j of
B's 8 is column j % N). After the dot the copies are split off (a reshape moves the copies' dims
last, `split` halves them down to one):

    %a16 = reshape (broadcast (expand_dims %a {axis = 0}) : <8x2x32>) : <16x32>   // M = 2
    %d16 = dot %a16, %b8, %acc16 : <16x8>
    ... reshape : <8x2x2x4>, permute, splits  -> <2x4>

The dot then runs on mma.sync 16x8 steps (fp8 through fp8_dot_upcast) instead of each thread's FMAs.
Dots whose padded form no mma runs (K under a step, fp32 at ieee precision) stay as they are.
"""
from __future__ import annotations

from kiln.ir.core import Operation, Value
from kiln.ir.types import block_type, float16, scalar_of, with_shape

from ..analysis.dots import fp8_mma, mma_eligible
from .fp8_dot_upcast import FP8
from .rewrite import replace_uses

name = "small_dot_tiles"

TILE_M, TILE_N = 16, 8  # mma.sync's m16n8 steps


def apply(fn, ctx) -> None:
    if ctx.target.capability < 80 and not ctx.portable:
        return
    for dot in [op for op in fn.walk() if op.name == "dot"]:
        a, b, acc = dot.operands
        if len(a.type.shape) != 2:
            continue
        (M, _), N = a.type.shape, b.type.shape[1]
        rows, cols = max(1, TILE_M // M), max(1, TILE_N // N)
        if rows * cols == 1 or TILE_M % min(M, TILE_M) or TILE_N % min(N, TILE_N) \
                or not _runs_on_mma(dot, rows, cols, ctx):
            continue
        replace_uses(fn, {dot.results[0]: _pad(dot, rows, cols)})


def _runs_on_mma(dot, rows, cols, ctx) -> bool:
    """Would mma.sync run the dot padded (an fp8 one after fp8_dot_upcast's fp16 cast where need be)?"""
    a, b, acc = dot.operands
    (M, K), N = a.type.shape, b.type.shape[1]
    s = scalar_of(a.type)
    if s.name in FP8 and not fp8_mma(ctx):  # fp8_dot_upcast casts it to fp16 for mma.sync
        s = float16
    wide = with_shape(acc.type, [M * rows, N * cols])
    trial = Operation("dot", [Value(block_type(s, [M * rows, K])), Value(block_type(s, [K, N * cols])), Value(wide)],
                      [wide], dict(dot.attrs))
    return mma_eligible(trial, ctx)


def _pad(dot, rows, cols):
    """The padded dot and the ops around it in `dot`'s place: the value that stands for its result."""
    a, b, acc = dot.operands
    block, loc = dot.parent, dot.loc
    ops = []

    def emit(op_name, operand, shape, **attrs):
        op = Operation(op_name, [operand], [with_shape(operand.type, shape)], attrs, loc=loc)
        ops.append(op)
        return op.results[0]

    def repeat(v, axis, times):
        """`v` with each index along `axis` (0 or 1) repeated: index i of the result is i % n."""
        if times == 1:
            return v
        shape = list(v.type.shape)
        grown = shape[:axis] + [times] + shape[axis:]
        wide = emit("broadcast", emit("expand_dims", v, shape[:axis] + [1] + shape[axis:], axis=axis), grown)
        shape[axis] *= times
        return emit("reshape", wide, shape, can_reorder=False)

    a16, b8 = repeat(a, 0, rows), repeat(b, 1, cols)
    acc16 = repeat(repeat(acc, 0, rows), 1, cols)
    (M, _), N = a.type.shape, b.type.shape[1]
    wide = Operation("dot", [a16, b8, acc16], [acc16.type], dict(dot.attrs), loc=loc)
    ops.append(wide)
    # [rows, M, cols, N] -> [M, N, rows * cols] -> halved down to the first copy
    out = emit("reshape", wide.results[0], [rows, M, cols, N], can_reorder=False)
    out = emit("permute", out, [M, N, rows, cols], order=[1, 3, 0, 2])
    copies = rows * cols
    while copies > 1:
        copies //= 2
        out = emit("reshape", out, [M, N, copies, 2], can_reorder=False)
        split = Operation("split", [out], [with_shape(out.type, [M, N, copies])] * 2, {}, loc=loc)
        ops.append(split)
        out = split.results[0]
    out = emit("reshape", out, [M, N], can_reorder=False)
    at = block.ops.index(dot)
    for op in ops:
        op.parent = block
    block.ops[at:at + 1] = ops
    return out
