"""A layout conversion within warps, lowered as kiln.codegen.analysis.warp_shuffles plans it: each
destination register one `shfl.sync.idx` of a source register (several where some lanes read one register
and others another, chosen by masks of lanes), from a lane computed from the reader's lane."""
from __future__ import annotations

from .reduce import shuffle


def gather(lw, regs: list, plan) -> list:
    """The registers of the new layout, from `regs` (the old layout's) by `plan`'s shuffles."""
    out = []
    for sources in plan:
        value = None
        for source in reversed(sources):  # the last one takes the lanes no earlier one does
            got = shuffle(lw, regs[source.register], "idx", _source_lane(lw, source), 0x1F)
            value = got if value is None else lw.b.select(_takes(lw, source.lanes), got, value)
        out.append(value)
    return out


def _source_lane(lw, source):
    b = lw.b
    lane = lw.i32(source.lane_constant)
    for k, column in enumerate(source.lane_columns):
        if column:
            bit = b.and_(b.lshr(lw.lane, lw.i32(k)), lw.i32(1))
            lane = b.xor(lane, b.mul(bit, lw.i32(column)))
    return lane


def _takes(lw, lanes: int):
    """Is this lane one of the mask's?"""
    b = lw.b
    mask = lanes - (1 << 32) if lanes >= 1 << 31 else lanes  # (as a signed 32-bit constant)
    return b.icmp_unsigned("!=", b.and_(b.lshr(lw.i32(mask), lw.lane), lw.i32(1)), lw.i32(0))
