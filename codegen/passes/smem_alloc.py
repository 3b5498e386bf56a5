"""Shared-memory allocation: a byte offset for every `local_alloc`, by liveness.

A buffer lives from its `local_alloc` to its last use (through `local_index` and `local_trans` views); a
use inside a loop keeps it alive to the end of that loop, since the next iteration
comes back to it. Buffers whose lives do not overlap may share bytes; each starts at a
multiple of 1024 (a 128-byte swizzle repeats every 1024 bytes and is computed from the
address). The offsets are the `offset` attrs in the IR text; `ctx.shared_allocated` is
the bytes they span. Lowering puts the transient scratch area after them where a
buffer is live (`ctx.buffers_live(op)`), and at the start of shared memory elsewhere.
"""
from __future__ import annotations

from kiln.ir.core import Operation

name = "smem_alloc"
ALIGN = 1024


def apply(fn, ctx) -> None:
    position, loop_end = {}, {}
    _number(fn.body, position, loop_end, [])
    loop_end = {key: position[("end", id(loop))] for key, loop in loop_end.items()}
    allocs = [op for op in fn.walk() if op.name == "local_alloc"]
    lives = []
    for alloc in allocs:
        values, end = {alloc.results[0]}, position[id(alloc)]
        for op in fn.walk():
            if any(v in values for v in op.operands):
                end = max(end, loop_end.get(id(op), position[id(op)]))
                if op.name in ("local_index", "local_trans"):
                    values.update(op.results)
        lives.append((position[id(alloc)], end, alloc))
    placed = []  # (start, end of life, offset, size)
    top = 0
    for start, end, alloc in sorted(lives, key=lambda l: l[0]):
        size = -(-alloc.results[0].type.nbytes // ALIGN) * ALIGN
        busy = sorted((o, o + s) for b, e, o, s in placed if b <= end and start <= e)
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        alloc.attrs["offset"] = offset
        placed.append((start, end, offset, size))
        top = max(top, offset + size)
    ctx.shared_allocated = top
    spans = [(start, end) for start, end, _, _ in placed]
    ctx.buffers_live = lambda op: any(s <= position.get(id(op), -1) <= e for s, e in spans)


def _number(block, position, loop_end, loops):
    """Program-order positions of every op (a loop's end counts as one more), and for
    ops inside loops the position where their outermost enclosing loop ends."""
    for op in block.ops:
        position[id(op)] = len(position)
        if loops:
            loop_end[id(op)] = loops[0]
        inner = loops + [op] if op.name in ("for", "while") else loops
        for region in op.regions:
            _number(region, position, loop_end, inner)
        if op.name in ("for", "while"):
            position[("end", id(op))] = len(position)
