"""Lowering block IR to LLVM IR: one table from op name to the function that lowers it.

The rules live next to what they lower (elementwise, shape, memory, control, reduce,
dot, debug); `LOWER` merges them, and a missing op is a clear `LoweringError`.
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import scalar_of, tensormap

from ..backend import DATA_LAYOUT, TRIPLE
from . import asm, cluster, control, debug, dot, elementwise, memory, reduce, shape, tma, wgmma
from .context import Lowering, LoweringError, ScratchUse
from .line_info import LineInfo
from ..analysis import Analysis
from ..analysis.dots import staging_end
from ..analysis.partitions import cta_warps
from ..analysis.scratch_use import scratch_extent, touches_no_shared
from ..analysis.shared_buffers import reserved_bytes
from .types import I8, reg_type

LOWER: dict = {}
for _module in (elementwise, shape, memory, control, reduce, dot, debug, asm, wgmma, tma, cluster):
    LOWER.update(_module.RULES)

_TERMINATORS = ("yield", "condition", "return")


def lower_block(lw: Lowering, block) -> None:
    with lw.fragments.region(block):
        _lower_ops(lw, block)


def _lower_ops(lw: Lowering, block) -> None:
    for op in block.ops:
        if op.name in _TERMINATORS:
            continue
        rule = LOWER.get(op.name)
        where = f" (at {op.loc})" if op.loc else ""
        if rule is None:
            raise LoweringError(f"kiln cannot lower '{op.name}' to LLVM IR yet{where}")
        lw.buffers_live = lw.ctx.buffers_live(op)
        if lw.lines is not None:  # what this op emits carries its source line
            lw.b.debug_metadata = lw.lines.location(op.loc)
        outer, lw.scratch = lw.scratch, ScratchUse(op.attrs.get("scratch"))
        try:
            rule(lw, op)
        except LoweringError as e:
            if where and where not in str(e):
                raise LoweringError(f"{e}{where}") from None
            raise
        finally:
            use, lw.scratch = lw.scratch, outer
        if use.needs_barrier_after(lambda: touches_no_shared(op, lw.ctx)):
            lw.barrier()


def param_type(t) -> ir.Type:
    """How a kernel argument is passed: pointers as `ptr addrspace(1)`, bools as i8, a TMA
    map by value (`ptr byval([128 x i8])`)."""
    if t == tensormap:
        return tma.TensormapPointer()
    return I8 if scalar_of(t).is_bool() else reg_type(t)


def lower_function(fn, ctx) -> tuple[str, list[dict], int]:
    """LLVM IR text of the kernel, its argument layout and the dynamic shared bytes it needs.

    What runs each dot and where it stages its operands is the dot_staging pass's (its attrs).
    """
    # The options, and what the passes decided from read from the IR as they read it (contiguity,
    # index math, live buffers): lowering takes nothing else from them, so a function dumped after
    # the passes lowers as its compile lowered it.
    ctx = Analysis(fn, ctx)
    module = ir.Module(name=fn.name, context=ir.Context())  # its named types its own (Lowering.registers_struct)
    module.triple, module.data_layout = TRIPLE, DATA_LAYOUT
    # libdevice's flush-to-zero paths, as Triton asks for them (its enable_reflect_ftz, on by
    # default): NVVMReflect answers __nvvm_reflect("__CUDA_FTZ") with 1
    if ctx.reflect_ftz:
        module.add_named_metadata("llvm.module.flags", [ir.Constant(ir.IntType(32), 4), "nvvm-reflect-ftz",
                                                        ir.Constant(ir.IntType(32), 1)])
    params = [param_type(a.type) for a in fn.args]
    llfn = ir.Function(module, ir.FunctionType(ir.VoidType(), params), fn.name)
    llfn.calling_convention = "ptx_kernel"
    # llvmlite checks attribute names against its own list; these are NVVM's strings.
    threads = 32 * cta_warps(fn, ctx.num_warps)
    set.add(llfn.attributes, f'"nvvm.maxntid"="{threads}"')
    maxnreg = ctx.maxnreg
    if threads > 32 * ctx.num_warps:  # setmaxnreg moves registers only under a cap at entry: the CTA's share
        maxnreg = min(maxnreg or 248, 65536 // threads // 8 * 8)  # a multiple of 8, or ptxas ignores setmaxnreg
    if maxnreg is not None:
        set.add(llfn.attributes, f'"nvvm.maxnreg"="{maxnreg}"')
    lw = Lowering(module, llfn, ctx)
    if ctx.line_info and not ctx.portable:
        lw.lines = LineInfo(module, llfn, fn.name, next((op.loc for op in fn.walk() if op.loc is not None), None))
        lw.b.debug_metadata = lw.entry.debug_metadata = lw.lines.entry
    lw.reserved = reserved_bytes(fn)  # the buffers smem_alloc placed, from a base declared aligned (wgmma.shared_base)
    if lw.replicated:  # each replica of a warp_specialize region has a scratch area of its own
        lw.replica_scratch = scratch_extent(fn)
    staged = staging_end(fn)
    if staged:  # dots' staging buffers of their own (the dot_staging pass), after those
        lw.reserved, lw.staged_dots = staged, True
    for arg, param, name in zip(fn.args, llfn.args, fn.arg_names):
        param.name = name
        if arg.type == tensormap and not ctx.portable:  # (the CPU emulator's build reads no map: a pointer)
            tma.tensormap_param(param)
        value = lw.b.icmp_unsigned("!=", param, ir.Constant(I8, 0)) if scalar_of(arg.type).is_bool() else param
        lw.bind(arg, [value])
    created = [op for op in fn.walk() if op.name == "tensormap_create"]
    lw.map_slots = (len(created), {op: i for i, op in enumerate(created)})  # (maps per CTA, each one's slot)
    lower_block(lw, fn.body)
    lw.b.ret_void()
    arg_layout = [{"name": n, "type": str(a.type), "llvm_type": str(p)}
                  for n, a, p in zip(fn.arg_names, fn.args, params)]
    for layout, attrs in zip(arg_layout, fn.arg_attrs):  # a map the launcher derives from other arguments
        if "tma_box" in attrs:  # the box the launcher encodes the map with (smem_pipeline, tma_store)
            inner, rows, swizzle = attrs["tma_box"]
            layout["tma_box"] = f"{inner}x{rows}:swizzle{swizzle}"
        if "tma_of" in attrs:
            layout["tma_of"] = ",".join(str(i) for i in attrs["tma_of"])
        if "global_scratch" in attrs:  # bytes of global scratch per CTA: its maps (tensormap_create)
            layout["global_scratch"] = str(tensormap.NBYTES * len(created))
        if "launch_grid" in attrs:  # the launch grid's size along an axis (kiln.codegen.passes.persistent)
            layout["launch_grid"] = str(attrs["launch_grid"])
        if "split_k" in attrs:  # the CTAs of each program's cluster (kiln.codegen.passes.split_k)
            layout["split_k"] = "1"
        if "tma_stride" in attrs:  # a row stride of a map the kernel makes: launched only where positive
            layout["tma_stride"] = "1"
    return str(module), arg_layout, max(lw.smem_bytes, lw.reserved)


__all__ = ["LOWER", "LoweringError", "lower_block", "lower_function"]
