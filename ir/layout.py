"""How a block's elements are spread over a CTA's threads.

A `Blocked` layout gives each thread `size_per_thread[d]` consecutive elements along
each dim, `threads_per_warp[d]` lanes and `warps_per_cta[d]` warps side by side, lanes
and warps numbered fastest along `order[0]`. A shape larger than that tile repeats it
(more registers per thread); a smaller one wraps, so several threads hold the same
element. `Slice(dim, parent)` is what remains of `parent` after a reduction along
`dim`: the threads that differed only along `dim` now hold the same elements.

A layout is part of a block type in the GPU stage of block IR, printed as the type's
encoding: `<64x32xfp16:blocked:spt1.8:tpw4.8:wpc4.1:order1.0>`, `<64xfp32:slice1:blocked:...>`,
`<128x256xfp32:wgmma:warps4.2:n256>`, and for a shape op's intermediate that none of those
holds, `<64x32x2xfp32:linear:r0.1.0/8.0.0/...:l0.2.0/...:w16.0.0/...>` (`Linear`: where each
register, lane and warp id bit moves the index) (`str(layout)`, read back by `parse_layout`).

Both answer the same questions for a given shape, which is all that lowering asks:
`offsets` (each register's index, relative to the thread's base), `lane_axis`/`warp_axis`
(which lane/warp id bits move along a dim, for shuffles) and `base_terms` (how the
thread's base index along a dim follows from its lane and warp ids). A register's
logical index along d is `(base_d + offset_d) mod shape_d`.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Axis:
    """Along one dim: the id stride (in lanes or warps), how many ids move along the dim
    and how many of those hold distinct elements (the rest wrap)."""

    stride: int
    count: int
    distinct: int


@dataclass(frozen=True)
class Blocked:
    size_per_thread: tuple[int, ...]
    threads_per_warp: tuple[int, ...]
    warps_per_cta: tuple[int, ...]
    order: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.order)

    def tile(self, d: int) -> int:
        return self.size_per_thread[d] * self.threads_per_warp[d] * self.warps_per_cta[d]

    def positions(self, shape, d: int) -> list[int]:
        """The register offsets along dim d: spt consecutive elements per tile repetition."""
        spt = min(self.size_per_thread[d], shape[d])
        reps = max(1, shape[d] // self.tile(d))
        return [r * self.tile(d) + e for r in range(reps) for e in range(spt)]

    def offsets(self, shape) -> list[tuple[int, ...]]:
        """Per register, its index offset in every dim; order[0] varies fastest."""
        slow_to_fast = list(reversed(self.order))
        out = []
        for combo in itertools.product(*[self.positions(shape, d) for d in slow_to_fast]):
            idx = [0] * self.rank
            for d, v in zip(slow_to_fast, combo):
                idx[d] = v
            out.append(tuple(idx))
        return out

    def _id_axis(self, counts, d, unit, shape) -> Axis:
        stride = 1
        for o in self.order:
            if o == d:
                break
            stride *= counts[o]
        distinct = min(counts[d], max(1, shape[d] // unit))
        return Axis(stride, counts[d], distinct)

    def lane_axis(self, shape, d: int) -> Axis:
        return self._id_axis(self.threads_per_warp, d, self.size_per_thread[d], shape)

    def warp_axis(self, shape, d: int) -> Axis:
        return self._id_axis(self.warps_per_cta, d, self.size_per_thread[d] * self.threads_per_warp[d], shape)

    def base_terms(self, shape, d: int):
        """(lane Axis, lane scale, warp Axis, warp scale, wraps): base_d = lane_d*scale + warp_d*scale."""
        spt = self.size_per_thread[d]
        return (self.lane_axis(shape, d), spt, self.warp_axis(shape, d),
                spt * self.threads_per_warp[d], self.tile(d) > shape[d])

    def vector_dim(self) -> int:
        return self.order[0]

    def insert_dim(self, axis: int) -> "Blocked":
        """The same distribution with a new size-1 dim at `axis` (slowest in order)."""
        ins = lambda t, v: tuple(t[:axis]) + (v,) + tuple(t[axis:])
        order = tuple(o + (o >= axis) for o in self.order) + (axis,)
        return Blocked(ins(self.size_per_thread, 1), ins(self.threads_per_warp, 1), ins(self.warps_per_cta, 1), order)

    def __str__(self):
        return (f"blocked:spt{_dotted(self.size_per_thread)}:tpw{_dotted(self.threads_per_warp)}"
                f":wpc{_dotted(self.warps_per_cta)}:order{_dotted(self.order)}")


@dataclass(frozen=True)
class Slice:
    dim: int
    parent: "Blocked | Slice"

    @property
    def rank(self) -> int:
        return self.parent.rank - 1

    def parent_shape(self, shape):
        return tuple(shape[:self.dim]) + (1,) + tuple(shape[self.dim:])

    def parent_dim(self, d: int) -> int:
        return d + (d >= self.dim)

    def offsets(self, shape):
        return [o[:self.dim] + o[self.dim + 1:] for o in self.parent.offsets(self.parent_shape(shape))]

    def lane_axis(self, shape, d):
        return self.parent.lane_axis(self.parent_shape(shape), self.parent_dim(d))

    def warp_axis(self, shape, d):
        return self.parent.warp_axis(self.parent_shape(shape), self.parent_dim(d))

    def base_terms(self, shape, d):
        return self.parent.base_terms(self.parent_shape(shape), self.parent_dim(d))

    def vector_dim(self) -> int:
        pd = self.parent.vector_dim()
        return pd - (pd > self.dim) if pd != self.dim else -1

    def __str__(self):
        return f"slice{self.dim}:{self.parent}"


Layout = "Blocked | Slice"


def blocked_for(shape, order, vec: int, num_warps: int) -> Blocked:
    """A layout for `shape` with `vec` consecutive elements per thread along order[0],
    lanes then warps filling dims fastest-first (Triton's coalesced layout)."""
    rank = len(shape)
    spt = [1] * rank
    spt[order[0]] = max(1, min(vec, shape[order[0]]))
    tpw, wpc = [1] * rank, [1] * rank
    lanes, warps = 32, num_warps
    for d in order:
        t = min(lanes, max(1, shape[d] // spt[d]))
        tpw[d], lanes = t, lanes // t
    tpw[order[-1] if rank > 1 else order[0]] *= lanes  # leftover lanes wrap
    for d in order:
        w = min(warps, max(1, shape[d] // (spt[d] * tpw[d])))
        wpc[d], warps = w, warps // w
    wpc[order[-1] if rank > 1 else order[0]] *= warps
    return Blocked(tuple(spt), tuple(tpw), tuple(wpc), tuple(order))


def default_order(rank: int) -> tuple[int, ...]:
    return tuple(reversed(range(rank)))


def thread_elements(layout, shape, num_warps: int, threads: int | None = None) -> list[list[tuple[int, ...]]]:
    """Per thread (the first `threads`, default all), the logical indices of its registers
    (lowering computes the same `(base + offset) mod shape` in LLVM IR)."""
    return [[tuple(e) for e in t] for t in thread_indices(layout, shape, num_warps, threads).tolist()]


def thread_indices(layout, shape, num_warps: int, threads: int | None = None) -> np.ndarray:
    """`thread_elements` as an int64 array [thread, register, dim] (an analysis's form: a list of
    tuples per element took ~8 ms for a 128x256 accumulator's conversion)."""
    rank = len(shape)
    bases = np.array(thread_bases(layout, shape, num_warps, threads), np.int64).reshape(-1, rank)
    offsets = np.array(layout.offsets(shape), np.int64).reshape(-1, rank)
    return bases[:, None, :] + offsets[None, :, :]


def thread_bases(layout, shape, num_warps: int, threads: int | None = None) -> list[tuple[int, ...]]:
    """Per thread, the index its register offsets (`layout.offsets`) are added to."""
    terms = [layout.base_terms(shape, d) for d in range(len(shape))]  # the same for every thread
    out = []
    for tid in range(32 * num_warps if threads is None else threads):
        lane, warp = tid % 32, tid // 32
        base = []
        for size, (lane_axis, lane_scale, warp_axis, warp_scale, wraps) in zip(shape, terms):
            b = (lane // lane_axis.stride) % lane_axis.count * lane_scale
            b += (warp // warp_axis.stride) % warp_axis.count * warp_scale
            base.append(b % size if wraps else b)
        out.append(tuple(base))
    return out


@functools.lru_cache(maxsize=4096)
def same_distribution(a, b, shape, num_warps: int) -> bool:
    """Do layouts `a` and `b` put the same elements of `shape` in the same registers of
    the same threads? (Then a value needs no conversion between them: e.g. a [128, 1]
    column in wgmma layouts that differ only in their instruction's width.)"""
    if a == b:
        return True
    if a is None or b is None or a.rank != b.rank or a.offsets(shape) != b.offsets(shape):
        return False
    # with the same (never empty) offsets, each thread holds the same elements where it has the same base
    return thread_bases(a, shape, num_warps) == thread_bases(b, shape, num_warps)


def mma_layout(shape, num_warps: int, rows_only: bool = False, replicate: bool = False) -> "Blocked | None":
    """The accumulator layout of `mma.sync.m16n8k16` tiles, or None if `shape` does not fit.

    Within a warp, lane (g = lane/4, t = lane%4) holds columns 2t, 2t+1 of rows g and
    g + 8 of each 16x8 tile: `Blocked(spt=[1, 2], tpw=[8, 4])`. Warps tile the block
    [Wm, Wn]; a thread's row pairs (i, i+1) of the 8-row repetition play the tile's rows
    g and g+8, which is fine because the dot loads A and B through shared memory with
    the same row and column mapping.

    `rows_only`: every warp holds whole rows (Wn = 1). Then a 16-bit value in this layout
    is the A operand of a next dot as mma.sync reads it from registers: the columns of two
    adjacent 8-column tiles are one 16-wide k-step's fragment (attention's P).

    `replicate`: where the block has fewer 16x8 tiles than there are warps (16x16 on 4 warps), the
    warps past them along N hold copies of the others' tiles (the layout's columns wrap), as
    Triton's mma layouts do; rows never wrap (each warp needs its pair of 8-row halves).
    """
    if len(shape) == 3:
        return _batched_mma_layout(shape, num_warps) if not rows_only else None
    if len(shape) != 2:
        return None
    M, N = shape
    best = None
    wm = num_warps if rows_only else 1
    while wm <= num_warps:
        wn = num_warps // wm
        if M % (16 * wm) == 0 and N % (8 * wn) == 0:
            score = abs((M // wm) - (N // wn))
            if best is None or score < best[0]:
                best = (score, wm, wn)
        wm *= 2
    if best is None and replicate and not rows_only and N % 8 == 0:
        # the most warps on distinct tiles: every row pair of M taken, the rest along N
        wm = max((w for w in (1 << i for i in range(num_warps.bit_length())) if M % (16 * w) == 0
                  and num_warps % w == 0), default=None)
        if wm is not None and (8 * (num_warps // wm)) % N == 0:
            best = (0, wm, num_warps // wm)
    if best is None:
        return None
    _, wm, wn = best
    return Blocked((1, 2), (8, 4), (wm, wn), (1, 0))


def _batched_mma_layout(shape, num_warps: int) -> "Blocked | None":
    """A batched dot's [B, M, N] accumulator: each batch a 2-D mma layout's tiles, warps on the
    batch dim first (as many as divide it), the rest over M and N as `mma_layout` splits them,
    so that a warp's tiles lie in as few batches as may be. Where they split no other way, every
    warp on the batch dim, more warps than batches holding copies: Triton's batched mma puts all
    its warps there whatever the shape."""
    batch, M, N = shape
    wb = num_warps
    while wb >= 1:
        inner = mma_layout((M, N), num_warps // wb) if batch % wb == 0 else None
        if inner is not None:
            return Blocked((1, 1, 2), (1, 8, 4), (wb, *inner.warps_per_cta), (2, 1, 0))
        wb //= 2
    if M % 16 or N % 8:
        return None
    return Blocked((1, 1, 2), (1, 8, 4), (num_warps, 1, 1), (2, 1, 0))


def is_mma_layout(layout, shape, num_warps: int) -> bool:
    """Is `layout` an mma.sync accumulator layout of `shape`, whichever way the warps split?"""
    if isinstance(layout, Blocked) and len(shape) == 3:  # batched: 2-D tiles per batch, batches whole to a warp
        wb = layout.warps_per_cta[0]
        return layout.size_per_thread == (1, 1, 2) and layout.threads_per_warp == (1, 8, 4) \
            and layout.order == (2, 1, 0) and (shape[0] % wb == 0 or wb % shape[0] == 0) \
            and layout.warps_per_cta[0] * layout.warps_per_cta[1] * layout.warps_per_cta[2] == num_warps \
            and shape[1] % (16 * layout.warps_per_cta[1]) == 0 and shape[2] % (8 * layout.warps_per_cta[2]) == 0
    if not isinstance(layout, Blocked) or len(shape) != 2 or layout.size_per_thread != (1, 2) \
            or layout.threads_per_warp != (8, 4) or layout.order != (1, 0):
        return False
    wm, wn = layout.warps_per_cta
    cols = 8 * wn  # columns the warps cover: the block's, or a multiple of them (copies: `replicate`)
    return wm * wn == num_warps and shape[0] % (16 * wm) == 0 and shape[1] % 8 == 0 \
        and (shape[1] % cols == 0 or cols % shape[1] == 0)


@dataclass(frozen=True)
class Wgmma:
    """The accumulator layout of Hopper's `wgmma.mma_async.m64nNk16` (N = `instr_n`):
    fp32 accumulators, or int32 for int8 inputs (`.s32`, the same fragment).

    Warp w of a warpgroup holds rows 16w .. 16w+15 of the instruction's 64; within the
    warp, lane (g = lane/4, t = lane%4) holds rows g and g + 8 and, in every 8-column
    chunk, columns 2t and 2t + 1. A thread's registers come in the instruction's own
    order (d[4j + r]: chunk j, row g + 8(r/2), column 2t + r%2), so the registers of one
    instruction are consecutive. `warps` = (warps along M, warps along N): warps are
    numbered M first and the warps along M are a multiple of 4, so each warpgroup covers
    64 consecutive rows; the CTA tile [16 Wm, instr_n Wn] repeats over the shape, M
    repetitions outermost.
    """

    warps: tuple[int, int]
    instr_n: int

    rank = 2

    def tile(self, d: int) -> int:
        return 16 * self.warps[0] if d == 0 else self.instr_n * self.warps[1]

    def offsets(self, shape) -> list[tuple[int, int]]:
        M, N = shape
        out, seen = [], set()
        for mrep in range(max(1, M // self.tile(0))):
            for nrep in range(max(1, N // self.tile(1))):
                for j in range(self.instr_n // 8):
                    for r in range(4):
                        off = (mrep * self.tile(0) + 8 * (r // 2), nrep * self.tile(1) + 8 * j + r % 2)
                        if off[0] < M and off[1] < N and off not in seen:
                            seen.add(off)
                            out.append(off)
        return out

    def _scales(self, d):
        """(lane stride, lane count, lane scale, warp stride, warp count, warp scale) along d."""
        if d == 0:
            return 4, 8, 1, 1, self.warps[0], 16
        return 1, 4, 2, self.warps[0], self.warps[1], self.instr_n

    def lane_axis(self, shape, d: int) -> Axis:
        stride, count, scale = self._scales(d)[:3]
        return Axis(stride, count, min(count, max(1, shape[d] // scale)))

    def warp_axis(self, shape, d: int) -> Axis:
        stride, count, scale = self._scales(d)[3:]
        return Axis(stride, count, min(count, max(1, shape[d] // scale)))

    def base_terms(self, shape, d: int):
        scales = self._scales(d)
        return (self.lane_axis(shape, d), scales[2], self.warp_axis(shape, d), scales[5],
                self.tile(d) > shape[d])

    def vector_dim(self) -> int:
        return 1

    def __str__(self):
        return f"wgmma:warps{_dotted(self.warps)}:n{self.instr_n}"


@dataclass(frozen=True)
class Linear:
    """A distribution given bit by bit, for one shape (Triton's LinearLayout): register index bit
    b moves a thread's element by `regs[b]`, lane id bit b by `lanes[b]`, warp id bit b by
    `warps[b]` (index vectors; the bits' moves combine by XOR, here always on disjoint bits).

    Only what a shape op's intermediate needs, where no Blocked layout can hold it (a wgmma
    accumulator reshaped to 3-D on its way to a split): `derived_layout`
    (kiln.ir.layout_moves) makes one only where each dim's lane (and warp) bits are one run
    of consecutive id bits moving consecutive index bits, so `base_terms` can answer."""

    regs: tuple[tuple[int, ...], ...]
    lanes: tuple[tuple[int, ...], ...]
    warps: tuple[tuple[int, ...], ...]

    @property
    def rank(self) -> int:
        return len((self.regs + self.lanes + self.warps)[0])

    def offsets(self, shape) -> list[tuple[int, ...]]:
        out = []
        for r in range(1 << len(self.regs)):
            idx = [0] * self.rank
            for b, move in enumerate(self.regs):
                if r >> b & 1:
                    idx = [i ^ m for i, m in zip(idx, move)]
            out.append(tuple(idx))
        return out

    def _axis(self, moves, d: int) -> tuple[Axis, int]:
        """(Axis, scale) of the id bits in `moves` that move dim d (a run, see the class)."""
        bits = [b for b, m in enumerate(moves) if m[d]]
        if not bits:
            return Axis(1, 1, 1), 0
        first, scale = bits[0], moves[bits[0]][d]
        if bits != list(range(first, first + len(bits))) or \
                any(moves[b][d] != scale << (b - first) or sum(map(bool, moves[b])) != 1 for b in bits):
            raise ValueError(f"{self}: the id bits along dim {d} are not one run")
        count = 1 << len(bits)
        return Axis(1 << first, count, count), scale

    def lane_axis(self, shape, d: int) -> Axis:
        return self._axis(self.lanes, d)[0]

    def warp_axis(self, shape, d: int) -> Axis:
        return self._axis(self.warps, d)[0]

    def base_terms(self, shape, d: int):
        (lane, lane_scale), (warp, warp_scale) = self._axis(self.lanes, d), self._axis(self.warps, d)
        return lane, lane_scale, warp, warp_scale, False

    def vector_dim(self) -> int:
        return -1  # no op that accesses memory reads one

    def __str__(self):
        moves = lambda kind, vs: kind + "/".join(_dotted(v) for v in vs)  # noqa: E731
        return f"linear:{moves('r', self.regs)}:{moves('l', self.lanes)}:{moves('w', self.warps)}"


@functools.lru_cache(maxsize=1024)
def as_linear(layout, shape: tuple, num_warps: int) -> "Linear | None":
    """`layout` over `shape` bit by bit, where it is linear: every register, lane and warp id bit
    moves one index bit of its own, none twice, none wraps (else None)."""
    threads = 32 * num_warps
    offsets = layout.offsets(shape)
    n = len(offsets)
    if n & (n - 1) or threads & (threads - 1) or any(layout.tile(d) > shape[d] for d in range(len(shape))
                                                     if hasattr(layout, "tile")):
        return None
    regs = tuple(offsets[1 << b] for b in range(n.bit_length() - 1))
    try:
        bases = thread_bases(layout, shape, num_warps)
    except ValueError:  # a Linear whose id bits base_terms cannot express
        return None
    ids = [tuple(bases[1 << b]) for b in range(threads.bit_length() - 1)]
    moves = regs + tuple(ids)
    seen = set()
    for move in moves:  # one index bit each, no two alike
        hot = [(d, v) for d, v in enumerate(move) if v]
        if len(hot) != 1 or hot[0][1] & (hot[0][1] - 1) or hot[0] in seen:
            return None
        seen.add(hot[0])
    linear = Linear(regs, tuple(ids[:5]), tuple(ids[5:]))
    if linear.offsets(shape) != offsets or [tuple(b) for b in thread_bases(linear, shape, num_warps)] != \
            [tuple(b) for b in bases]:
        return None
    return linear


# N of one int8 wgmma (.s32.s8.s8), as the PTX ISA lists them: 8, 16, 24, 32, then
# multiples of 16 up to 224 (float inputs take every multiple of 8 up to 256)
INT8_WGMMA_N = (8, 16, 24, 32, *range(48, 225, 16))


def wgmma_layout(shape, num_warps: int, int8: bool = False) -> "Wgmma | None":
    """The wgmma accumulator layout for a 2-D `shape`, or None where it does not fit:
    warpgroups (4 warps) take 64-row slabs along M first, the rest split N; one
    instruction covers up to 256 columns of a warpgroup's share (for `int8` inputs the
    widest of INT8_WGMMA_N that divides it: a 256-wide share is two n128 instructions)."""
    if len(shape) != 2 or num_warps % 4:
        return None
    M, N = shape
    groups = num_warps // 4
    gm = 1
    while gm * 2 <= groups and M % (64 * gm * 2) == 0:
        gm *= 2
    gn = groups // gm
    if M % (64 * gm) or N % (8 * gn):
        return None
    instr_n = min(256, N // gn)
    if int8:
        instr_n = max((n for n in INT8_WGMMA_N if N // gn % n == 0), default=0)
    if instr_n == 0 or instr_n % 8:
        return None
    return Wgmma((4 * gm, gn), instr_n)


def transposed_instr_n(M: int, int8: bool = False) -> int:
    """N of each wgmma of a transposed product (`transposed_wgmma_layout`): the product's M, or the widest
    width that divides it (0 where none does)."""
    widths = INT8_WGMMA_N if int8 else range(8, 257, 8)
    return max((n for n in widths if M % n == 0), default=0)


def transposed_wgmma_layout(shape, num_warps: int, int8: bool = False) -> "Blocked | None":
    """The layout of C = A @ B computed as C^T = B^T A^T, B^T being wgmma's A from registers (an 8-bit or
    32-bit B whose memory runs along N, which wgmma reads K-major only; kiln.codegen.lower.transposed_dot),
    or None where `shape` does not fit.

    wgmma's accumulator rows are then C's columns, the warps' 16-row slabs side by side along N. Within a
    slab the fragment's row g is column 2g and row g + 8 column 2g + 1 (the order its registers are read
    from a tile in), so lane (g, t) holds the 2x2 squares at rows 2t + 8j and columns 2g of C: a Blocked
    layout, which the epilogue converts as any other."""
    if len(shape) != 2 or num_warps % 4:
        return None
    M, N = shape
    if N % (16 * num_warps) or M % 8 or not transposed_instr_n(M, int8):
        return None
    return Blocked((2, 2), (4, 8), (1, num_warps), (0, 1))


def _dotted(values) -> str:
    return ".".join(str(v) for v in values)


def _ints(field: str, prefix: str, text: str) -> tuple[int, ...]:
    parts = field[len(prefix):].split(".") if field.startswith(prefix) else []
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a layout: {text!r} (expected {prefix}N.N...)")
    return tuple(int(p) for p in parts)


def _move_list(field: str, prefix: str, text: str) -> tuple[tuple[int, ...], ...]:
    if not field.startswith(prefix):
        raise ValueError(f"not a layout: {text!r} (expected {prefix}...)")
    return tuple(_ints(part, "", text) for part in field[len(prefix):].split("/")) if field[len(prefix):] else ()


def parse_layout(text: str) -> "Blocked | Slice | Wgmma | Linear":
    """The layout that `str(layout)` printed; ValueError for anything else (a distribution
    that no CTA of a power-of-two warp count could hold included)."""
    fields = text.split(":")
    kind = fields[0]
    if kind.startswith("slice") and kind[5:].isdigit() and len(fields) > 1:
        parent = parse_layout(":".join(fields[1:]))
        dim = int(kind[5:])
        if dim >= parent.rank or parent.rank < 2:
            raise ValueError(f"not a layout: {text!r} (a slice drops one dim of a parent of rank 2 or more)")
        return Slice(dim, parent)
    if kind == "blocked" and len(fields) == 5:
        spt, tpw, wpc, order = (_ints(f, p, text) for f, p in zip(fields[1:], ("spt", "tpw", "wpc", "order")))
        rank = len(order)
        lanes = wpc_total = 1
        for t in tpw:
            lanes *= t
        for w in wpc:
            wpc_total *= w
        if len({len(spt), len(tpw), len(wpc), rank}) != 1 or sorted(order) != list(range(rank)) \
                or lanes != 32 or wpc_total & (wpc_total - 1) or min(spt) < 1:
            raise ValueError(f"not a layout: {text!r} (32 lanes, a power-of-two warp count, order a permutation)")
        return Blocked(spt, tpw, wpc, order)
    if kind == "wgmma" and len(fields) == 3:
        warps = _ints(fields[1], "warps", text)
        (n,) = _ints(fields[2], "n", text)
        if len(warps) != 2 or warps[0] % 4 or n % 8 or not 8 <= n <= 256:
            raise ValueError(f"not a layout: {text!r} (warps along M a multiple of 4, n a multiple of 8 up to 256)")
        return Wgmma(warps, n)
    if kind == "linear" and len(fields) == 4:
        regs, lanes, warps = (_move_list(f, p, text) for f, p in zip(fields[1:], "rlw"))
        moves = regs + lanes + warps
        if len(lanes) != 5 or not moves or len({len(m) for m in moves}) != 1:
            raise ValueError(f"not a layout: {text!r} (5 lane moves, every move of one rank)")
        linear = Linear(regs, lanes, warps)
        for d in range(linear.rank):  # base_terms must be able to answer
            linear.base_terms(None, d)
        return linear
    raise ValueError(f"not a layout: {text!r}")
