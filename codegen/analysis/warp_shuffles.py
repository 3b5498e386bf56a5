"""Layout conversions that stay within each warp, planned as warp shuffles (`shfl.sync.idx`) instead of a
trip through shared memory: no store, no barrier, no load, as Triton converts within a warp.

Where every element a thread needs in the new layout is held by a lane of its own warp in the old one, a
destination register is gathered by one shuffle of one source register (or up to MAX_SOURCES, one register
for some lanes and another for others, chosen by masks of lanes). The lane each thread reads must be the same
function of its lane in every warp and is computed as an affine map over the lane's five bits
(`c ^ XOR of column k where bit k of the lane is set`), which the layouts kiln uses (power-of-two
tiles) give: fla's forward substitution turns a row of a 16x16 block into a column every serial step,
which took a barrier and a store and load through shared memory each time.

The plan is a function of the layouts and the shape only, so scratch_barriers (no scratch bytes, no
barrier) and lowering (the shuffles) agree on which conversions take it. Small conversions only: at most
MAX_REGISTERS registers a thread on either side (a wide tile's conversion would take a shuffle per
register where shared memory moves 16 bytes a thread at a time).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from kiln.ir.layout import thread_indices

MAX_REGISTERS = 16  # registers a thread, either side
MAX_SOURCES = 4  # shuffles a destination register


@dataclass(frozen=True)
class Source:
    """One shuffle: source register `register` read from lane `lane_constant ^ XOR(lane_columns[k] for
    the bits k set in the reading lane)`, taken by the lanes in `lanes` (a 32-bit mask)."""
    register: int
    lane_constant: int
    lane_columns: tuple[int, ...]
    lanes: int

    def lane_of(self, lane: int) -> int:
        out = self.lane_constant
        for k, column in enumerate(self.lane_columns):
            if lane >> k & 1:
                out ^= column
        return out


@functools.lru_cache(maxsize=2048)
def shuffle_plan(src, dst, shape: tuple, num_warps: int):
    """Per destination register, the shuffles (`Source`s) that gather it; None where the conversion
    does not stay within warps or takes more than the plan allows."""
    if src is None or dst is None or max(len(src.offsets(shape)), len(dst.offsets(shape))) > MAX_REGISTERS:
        return None  # (asked of every conversion: a wide tile's answer costs no element map)
    held = thread_indices(src, shape, num_warps)  # [thread, register, dim]
    wanted = thread_indices(dst, shape, num_warps)
    strides = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]
    held_ids = (held * strides).sum(-1).reshape(num_warps, 32, -1)
    wanted_ids = (wanted * strides).sum(-1).reshape(num_warps, 32, -1)
    holders = []  # per warp: element -> {(lane, register)}
    for w in range(num_warps):
        where: dict = {}
        for lane in range(32):
            for reg, e in enumerate(held_ids[w, lane].tolist()):
                where.setdefault(e, set()).add((lane, reg))
        holders.append(where)
    plan = []
    for j in range(wanted_ids.shape[2]):
        options = []  # per lane: the (lane, register) pairs holding its element in every warp
        for lane in range(32):
            common = None
            for w in range(num_warps):
                found = holders[w].get(int(wanted_ids[w, lane, j]), set())
                common = found if common is None else common & found
                if not common:
                    return None
            options.append(common)
        sources = _sources(options)
        if sources is None:
            return None
        plan.append(sources)
    return tuple(plan)


def _sources(options):
    """The fewest registers (at most MAX_SOURCES) whose lanes cover every lane's options, each with an
    affine lane map; None where there is none."""
    uncovered = set(range(32))
    out = []
    while uncovered:
        if len(out) == MAX_SOURCES:
            return None
        counts: dict = {}
        for lane in uncovered:
            for _, reg in options[lane]:
                counts[reg] = counts.get(reg, 0) + 1
        for reg in sorted(counts, key=lambda r: (-counts[r], r)):
            lanes = {lane for lane in uncovered if any(r == reg for _, r in options[lane])}
            reads = {lane: {s for s, r in options[lane] if r == reg} for lane in lanes}
            fitted = _affine(reads)
            if fitted is not None:
                mask = sum(1 << lane for lane in lanes)
                out.append(Source(reg, fitted[0], fitted[1], mask))
                uncovered -= lanes
                break
        else:
            return None
    if len(out) > 1:  # the last one taken is the default: its mask covers whatever the others do not
        last = out[-1]
        out[-1] = Source(last.register, last.lane_constant, last.lane_columns, 0xFFFFFFFF)
    return tuple(out)


def _affine(reads: dict):
    """(c, columns): a lane map c ^ XOR(columns[k] for bit k of the lane) sending each lane of `reads` to one
    of its allowed lanes (lanes not in it: any), or None."""
    def fits(c, columns, below):
        for lane in range(below):
            if lane in reads:
                got = c
                for k, column in enumerate(columns):
                    if lane >> k & 1:
                        got ^= column
                if got not in reads[lane]:
                    return False
        return True

    for c in sorted(reads.get(0, range(32))):
        columns = []
        for k in range(5):
            bit = 1 << k
            tried = ([s ^ c for s in sorted(reads[bit])] if bit in reads else []) + [0, bit] + list(range(32))
            for column in dict.fromkeys(tried):
                if fits(c, columns + [column], 2 * bit):
                    columns.append(column)
                    break
            else:
                break
        if len(columns) == 5:
            return c, tuple(columns)
    return None
