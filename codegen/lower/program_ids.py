"""The program ids a CTA plays where its kernel's programs go out by work (`launch_order`).

The hardware hands CTAs out by linear index L = x + nx * (y + ny * z). Here L counts the
programs in groups of `group` slices of the two other axes: within a group, rank r = L' // width
runs over the work axis (longest programs first), the slice over the group's slices, so the CTAs
of one rank go out together across the group's slices and the group's longest ones first.
"""
from __future__ import annotations

from llvmlite import ir

I32, I64 = ir.IntType(32), ir.IntType(64)


def longest_first(b, ids, sizes, axis: int, reverse: int, budget: int) -> list:
    """Program ids (x, y, z) for block ids `ids` of a grid of `sizes` (i32 values, built with `b`):
    work along `axis` grows with the id where `reverse`, shrinks otherwise; a group holds
    `budget` // sizes[axis] slices of the other axes, at least one. Where the grid has 2^31
    programs or more (L is no i32) the ids stay as they are."""
    one = ir.Constant(I32, 1)

    def at_least_one(v):  # (a zero only where the grid does not fit: no division by it)
        return b.select(b.icmp_unsigned("<", v, one), one, v)

    def smaller(u, v):
        return b.select(b.icmp_unsigned("<", u, v), u, v)

    x, y, z = ids
    nx, ny, _ = sizes
    linear = b.add(x, b.mul(nx, b.add(y, b.mul(ny, z))))
    wide = [b.zext(n, I64) for n in sizes]
    fits = b.icmp_unsigned("<", b.mul(b.mul(wide[0], wide[1]), wide[2]), ir.Constant(I64, 1 << 31))
    first, second = [i for i in range(3) if i != axis]
    along = sizes[axis]
    slices = b.mul(sizes[first], sizes[second])
    group = smaller(at_least_one(b.udiv(ir.Constant(I32, budget), at_least_one(along))), at_least_one(slices))
    span = at_least_one(b.mul(group, along))
    start = b.mul(b.udiv(linear, span), group)  # the group's first slice
    within = b.urem(linear, span)
    width = at_least_one(smaller(group, b.sub(slices, start)))  # the last group may have fewer slices
    rank = b.udiv(within, width)
    piece = b.add(start, b.urem(within, width))
    new = [None, None, None]
    new[axis] = b.sub(b.sub(along, one), rank) if reverse else rank
    new[first] = b.urem(piece, at_least_one(sizes[first]))
    new[second] = b.udiv(piece, at_least_one(sizes[first]))
    return [b.select(fits, n, old) for n, old in zip(new, ids)]
