"""Bytes of the transient scratch area for reductions, scans, conversions, exchanges and
histograms, and barriers only where an earlier access to those bytes may still be in flight.

A reduction or scan across warps, a layout conversion through shared memory, an exchange of elements
between threads (reshape, permute, join, split, cat, gather) and a histogram write the scratch
area, wait at a barrier, then read it back (that barrier is part of the op's lowering).
Before one writes, no warp may still be reading what an earlier op left in those bytes. This
pass gives each such op its bytes (`scratch = [offset, bytes]`, from the start of the scratch
area) and puts a `barrier` before it only where that may happen; neighbours take disjoint
bytes and need none:

    %m = reduce %x {axis = 0, scratch = [0, 32]}    // write, barrier, read
    %s = reduce %e {axis = 0, scratch = [32, 32]}   // %m's reads may be in flight: other bytes

Walking back from such an op over ops that touch no shared memory, the pass stops at
- the kernel's start or a `barrier`: nothing is in flight, the op takes bytes from 0;
- an earlier op P that it planned, with shared buffers live at both or at neither (the area
  starts after the buffers or at byte 0): everything before P's own barrier has finished and
  only P's reads may be in flight, so the op takes bytes beside P's (or below them, where it
  fits), unless that grows the area by more than GROWTH beyond what its largest user needs;
- anything else (shared buffers, async copies, dots, ops it does not model): a barrier first.
At the top of a `for` body, the way in from before the loop and the way round from the end
of the body must both stop at a `barrier`, the start, or the same P.

Lowering keeps to the plan, or where it cannot (an op that needed more bytes than planned, or
none) ends the op with a barrier; an op this pass's model (kiln.codegen.analysis.scratch_use) takes
for one touching no shared memory (`touches_no_shared`) that used the scratch area after all does the
same. A plan that guessed wrong costs a barrier, never a race. Everything lowering needs of the plan
is in the IR: the `scratch` attrs, the barriers, and what the model reads (op names, layouts, index
math, live buffers).
"""
from __future__ import annotations

from kiln.ir.core import Function, Operation

from ..analysis import Analysis
from ..analysis.scratch_use import scratch_bytes, touches_no_shared

name = "scratch_barriers"
ALIGN = 16
GROWTH = 1024  # bytes the area may grow by (beyond its largest user) so that neighbours need no barrier

_CLEAR = "clear"  # nothing in flight
_HAZARD = "hazard"  # something may be: a barrier goes first


def apply(fn, ctx) -> None:
    for op in fn.walk():
        op.attrs.pop("scratch", None)  # only this pass's plans count, never an incoming attr
    model = Analysis(fn, ctx)  # the options, the function's index math and live buffers
    sizes = {}
    for op in fn.walk():
        n = scratch_bytes(op, model)
        if n:
            sizes[op] = -(-n // ALIGN) * ALIGN
    if not sizes:
        return
    cap = max(sizes.values()) + GROWTH
    for op in [op for op in fn.walk() if op in sizes]:  # program order: an op's predecessors first
        _plan(op, sizes[op], cap, model)


def _plan(op, size, cap, model) -> None:
    before = _sync_before(op, model)
    offset = 0
    if isinstance(before, Operation) and model.buffers_live(before) == model.buffers_live(op):
        p_offset, p_size = before.attrs["scratch"]
        if size > p_offset:
            offset = p_offset + p_size
        if offset + size > cap:
            before, offset = _HAZARD, 0
    elif before != _CLEAR:
        before = _HAZARD
    if before == _HAZARD:
        barrier = Operation("barrier", [], [], {}, loc=op.loc)
        barrier.parent = op.parent
        op.parent.ops.insert(op.parent.ops.index(op), barrier)
    op.attrs["scratch"] = [offset, size]


def _sync_before(op, model):
    """What every path to `op` last passed that orders shared memory: _CLEAR, a planned op,
    or _HAZARD where some path passed an access that may still be in flight."""
    block = op.parent
    return _walk_back(block.ops[:block.ops.index(op)], block, model)


def _walk_back(ops, block, model):
    for prev in reversed(ops):
        if prev.name == "barrier":
            return _CLEAR
        if "scratch" in prev.attrs:
            return prev
        if not touches_no_shared(prev, model):
            return _HAZARD
    owner = block.parent
    if isinstance(owner, Function):
        return _CLEAR
    if owner.name in ("if", "warp_specialize"):  # a branch (a partition) is entered from just before the op
        return _sync_before(owner, model)
    if owner.name == "for":  # entered from before the loop and from the end of the body
        return _meet(_sync_before(owner, model), _walk_back(block.ops, block, model))
    return _HAZARD


def _meet(a, b):
    if _HAZARD in (a, b):
        return _HAZARD
    if a == _CLEAR:
        return b
    if b == _CLEAR or a is b:
        return a
    return _HAZARD
