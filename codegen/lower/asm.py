"""`inline_asm`: user PTX applied elementwise (Triton's `inline_asm_elementwise`).

Each call handles `pack` elements of every operand: narrower than 32 bits they travel
packed in 32-bit registers (four int8 in one `r`), wider ones as `pack` operands; the
results come back the same way. `volatile` asm keeps its side effects.
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import block_type, scalar_of

from .context import LoweringError
from .types import I32, reg_type


def _bits(t) -> int:
    s = scalar_of(t)
    return 1 if s.is_bool() else s.primitive_bitwidth


def _slots(t, pack):
    """(LLVM type of one asm operand, how many of them) for `pack` elements of `t`."""
    bits = _bits(t)
    if pack == 1:
        return reg_type(t), 1
    if bits < 32 and bits * pack % 32 == 0:
        return I32, bits * pack // 32
    if bits < 32:
        return ir.IntType(bits * pack), 1
    return reg_type(t), pack


def _to_slots(lw, values, t, pack):
    ty, n = _slots(t, pack)
    if pack == 1 or _bits(t) >= 32:
        return list(values)
    vec = ir.Constant(ir.VectorType(reg_type(t), pack), ir.Undefined)
    for i, v in enumerate(values):
        vec = lw.b.insert_element(vec, v, lw.i32(i))
    if n == 1:
        return [lw.b.bitcast(vec, ty)]
    words = lw.b.bitcast(vec, ir.VectorType(ty, n))
    return [lw.b.extract_element(words, lw.i32(i)) for i in range(n)]


def _from_slots(lw, slots, t, pack):
    if pack == 1 or _bits(t) >= 32:
        return list(slots)
    ty, n = _slots(t, pack)
    if n == 1:
        vec = lw.b.bitcast(slots[0], ir.VectorType(reg_type(t), pack))
    else:
        words = ir.Constant(ir.VectorType(ty, n), ir.Undefined)
        for i, w in enumerate(slots):
            words = lw.b.insert_element(words, w, lw.i32(i))
        vec = lw.b.bitcast(words, ir.VectorType(reg_type(t), pack))
    return [lw.b.extract_element(vec, lw.i32(i)) for i in range(pack)]


def _inline_asm(lw, op):
    pack = op.attrs["pack"]
    results = op.results
    layout = lw.layout(results[0]) if isinstance(results[0].type, block_type) else None
    operands = [lw.regs(v, layout) if layout else [lw.scalar(v)] for v in op.operands]
    count = len(layout.offsets(results[0].type.shape)) if layout else 1
    if count % pack:
        raise LoweringError(f"inline_asm: pack {pack} does not divide the {count} elements a thread holds")
    out_slots = [_slots(r.type, pack) for r in results]
    ret_types = [ty for ty, n in out_slots for _ in range(n)]
    in_types = [ty for v in op.operands for ty in [_slots(v.type, pack)[0]] * _slots(v.type, pack)[1]]
    ret = ret_types[0] if len(ret_types) == 1 else ir.LiteralStructType(ret_types)
    asm = ir.InlineAsm(ir.FunctionType(ret, in_types), op.attrs["asm"], op.attrs["constraints"],
                       side_effect=bool(op.attrs.get("volatile")))
    outs = [[] for _ in results]
    for g in range(0, count, pack):
        args = []
        for v, regs in zip(op.operands, operands):
            args += _to_slots(lw, regs[g:g + pack], v.type, pack)
        got = lw.b.call(asm, args)
        flat = [got] if len(ret_types) == 1 else [lw.b.extract_value(got, i) for i in range(len(ret_types))]
        k = 0
        for j, (r, (ty, n)) in enumerate(zip(results, out_slots)):
            outs[j] += _from_slots(lw, flat[k:k + n], r.type, pack)
            k += n
    for r, regs in zip(results, outs):
        lw.bind(r, regs, layout)


RULES = {"inline_asm": _inline_asm}
