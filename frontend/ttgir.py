"""`asm['ttgir']`: what kiln's passes made of a kernel for one GPU, written in Triton's TTGIR spelling.

Tools and tests written for Triton read `compiled.asm["ttgir"]` for facts about the GPU stage: the
target (`ttg.target = "cuda:90"`), how many reductions a loop kept (`"tt.reduce"`), which layout
conversions remain (`ttg.convert_layout`), whether a dot runs on Hopper's wgmma
(`ttng.warp_group_dot`), how many loops there are (`scf.for`). This is the binary's own GPU-stage
block IR (layouts, shared-memory rings, async copies, tensor-core dots), op for op, as `asm["ttir"]`
is the kernel's block IR (kiln.ttir, whose spelling of the other ops it shares):

    #blocked = #ttg.blocked<{sizePerThread = [1, 4], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>
    #shared = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = false, elementBitWidth = 16}>
    #smem = #ttg.shared_memory
    module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.shared = 32768 : i32, ...} {
      tt.func public @k(...) attributes {noinline = false} {
        %5 = tt.load %4 : tensor<32x128x!tt.ptr<f32>, #blocked>
        %6 = ttg.local_alloc {allocation.offset = 0 : i32} : () -> !ttg.memdesc<3x64x64xf16, #shared, #smem, mutable>

A block's layout is the Triton encoding of the same distribution: `#ttg.blocked`, `#ttg.slice`,
`#ttg.nvidia_mma` (version 3) for a wgmma accumulator, `#ttg.linear` (kiln's mma.sync accumulator is
the blocked layout kiln gives it); a shared buffer is a `!ttg.memdesc` of a `#ttg.nvmma_shared` tile
(swizzled) or a `#ttg.swizzled_shared` one. A `ttg.convert_layout` is where elements move between
threads, as in Triton's text: kiln's conversion of index math (addresses, masks), which lowering
recomputes in the new layout, is written as those ops again in it, and a shape op whose elements
change threads (a reshape or permute lowering exchanges through shared memory) as the op in a
layout that keeps them in place and the conversion. What differs from Triton's: the decisions are kiln's (its
layouts, conversions, stages), async copies carry no tokens (kiln orders them by commit groups alone:
`ttg.async_wait {num = 1 : i32}`), and kiln's ops with no TTGIR counterpart print in MLIR's generic
form under kiln's name (`"kiln.turn_wait"(%3) : (i1) -> ()`). A rendering for reading, never parsed.
"""
from __future__ import annotations

import re

from kiln.ir.core import Function, Operation
from kiln.ir.index_math import index_values
from kiln.ir.layout import Blocked, Linear, Slice, Wgmma, same_distribution
from kiln.ir.layout_check import reads_in
from kiln.ir.layout_moves import derived_layout, moves_no_data
from kiln.ir.types import ROW_XOR_32, block_type, shared_type

from .ttir import _attrs, _Renderer, ttir_type

__all__ = ["render_ttgir", "binary_ttgir"]


def _ints(values) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


class _Encodings:
    """The layouts and shared-memory encodings a text uses, each defined once under an MLIR alias
    (`#blocked`, `#blocked1`, ...) in the order the text first uses them."""

    def __init__(self):
        self.alias: dict[str, str] = {}  # definition -> alias
        self.counts: dict[str, int] = {}

    def named(self, kind: str, definition: str) -> str:
        if definition not in self.alias:
            n = self.counts.get(kind, 0)
            self.counts[kind] = n + 1
            self.alias[definition] = f"#{kind}{n if n else ''}"
        return self.alias[definition]

    def layout(self, layout) -> str:
        if isinstance(layout, Blocked):
            return self.named("blocked", f"#ttg.blocked<{{sizePerThread = {_ints(layout.size_per_thread)}, "
                                         f"threadsPerWarp = {_ints(layout.threads_per_warp)}, "
                                         f"warpsPerCTA = {_ints(layout.warps_per_cta)}, order = {_ints(layout.order)}}}>")
        if isinstance(layout, Slice):
            return f"#ttg.slice<{{dim = {layout.dim}, parent = {self.layout(layout.parent)}}}>"
        if isinstance(layout, Wgmma):  # (the accumulator does not say the instruction's K)
            return self.named("mma", f"#ttg.nvidia_mma<{{versionMajor = 3, versionMinor = 0, "
                                     f"warpsPerCTA = {_ints(layout.warps)}, instrShape = [16, {layout.instr_n}]}}>")
        if isinstance(layout, Linear):
            moves = lambda vs: "[" + ", ".join(_ints(v) for v in vs) + "]"  # noqa: E731
            return self.named("linear", f"#ttg.linear<{{register = {moves(layout.regs)}, lane = {moves(layout.lanes)}, "
                                        f"warp = {moves(layout.warps)}, block = []}}>")
        raise TypeError(f"no TTGIR encoding for layout {layout}")

    def shared(self, t: shared_type) -> str:
        if t.swizzle == ROW_XOR_32:
            definition = (f"#ttg.swizzled_shared<{{vec = {32 // t.element_ty.itemsize}, perPhase = 1, maxPhase = 4, "
                          f"order = {_ints(t.order)}}}>")
        elif t.swizzle:
            definition = (f"#ttg.nvmma_shared<{{swizzlingByteWidth = {t.swizzle}, "
                          f"transposed = {'true' if t.order == (0, 1) else 'false'}, "
                          f"elementBitWidth = {t.element_ty.primitive_bitwidth}}}>")
        else:
            definition = f"#ttg.swizzled_shared<{{vec = 1, perPhase = 1, maxPhase = 1, order = {_ints(t.order)}}}>"
        return self.named("shared", definition)

    def definitions(self) -> list[str]:
        lines = [f"{alias} = {definition}" for definition, alias in sorted(self.alias.items(), key=_alias_order)]
        if "shared" in self.counts:
            lines.append("#smem = #ttg.shared_memory")
        return lines


def _alias_order(item) -> tuple:
    """Aliases sorted as MLIR prints them: by name, `#blocked` before `#blocked1` before `#blocked10`."""
    alias = item[1]
    stem = alias.rstrip("0123456789")
    return stem, int(alias[len(stem):] or -1)


class _GpuRenderer(_Renderer):
    """kiln.ttir's renderer with layouts in the types and the GPU stage's ops in TTGIR's names."""

    def __init__(self, fn: Function, names, locs: bool, lines: list, encodings: _Encodings, num_warps: int):
        super().__init__(fn.args, names, locs, lines, {})
        self.encodings = encodings
        self.num_warps = num_warps
        self.index = index_values(fn)
        self.recomputed: dict = {}  # (value, layout, block) -> the name of the value recomputed in that layout

    def type(self, t) -> str:
        if isinstance(t, block_type) and t.encoding is not None:
            return ttir_type(t)[:-1] + ", " + self.encodings.layout(t.encoding) + ">"
        if isinstance(t, shared_type):
            dims = "x".join(str(d) for d in t.shape)
            return f"!ttg.memdesc<{dims}x{ttir_type(t.element_ty)}, {self.encodings.shared(t)}, #smem, mutable>"
        return ttir_type(t)

    def _plain(self, op, indent, name, text="", result=True):
        """`NAME <operands><text> : <operand types> [-> <result type>]`."""
        ins = ", ".join(self.type(v.type) for v in op.operands)
        outs = " -> " + self.type(op.results[0].type) if result and op.results else ""
        head = self.define(op) if op.results else ""
        types = f" : {ins}{outs}" if ins or outs else ""
        self.emit(indent, f"{head}{name}{(' ' + self.uses(op.operands)) if op.operands else ''}{text}{types}", op)

    def op_convert_layout(self, op, indent, parent):
        src = op.operands[0]
        if src in self.index:  # index math: lowering recomputes it in the new layout, as Triton's TTGIR has it
            self.names[id(op.results[0])] = self._recomputed(src, op.results[0].type.encoding, op, indent, parent)
            return
        self._plain(op, indent, "ttg.convert_layout")

    def _moved(self, op, indent, parent):
        """A shape op whose elements change threads (lowering exchanges them through shared memory): the op
        in a layout that keeps each element in its thread, and the conversion before or after it, as
        Triton's TTGIR has it."""
        handler = getattr(super(), "op_" + op.name)
        if len(op.results) != 1 or moves_no_data(op, self.num_warps):
            handler(op, indent, parent)
            return
        out, src = op.results[0], op.operands[0]
        kept = derived_layout(op, src.type.encoding, self.num_warps)
        if kept is not None:  # the op, then its result converted
            renamed = Operation(op.name, list(op.operands), [out.type.with_encoding(kept)], dict(op.attrs), loc=op.loc)
            handler(renamed, indent, parent)
            moved = Operation("convert_layout", renamed.results, [out.type], loc=op.loc)
            self._plain(moved, indent, "ttg.convert_layout")
            self.names[id(out)] = self.use(moved.results[0])
            return
        wanted = _source_layout(op, self.num_warps)
        if wanted is None or len(op.operands) != 1:
            handler(op, indent, parent)
            return
        moved = Operation("convert_layout", [src], [src.type.with_encoding(wanted)], loc=op.loc)  # its source converted
        self._plain(moved, indent, "ttg.convert_layout")
        again = Operation(op.name, moved.results, [out.type], dict(op.attrs), loc=op.loc)
        handler(again, indent, parent)
        self.names[id(out)] = self.use(again.results[0])

    op_reshape = op_permute = op_join = op_cat = _moved

    def _recomputed(self, v, layout, at, indent, parent) -> str:
        """The name of index-math value `v` in `layout`: its ops written again in that layout before `at`
        (once in `at`'s block), each reading its operands in the layouts it reads them in (kiln.ir.layout_check),
        as lowering recomputes them (kiln.codegen.lower.context)."""
        t = v.type
        if not isinstance(t, block_type) or layout is None \
                or same_distribution(t.encoding, layout, tuple(t.shape), self.num_warps):
            return self.use(v)
        key = (id(v), str(layout), id(at.parent))
        if key not in self.recomputed:
            op = v.defining_op
            if op.name == "convert_layout":
                self.recomputed[key] = self._recomputed(op.operands[0], layout, at, indent, parent)
                return self.recomputed[key]
            if op.name == "expand_dims" and isinstance(layout, Blocked):
                wants = [Slice(op.attrs["axis"], layout)]
            else:
                wants = reads_in(op, lambda x: layout if x is v else getattr(x.type, "encoding", None))
            operands = []
            for operand, want in zip(op.operands, wants):
                want = want if isinstance(operand.type, block_type) else None
                stand_in = Operation("constant", [], [operand.type if want is None else operand.type.with_encoding(want)])
                self.names[id(stand_in.results[0])] = self._recomputed(operand, want, at, indent, parent)
                operands.append(stand_in.results[0])
            again = Operation(op.name, operands, [t.with_encoding(layout)], dict(op.attrs), loc=op.loc)
            self.op(again, indent, parent)
            self.recomputed[key] = self.use(again.results[0])
        return self.recomputed[key]

    def op_local_alloc(self, op, indent, parent):
        offset = op.attrs.get("offset")
        attrs = f" {{allocation.offset = {offset} : i32}}" if offset is not None else ""
        self.emit(indent, f"{self.define(op)}ttg.local_alloc{attrs} : () -> {self.type(op.results[0].type)}", op)

    def op_local_index(self, op, indent, parent):
        ring, slot = op.operands
        self.emit(indent, f"{self.define(op)}ttg.memdesc_index {self.use(ring)}[{self.use(slot)}] : "
                          f"{self.type(ring.type)} -> {self.type(op.results[0].type)}", op)

    def op_local_trans(self, op, indent, parent):
        self._plain(op, indent, "ttg.memdesc_trans", " {order = array<i32: 1, 0>}")

    def op_local_load(self, op, indent, parent):
        self._plain(op, indent, "ttg.local_load")

    def op_local_store(self, op, indent, parent):
        value, tile = op.operands
        self.emit(indent, f"ttg.local_store {self.uses(op.operands)} : {self.type(value.type)} -> "
                          f"{self.type(tile.type)}", op)

    def op_async_copy(self, op, indent, parent):
        if len(op.operands) > 3:  # a prefix-run copy: its count has no TTGIR spelling
            self.generic(op, indent, "kiln.async_copy")
            return
        ptr, tile, *mask = op.operands
        text = f"{self.use(ptr)}, {self.use(tile)}" + (f" mask {self.use(mask[0])}" if mask else "")
        self.emit(indent, f"ttg.async_copy_global_to_local {text} : {self.type(ptr.type)} -> "
                          f"{self.type(tile.type)}", op)

    def op_async_commit(self, op, indent, parent):
        self.emit(indent, "ttg.async_commit_group", op)

    def op_async_wait(self, op, indent, parent):
        self.emit(indent, f"ttg.async_wait {{num = {op.attrs['pending']} : i32}}", op)

    def op_fence_async_shared(self, op, indent, parent):
        self.emit(indent, "ttng.fence_async_shared {bCluster = false}", op)

    def _tile_dot(self, op, indent, name, attrs):
        a, b, c = op.operands
        self.emit(indent, f"{self.define(op)}{name} {self.uses(op.operands)}{attrs} : {self.type(a.type)} * "
                          f"{self.type(b.type)} -> {self.type(c.type)}", op)

    def op_warp_group_dot(self, op, indent, parent):
        self._tile_dot(op, indent, "ttng.warp_group_dot", " {isAsync = true}")

    def op_mma_dot(self, op, indent, parent):
        self._tile_dot(op, indent, "tt.dot", "")

    def op_warp_group_dot_wait(self, op, indent, parent):
        types = ", ".join(self.type(v.type) for v in op.operands)
        self.emit(indent, f"{self.define(op)}ttng.warp_group_dot_wait {self.uses(op.operands)} "
                          f"{{pendings = {op.attrs['pending']} : i32}} : {types}", op)

    def op_mbarrier_init(self, op, indent, parent):
        bars = op.operands[0]
        self.emit(indent, f"ttng.init_barrier {self.use(bars)}, {op.attrs['count']} : {self.type(bars.type)}", op)

    def op_mbarrier_inval(self, op, indent, parent):
        self._plain(op, indent, "ttng.inval_barrier")

    def op_mbarrier_wait(self, op, indent, parent):
        bar, parity = op.operands
        self.emit(indent, f"ttng.wait_barrier {self.use(bar)}, {self.use(parity)} : {self.type(bar.type)}", op)

    def op_mbarrier_arrive(self, op, indent, parent):
        bar, pred = op.operands
        self.emit(indent, f"ttng.arrive_barrier {self.use(bar)}, 1, {self.use(pred)} : {self.type(bar.type)}", op)

    def op_tma_expect(self, op, indent, parent):
        bar, pred = op.operands
        self.emit(indent, f"ttng.barrier_expect {self.use(bar)}, {op.attrs['bytes']}, {self.use(pred)} : "
                          f"{self.type(bar.type)}", op)

    def op_tma_copy(self, op, indent, parent):
        lead = op.attrs.get("lead_dims", 0)
        desc, tile, bar, pred = op.operands[:4]
        coords = op.operands[4:6 + lead]
        extent = op.operands[6 + lead:]
        wrap = f" wrap {self.use(extent[0])}" if extent else ""  # a box whose rows wrap at the extent (`% M`)
        attrs = {f"kiln.{k}": v for k, v in op.attrs.items()}
        at = ", ".join(self.use(c) for c in coords)
        self.emit(indent, f"ttng.async_tma_copy_global_to_local {self.use(desc)}[{at}] "
                          f"{self.use(tile)}, {self.use(bar)}, {self.use(pred)}{wrap}{_attrs(attrs)} : "
                          f"{self.type(desc.type)}, {self.type(bar.type)} -> {self.type(tile.type)}", op)

    def op_tma_store(self, op, indent, parent):
        desc, tile, c0, c1 = op.operands
        self.emit(indent, f"ttng.async_tma_copy_local_to_global {self.use(desc)}[{self.use(c0)}, {self.use(c1)}] "
                          f"{self.use(tile)} : {self.type(desc.type)}, {self.type(tile.type)}", op)

    def op_warp_specialize(self, op, indent, parent):
        regs = op.attrs.get("regs")
        attrs = {"replicas": op.attrs.get("replicas", 1)}
        text = "ttg.warp_specialize() attributes {" + ", ".join(f"{k} = {v} : i32" for k, v in attrs.items())
        if regs:
            text += f", actualRegisters = array<i32: {', '.join(str(r) for r in regs)}>"
        self.emit(indent, text + "}")
        self.lines.append(indent + "default {")
        self.region(op.regions[0], indent, "ttg.warp_specialize", header=False)
        self.lines.append(indent + f"}} partition0() num_warps({op.attrs['warps']}) {{")
        self.region(op.regions[1], indent, "ttg.warp_specialize", header=False)
        self.emit(indent, "}", op)

    def op_yield(self, op, indent, parent):
        if parent == "ttg.warp_specialize":  # each partition ends in its own terminator
            self.emit(indent, "ttg.warp_yield", op)
            return
        super().op_yield(op, indent, parent)


def _source_layout(op, num_warps: int):
    """The layout of a reshape's or permute's operand from which the op keeps every element in its thread
    and gives its result's layout: the inverse op's derived layout (kiln.ir.layout_moves), or None."""
    out, src = op.results[0].type, op.operands[0].type
    if op.name == "reshape":
        attrs = {}
    elif op.name == "permute":
        order = list(op.attrs["order"])
        attrs = {"order": [order.index(d) for d in range(len(order))]}
    else:
        return None
    stand_in = Operation("constant", [], [out])
    inverse = Operation(op.name, stand_in.results, [block_type(src.element_ty, src.shape)], attrs)
    return derived_layout(inverse, out.encoding, num_warps)


def render_ttgir(fn: Function, target: str, num_warps: int, threads: int | None = None, shared: int = 0,
                 locs: bool = True) -> str:
    """GPU-stage block IR `fn` (a binary's `kir`) in Triton's TTGIR spelling (the module docstring
    says how it differs from Triton's), for `target` ("sm_90a") on `num_warps` warps (`threads`: all
    the CTA's threads where a warp-specialized kernel runs more) with `shared` bytes of shared memory."""
    capability = int(target[3:].rstrip("a"))
    total = (threads or 32 * num_warps) // 32
    encodings, body = _Encodings(), []
    names = [re.sub(r"\W", "_", name) for name in fn.arg_names]  # `launch_grid.0`: %launch_grid_0
    _GpuRenderer(fn, names, locs, body, encodings, num_warps).kernel(fn)
    attrs = (f'"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = {num_warps} : i32, ttg.shared = {shared} : i32, '
             f'ttg.target = "cuda:{capability}", "ttg.threads-per-warp" = 32 : i32, "ttg.total-num-warps" = {total} : i32')
    return "\n".join(encodings.definitions() + [f"module attributes {{{attrs}}} {{"] + body + ["}"]) + "\n"


def binary_ttgir(binary) -> str:
    """`asm["ttgir"]` of a compiled binary (kiln.codegen.artifact.CompiledKernel): its GPU-stage IR."""
    from kiln.ir import parse_function
    meta = binary.metadata
    return render_ttgir(parse_function(binary.kir), binary.target, meta.get("num_warps", 4), meta.get("threads"),
                        meta.get("shared", 0))

