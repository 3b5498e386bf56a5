"""Layout assignment: a distribution over threads for every block value.

Global accesses are the anchors. For each load, store and atomic on a block of pointers
the axis analysis says which dim is contiguous and how many elements in a row are
contiguous and aligned; from that comes a coalesced `Blocked` layout whose threads hold
up to 16 bytes in a row (Triton's rule). Each shape gets the widest anchor's layout as
its preferred layout, and layouts then flow forward through the ops: elementwise ops keep
their operands' layout, a reduction gives a `Slice` of its operand's, `expand_dims` of a
slice gives its parent back (so `x - max(x, 1)[:, None]` needs no data movement).
Where two layouts still meet, a `convert_layout` op goes (kiln.codegen.passes.convert_layouts).
"""
from __future__ import annotations

from kiln.ir.core import Block, Operation
from kiln.ir.index_math import computes_index_math
from kiln.ir.ops import ELEMENTWISE_OPS
from kiln.ir.types import block_type

from kiln.ir.layout import (Blocked, Linear, Slice, Wgmma, blocked_for, default_order, mma_layout, same_distribution,
                             thread_bases, transposed_wgmma_layout, wgmma_layout)
from kiln.ir.layout_moves import RENAMING_OPS, derived_layout, registers_held

from ..analysis.access import memory_width, read_back_through_memory, tile_order
from ..analysis.dots import mma_eligible
from ..analysis import Analysis
from .convert_layouts import convert, wanted

name = "layouts"

MEMORY_OPS = ("load", "store", "atomic_rmw", "atomic_cas", "async_copy")


ELEMENTWISE_BETWEEN = {"cast", "bitcast", "add", "sub", "mul", "div", "and", "or", "xor", "shl", "shr", "min", "max",
                       "select"}


def computed_from(v, producers, depth: int = 12, seen=None) -> bool:
    """Is block value `v` computed from the result of an op named in `producers` (dots): through
    elementwise ops of its shape, the waits that retire a wgmma, the loops that carry it (their
    yielded value, or what a carried value starts as) and the branches that yield it? fla's
    chunk_fwd_kernel_o: `b_A`, summed by wgmma in the K loop, masked and cast for the epilogue's
    dot; its kkt_solve: each block's inverse, a loop's rows substituted into the negated product of
    a dot. Each value is asked once (`seen`)."""
    seen = set() if seen is None else seen
    if depth == 0 or id(v) in seen:
        return False
    seen.add(id(v))
    op = v.defining_op
    if op is None:
        loop = v.owner.parent if v.index > 0 else None  # (argument 0 of a loop's body: its counter)
        return isinstance(loop, Operation) and loop.name == "for" and \
            computed_from(loop.operands[2 + v.index], producers, depth - 1, seen)
    if op.name in producers:
        return True
    if op.name == "warp_group_dot_wait":
        return computed_from(op.operands[v.index], producers, depth - 1, seen)
    if op.name in ("for", "if"):
        return any(computed_from(region.ops[-1].operands[v.index], producers, depth - 1, seen)
                   for region in op.regions if region.ops and region.ops[-1].operands)
    return op.name in ELEMENTWISE_BETWEEN and any(
        computed_from(x, producers, depth - 1, seen) for x in op.operands
        if isinstance(x.type, block_type) and tuple(x.type.shape) == tuple(v.type.shape))


# what a value read only as a dot's operand may pass on its way there (only_dot_operand); UNMIXED: a carried one
BETWEEN_DOT_OPERANDS = ELEMENTWISE_BETWEEN | {"permute", "cmp"}
UNMIXED = frozenset({"cast", "bitcast", "permute"})


def _read_back_under(v, depth: int = 6):
    """The `local_load` that block value `v` is computed from through elementwise ops of
    its shape (casts, a zero point subtracted, a nibble shifted out), or None."""
    op = v.defining_op
    if op is None or depth == 0:
        return None
    if op.name == "local_load":
        return op
    if op.name not in ELEMENTWISE_BETWEEN:
        return None
    for x in op.operands:
        if isinstance(x.type, block_type) and tuple(x.type.shape) == tuple(v.type.shape):
            found = _read_back_under(x, depth - 1)
            if found is not None:
                return found
    return None


def _dot_under(v):
    """The dot (`dot`, `mma_dot`, `warp_group_dot`) whose result `v` is, through the waits that
    retire a wgmma, or None."""
    op = v.defining_op
    while op is not None and op.name == "warp_group_dot_wait":  # (its results are its operands, retired)
        v = op.operands[v.index]
        op = v.defining_op
    return op if op is not None and op.name in ("dot", "mma_dot", "warp_group_dot") else None


def _for_of(yield_op):
    """The `for` whose body `yield_op` ends, or None."""
    loop = yield_op.parent.parent
    return loop if isinstance(loop, Operation) and loop.name == "for" else None


def _loads_behind(v) -> list:
    """The loads `v` is: its own (a `local_load` of a vector copied ahead, smem_pipeline, counts
    as one), or those of a loop-carried value (prefetched: the first before the loop, the next
    in the body), else none."""
    op = v.defining_op
    if op is not None:
        return [op] if op.name in ("load", "local_load") else []
    loop = v.owner.parent if isinstance(v.owner, Block) else None
    if not isinstance(loop, Operation) or loop.name != "for" or v.index == 0:
        return []
    sources = [loop.operands[2 + v.index].defining_op, v.owner.ops[-1].operands[v.index - 1].defining_op]
    return sources if all(s is not None and s.name == "load" for s in sources) else []


def _loads_under(v, depth: int = 8) -> list:
    """The loads `v` is (`_loads_behind`) or is computed from elementwise, through values of its
    shape (fla's `exp2(g_last - g)`): where `v` is broadcast against a tile, those loads are made in
    its slice, and the ops between keep it."""
    found, seen, stack = [], set(), [(v, depth)]
    while stack:
        x, left = stack.pop()
        op = x.defining_op
        if id(x) in seen or not isinstance(x.type, block_type) or x.type.shape != v.type.shape:
            continue
        seen.add(id(x))
        behind = _loads_behind(x)
        if behind:
            found += behind
        elif op is not None and op.name in ELEMENTWISE_OPS and op.name != "addptr" and left:
            stack += [(y, left - 1) for y in op.operands]
    return found


def _reads_any(v, values: set, body, depth: int = 12) -> bool:
    """Is `v` one of `values`, or computed in `body` (not in a nested region's own values) from one?"""
    seen, stack = set(), [(v, depth)]
    while stack:
        x, left = stack.pop()
        if x in values:
            return True
        op = x.defining_op
        if op is None or left == 0 or op in seen or op.parent is not body:
            continue
        seen.add(op)
        stack += [(y, left - 1) for y in op.operands]
    return False


MMA_ROWS = (1 << 30) + 1  # the priority of whole-row mma layouts (a dot's A from registers)
LOCAL_LOAD = 1 << 29  # a tile read back from shared memory: above memory anchors, below dots


class _Assigner:
    def __init__(self, ctx):
        self.ctx = ctx
        self.num_warps = ctx.num_warps
        self.preferred: dict[tuple, tuple[int, Blocked]] = {}
        # pointer blocks follow the memory op they feed (A's and B's 128x128 pointer
        # tiles want different orders, and neither is an accumulator of that shape)
        self.wanted: dict = {}
        self.layouts: dict = {}
        self.cheap: set = set()
        self.stored: set = set()  # values that `local_store` writes to shared memory
        self.wgmma_results: dict = {}  # each warp_group_dot's result -> its accumulator layout
        self.users: dict = {}  # value -> the ops that read it
        self.fragment_reads: dict = {}  # local_load -> the wgmma A fragment layout it is read in
        self.broadcasts: dict = {}  # broadcast result -> the layout its user reads it in (apply)

    def anchor_dot(self, op):
        """A dot that can use tensor cores fixes its accumulator's layout (and so that of
        the loop-carried accumulator and its zeros)."""
        if op.name == "warp_group_dot":
            shape = op.results[0].type.shape
            int8 = op.operands[1].type.element_ty.name == "int8"  # B is a shared tile
            accumulator = transposed_wgmma_layout if op.attrs.get("transposed") else wgmma_layout
            self.wgmma_results[op.results[0]] = accumulator(shape, self.num_warps, int8)
            self.preferred[shape] = (1 << 31, self.wgmma_results[op.results[0]])
        elif op.name == "mma_dot" and any(isinstance(v.type, block_type) for v in op.operands[:2]):
            # A (or B, at one warp) in registers (smem_pipeline, shared_dot_operands checked that they
            # fit): those, and so the dots that made them, and the accumulator in whole rows per warp
            for v in (op.results[0], *op.operands[:2]):
                if isinstance(v.type, block_type):
                    self.preferred[v.type.shape] = (MMA_ROWS, mma_layout(v.type.shape, self.num_warps, rows_only=True))
        elif mma_eligible(op, self.ctx):
            shape = op.results[0].type.shape
            layout = mma_layout(shape, self.num_warps, replicate=True)
            # a wgmma or whole-row mma dot of this shape keeps its say, whichever comes first (a dot peeled
            # off after a wgmma loop would otherwise lay the loop's softmax out for itself)
            if layout is not None and self.preferred.get(shape, (0,))[0] < 1 << 30:
                self.preferred[shape] = (1 << 30, layout)

    def anchor(self, op):
        ptr = op.operands[0]
        if not isinstance(ptr.type, block_type):
            return
        shape = ptr.type.shape
        order, vec = memory_width(self.ctx, op)
        threads = 32 * self.num_warps
        per_thread = max(1, ptr.type.numel // threads)
        vec = min(vec, per_thread)
        layout = blocked_for(shape, order, vec, self.num_warps)
        old = self.preferred.get(shape)
        if old is None or vec > old[0]:
            self.preferred[shape] = (vec, layout)
        self.want(ptr, layout)
        if op.name == "load" and (op.results[0] in self.stored or self.only_dot_operand(op.results[0])):
            self.wanted[op.results[0]] = layout  # goes to shared memory as it came

    def only_dot_operand(self, v, depth: int = 12, known=None, through=None) -> bool:
        """Is block value `v` read only as a `dot`'s A or B (or stored to a shared tile, as a value several
        dots read is), directly or through elementwise ops, comparisons and transposes (an fp32 operand
        split into tf32 or bf16 parts: f32_dot_split)?
        Such a dot stages its operands in shared memory whatever their layout, so a load of one keeps
        its coalesced layout (16-byte pieces) rather than the dot's result's, which would split it into
        the 4-byte pieces of an mma fragment where the operand's shape is the result's (a 64x64x64 dot).
        Each value's answer is worked out once (`known`), however many paths reach it. `through`: the
        ops it may pass (default: elementwise ops, comparisons, transposes), with `known` its own."""
        known = {} if known is None else known
        through = BETWEEN_DOT_OPERANDS if through is None else through
        if v in known:
            return known[v]
        users = self.users.get(v, ())
        answer = bool(users) and depth > 0
        for user in users if answer else ():
            if user.name == "dot":
                answer = v is not user.operands[2] and v in user.operands[:2]
            elif user.name == "local_store":  # a dot's operand stored once for several (shared_dot_operands)
                answer = v is user.operands[0]
            elif user.name in through:
                answer = len(user.results) == 1 and self.only_dot_operand(user.results[0], depth - 1, known, through)
            elif user.name == "yield" and _for_of(user) is not None:
                answer = self._carried_only_to_dots(v, _for_of(user), user.operands, depth)
            elif user.name == "for" and v not in user.operands[:3]:
                answer = self._carried_only_to_dots(v, user, user.operands[3:], depth)
            else:
                answer = False
            if not answer:
                break
        known[v] = answer
        return answer

    def _carried_only_to_dots(self, v, loop, carried, depth) -> bool:
        """`v` carried by `loop`, as a start or a yield (`carried`: the loop's starts or its yield's
        operands; a load one iteration ahead, the prefetch pass's): the body's value, and the loop's
        result where read at all, go to dots unmixed: through casts and transposes only. A carried load
        combined with other blocks on its way (fla's `k * exp(g - gn)`) would, in its coalesced layout,
        move the product through shared memory every iteration."""
        arg_of = loop.regions[0].args[1:]
        for i, y in enumerate(carried):
            if y is not v:
                continue
            if not self.only_dot_operand(arg_of[i], depth - 1, {}, UNMIXED):
                return False
            result = loop.results[i]
            if self.users.get(result) and not self.only_dot_operand(result, depth - 1, {}, UNMIXED):
                return False
        return True

    def want(self, ptr, layout):
        """`layout` for pointer block `ptr` and the same-shaped pointers it is computed
        from (through addptr and loop-carried values); the first memory op to ask wins."""
        stack = [ptr]
        while stack:
            v = stack.pop()
            if v in self.wanted or not isinstance(v.type, block_type) or v.type.shape != ptr.type.shape:
                continue
            self.wanted[v] = layout
            op = v.defining_op
            if op is not None and op.name == "addptr":
                stack.append(op.operands[0])
            elif op is not None and op.name == "for":
                body = op.regions[0]
                stack += [op.operands[3 + v.index], body.ops[-1].operands[v.index]]
            elif op is None and isinstance(v.owner, Block) and isinstance(v.owner.parent, Operation) \
                    and v.owner.parent.name == "for" and v.index > 0:
                loop = v.owner.parent
                stack += [loop.operands[2 + v.index], v.owner.ops[-1].operands[v.index - 1]]

    def hint_slices(self, fn):
        """A vector loaded only to be broadcast against accumulators (attention backward's
        row statistics) or a tile read back from shared memory (a dequantized weight's
        scales) is loaded in a slice of that layout: the broadcast then moves no data,
        where converting its result would move the whole block through shared memory
        every time. The vector is small, so the less coalesced load is cheap. A vector
        loaded one iteration ahead (carried by its loop) counts as loaded. Where the
        broadcast meets a tile read back (a scale times converted weights) that tile's
        layout wins over the shape's preference (an accumulator of the same shape)."""
        users = self.users
        for op in fn.walk():
            if op.name != "broadcast":
                continue
            dims = op.operands[0].defining_op
            if dims is None or dims.name != "expand_dims":
                continue
            target = self.read_back_beside(op.results[0], users)
            if target is None:
                got = self.preferred.get(tuple(op.results[0].type.shape))
                target = got[1] if got is not None and got[0] >= LOCAL_LOAD else None
            if target is not None:
                for load in _loads_under(dims.operands[0]):
                    if not read_back_through_memory(load):  # (loaded by the threads that stored it)
                        self.wanted.setdefault(load.results[0], Slice(dims.attrs["axis"], target))

    def read_back_beside(self, v, users):
        """The layout of a tile read back (`local_load`) that an elementwise user of `v`
        combines it with, through elementwise ops of its shape (`(w - zero).to(f32) * scale`);
        else None."""
        for user in users.get(v, []):
            for other in user.operands:
                src = _read_back_under(other) if other is not v else None
                if src is not None:
                    return self.local_load_layout(src)
        return None

    def prefer(self, shape) -> Blocked:
        got = self.preferred.get(tuple(shape))
        if got is None:
            got = (0, blocked_for(shape, default_order(len(shape)), 1, self.num_warps))
            self.preferred[tuple(shape)] = got
        return got[1]

    def prefer_for(self, v):
        """The preferred layout of block value `v`."""
        got = self.wanted.get(v)
        return got if got is not None else self.prefer(v.type.shape)

    def set(self, v, layout):
        if isinstance(v.type, block_type):
            self.layouts[v] = layout

    def of(self, v):
        return self.layouts.get(v)

    def block(self, block):
        for op in block.ops:
            self.op(op)

    def op(self, op):
        if computes_index_math(op, self.cheap):
            self.cheap.update(op.results)
        handler = getattr(self, "op_" + op.name, None)
        if handler is not None:
            handler(op)
        else:
            self.elementwise(op)

    def elementwise(self, op):
        for region in op.regions:
            self.block(region)
        for r in op.results:
            if not isinstance(r.type, block_type):
                continue
            # operands that are cheap to recompute take any layout: only the others vote
            pref = self.prefer_for(r)
            costly = [v for v in op.operands if isinstance(v.type, block_type) and v not in self.cheap
                      and v.type.shape == r.type.shape and self.of(v)]
            # a block broadcast from a much smaller one votes only where nothing else does: beside a computed
            # block its source is what moves (`_broadcasts_read_elsewhere`), a fraction of the block (a mx
            # dequantization's 4x32x256 factors from 4x256 scales: 128 KB through shared memory each iteration;
            # triton_kernels' mx upcast, a 64x4x32 fp32 tile for its scales' 64x4: 36 KB, then TMA-stored)
            if len(costly) > 1:
                costly = [v for v in costly if not _grown_broadcast(v)] or costly
            costly = [self.of(v) for v in costly]
            self.set(r, pref if pref in costly or not costly else costly[0])

    def op_inline_asm(self, op):
        """Each asm call takes `pack` consecutive registers of a thread. As in Triton, the asm runs in
        its operand's layout, where each call then takes `pack` elements in a row along the layout's
        fastest dim (a tile loaded from memory: bytes of one 32-bit word, which triton_kernels' mxfp4
        weights untwiddle together; elements of `pack` rows would mix four words); another layout
        only where that one holds no such runs. One element a call: as any elementwise op (triton_kernels'
        swiglu: its `ex2` in the store's layout converted three 16x128 fp32 blocks, 8 KB, Triton's none)."""
        r = op.results[0]
        if not isinstance(r.type, block_type):
            return
        pack, shape = op.attrs["pack"], tuple(r.type.shape)
        if pack == 1:
            self.elementwise(op)
            return
        layout = self.prefer(shape)
        held = [self.of(v) for v in op.operands if isinstance(v.type, block_type) and self.of(v)]
        layout = next((c for c in held + [layout] if _runs_of(c, shape, pack, self.num_warps)), None) or \
            blocked_for(shape, _fastest_first(held[0] if held else layout, len(shape)), pack, self.num_warps)
        for res in op.results:
            self.set(res, layout)

    def op_dot(self, op):
        """The shape's preferred layout; a dot that can run on mma.sync where a wgmma dot holds its
        shape's preference writes its own mma layout (in wgmma's, it would run on FMAs: dot_staging)."""
        shape = op.results[0].type.shape
        layout = self.prefer(shape)
        if op.name == "dot" and isinstance(layout, Wgmma) and mma_eligible(op, self.ctx):
            layout = mma_layout(shape, self.num_warps, replicate=True) or layout
        self.set(op.results[0], layout)

    op_mma_dot = op_dot

    def op_warp_group_dot(self, op):
        """wgmma writes its accumulator in wgmma's layout, whatever another dot of the same shape
        asks of that shape (attention whose V rows are not 16-byte aligned: QK^T on wgmma, P @ V
        on mma.sync, both accumulators BLOCK_M x HEAD_DIM)."""
        self.set(op.results[0], self.wgmma_results[op.results[0]])

    def note_fragment_reads(self, fn):
        """A wgmma A the loop computes from a tile read back (`(a * s).to(fp16)`, its load fetched
        through a ring) is read back in A's fragment layout: what it is computed from then needs
        no conversion (through shared memory, a barrier) every iteration, as Triton reads it."""
        for op in fn.walk():
            a = op.operands[0] if op.name == "warp_group_dot" else None
            if a is not None and isinstance(a.type, block_type):
                src = _read_back_under(a)
                acc = wgmma_layout(op.results[0].type.shape, self.num_warps,
                                   op.operands[1].type.element_ty.name == "int8")
                if src is not None and acc is not None and src not in self.fragment_reads:
                    self.fragment_reads[src] = Wgmma(acc.warps, a.type.shape[1])

    def note_accumulator_reads(self, fn):
        """A tile read back that an elementwise op combines with a tensor-core dot's result of its
        shape (fla's `b_v = tl.load(v) - tl.dot(w, h)`, v fetched through a ring for a staged
        operand) is read back in that accumulator's layout, as Triton reads it: not in runs of 16
        bytes converted through shared memory (a barrier) to the accumulator's every iteration.
        After the dots' anchors: they fix the accumulators' layouts."""
        for op in fn.walk():
            if op.name not in ELEMENTWISE_BETWEEN or not isinstance(op.results[0].type, block_type):
                continue
            shape = tuple(op.results[0].type.shape)
            acc = next((a for a in (self.accumulator_of(x, shape) for x in op.operands) if a is not None), None)
            for x in op.operands if acc is not None else ():
                src = _read_back_under(x) if isinstance(x.type, block_type) else None
                if src is not None and src not in self.fragment_reads:
                    self.fragment_reads[src] = acc

    def accumulator_of(self, v, shape):
        """The layout of the accumulator `v` is, where it is a tensor-core dot's result of `shape`."""
        dot = _dot_under(v)
        if dot is None or tuple(dot.results[0].type.shape) != shape:
            return None
        if dot.name == "warp_group_dot":
            return self.wgmma_results.get(dot.results[0])
        got = self.preferred.get(shape)  # an mma layout anchor_dot gave the shape, if the dot runs on mma
        return got[1] if got is not None and got[0] >= 1 << 30 else None

    def local_load_layout(self, op):
        """Runs of 16 bytes along the tile's inner dim, lanes side by side: whole rows of
        shared memory per warp access; or a wgmma A fragment (note_fragment_reads)."""
        if op in self.fragment_reads:
            return self.fragment_reads[op]
        r, inner = op.results[0], op.operands[0].type.order[0]
        vec = max(1, min(16 // r.type.element_ty.itemsize, r.type.numel // (32 * self.num_warps)))
        return blocked_for(r.type.shape, tile_order(r.type.shape, inner), vec, self.num_warps)

    def anchor_local_load(self, op):
        """What is computed from a tile read back (a dequantized weight) stays in its layout.
        A vector read back is the memory op's business no more than a load is (hint_slices)."""
        shape = getattr(op.results[0].type, "shape", ())  # (a scalar read back has none)
        if len(shape) > 1 and self.preferred.get(shape, (0,))[0] < LOCAL_LOAD:
            self.preferred[shape] = (LOCAL_LOAD, self.local_load_layout(op))

    def op_local_load(self, op):
        if not isinstance(op.results[0].type, block_type):
            return  # a scalar read back: every thread reads it
        wanted = self.wanted.get(op.results[0])  # a vector in a slice of what it is broadcast against
        self.set(op.results[0], wanted if wanted is not None else self.local_load_layout(op))

    def op_reduce(self, op):
        self.block(op.regions[0])
        src = self.of(op.operands[0])
        for r in op.results:
            self.set(r, Slice(op.attrs["axis"], src))

    def op_expand_dims(self, op):
        """The source's parent (a slice expanded along its own dim) or its layout with the dim inserted;
        else as the broadcast that reads it is laid out where it moved to its user's layout (apply): the
        vector then converts once, into that layout's slice (fla's forward substitution turns a row
        into a column each step: a vector converted, then the column again, two trips through shared
        memory), else the shape's preference."""
        src, axis = self.of(op.operands[0]), op.attrs["axis"]
        readers = self.users.get(op.results[0], ())
        moved = {self.broadcasts.get(u.results[0]) for u in readers if u.name == "broadcast"}
        if readers and len(moved) == 1 and None not in moved and all(u.name == "broadcast" for u in readers):
            self.set(op.results[0], moved.pop())
        elif isinstance(src, Slice) and src.dim == axis:
            self.set(op.results[0], src.parent)
        elif isinstance(src, Blocked):
            self.set(op.results[0], src.insert_dim(axis))
        else:
            self.set(op.results[0], self.prefer_for(op.results[0]))

    def op_broadcast(self, op):
        """The source's layout, or the result shape's preferred one where the source
        holds the same registers in both (then the broadcast costs no conversion)."""
        src, r = self.of(op.operands[0]), op.results[0]
        if r in self.broadcasts:  # as its user reads it (apply's second assignment): the operand moves
            self.set(r, self.broadcasts[r])
            return
        pref = self.prefer_for(r)
        beside = self.read_back_beside(r, self.users)  # (a tile read back that it scales: its layout, not a dot's
        pref = beside if beside is not None else pref  # of the same shape, which would convert the tile)
        want = self.wanted.get(r)
        if want is not None and _grown_broadcast(r) and max(want.size_per_thread) > 1:
            # pointers a memory op reads in pieces of several elements, from a column of row pointers (rows
            # gathered or scheduled: not index math): the column moves, not a 128x128 pointer tile each
            # iteration (triton_kernels' ragged matmul; that conversion's 128 KB also kept its rings out)
            self.set(r, want)
            return
        self.set(r, pref if src is None or same_distribution(src, pref, tuple(op.operands[0].type.shape), self.num_warps) else src)

    def op_reshape(self, op):
        """A shape op's result in the layout that keeps every element in its thread (no data
        moves: kiln.ir.layout_moves), where the operand's layout has one; a join's two operands
        alike; a `Linear` one only for other shape ops to read. Otherwise as an elementwise op
        (its elements go through shared memory)."""
        src = self.of(op.operands[0])
        derived = derived_layout(op, src, self.num_warps)
        if derived is None or any(self.of(v) != src for v in op.operands[1:]) or \
                (isinstance(derived, Linear) and any(u.name not in RENAMING_OPS for r in op.results
                                                     for u in self.users.get(r, ()))):
            reordered = self.reordered(op, src)
            if reordered is None:
                self.elementwise(op)
            else:
                self.set(op.results[0], reordered)
            return
        for r in op.results:
            self.set(r, derived)

    op_permute = op_join = op_split = op_cat = op_reshape

    def reordered(self, op, src):
        """For a reshape that may reorder its elements, a Blocked result layout in which each thread
        holds as many elements as in `src` (each once), so that it renames them (layout_moves'
        `registers_held`): triton_kernels' absmax of a whole 128x256 accumulator, flattened to be
        reduced, went through 128 KB of shared memory. None for any other op, or where none holds."""
        if op.name != "reshape" or not op.attrs.get("can_reorder") or src is None:
            return None
        held = registers_held(src, tuple(op.operands[0].type.shape), self.num_warps)
        shape = tuple(op.results[0].type.shape)
        if held is None:
            return None
        layout = blocked_for(shape, default_order(len(shape)), held, self.num_warps)
        return layout if registers_held(layout, shape, self.num_warps) == held else None

    def op_for(self, op):
        """A carried value takes the layout its yield arrives in (the initial value is
        converted once, before the loop, rather than every iteration's result)."""
        body = op.regions[0]
        args = body.args[1:]
        for arg, init in zip(args, op.operands[3:]):  # a cheap start (zeros) has no say
            self.set(arg, None if init in self.cheap else self.of(init))
        yields = body.ops[-1].operands
        for _ in range(3):
            self.block(body)
            moved = [(arg, self.of(y)) for arg, y in zip(args, yields)
                     if self.of(y) is not None and self.of(y) != self.of(arg)]
            if not moved:
                break
            # what the body made of a value whose layout changed was laid out for the old one: the values
            # carried out of that are decided anew (a row maximum carried beside scores whose start the code
            # before the loop laid out would otherwise keep that layout)
            changed = {arg for arg, _ in moved if self.of(arg) is not None}
            for arg, layout in moved:
                self.set(arg, layout)
            for arg, y in zip(args, yields):
                if arg not in changed and isinstance(arg.type, block_type) and _reads_any(y, changed, body):
                    self.set(arg, None)
        unset = [(arg, init) for arg, init in zip(args, op.operands[3:]) if self.of(arg) is None]
        for arg, init in unset:  # carried through unchanged: the start's layout after all
            self.set(arg, self.of(init))
        # only across an inner loop (a tile loop's K loop), whose registers it would hold throughout and
        # which its conversion, once an iteration, does not slow
        nests = any(inner.name in ("for", "while") for inner in body.ops)
        compacted = [arg for arg in args if nests and self.compact(arg)]
        if unset or compacted:
            self.block(body)
        for r, arg in zip(op.results, args):
            self.set(r, self.of(arg))

    def compact(self, arg) -> bool:
        """Carry a small vector that arrives in a layout repeating it across threads (a column maximum
        in a slice of a 128x256 accumulator: 64 registers a thread, for the whole loop) in one that
        holds each element once instead, its yield converted each iteration (a few hundred bytes):
        triton_kernels' persistent matmul carried its absmax so across its K loop, beside the
        accumulator, and spilled 840 bytes (none since)."""
        layout = self.of(arg)
        if layout is None or not isinstance(arg.type, block_type) or arg.type.numel > COMPACT_MAX:
            return False
        shape = tuple(arg.type.shape)
        compact = blocked_for(shape, default_order(len(shape)), 1, self.num_warps)
        held = len(layout.offsets(shape))
        if held < COMPACT_FROM or held < 8 * len(compact.offsets(shape)):
            return False
        self.set(arg, compact)
        return True

    def op_while(self, op):
        before, after = op.regions
        for arg, init in zip(before.args, op.operands):
            self.set(arg, self.of(init))
        self.block(before)
        passed = before.ops[-1].operands[1:]
        for arg, r, v in zip(after.args, op.results, passed):
            self.set(arg, self.of(v))
            self.set(r, self.of(v))
        self.block(after)

    def op_if(self, op):
        for region in op.regions:
            self.block(region)
        for r, v in zip(op.results, op.regions[0].ops[-1].operands):
            self.set(r, self.of(v) or self.prefer_for(r) if isinstance(r.type, block_type) else None)


COMPACT_MAX = 1024  # elements: a carried vector this small is carried once per thread, not repeated
COMPACT_FROM = 16  # registers a thread: a carried vector repeated into this many is worth a conversion


def _fastest_first(layout, rank: int) -> tuple:
    """`layout`'s dims, fastest first (a Blocked's order; the last dim first for the others)."""
    return tuple(layout.order) if isinstance(layout, Blocked) else default_order(rank)


def _runs_of(layout, shape, pack: int, num_warps: int) -> bool:
    """Does every thread of `layout` hold a multiple of `pack` registers, in runs of `pack` consecutive
    elements along the layout's fastest dim, each starting at a multiple of `pack`? (Only the multiple
    where that dim is not a multiple of `pack` long.)"""
    offsets = layout.offsets(shape)
    if len(offsets) % pack:
        return False
    dim = _fastest_first(layout, len(shape))[0]
    if shape[dim] % pack:
        return True
    for g in range(0, len(offsets), pack):
        first = tuple(offsets[g])
        if first[dim] % pack or any(tuple(offsets[g + j]) != first[:dim] + (first[dim] + j,) + first[dim + 1:]
                                    for j in range(1, pack)):
            return False
    return all(base[dim] % pack == 0 for base in thread_bases(layout, shape, num_warps))


def apply(fn, ctx) -> None:
    """A layout for every block value, then a `convert_layout` wherever an op reads a value in
    another one (convert_layouts.convert): after it every block type holds its layout.

    A broadcast whose user reads it in another layout is laid out as that user reads it, in a second
    assignment: its operand is then what moves, a fraction of the block (dot_scaled's factors: a
    256x4 block of scales, not 256x128 of factors, 64 KB through shared memory each iteration)."""
    ctx = Analysis(fn, ctx)  # the options, and the pointers' contiguity as this function has it
    assigner = _assigned(fn, ctx, {})
    moved = {}
    for _ in range(3):  # a broadcast read beside another that moved is then read in that one's new layout
        more = {r: layout for r, layout in _broadcasts_read_elsewhere(fn, ctx, assigner).items()
                if moved.get(r) != layout}
        if not more:
            break
        moved.update(more)
        assigner = _assigned(fn, ctx, moved)
    convert(fn, ctx, assigner.layouts)


# a broadcast is laid out as its user reads it where it makes at least this many elements of each one
BROADCAST_GROWTH = 8


# how many elementwise ops of broadcast blocks a broadcast's result is followed through to the op that
# reads it in another layout (k[:, None] * v[None, :] added to a state: two)
BROADCAST_CHAIN = 4


def _grown_broadcast(v) -> bool:
    """Is `v` a broadcast's result at least BROADCAST_GROWTH times its source's elements?"""
    op = v.defining_op
    return op is not None and op.name == "broadcast" and v.type.numel >= BROADCAST_GROWTH * op.operands[0].type.numel


def _broadcasts_read_elsewhere(fn, ctx, assigner) -> dict:
    """Broadcast results (growing BROADCAST_GROWTH-fold or more, not index math) that an elementwise
    user reads in another layout -> that layout. The user may be a few elementwise ops on: where a
    broadcast's users compute in its layout and only their result is read in another (an outer product
    `k[:, None] * v[None, :]` added to a carried state, fla's recurrent kernels), the broadcast takes
    the layout that result is read in, so its operand moves (64 elements) and not the product (64x64)."""
    found = {}
    for op in fn.walk():
        if op.name != "broadcast" or op.operands[0].defining_op is None:
            continue
        r = op.results[0]
        if r in assigner.cheap or not _grown_broadcast(r):
            continue  # index math converts for nothing (recomputed in the new layout)
        want = _read_elsewhere(ctx, assigner, r, r.type.shape, BROADCAST_CHAIN)
        if want is not None:
            found[r] = want
    return found


def _read_elsewhere(ctx, assigner, v, shape, depth):
    """The layout an elementwise user reads `v` in where it is not `v`'s own, following users that
    compute in `v`'s layout up to `depth` ops on; None where every one reads it as it is."""
    have = assigner.of(v)
    if have is None:
        return None
    for user in assigner.users.get(v, ()):
        if user.name not in ELEMENTWISE_BETWEEN:
            continue
        want = wanted(ctx, user, assigner.of)[list(user.operands).index(v)]
        if want is not None and not same_distribution(have, want, tuple(shape), ctx.num_warps):
            return want
        out = user.results[0]
        if depth > 1 and tuple(out.type.shape) == tuple(shape) and assigner.of(out) == have:
            further = _read_elsewhere(ctx, assigner, out, shape, depth - 1)
            if further is not None:
                return further
    return None


def _assigned(fn, ctx, broadcasts: dict) -> "_Assigner":
    assigner = _Assigner(ctx)
    assigner.broadcasts = broadcasts
    assigner.stored = {op.operands[0] for op in fn.walk() if op.name == "local_store"}
    for op in fn.walk():
        for v in op.operands:
            assigner.users.setdefault(v, []).append(op)
    assigner.note_fragment_reads(fn)
    for op in fn.walk():
        if op.name in MEMORY_OPS:
            assigner.anchor(op)
        elif op.name in ("dot", "warp_group_dot", "mma_dot"):
            assigner.anchor_dot(op)
        elif op.name == "local_load":
            assigner.anchor_local_load(op)
    assigner.note_accumulator_reads(fn)
    assigner.hint_slices(fn)
    for arg in fn.args:
        if isinstance(arg.type, block_type):
            assigner.set(arg, assigner.prefer_for(arg))
    assigner.block(fn.body)
    return assigner
