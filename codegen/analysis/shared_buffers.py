"""Where the shared buffers lie and live, read from the IR: the `offset` attrs smem_alloc gave the
`local_alloc`s, and each buffer's life from its `local_alloc` to its last use (through `local_index`
and `local_trans` views; a use inside a loop the `local_alloc` is not in keeps it alive to the end of
that loop). smem_alloc places the buffers by these lives; lowering and scratch_barriers ask where they
are live and how many bytes they reserve.
"""
from __future__ import annotations

ALIGN = 1024  # each buffer's offset and their base: a 128-byte swizzle repeats every 1024 bytes


def allocated_bytes(fn) -> int:
    """The shared memory the buffers smem_alloc placed span: the end of the highest, from their
    `offset` attrs (0 before smem_alloc ran, and where it placed none)."""
    return max((op.attrs["offset"] + -(-op.results[0].type.nbytes // ALIGN) * ALIGN
                for op in fn.walk() if op.name == "local_alloc" and "offset" in op.attrs), default=0)


def reserved_bytes(fn) -> int:
    """The shared memory lowering reserves for these buffers: their span, from the kernel's shared
    base, which is declared aligned to ALIGN (wgmma.shared_base); 0 without buffers."""
    return allocated_bytes(fn)


def buffers_live_at(fn):
    """`live(op)`: is a buffer live at `op`? Read from the IR (the `local_alloc`s and their uses),
    so lowering, which puts the scratch area after the buffers there, and scratch_barriers ask
    the function itself, before or after smem_alloc's barriers went in."""
    position, lives = buffer_lives(fn)
    spans = [(start, end) for start, end, _ in lives]
    return lambda op: any(s <= position.get(id(op), -1) <= e for s, e in spans)


def buffer_lives(fn):
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


def _last_position(use, alloc, position, loops) -> int:
    """Where a use keeps its buffer alive to: the end of the outermost loop around the use
    that is not also around the allocation (whose next iteration allocates it again)."""
    around_alloc = {id(loop) for loop in loops.get(id(alloc), ())}
    for loop in loops.get(id(use), ()):
        if id(loop) not in around_alloc:
            return position[("end", id(loop))]
    return position[id(use)]


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
