"""Ops with regions: loops and branches, and reductions and scans whose combine region
runs on whole arrays (a log2 tree of pairings; a Hillis-Steele sweep for scans)."""
from __future__ import annotations

import numpy as np

from .errors import OpFault


def for_loop(ctx, op, lower, upper, step, *carried):
    lo, hi, st = int(lower), int(upper), int(step)
    if st == 0:
        raise OpFault("loop step is 0")
    body, iv_type = op.regions[0], lower.dtype
    values = list(carried)
    iv = lo
    while iv < hi if st > 0 else iv > hi:
        values = ctx.run_block(body, [np.array(iv, iv_type)] + values)
        iv += st
    return values


def if_else(ctx, op, cond):
    then_block, else_block = op.regions
    if cond.ndim == 0:
        return ctx.run_block(then_block if cond else else_block, [])
    # Inside a combine region a scalar condition is one per lane: take both sides.
    taken, other = ctx.run_block(then_block, []), ctx.run_block(else_block, [])
    return [np.where(cond, a, b) for a, b in zip(taken, other)]


def while_loop(ctx, op, *initial):
    before, after = op.regions
    values = list(initial)
    while True:
        cond, *passed = ctx.run_block(before, values)
        if np.ndim(cond) != 0:
            raise OpFault("a while loop whose condition differs per lane is not supported here")
        if not cond:
            return passed
        values = ctx.run_block(after, passed)


def _along(axis: int, index) -> tuple:
    return (slice(None),) * axis + (index,)


def _axis(op, values) -> int:
    """The op's axis in the arrays: past the lanes of an enclosing combine region, if any."""
    values[:] = np.broadcast_arrays(*values)
    return op.attrs["axis"] + values[0].ndim - len(op.operands[0].type.shape)


def reduce(ctx, op, *operands):
    region, values = op.regions[0], list(operands)
    axis = _axis(op, values)
    while values[0].shape[axis] > 1:
        n = values[0].shape[axis]
        even = [v[_along(axis, slice(0, n - n % 2, 2))] for v in values]
        odd = [v[_along(axis, slice(1, n, 2))] for v in values]
        paired = ctx.run_combine(region, even + odd, even[0].shape)
        if n % 2:  # an odd leftover joins the next round at the end
            paired = [np.concatenate([p, v[_along(axis, slice(n - 1, n))]], axis) for p, v in zip(paired, values)]
        values = paired
    return [np.squeeze(v, axis) for v in values]


def scan(ctx, op, *operands):
    region, values = op.regions[0], list(operands)
    axis = _axis(op, values)
    reverse = bool(op.attrs.get("reverse", False))
    values = [np.flip(v, axis) if reverse else v for v in values]
    n, shift = values[0].shape[axis], 1
    while shift < n:
        earlier = [v[_along(axis, slice(0, n - shift))] for v in values]
        later = [v[_along(axis, slice(shift, n))] for v in values]
        combined = ctx.run_combine(region, earlier + later, later[0].shape)
        values = [np.concatenate([v[_along(axis, slice(0, shift))], c], axis) for v, c in zip(values, combined)]
        shift *= 2
    return [np.flip(v, axis) if reverse else v for v in values]
