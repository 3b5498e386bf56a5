"""`print` (vprintf, one line per element a thread holds), `assert` (__assertfail where
the condition is false), `assume` (llvm.assume), `barrier`, and grid dependency control (`gdc_wait`,
`gdc_launch_dependents`: PTX `griddepcontrol`, sm_90 and newer)."""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import block_type, scalar_of

from .context import LoweringError
from .types import F64, GENERIC_PTR, I8, I32, I64, VOID


def _cstring(lw, text: str, name: str):
    data = bytearray(text.encode()) + b"\0"
    ty = ir.ArrayType(I8, len(data))
    g = ir.GlobalVariable(lw.module, ty, lw.module.get_unique_name(name))
    g.global_constant = True
    g.linkage = "internal"
    g.initializer = ir.Constant(ty, data)
    return g


def _printable(lw, v, t):
    s = scalar_of(t)
    if s.is_ptr():
        return "%p", lw.b.ptrtoint(v, I64)
    if s.is_floating():
        return "%f", (lw.b.fpext(v, F64) if v.type != F64 else v)
    if s.primitive_bitwidth == 64:
        return ("%lld" if s.signed else "%llu"), v
    wide = lw.b.sext(v, I32) if s.signed and not s.is_bool() else lw.b.zext(v, I32) if v.type.width < 32 else v
    return ("%d" if s.signed and not s.is_bool() else "%u"), wide


def _print(lw, op):
    vprintf = lw.intrinsic("vprintf", I32, [GENERIC_PTR, GENERIC_PTR])
    prefix = op.attrs.get("prefix", "")
    pids = [lw.program_id(axis) for axis in range(3)]
    if not op.operands:
        items = [("", [])]
    else:
        items = []
        first = op.operands[0]
        layout = lw.layout(first)
        n = len(layout.offsets(first.type.shape)) if layout else 1
        idx = lw.indices(layout, first.type.shape) if layout else [()] * n
        for i in range(n):
            items.append((idx[i], [(lw.regs(v, layout)[i] if layout else lw.scalar(v), v.type) for v in op.operands]))
    for index, values in items:
        fmts, args = [], list(pids)
        for v, t in values:
            f, a = _printable(lw, v, t)
            fmts.append(f)
            args.append(a)
        idx_fmt = ""
        if index:
            idx_fmt = " idx (" + ", ".join(["%d"] * len(index)) + ")"
            args[3:3] = list(index)
        text = f"pid (%u, %u, %u){idx_fmt} {prefix}" + " ".join(fmts) + "\n"
        fmt = _cstring(lw, text, "kiln_fmt")
        struct = ir.LiteralStructType([a.type for a in args])
        buf = lw.entry.alloca(struct)
        buf.type = GENERIC_PTR  # opaque, so the GEPs below type-check
        for j, a in enumerate(args):
            lw.b.store(a, lw.b.gep(buf, [lw.i32(0), lw.i32(j)], source_etype=struct))
        lw.b.call(vprintf, [fmt, buf])


def _assert(lw, op):
    cond = op.operands[0]
    fail = lw.intrinsic("__assertfail", VOID, [GENERIC_PTR, GENERIC_PTR, I32, GENERIC_PTR, I64])
    loc = op.loc
    msg = _cstring(lw, op.attrs.get("message", "assertion failed"), "kiln_assert_msg")
    file = _cstring(lw, loc.file if loc else "<kiln>", "kiln_assert_file")
    func = _cstring(lw, lw.llfn.name, "kiln_assert_func")
    line = lw.i32(loc.line if loc else 0)
    regs = lw.regs(cond) if isinstance(cond.type, block_type) else [lw.scalar(cond)]
    failed = None
    for r in regs:
        bad = lw.b.not_(r)
        failed = bad if failed is None else lw.b.or_(failed, bad)
    with lw.b.if_then(failed, likely=False):
        lw.b.call(fail, [msg, file, line, func, ir.Constant(I64, 1)])


def _barrier(lw, op):
    lw.barrier()


def _assume(lw, op):
    """LLVM's `llvm.assume`: the optimizer may take the condition for true (ranges, signs, branches)."""
    cond = lw.scalar(op.operands[0])
    lw.b.call(lw.intrinsic("llvm.assume", VOID, [ir.IntType(1)]), [cond])


def _griddepcontrol(action: str):
    """`griddepcontrol.<action>;` as volatile asm that clobbers memory, so neither LLVM nor ptxas
    moves a load or store across it. Portable lowering (the CPU emulator) runs one grid at a
    time and leaves it out, as the interpreter does; before sm_90 it is an error, as in Triton
    (whose ptxas refuses the instruction there)."""
    def lower(lw, op):
        if lw.ctx.portable:
            return
        if lw.ctx.target.capability < 90:
            raise LoweringError(f"{op.name} (griddepcontrol.{action}) needs sm_90 or newer, not {lw.ctx.target.name}")
        lw.b.call(ir.InlineAsm(ir.FunctionType(VOID, []), f"griddepcontrol.{action};", "~{memory}",
                               side_effect=True), [])
    return lower


RULES = {"print": _print, "assert": _assert, "barrier": _barrier, "assume": _assume,
         "gdc_wait": _griddepcontrol("wait"), "gdc_launch_dependents": _griddepcontrol("launch_dependents")}
