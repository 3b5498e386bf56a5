"""The state of lowering one kernel: the LLVM function and builder, one value map from
block IR values to their registers, thread ids, index math for layouts and the
shared-memory scratch area.

Every value lowers to a list of LLVM scalars: one for a scalar (uniform over the CTA),
one per register for a block, in the order its layout's `offsets` gives. `regs(v, L)`
returns v's registers in layout L, converting through shared memory when v lives in
another layout (by warp shuffles where the conversion stays within warps).
"""
from __future__ import annotations

import re

import llvmlite.ir as ir

from kiln.ir.types import block_type

from kiln.ir import layout as lay
from ..analysis.partitions import replicated
from ..analysis.warp_shuffles import shuffle_plan
from .types import I8, I32, SHARED_PTR, VOID, reg_type
from .program_ids import longest_first
from .fragment_reuse import Fragments
from .tile_transpose import copies as transposed_copies
from .warp_gather import gather


class LoweringError(NotImplementedError):
    pass


NAMED_STRUCT_MIN = 16  # registers from which an asm statement's struct is a named type


class Lowering:
    def __init__(self, module: ir.Module, llfn: ir.Function, ctx):
        self.module, self.llfn, self.ctx = module, llfn, ctx  # ctx: options and the IR's facts (kiln.codegen.analysis)
        self.lines = None  # the kernel's line tables (kiln.codegen.lower.line_info), where it has them
        self.num_warps = ctx.num_warps
        self.values: dict = {}
        self.converted: dict = {}
        self.converting = False  # lowering a convert_layout (the only op that moves data between layouts)
        self.layouts: dict = _encodings(ctx.function) if ctx.function is not None else {}
        entry = llfn.append_basic_block("entry")
        body = llfn.append_basic_block("body")
        self.entry = ir.IRBuilder(entry)
        jump = self.entry.branch(body)
        self.entry.position_before(jump)
        self.b = ir.IRBuilder(body)
        self.tid = self.sreg("tid.x")
        self.lane = self.entry.and_(self.tid, ir.Constant(I32, 31), "lane")
        self.cta_warp = self.entry.lshr(self.tid, ir.Constant(I32, 5), "cta_warp")
        # the warp and thread within the kernel's num_warps: where replicas of a warp_specialize
        # region run the same code on warps num_warps.., each computes its layouts as warps 0..
        self.warp, self.thread = self.cta_warp, self.tid
        self.replicated = ctx.function is not None and replicated(ctx.function)
        # in a cluster launch a CTA's shared addresses carry its rank in bits 24-31 (kiln.codegen.passes.split_k)
        self.in_cluster = ctx.function is not None and ctx.function.attrs.get("split_k") == 1
        if self.replicated:
            self.warp = self.entry.and_(self.cta_warp, ir.Constant(I32, self.num_warps - 1), "warp")
            self.thread = self.entry.and_(self.tid, ir.Constant(I32, 32 * self.num_warps - 1), "thread")
        self._index_cache: dict = {}
        self.fragments = Fragments(ctx.function)  # mma_dot fragments of shared tiles, loaded once
        self._transposed_copies = None
        # the order the kernel's programs go out in (kiln.codegen.passes.launch_order), and the ids mapped by it
        self.launch_order = ctx.function.attrs.get("launch_order") if ctx.function is not None else None
        self._program_ids = None
        self._uniform_warp = None
        self.used = {v for op in ctx.function.walk() for v in op.operands} if ctx.function else set()
        self.smem_bytes = 0
        self._smem = None
        # Shared memory is one dynamic array: the first `reserved` bytes hold smem_alloc's buffers
        # and the staging buffers that dots in loops keep for themselves (the dot_staging pass),
        # the transient uses share what follows.
        self.reserved = 0
        self.staged_dots = False  # some dot has staging buffers of its own: the scratch area always follows them
        self.buffers_live = False  # a shared buffer (kiln.codegen.passes.smem_alloc) is live here
        self.scratch = ScratchUse(None)  # the op being lowered: its planned scratch bytes, what it used
        self.partition = Partition(0, 32 * self.num_warps, 0)  # the threads running the ops being lowered
        self.replica_scratch = 0  # bytes of scratch each replica of a warp_specialize region takes

    # --- values ---------------------------------------------------------------------
    def bind(self, v, regs, layout=None):
        if layout is not None:
            self.layouts[v] = layout
        self.values[v] = list(regs)

    def layout(self, v):
        return self.layouts.get(v) if isinstance(v.type, block_type) else None

    def regs(self, v, layout=None) -> list:
        """v's registers, in `layout` when given (converted through shared memory if needed)."""
        have = self.values[v]
        if layout is None or not isinstance(v.type, block_type) or self.layouts.get(v) == layout:
            return have
        if lay.same_distribution(self.layouts.get(v), layout, tuple(v.type.shape), self.num_warps):
            return have
        if not self.converting:
            raise LoweringError(f"{v.type} read in {layout}: the convert_layouts pass gave no convert_layout for it")
        key = (v, layout, self.b.block)  # a conversion made in one branch must not leak to another
        if key not in self.converted:
            plan = None if v in self.ctx.index else \
                shuffle_plan(self.layouts[v], layout, tuple(v.type.shape), self.num_warps)
            if plan is not None:  # within warps: shuffles, no shared memory (as scratch_barriers planned)
                self.converted[key] = gather(self, have, plan)
            elif v in self.ctx.index:
                self.converted[key] = self.rematerialize(v, layout)
            else:
                from .shared import convert
                self.converted[key] = convert(self, have, self.layouts[v], layout, v.type)
        return self.converted[key]

    def rematerialize(self, v, layout):
        """Recompute cheap index math `v` directly in `layout` (no shared memory)."""
        from . import LOWER
        op = v.defining_op
        saved = {r: (self.values.get(r), self.layouts.get(r)) for r in op.results}
        self.layouts[v] = layout
        if op.name == "expand_dims" and isinstance(layout, lay.Blocked):
            src = op.operands[0]
            self.values[v] = self.regs(src, lay.Slice(op.attrs["axis"], layout))
        else:
            LOWER[op.name](self, op)
        regs = self.values[v]
        for r, (vals, l) in saved.items():
            self.values[r], self.layouts[r] = vals, l
        return regs

    def scalar(self, v):
        return self.values[v][0]

    # --- intrinsics and helpers ------------------------------------------------------
    def intrinsic(self, name: str, ret, args) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, list(args)), name)
        return fn

    def registers_struct(self, types: list) -> ir.Type:
        """The struct of registers `types` an asm statement returns: named where it is long, since
        every extractvalue prints its operand's type (a tile's 128 accumulators as a literal struct,
        printed once per extractvalue, made 80% of a matmul's LLVM IR text, written, printed and
        parsed again on every compile)."""
        if len(types) < NAMED_STRUCT_MIN:
            return ir.LiteralStructType(types)
        runs = []  # [(type, count)]
        for t in types:
            if runs and runs[-1][0] == t:
                runs[-1][1] += 1
            else:
                runs.append([t, 1])
        name = "regs." + ".".join(f"{re.sub(r'[^0-9a-z]', '', str(t))}x{n}" for t, n in runs)
        named = self.module.context.get_identified_type(name)
        if named.is_opaque:
            named.set_body(*types)
        return named

    @property
    def transposed_copies(self) -> dict:
        """Tiles read back only to be stored transposed: {id(local_load): its local_store} (tile_transpose),
        found when the first tile op asks (most kernels have none)."""
        if self._transposed_copies is None:
            fn = self.ctx.function
            self._transposed_copies = transposed_copies(fn, self.num_warps) if fn is not None else {}
        return self._transposed_copies

    @property
    def uniform_warp(self):
        """`warp` as ptxas can tell it is the same in every lane (lane 0's, `shfl.sync.idx`): what
        is computed from it alone (wgmma's descriptors of a warpgroup's rows) stays in uniform
        registers. `tid.x >> 5` is not seen as warp-uniform: a loop-invariant descriptor made from
        it lived in vector registers, moved to uniform ones (R2UR) at every wgmma."""
        if self._uniform_warp is None:
            if self.ctx.portable:
                self._uniform_warp = self.warp
            else:
                shfl = self.intrinsic("llvm.nvvm.shfl.sync.idx.i32", I32, [I32, I32, I32, I32])
                self._uniform_warp = self.entry.call(shfl, [ir.Constant(I32, -1), self.warp, ir.Constant(I32, 0),
                                                            ir.Constant(I32, 31)], name="uniform_warp")
        return self._uniform_warp

    def sreg(self, name: str):
        fn = self.intrinsic(f"llvm.nvvm.read.ptx.sreg.{name}", I32, [])
        return self.entry.call(fn, [])

    def program_id(self, axis: int):
        """The program id along `axis` this CTA plays: its block id, or where the kernel's programs go
        out by work (kiln.codegen.passes.launch_order) the id its place in that order maps to,
        computed once at the kernel's entry."""
        if not self.launch_order:
            return self.sreg("ctaid." + "xyz"[axis])
        if self._program_ids is None:
            self._program_ids = longest_first(self.entry, [self.sreg("ctaid." + a) for a in "xyz"],
                                              [self.sreg("nctaid." + a) for a in "xyz"], *self.launch_order)
        return self._program_ids[axis]

    def const(self, t, value):
        return ir.Constant(reg_type(t) if not isinstance(t, ir.Type) else t, value)

    def i32(self, v: int):
        return ir.Constant(I32, v)

    def barrier(self, builder=None):
        """A barrier of the threads running this code: the CTA's, or a warp_specialize partition's
        (a named barrier of its own, which the other partition's warps never reach)."""
        b = builder or self.b
        bar_id = self.partition.barrier_id
        if isinstance(bar_id, int) and bar_id == 0:
            b.call(self.intrinsic("llvm.nvvm.barrier0", VOID, []), [])
            return
        if isinstance(bar_id, int):
            bar_id = self.i32(bar_id)
        sync = ir.InlineAsm(ir.FunctionType(VOID, [I32]), f"bar.sync $0, {self.partition.threads};", "r,~{memory}",
                            side_effect=True)
        b.call(sync, [bar_id])

    # --- layout index math --------------------------------------------------------------
    def indices(self, layout, shape) -> list[tuple]:
        """Per register of `layout` over `shape`, its logical index (i32 values) per dim."""
        key = (layout, tuple(shape))
        got = self._index_cache.get(key)
        if got is None:
            bases = [self._base(layout, shape, d) for d in range(len(shape))]
            got = [tuple(self._add_const(bases[d], off[d]) for d in range(len(shape)))
                   for off in layout.offsets(shape)]
            self._index_cache[key] = got
        return got

    def _add_const(self, base, off):
        """An index within its dim: non-negative and below 2**31, so the add wraps neither
        way (`elementwise.widen` relies on that to cast it to i64 as `ext(base) + off`)."""
        if isinstance(base, ir.Constant):
            return ir.Constant(I32, base.constant + off)
        if not off:
            return base
        # a negative offset (an arange from a negative start) may not keep the sum >= 0
        return self.entry.add(base, self.i32(off), flags=["nsw", "nuw"] if off > 0 else [])

    def id_along(self, axis: lay.Axis, ident, builder=None):
        """Which of the `axis.count` ids along a dim this lane (or warp) is."""
        b = builder or self.entry
        if axis.count == 1:
            return self.i32(0)
        v = b.udiv(ident, self.i32(axis.stride)) if axis.stride > 1 else ident
        return b.urem(v, self.i32(axis.count))

    def _base(self, layout, shape, d):
        lane_axis, lane_scale, warp_axis, warp_scale, wraps = layout.base_terms(shape, d)
        b = self.entry
        terms = []
        if lane_axis.count > 1:
            terms.append(b.mul(self.id_along(lane_axis, self.lane), self.i32(lane_scale)))
        if warp_axis.count > 1:
            terms.append(b.mul(self.id_along(warp_axis, self.warp), self.i32(warp_scale)))
        if not terms:
            return self.i32(0)
        base = terms[0] if len(terms) == 1 else b.add(terms[0], terms[1])
        return b.and_(base, self.i32(shape[d] - 1)) if wraps else base

    def owner_mask(self, layout, shape):
        """i1 true on exactly one of the threads that hold each element (None: all own)."""
        conds = []
        ranks = range(len(shape))
        for d in ranks:
            lane_axis, _, warp_axis, _, _ = layout.base_terms(shape, d)
            for axis, ident in ((lane_axis, self.lane), (warp_axis, self.warp)):
                if axis.distinct < axis.count:
                    conds.append(self.entry.icmp_unsigned("<", self.id_along(axis, ident), self.i32(axis.distinct)))
        for sl in _slices(layout):
            parent_shape = sl.parent_shape(shape)
            lane_axis, _, warp_axis, _, _ = sl.parent.base_terms(parent_shape, sl.dim)
            for axis, ident in ((lane_axis, self.lane), (warp_axis, self.warp)):
                if axis.count > 1:
                    conds.append(self.entry.icmp_unsigned("==", self.id_along(axis, ident), self.i32(0)))
            shape = parent_shape
        if not conds:
            return None
        out = conds[0]
        for c in conds[1:]:
            out = self.entry.and_(out, c)
        return out

    # --- shared memory -------------------------------------------------------------
    def smem_array(self):
        """The kernel's dynamic shared memory (byte 0)."""
        if self._smem is None:
            g = ir.GlobalVariable(self.module, ir.ArrayType(I8, 0), "kiln_smem", addrspace=3)
            g.linkage = "external"
            g.align = 16
            g.type = SHARED_PTR  # opaque, so GEPs on it take any element type
            self._smem = g
        return self._smem

    def smem(self, nbytes: int):
        """`nbytes` of the scratch area (a shared pointer): the bytes the scratch_barriers pass
        planned for the op being lowered, or else the area's start after a barrier."""
        g = self.smem_array()
        # where no shared buffer or dot staging buffer is live, the scratch may use their bytes
        start = self.reserved if self.buffers_live or self.staged_dots else 0
        if self.scratch.take(nbytes):
            start += self.scratch.plan[0]
        else:
            self.barrier()
        replica = self.partition.replica
        if replica is None:
            self.smem_bytes = max(self.smem_bytes, start + (nbytes + 15) // 16 * 16)
            return self.b.gep(g, [self.i32(start)], source_etype=I8) if start else g
        # replicas run their epilogues at once: each has the scratch area's bytes of its own
        # (the rings, allocated before the split, are live throughout: the area starts after them)
        own = self.replica_scratch
        if start < self.reserved or start - self.reserved + nbytes > own:
            raise LoweringError(f"a scratch use of {nbytes} bytes past the {own} each warp_specialize replica has")
        self.smem_bytes = max(self.smem_bytes, self.reserved + self.partition.replicas * own)
        return self.b.gep(g, [self.b.add(self.i32(start), self.b.mul(replica, self.i32(own)))], source_etype=I8)

    def smem_ptr(self, base, elem_ty, index, byte_offset=0):
        p = base
        if byte_offset:
            p = self.b.gep(p, [self.i32(byte_offset)], source_etype=I8)
        return self.b.gep(p, [index], source_etype=elem_ty)

    def flat_index(self, idx, shape, b=None):
        """Row-major flat index of a logical index tuple."""
        b = b or self.b
        out, stride = None, 1
        for d in reversed(range(len(shape))):
            term = idx[d] if stride == 1 else b.mul(idx[d], self.i32(stride))
            out = term if out is None else b.add(out, term)
            stride *= shape[d]
        return out if out is not None else self.i32(0)

    # --- control flow helper ---------------------------------------------------------
    def if_then(self, cond):
        """Context manager: emit the body only where `cond` (i1) holds."""
        return self.b.if_then(cond)

    def region_values(self, block, args):
        """Lower a region's ops with `args` bound to its arguments; its terminator's operands' registers."""
        from . import lower_block
        for a, regs in zip(block.args, args):
            self.bind(a, regs)
        lower_block(self, block)
        return block.ops[-1]


def _encodings(fn) -> dict:
    """Each block value's layout, as its type spells it (the convert_layouts pass wrote them)."""
    out = {}
    for op in fn.walk():
        for v in op.defined_values():
            if isinstance(v.type, block_type) and v.type.encoding is not None:
                out[v] = v.type.encoding
    return out


def _slices(layout):
    while isinstance(layout, lay.Slice):
        yield layout
        layout = layout.parent


class Partition:
    """The threads that run the ops being lowered: `threads` from thread `first` on, synced by
    named barrier `barrier_id` (0: the whole CTA's); in a replica of a warp_specialize region,
    `replica` is its index (an LLVM value; `first` and `barrier_id` then are too) of `replicas`."""
    __slots__ = ("first", "threads", "barrier_id", "replica", "replicas")

    def __init__(self, first, threads: int, barrier_id, replica=None, replicas: int = 1):
        self.first, self.threads, self.barrier_id = first, threads, barrier_id
        self.replica, self.replicas = replica, replicas


class ScratchUse:
    """One op's use of the scratch area against its plan (`scratch = [offset, bytes]`,
    kiln.codegen.passes.scratch_barriers), which let the op before it skip its barrier."""

    def __init__(self, plan):
        self.plan = plan if _valid_plan(plan) else None
        self.used = self.kept = False
        self.broken = False

    def take(self, nbytes: int) -> bool:
        """Whether this use may have the planned bytes (no barrier before it): the op's first
        use, no bigger than planned."""
        first, self.used = not self.used, True
        if self.plan is not None and first and nbytes <= self.plan[1]:
            self.kept = True
            return True
        self.broken = self.plan is not None
        return False

    def needs_barrier_after(self, taken_for_none) -> bool:
        """A plan not kept (no use, or another) or an op the pass takes for one touching no
        shared memory (`taken_for_none()`) that used it: the ops after it were planned on a
        barrier here."""
        if self.plan is not None:
            return self.broken or not self.kept
        return self.used and taken_for_none()


def _valid_plan(plan) -> bool:
    return (isinstance(plan, list) and len(plan) == 2 and all(type(x) is int and x >= 0 for x in plan)
            and plan[0] % 16 == 0)
