"""Shared-memory allocation: a byte offset for every `local_alloc`, by liveness.

A buffer lives from its `local_alloc` to its last use (kiln.codegen.analysis.shared_buffers: a
use inside a loop that the `local_alloc` is not in keeps it alive to the end of that loop, since the
next iteration comes back to it). A buffer allocated inside a loop is allocated anew each iteration
(a persistent matmul's ring in its tile loop): its life ends with its last use in the iteration,
and the epilogue after the K loop may take its bytes. Buffers whose lives do not overlap may share
bytes; each starts at a multiple of 1024 (a 128-byte swizzle repeats every 1024 bytes and is
computed from the address). The offsets are the `offset` attrs in the IR text, which
`shared_buffers.allocated_bytes` reads back. Lowering puts the transient scratch area after them
where a buffer is live (`shared_buffers.buffers_live_at`), and at the start of shared memory elsewhere.

Bytes that change owner need a barrier: a warp done with a loop's ring could otherwise
copy the next loop's tiles over bytes a slower warp still reads. So a `barrier` goes
before a buffer's `local_alloc` where the bytes may have held something else earlier
(a buffer that died before, or the scratch area, used wherever no buffer lives), and
inside a loop, where the next iteration writes over what the last one read.
"""
from __future__ import annotations

from kiln.ir.core import Operation

from ..analysis.shared_buffers import ALIGN, buffer_lives
from .rewrite import in_loop

name = "smem_alloc"


def apply(fn, ctx) -> None:
    position, lives = buffer_lives(fn)
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


def _scratch_positions(fn, position, spans) -> list:
    """Positions of ops that may use the scratch area at the start of shared memory: any
    op on blocks where no buffer is live (conversions, reductions, dots stage through it)."""
    def on_blocks(op):
        return any(v.type.is_block() for v in list(op.operands) + list(op.results))
    return [position[id(op)] for op in fn.walk() if op.name != "local_alloc" and on_blocks(op)
            and not any(s <= position[id(op)] <= e for s, e in spans)]


def _barrier_before(alloc) -> None:
    """Insert a barrier before `alloc`, unless one already precedes it with only other
    buffers' allocations and first stores between (those bytes are live, not reused; an
    mbarrier's initialisation is its first store)."""
    ops = alloc.parent.ops
    at = ops.index(alloc)
    for op in reversed(ops[:at]):
        if op.name == "barrier":
            return
        if op.name not in ("local_alloc", "local_store", "mbarrier_init", "constant"):
            break
    barrier = Operation("barrier", [], [], {}, loc=alloc.loc)
    barrier.parent = alloc.parent
    ops.insert(at, barrier)
