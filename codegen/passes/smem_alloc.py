"""Shared-memory allocation: a byte offset for every `local_alloc`, by liveness.

A buffer lives from its `local_alloc` to its last use (through `local_index` and `local_trans`
views); a use inside a loop that the `local_alloc` is not in keeps it alive to the end of that
loop, since the next iteration comes back to it. A buffer allocated inside a loop is allocated
anew each iteration (a persistent matmul's ring in its tile loop): its life ends with its last
use in the iteration, and the epilogue after the K loop may take its bytes. Buffers whose lives
do not overlap may share bytes; each starts at a multiple of 1024 (a 128-byte swizzle repeats
every 1024 bytes and is computed from the address). The offsets are the `offset` attrs in the
IR text, and `allocated_bytes(fn)` reads the bytes they span from them. Lowering puts the
transient scratch area after them where a buffer is live (`buffers_live_at(fn)`), and at the
start of shared memory elsewhere.

Bytes that change owner need a barrier: a warp done with a loop's ring could otherwise
copy the next loop's tiles over bytes a slower warp still reads. So a `barrier` goes
before a buffer's `local_alloc` where the bytes may have held something else earlier
(a buffer that died before, or the scratch area, used wherever no buffer lives), and
inside a loop, where the next iteration writes over what the last one read.
"""
from __future__ import annotations

from kiln.ir.core import Operation

from .rewrite import in_loop

name = "smem_alloc"
ALIGN = 1024


def allocated_bytes(fn) -> int:
    """The shared memory the buffers this pass placed span: the end of the highest, from their
    `offset` attrs (0 before this pass, and where it placed none)."""
    return max((op.attrs["offset"] + -(-op.results[0].type.nbytes // ALIGN) * ALIGN
                for op in fn.walk() if op.name == "local_alloc" and "offset" in op.attrs), default=0)


def reserved_bytes(fn) -> int:
    """The shared memory lowering reserves for these buffers: their span, from a base it rounds up
    to ALIGN at run time (so ALIGN more, for the bytes that rounding may skip); 0 without buffers."""
    allocated = allocated_bytes(fn)
    return allocated + ALIGN if allocated else 0


def buffers_live_at(fn):
    """`live(op)`: is a buffer live at `op`? Read from the IR (the `local_alloc`s and their uses),
    so lowering, which puts the scratch area after the buffers there, and scratch_barriers ask
    the function itself, before or after this pass's barriers went in."""
    position, lives = _lives(fn)
    spans = [(start, end) for start, end, _ in lives]
    return lambda op: any(s <= position.get(id(op), -1) <= e for s, e in spans)


def _lives(fn):
    """(program-order positions, [(first position, last position, local_alloc)])."""
    position, loops = {}, {}
    _number(fn.body, position, loops, [])
    lives = []
    for alloc in [op for op in fn.walk() if op.name == "local_alloc"]:
        values, end = {alloc.results[0]}, position[id(alloc)]
        for op in fn.walk():
            if any(v in values for v in op.operands):
                end = max(end, _last_position(op, alloc, position, loops))
                if op.name in ("local_index", "local_trans"):
                    values.update(op.results)
        lives.append((position[id(alloc)], end, alloc))
    return position, lives


def apply(fn, ctx) -> None:
    position, lives = _lives(fn)
    placed = []  # (start, end of life, offset, size), in the order of `lives`
    lives.sort(key=lambda l: l[0])
    for start, end, alloc in lives:
        size = -(-alloc.results[0].type.nbytes // ALIGN) * ALIGN
        busy = sorted((o, o + s) for b, e, o, s in placed if b <= end and start <= e)
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        alloc.attrs["offset"] = offset
        placed.append((start, end, offset, size))
    spans = [(start, end) for start, end, _, _ in placed]
    first_scratch = min(_scratch_positions(fn, position, spans), default=float("inf"))
    for (start, _, alloc), (_, _, offset, size) in zip(lives, placed):
        reused = any(e < start and o < offset + size and offset < o + s for b, e, o, s in placed)
        if reused or first_scratch < start or in_loop(alloc):
            _barrier_before(alloc)


def _last_position(use, alloc, position, loops) -> int:
    """Where a use keeps its buffer alive to: the end of the outermost loop around the use
    that is not also around the allocation (whose next iteration allocates it again)."""
    around_alloc = {id(loop) for loop in loops.get(id(alloc), ())}
    for loop in loops.get(id(use), ()):
        if id(loop) not in around_alloc:
            return position[("end", id(loop))]
    return position[id(use)]


def _scratch_positions(fn, position, spans) -> list:
    """Positions of ops that may use the scratch area at the start of shared memory: any
    op on blocks where no buffer is live (conversions, reductions, dots stage through it)."""
    def on_blocks(op):
        return any(v.type.is_block() for v in list(op.operands) + list(op.results))
    return [position[id(op)] for op in fn.walk() if op.name != "local_alloc" and on_blocks(op)
            and not any(s <= position[id(op)] <= e for s, e in spans)]


def _barrier_before(alloc) -> None:
    """Insert a barrier before `alloc`, unless one already precedes it with only other
    buffers' allocations and first stores between (those bytes are live, not reused)."""
    ops = alloc.parent.ops
    at = ops.index(alloc)
    for op in reversed(ops[:at]):
        if op.name == "barrier":
            return
        if op.name not in ("local_alloc", "local_store", "constant"):
            break
    barrier = Operation("barrier", [], [], {}, loc=alloc.loc)
    barrier.parent = alloc.parent
    ops.insert(at, barrier)


def _number(block, position, loops, around):
    """Program-order positions of every op (a loop's end counts as one more), and for
    ops inside loops the loops around them, outermost first."""
    for op in block.ops:
        position[id(op)] = len(position)
        if around:
            loops[id(op)] = around
        inner = around + [op] if op.name in ("for", "while") else around
        for region in op.regions:
            _number(region, position, loops, inner)
        if op.name in ("for", "while"):
            position[("end", id(op))] = len(position)
