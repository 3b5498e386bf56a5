"""Lowering of Hopper's bulk tensor copies (TMA) and the mbarriers they complete on.

A host TensorDescriptor reaches the kernel as a 128-byte by-value parameter (its TMA map,
`nvvm.grid_constant`, so its generic address is `cvta.param` of the parameter, never a
local copy). Thread 0 initializes the barriers, announces each slot's bytes
(`mbarrier.arrive.expect_tx`) and issues the copies; every thread waits on the slot's
phase parity (`mbarrier.try_wait.parity`). A tile wider than one swizzle row (W bytes) is
copied as one box per W-byte column chunk, each chunk `O * W` bytes after the last: the
layout `wgmma.tile_offset` computes, which TMA's swizzle modes write when the tile starts
on a 1024-byte boundary (the XOR of address bits 4-6 with bits 7-9, for 128 bytes).
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import int64, tensormap

from .types import GENERIC_PTR, I32, I64
from .wgmma import _asm


def _shared_address(lw, v, byte_offset=0):
    """The 32-bit shared-memory address of buffer `v` plus `byte_offset`."""
    address = lw.b.ptrtoint(lw.scalar(v), I32)
    return lw.b.add(address, lw.i32(byte_offset)) if byte_offset else address


def _barriers(lw, op):
    """The shared addresses of every mbarrier in the buffer operand of `op`."""
    t = op.operands[0].type
    count = t.shape[0] if len(t.shape) == 3 else 1
    return [_shared_address(lw, op.operands[0], 8 * i) for i in range(count)]


def _thread0(lw, pred=None):
    """A context in which only the first thread of the threads running this code (thread 0,
    or a warp_specialize partition's first) runs, and only where `pred` holds."""
    first = lw.partition.first
    first = lw.b.icmp_unsigned("==", lw.tid, lw.i32(first) if isinstance(first, int) else first)
    return lw.if_then(first if pred is None else lw.b.and_(first, pred))


def _mbarrier_init(lw, op):
    with _thread0(lw):
        for bar in _barriers(lw, op):
            _asm(lw, "mbarrier.init.shared::cta.b64 [$0], $1;", args=[bar, lw.i32(op.attrs["count"])],
                 constraints="r,r")


def _mbarrier_inval(lw, op):
    with _thread0(lw):
        for bar in _barriers(lw, op):
            _asm(lw, "mbarrier.inval.shared::cta.b64 [$0];", args=[bar], constraints="r")


def _mbarrier_wait(lw, op):
    bar, parity = op.operands
    # braces scope the label, so every wait may use the same one
    text = ("{\n.reg .pred ready;\nwait_phase:\n"
            "mbarrier.try_wait.parity.shared::cta.b64 ready, [$0], $1;\n@!ready bra wait_phase;\n}")
    _asm(lw, text.replace("\n", "\n\t"), args=[_shared_address(lw, bar), lw.scalar(parity)], constraints="r,r")


def _mbarrier_arrive(lw, op):
    """The first thread of each warpgroup arrives (its wgmmas' waits are the warpgroup's: one
    arrival says the group's dots are done; every thread arriving cost FA3 speed). A predicated
    arrive, not a branch around one: a branch between a warpgroup's wgmmas is a divergent path
    to ptxas, which then serializes them (C7519)."""
    bar, pred = op.operands
    first = lw.b.icmp_unsigned("==", lw.b.and_(lw.tid, lw.i32(127)), lw.i32(0))
    _asm(lw, "{ .reg .pred p; setp.ne.b32 p, $1, 0; @p mbarrier.arrive.shared::cta.b64 _, [$0]; }",
         args=[_shared_address(lw, bar), lw.b.zext(lw.b.and_(lw.scalar(pred), first), I32)], constraints="r,r")


def _tma_expect(lw, op):
    bar, pred = op.operands
    with _thread0(lw, lw.scalar(pred)):
        _asm(lw, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
             args=[_shared_address(lw, bar), lw.i32(op.attrs["bytes"])], constraints="r,r")


def _tma_copy(lw, op):
    """One box per swizzle-wide column chunk (C inner elements) and, with `box_rows`, per that many
    rows; along a `wrap_dim`, each box starts at its index mod the extent (smem_plan.copy_box). A map
    of `lead_dims` more dims takes their coordinates after the tile's two, outermost last."""
    lead = op.attrs.get("lead_dims", 0)
    tmap, tile, bar, pred = op.operands[:4]
    lead_coords = [lw.scalar(c) for c in op.operands[4:4 + lead]]
    c0, c1, *extent = op.operands[4 + lead:]
    t = tile.type
    inner, outer = t.order
    C, O, W = t.tma_box()
    R = op.attrs.get("box_rows", O)
    wrap = op.attrs.get("wrap_dim")
    coords = {0: lw.scalar(c0), 1: lw.scalar(c1)}
    map_address = lw.b.ptrtoint(lw.scalar(tmap), I64)
    with _thread0(lw, lw.scalar(pred)):
        barrier = _shared_address(lw, bar)
        modulus = None
        if extent:  # at least 1: a remainder by 0 is undefined (an empty tensor's boxes read zeros anyway)
            e = lw.scalar(extent[0])
            modulus = lw.b.select(lw.b.icmp_unsigned(">", e, lw.i32(1)), e, lw.i32(1))

        def start(dim, base, step):
            at = lw.b.add(base, lw.i32(step)) if step else base
            return lw.b.urem(at, modulus) if dim == wrap and modulus is not None else at
        for j in range(t.shape[inner] // C):
            x = start(inner, coords[inner], j * C)
            for r in range(0, O, R):
                where = [x, start(outer, coords[outer], r), *reversed(lead_coords)]
                names = ", ".join(f"${2 + i}" for i in range(len(where)))
                _asm(lw, f"cp.async.bulk.tensor.{len(where)}d.shared::cluster.global.mbarrier::complete_tx::bytes "
                         f"[$0], [$1, {{{names}}}], [${2 + len(where)}];",
                     args=[_shared_address(lw, tile, j * O * W + r * W), map_address, *where, barrier],
                     constraints="r,l," + "r," * len(where) + "r")


# tensormap.replace's enumerations (PTX ISA): element types as the host encoder picks them
# (kiln.runtime.tensormap: fp16, bf16, fp32 by name, anything else as raw bytes of its width)
_ELEMTYPE = {"fp16": 6, "bf16": 10, "fp32": 7}
_RAW_ELEMTYPE = {1: 0, 2: 1, 4: 2, 8: 4}
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}


def _tensormap_create(lw, op):
    """The first warp of the threads running this code builds the map in 128 bytes of the scratch
    area (zeros, then each field by `tensormap.replace`), copies it to this CTA's slot of the global
    scratch releasing it to the tensormap proxy (`tensormap.cp_fenceproxy`, a whole warp's
    instruction), then acquires it there for its own later TMA copies. As Triton builds its maps:
    one bulk copy to global memory, and upstream's tests look for that instruction."""
    scratch, base, inner, outer, stride = op.operands
    inner_box, rows, swizzle = op.attrs["box"]
    elem = base.type.element_ty
    b = lw.b
    cta = b.add(lw.sreg("ctaid.x"), b.mul(lw.sreg("nctaid.x"),
                                          b.add(lw.sreg("ctaid.y"), b.mul(lw.sreg("nctaid.y"), lw.sreg("ctaid.z")))))
    slot = b.add(b.mul(b.zext(cta, I64), ir.Constant(I64, lw.map_slots[0])), ir.Constant(I64, lw.map_slots[1][op]))
    address = b.add(b.ptrtoint(lw.scalar(scratch), I64), b.mul(slot, ir.Constant(I64, tensormap.NBYTES)))
    rows_apart = lw.scalar(stride)
    rows_apart = rows_apart if stride.type == int64 else b.sext(rows_apart, I64)
    row_bytes = b.mul(rows_apart, ir.Constant(I64, elem.itemsize))
    # a map is 128-byte aligned: the 128 bytes of these 256 that start at a multiple of 128
    staged = b.and_(b.add(b.ptrtoint(lw.smem(2 * tensormap.NBYTES), I32), lw.i32(127)), lw.i32(-128))
    elemtype = _ELEMTYPE.get(elem.name, _RAW_ELEMTYPE.get(elem.itemsize))
    replace = "@%first tensormap.replace.tile.{}.shared::cta.b1024.{} [$0], {};"
    # one asm statement, its writes by the first lane under a predicate: no branch inside it, so no
    # path of lanes apart from the others reaches the warp-wide copy (`convergent` keeps LLVM from
    # duplicating it into such paths around it)
    text = "\n\t".join([
        "{", ".reg .pred %first;", "setp.eq.u32 %first, $5, 0;", "st.shared.b32 [$6], 0;", "bar.warp.sync -1;",
        replace.format("global_address", "b64", "$1"), replace.format("rank", "b32", 1),
        replace.format("box_dim", "b32", f"0, {inner_box}"), replace.format("box_dim", "b32", f"1, {rows}"),
        replace.format("global_dim", "b32", "0, $2"), replace.format("global_dim", "b32", "1, $3"),
        replace.format("global_stride", "b64", "0, $4"),
        replace.format("element_stride", "b32", "0, 1"), replace.format("element_stride", "b32", "1, 1"),
        replace.format("elemtype", "b32", elemtype), replace.format("interleave_layout", "b32", 0),
        replace.format("swizzle_mode", "b32", _SWIZZLE[swizzle]), replace.format("fill_mode", "b32", 0),
        "bar.warp.sync -1;",
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [$7], [$0], 128;",
        "fence.proxy.tensormap::generic.acquire.gpu [$7], 128;", "}"])
    first = lw.partition.first
    lane = b.sub(lw.tid, lw.i32(first) if isinstance(first, int) else first)
    args = [staged, b.ptrtoint(lw.scalar(base), I64), lw.scalar(inner), lw.scalar(outer), row_bytes, lane,
            b.add(staged, b.mul(lane, lw.i32(4))), address]
    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [a.type for a in args]), text, "r,l,r,r,l,r,r,l,~{memory}",
                       side_effect=True)
    with lw.if_then(b.icmp_unsigned("<", lane, lw.i32(32))):  # each lane zeroes 4 of the map's 128 bytes
        b.call(asm, args, attrs=("convergent",))
    lw.bind(op.results[0], [b.inttoptr(address, GENERIC_PTR)])


def _tma_store(lw, op):
    tmap, tile, c0, c1 = op.operands
    t = tile.type
    inner, outer = t.order
    C, O, W = t.tma_box()
    coords = {0: lw.scalar(c0), 1: lw.scalar(c1)}
    map_address = lw.b.ptrtoint(lw.scalar(tmap), I64)
    with _thread0(lw):
        for j in range(t.shape[inner] // C):
            x = lw.b.add(coords[inner], lw.i32(j * C)) if j else coords[inner]
            _asm(lw, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [$0, {$1, $2}], [$3];",
                 args=[map_address, x, coords[outer], _shared_address(lw, tile, j * O * W)], constraints="l,r,r,r")
        # the tile's bytes may be reused once read; the writes complete with the kernel
        _asm(lw, "cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group.read 0;")


def tensormap_param(param) -> None:
    """Make kernel parameter `param` a 128-byte by-value TMA map the kernel reads in place."""
    param.add_attribute("byval")
    param.attributes.align = 64
    set.add(param.attributes, '"nvvm.grid_constant"')  # NVVM's string; llvmlite checks names


class TensormapPointer(ir.PointerType):
    """`ptr` whose by-value pointee is the 128-byte map (llvmlite prints `byval(<pointee>)`)."""

    def __init__(self):
        super().__init__()

    @property
    def pointee(self):
        return ir.ArrayType(ir.IntType(8), 128)


def _descriptor_load(lw, op):
    """A descriptor load no TMA ring took is its fallback pointer load (the
    `descriptor_loads` pass removes them before lowering; this keeps IR lowered without
    that pass correct)."""
    fallback = op.operands[-1]
    lw.bind(op.results[0], lw.regs(fallback), lw.layout(fallback))


RULES = {
    "descriptor_load": _descriptor_load,
    "mbarrier_init": _mbarrier_init,
    "mbarrier_inval": _mbarrier_inval,
    "mbarrier_wait": _mbarrier_wait,
    "mbarrier_arrive": _mbarrier_arrive,
    "tma_expect": _tma_expect,
    "tma_copy": _tma_copy,
    "tensormap_create": _tensormap_create,
    "tma_store": _tma_store,
}
