"""Elementwise ops, casts, comparisons, constants and math.

Each rule maps one element (LLVM scalars) to one element; `elementwise` applies it to
every register of the result's layout. Math follows Triton 3.6's PTX for sm_90 instruction for
instruction: fp32 `exp` is `ex2.approx` of x*log2(e), `exp2` `ex2.approx.ftz`, `sqrt` and `rsqrt`
the approximate roots with flush-to-zero (libdevice's `__nv_sqrtf` / `__nv_rsqrtf` as Triton's
reflect settings resolve them; `sqrt_rn` is the IEEE root), everything else libdevice (`__nv_logf`,
`__nv_sinf`, ...) on its flush-to-zero paths (the module's nvvm-reflect-ftz); with Triton's
enable_reflect_ftz=0 none of them flushes. fp16/bf16 math runs in fp32. `llvm.exp`/`llvm.log`/
`llvm.sin` abort NVPTX instruction selection, so they are never emitted.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from kiln.ir.types import block_type, scalar_of

from kiln.ir import layout as lay

from . import fp8
from .types import F32, F64, I64, reg_type

LOG2E = 1.4426950408889634


def elementwise(per_element):
    def rule(lw, op):
        out = op.results[0]
        layout = lw.layout(out)
        operands = [lw.regs(v, layout) for v in op.operands]
        first = equal_registers(lw, out, layout)
        regs = []
        for i, xs in enumerate(zip(*operands)):
            regs.append(regs[first[i]] if first is not None and first[i] != i else per_element(lw, op, *xs))
        lw.bind(out, regs, layout)
    return rule


def equal_registers(lw, v, layout):
    """Per register of block value `v` in `layout`, the first register of this thread that
    axis info says holds the same element value (None where none is shared). A mask
    `cols < N` with N divisible by 8 is one predicate per 8 elements, not 8 compares (as
    the load it feeds already assumes): layer norm's `tl.where(cols < N, x - mean, 0.)`
    then selects on the load's predicate."""
    axis = getattr(lw.ctx, "axis", None)
    if axis is None or not isinstance(layout, lay.Blocked) or not isinstance(v.type, block_type):
        return None
    shape = tuple(v.type.shape)
    # A thread's base index along each dim is a multiple of its size_per_thread (clipped to
    # the shape), and constancy is over aligned groups: registers whose offsets fall in the
    # same aligned group of g (g dividing both) hold equal values.
    groups = [math.gcd(c, min(spt, n)) for c, spt, n in zip(axis.get(v).constancy, layout.size_per_thread, shape)]
    if all(g == 1 for g in groups):
        return None
    seen = {}
    return [seen.setdefault(tuple(o // g for o, g in zip(off, groups)), i) for i, off in enumerate(layout.offsets(shape))]


def _s(op, i=0):
    return scalar_of(op.operands[i].type)


def _signed(t) -> bool:
    return t.is_int() and t.signed and not t.is_bool()


def _float_call(lw, name, t, *args):
    ty = args[0].type
    fn = lw.intrinsic(name, ty, [a.type for a in args])
    return lw.b.call(fn, list(args))


def _via_f32(lw, op, x_args, f32_fn):
    """Run an fp32 computation for fp16/bf16 operands and round back."""
    s = _s(op)
    if s.name in ("fp32", "fp64"):
        return f32_fn(*x_args)
    wide = [lw.b.fpext(x, F32) for x in x_args]
    return lw.b.fptrunc(f32_fn(*wide), reg_type(s))


def _libdevice(name32, name64):
    def fn(lw, op, *xs):
        s = _s(op)
        if s.name == "fp64":
            return _float_call(lw, name64, s, *xs)
        return _via_f32(lw, op, xs, lambda *w: _float_call(lw, name32, s, *w))
    return fn


def _approx(intrinsic, scale_in=None, f64=None, ftz=False):
    """fp32 through the approximate PTX instruction `intrinsic`; `ftz`: its flush-to-zero form when the
    compile flushes as libdevice does (enable_reflect_ftz), as Triton's libdevice calls resolve."""
    def fn(lw, op, x):
        s = _s(op)
        if s.name == "fp64":
            return _float_call(lw, f64, s, x)

        flags = ("contract",) if lw.ctx.fp_fusion else ()  # as every fp32 multiply (_arith)
        name = intrinsic.replace(".approx.", ".approx.ftz.") if ftz and lw.ctx.reflect_ftz else intrinsic

        def f32(v):
            if scale_in is not None:
                v = lw.b.fmul(v, ir.Constant(F32, scale_in), flags=flags)
            return lw.b.call(lw.intrinsic(name, F32, [F32]), [v])
        return _via_f32(lw, op, [x], f32)
    return fn


def _llvm_float(name):
    def fn(lw, op, *xs):
        suffix = {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64"}[_s(op).name]
        if suffix in ("bf16",):
            return _via_f32(lw, op, xs, lambda *w: _float_call(lw, f"llvm.{name}.f32", F32, *w))
        return _float_call(lw, f"llvm.{name}.{suffix}", _s(op), *xs)
    return fn


def _arith(int_op, float_op, uint_op=None):
    # fadd/fsub/fmul may fuse into fma (Triton's enable_fp_fusion, on by default); LLVM
    # fuses only pairs that both carry `contract`.
    contractible = float_op in ("fadd", "fsub", "fmul")

    def fn(lw, op, a, b):
        s = _s(op)
        if s.is_floating():
            flags = ("contract",) if contractible and lw.ctx.fp_fusion else ()
            return getattr(lw.b, float_op)(a, b, flags=flags)
        if uint_op and not _signed(s):
            return getattr(lw.b, uint_op)(a, b)
        if int_op == "add":
            return _add_index_last(lw.b, a, b)
        return getattr(lw.b, int_op)(a, b)
    return fn


def _index_plus_constant(x):
    """(base, c) where `x` is a layout index `base + c` (an `nsw nuw` add of a constant)."""
    if (isinstance(x, ir.Instruction) and x.opname == "add" and {"nsw", "nuw"} <= set(x.flags)
            and isinstance(x.operands[1], ir.Constant)):
        return x.operands
    return None


def _add_index_last(b, x, y):
    """x + y with a layout index's constant added last: `(y + base) + c` (exact: adds wrap
    alike in any order). Each register then shares `y + base` and the constant folds
    into an address immediate, instead of every `base + c` staying alive on its own
    (a tensor descriptor's 8 row indices per thread, across a whole loop)."""
    for u, v in ((x, y), (y, x)):
        parts = _index_plus_constant(u)
        if parts is not None and _index_plus_constant(v) is None:
            base, c = parts
            return b.add(b.add(v, base), c)
    return b.add(x, y)


def _minmax(kind):
    def fn(lw, op, a, b):
        s = _s(op)
        if s.is_floating():
            if op.attrs.get("propagate_nan"):  # NaN in, NaN out (PTX min.NaN / max.NaN)
                return _llvm_float("minimum" if kind == "<" else "maximum")(lw, op, a, b)
            return _llvm_float("minnum" if kind == "<" else "maxnum")(lw, op, a, b)
        cmp = lw.b.icmp_signed if _signed(s) else lw.b.icmp_unsigned
        return lw.b.select(cmp(kind, a, b), a, b)
    return fn


def _div(lw, op, a, b):
    """fp32 `/` is PTX `div.full.f32` (2 ulp, no slow path) as in Triton; `div_rn` and
    fp64 are IEEE division."""
    s = _s(op)
    if s.is_int():
        return lw.b.sdiv(a, b) if _signed(s) else lw.b.udiv(a, b)
    if s.name != "fp32" or lw.ctx.portable:
        return lw.b.fdiv(a, b)
    asm = ir.InlineAsm(ir.FunctionType(F32, [F32, F32]), "div.full.f32 $0, $1, $2;", "=f,f,f")
    return lw.b.call(asm, [a, b])


def _shr(lw, op, a, b):
    return lw.b.ashr(a, b) if _signed(_s(op)) else lw.b.lshr(a, b)


def _umulhi(lw, op, a, b):
    """The high half of the full product; signed types multiply signed (Triton's mulhi)."""
    bits = a.type.width
    wide = ir.IntType(2 * bits)
    ext = lw.b.sext if _signed(_s(op)) else lw.b.zext
    p = lw.b.mul(ext(a, wide), ext(b, wide))
    return lw.b.trunc(lw.b.lshr(p, ir.Constant(wide, bits)), a.type)


def _neg(lw, op, x):
    return lw.b.fneg(x) if _s(op).is_floating() else lw.b.sub(ir.Constant(x.type, 0), x)


def _abs(lw, op, x):
    s = _s(op)
    if s.is_fp8():  # held as its byte: every fp8 format keeps the sign in the top bit
        return lw.b.and_(x, ir.Constant(x.type, 0x7F))
    if s.is_floating():
        return _llvm_float("fabs")(lw, op, x)
    if not _signed(s):
        return x
    return lw.b.select(lw.b.icmp_signed("<", x, ir.Constant(x.type, 0)), lw.b.sub(ir.Constant(x.type, 0), x), x)


def _not(lw, op, x):
    return lw.b.not_(x)


def _isnan(lw, op, x):
    return lw.b.fcmp_unordered("uno", x, x)


def _isinf(lw, op, x):
    a = _llvm_float("fabs")(lw, op, x)
    return lw.b.fcmp_ordered("==", a, ir.Constant(a.type, math.inf))


def _isfinite(lw, op, x):
    a = _llvm_float("fabs")(lw, op, x)
    return lw.b.fcmp_ordered("!=", a, ir.Constant(a.type, math.inf))  # false for NaN too


def _signbit(lw, op, x):
    bits = _s(op).primitive_bitwidth
    return lw.b.icmp_signed("<", lw.b.bitcast(x, ir.IntType(bits)), ir.Constant(ir.IntType(bits), 0))


def _bit_count(name):
    """popc / clz / brev on the operand's own width (LLVM ctpop / ctlz / bitreverse)."""
    def fn(lw, op, x):
        ty = x.type
        if name == "ctlz":  # defined for 0 (all bits leading), as PTX clz
            f = lw.intrinsic(f"llvm.ctlz.i{ty.width}", ty, [ty, ir.IntType(1)])
            return lw.b.call(f, [x, ir.Constant(ir.IntType(1), 0)])
        return lw.b.call(lw.intrinsic(f"llvm.{name}.i{ty.width}", ty, [ty]), [x])
    return fn


_FAST_SQRT = _approx("llvm.nvvm.sqrt.approx.f", ftz=True)


def _sqrt(lw, op, x):
    if _s(op).name == "fp32":  # tl.sqrt: Triton's "fast square root"
        return _FAST_SQRT(lw, op, x)
    return _sqrt_rn(lw, op, x)


def _sqrt_rn(lw, op, x):
    return _llvm_float("sqrt")(lw, op, x)


def _copysign(lw, op, a, b):
    return _llvm_float("copysign")(lw, op, a, b)


def _fma(lw, op, a, b, c):
    if _s(op).name == "bf16" and not lw.ctx.portable and lw.ctx.target.capability >= 80:
        # one rounding, to bf16 (fma.rn.bf16), as Triton; through fp32 it would round twice
        return _float_call(lw, "llvm.fma.bf16", _s(op), a, b, c)
    return _llvm_float("fma")(lw, op, a, b, c)


def _frem(lw, op, a, b):
    return lw.b.frem(a, b)


_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _cmp(lw, op, a, b):
    s, pred = _s(op), _CMP[op.attrs["pred"]]
    if s.is_floating():
        if pred == "!=":
            return lw.b.fcmp_unordered("!=", a, b)
        return lw.b.fcmp_ordered(pred, a, b)
    if s.is_ptr():
        return lw.b.icmp_unsigned(pred, a, b)
    return (lw.b.icmp_signed if _signed(s) else lw.b.icmp_unsigned)(pred, a, b)


def _select(lw, op, c, a, b):
    return lw.b.select(c, a, b)


def widen(b, x, to, signed: bool):
    """sext/zext of `x`; an index `base + c` that cannot overflow (an `nsw nuw` add, as layout
    indices are) widens as `ext(base) + c`, so that every register of a block index cast to
    i64 shares one widened base instead of each keeping its own 64-bit value alive."""
    ext = b.sext if signed else b.zext
    parts = _index_plus_constant(x)
    if parts is not None:
        base, c = parts
        return b.add(ext(base, to), ir.Constant(to, c.constant), flags=["nsw", "nuw"])
    return ext(x, to)


def cast_value(lw, x, src, dst, rounding=None):
    """Convert one element from scalar type `src` to `dst` (Triton's value conversion)."""
    b = lw.b
    src, dst = scalar_of(src), scalar_of(dst)
    to = reg_type(dst)
    if src == dst:
        return x
    if src.is_fp8() or dst.is_fp8():
        return fp8.cast_fp8(lw, x, src, dst, rounding)
    if dst.is_ptr():
        return x if src.is_ptr() else b.inttoptr(x, to)
    if src.is_ptr() and dst.is_bool():  # a pointer's truth is its being non-null (`if bias_ptr:`), not its low bit
        return b.icmp_unsigned("!=", b.ptrtoint(x, I64), ir.Constant(I64, 0))
    if src.is_ptr():
        return b.ptrtoint(x, to)
    if dst.is_bool():
        if src.is_floating():
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if src.is_int() and dst.is_int():
        if src.primitive_bitwidth == dst.primitive_bitwidth:
            return x
        if src.primitive_bitwidth > dst.primitive_bitwidth:
            return b.trunc(x, to)
        return widen(b, x, to, _signed(src))
    if src.is_int():
        return b.sitofp(x, to) if _signed(src) else b.uitofp(x, to)
    if dst.is_int():
        return _float_to_int(lw, x, to, _signed(dst))
    if src.name in ("fp16", "bf16") and dst.name in ("fp16", "bf16"):
        return b.fptrunc(b.fpext(x, F32), to)
    if src.primitive_bitwidth < dst.primitive_bitwidth:
        return b.fpext(x, to)
    if lw.ctx.portable and x.type == F64 and to != F32:
        # the emulator's JIT has no routine for double -> half (a call to nowhere): narrow through fp32,
        # toward zero for rtz, to odd otherwise (inexact marked in the last bit), so that it rounds once
        x = _round_toward_zero(lw, x, F32) if rounding == "rtz" else _round_to_odd_f32(lw, x)
    if rounding == "rtz":
        return _round_toward_zero(lw, x, to) if lw.ctx.portable else _cvt_rz(lw, x, src, dst)
    return b.fptrunc(x, to)


def _float_to_int(lw, x, to, signed: bool):
    """Truncate, saturating at the integer's range, NaN to 0: PTX `cvt.rzi`'s meaning. Plain
    fptosi/fptoui are poison there, and LLVM then folds them into arbitrary values."""
    if x.type not in (F32, F64):
        x = lw.b.fpext(x, F32)  # fp16/bf16: exact in fp32
    suffix = "f32" if x.type == F32 else "f64"
    name = f"llvm.fpto{'s' if signed else 'u'}i.sat.i{to.width}.{suffix}"
    return lw.b.call(lw.intrinsic(name, to, [x.type]), [x])


def _round_toward_zero(lw, x, to):
    """Round-toward-zero narrowing in plain LLVM IR (the emulator has no PTX): where rounding
    to nearest went away from zero, step the bit pattern one ulp back (floats are sign-magnitude)."""
    b = lw.b
    nearest = b.fptrunc(x, to)
    wide, zero = b.fpext(nearest, x.type), ir.Constant(x.type, 0.0)
    overshoot = b.or_(b.and_(b.fcmp_ordered(">", x, zero), b.fcmp_ordered(">", wide, x)),
                      b.and_(b.fcmp_ordered("<", x, zero), b.fcmp_ordered("<", wide, x)))
    bits_type = ir.IntType(32 if to == F32 else 16)
    bits = b.bitcast(nearest, bits_type)
    return b.bitcast(b.select(overshoot, b.sub(bits, ir.Constant(bits_type, 1)), bits), to)


def _round_to_odd_f32(lw, x):
    """fp64 -> fp32 rounded to odd: toward zero, the lowest bit set where that was inexact. Rounded
    again to a type of 22 or fewer significand bits (fp16, bf16), it gives what one rounding of `x` would."""
    b = lw.b
    toward_zero = _round_toward_zero(lw, x, F32)
    inexact = b.zext(b.fcmp_ordered("!=", b.fpext(toward_zero, F64), x), ir.IntType(32))
    return b.bitcast(b.or_(b.bitcast(toward_zero, ir.IntType(32)), inexact), F32)


def _cvt_rz(lw, x, src, dst):
    """Round-toward-zero narrowing has no LLVM instruction: PTX `cvt.rz`."""
    d, con, out = {"fp16": ("f16", "h", ir.IntType(16)), "bf16": ("bf16", "h", ir.IntType(16)),
                   "fp32": ("f32", "f", F32)}[dst.name]
    s, src_con = ("f64", "d") if x.type == F64 else ("f32", "f")
    asm = ir.InlineAsm(ir.FunctionType(out, [x.type]), f"cvt.rz.{d}.{s} $0, $1;", f"={con},{src_con}")
    return lw.b.bitcast(lw.b.call(asm, [x]), reg_type(dst))


def _cast(lw, op, x):
    return cast_value(lw, x, op.operands[0].type, op.results[0].type, op.attrs.get("rounding"))


def _paired_cast(lw, op):
    """fp32 -> fp16/bf16 (round to nearest even) two registers at a time, `cvt.rn.f16x2.f32`
    (sm_80+): ptxas serializes a loop's wgmmas when an epilogue reads the accumulators
    through single `cvt.rn.f16.f32` (C7514; tutorial 08's tile loop), not through the pairs.
    fp8 from and to fp32 likewise, where the target converts them in pairs (lower.fp8)."""
    out = op.results[0]
    src, dst = scalar_of(op.operands[0].type), scalar_of(out.type)
    layout = lw.layout(out)
    if not isinstance(out.type, block_type) or op.attrs.get("rounding") not in (None, "rtne") or lw.ctx.portable:
        return _cast_each(lw, op)
    fmt = next((t.name for t in (src, dst) if t.is_fp8()), None)
    if fmt is not None and {src.name, dst.name} == {"fp32", fmt} and fp8.in_hardware(lw, fmt):
        return _fp8_pairs(lw, op, src, dst, layout)
    pairs = src.name == "fp32" and dst.name in ("fp16", "bf16") and lw.ctx.target.capability >= 80
    xs = lw.regs(op.operands[0], layout) if pairs else None
    if not pairs or len(xs) % 2:
        return _cast_each(lw, op)
    kind = "f16x2" if dst.name == "fp16" else "bf16x2"
    asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), [F32, F32]), f"cvt.rn.{kind}.f32 $0, $1, $2;", "=r,f,f")
    half = reg_type(dst)
    regs = []
    for lo, hi in zip(xs[0::2], xs[1::2]):
        both = lw.b.call(asm, [hi, lo])  # the first source goes to the upper half
        for word in (both, lw.b.lshr(both, ir.Constant(ir.IntType(32), 16))):
            bits = lw.b.trunc(word, ir.IntType(16))
            regs.append(bits if half == bits.type else lw.b.bitcast(bits, half))
    lw.bind(out, regs, layout)


def _fp8_pairs(lw, op, src, dst, layout):
    """fp32 <-> e4m3 / e5m2 two registers per `cvt`."""
    xs = lw.regs(op.operands[0], layout)
    if len(xs) % 2:
        return _cast_each(lw, op)
    pair, fmt = (fp8.encode_pair, dst.name) if dst.is_fp8() else (fp8.decode_pair, src.name)
    regs = []
    for lo, hi in zip(xs[0::2], xs[1::2]):
        regs.extend(pair(lw, lo, hi, fmt))
    lw.bind(op.results[0], regs, layout)


def _bitcast(lw, op, x):
    src, dst = scalar_of(op.operands[0].type), scalar_of(op.results[0].type)
    to = reg_type(dst)
    if src.is_ptr() or dst.is_ptr():
        return lw.b.ptrtoint(x, to) if src.is_ptr() else lw.b.inttoptr(x, to)
    return lw.b.bitcast(x, to)


def constant_value(t, value):
    s = scalar_of(t)
    ty = reg_type(s)
    if s.is_floating() and not s.is_fp8():
        return ir.Constant(ty, float(value))
    if s.is_bool():
        return ir.Constant(ty, 1 if value else 0)
    if isinstance(value, float):
        value = int(value)
    bits = ty.width
    value &= (1 << bits) - 1
    if value >= 1 << (bits - 1):
        value -= 1 << bits
    return ir.Constant(ty, value)


def _constant(lw, op):
    out = op.results[0]
    c = constant_value(out.type, op.attrs["value"])
    if isinstance(out.type, block_type):
        layout = lw.layout(out)
        lw.bind(out, [c] * len(layout.offsets(out.type.shape)), layout)
    else:
        lw.bind(out, [c])


def _addptr(lw, op, p, off):
    s = _s(op, 1)
    if not _signed(s) and off.type.width < 64:
        off = lw.b.zext(off, ir.IntType(64))  # a uint32 offset above 2^31 stays positive
    from .types import mem_type
    return lw.b.gep(p, [off], source_etype=mem_type(_s(op).element_ty))


def _identity(lw, op):
    out = op.results[0]
    layout = lw.layout(out)
    lw.bind(out, lw.regs(op.operands[0], layout), layout)


_PER_ELEMENT = {
    "add": _arith("add", "fadd"), "sub": _arith("sub", "fsub"), "mul": _arith("mul", "fmul"),
    "div": _div, "rem": _arith("srem", "frem", "urem"),
    "div_rn": _arith("sdiv", "fdiv"),
    "min": _minmax("<"), "max": _minmax(">"),
    "and": _arith("and_", "and_"), "or": _arith("or_", "or_"), "xor": _arith("xor", "xor"),
    "shl": _arith("shl", "shl"), "shr": _shr, "umulhi": _umulhi,
    "pow": _libdevice("__nv_powf", "__nv_pow"), "atan2": _libdevice("__nv_atan2f", "__nv_atan2"),
    "copysign": _copysign,
    "neg": _neg, "abs": _abs, "not": _not,
    "exp": _approx("llvm.nvvm.ex2.approx.f", scale_in=LOG2E, f64="__nv_exp"),
    "exp2": _approx("llvm.nvvm.ex2.approx.f", f64="__nv_exp2", ftz=True),  # as Triton (libdevice's)
    "log": _libdevice("__nv_logf", "__nv_log"), "log2": _libdevice("__nv_log2f", "__nv_log2"),
    "log1p": _libdevice("__nv_log1pf", "__nv_log1p"),
    "sqrt": _sqrt, "sqrt_rn": _sqrt_rn,
    "rsqrt": _approx("llvm.nvvm.rsqrt.approx.f", f64="__nv_rsqrt", ftz=True),
    "sin": _libdevice("__nv_sinf", "__nv_sin"), "cos": _libdevice("__nv_cosf", "__nv_cos"),
    "tan": _libdevice("__nv_tanf", "__nv_tan"), "tanh": _libdevice("__nv_tanhf", "__nv_tanh"),
    "erf": _libdevice("__nv_erff", "__nv_erf"),
    "floor": _libdevice("__nv_floorf", "__nv_floor"), "ceil": _libdevice("__nv_ceilf", "__nv_ceil"),
    "round": _libdevice("__nv_roundf", "__nv_round"), "trunc": _libdevice("__nv_truncf", "__nv_trunc"),
    "popc": _bit_count("ctpop"), "clz": _bit_count("ctlz"), "brev": _bit_count("bitreverse"),
    "isnan": _isnan, "isinf": _isinf, "isfinite": _isfinite, "signbit": _signbit, "fma": _fma,
    "cmp": _cmp, "select": _select, "addptr": _addptr, "cast": _cast, "bitcast": _bitcast,
}

# the rest of libdevice, one name each: `__nv_<name>f` for fp32 (and fp16/bf16 through
# fp32), `__nv_<name>` for fp64
for _name in ("expm1", "exp10", "log10", "cbrt", "rint", "sinh", "cosh", "asin", "acos", "atan",
              "asinh", "acosh", "atanh", "erfc", "erfinv", "lgamma", "tgamma",
              "hypot", "remainder", "fdim", "nextafter"):
    _PER_ELEMENT[_name] = _libdevice(f"__nv_{_name}f", f"__nv_{_name}")

RULES = {name: elementwise(fn) for name, fn in _PER_ELEMENT.items()}
_cast_each = RULES["cast"]
RULES["cast"] = _paired_cast
RULES.update({"constant": _constant, "multiple_of": _identity, "max_contiguous": _identity})

# libdevice's explicitly rounded arithmetic: `__nv_f<op>_<rounding>` (fp32), `__nv_d<op>_<rounding>` (fp64)
ROUNDED_NAMES = {"add_r": ("fadd", "dadd"), "mul_r": ("fmul", "dmul"), "div_r": ("fdiv", "ddiv"),
                  "fma_r": ("fmaf", "fma"), "sqrt_r": ("fsqrt", "dsqrt")}


def _rounded(lw, op, *xs):
    f32_name, f64_name = ROUNDED_NAMES[op.name]
    name = f64_name if _s(op).name == "fp64" else f32_name
    return _float_call(lw, f"__nv_{name}_{op.attrs['rounding']}", _s(op), *xs)


# number -> float with a directed rounding: libdevice's `__nv_<src>2<dst>_<rounding>`
CVT_NAMES = {("fp64", "fp32"): "double2float", ("int32", "fp32"): "int2float",
              ("uint32", "fp32"): "uint2float", ("int64", "fp32"): "ll2float",
              ("uint64", "fp32"): "ull2float", ("int64", "fp64"): "ll2double",
              ("uint64", "fp64"): "ull2double"}


def _cvt_r(lw, op, x):
    src, dst = _s(op), scalar_of(op.results[0].type)
    name = f"__nv_{CVT_NAMES[src.name, dst.name]}_{op.attrs['rounding']}"
    to = reg_type(dst)
    return lw.b.call(lw.intrinsic(name, to, [x.type]), [x])


def _bessel_of_order(lw, op, n, x):
    """jn / yn: `__nv_jnf(i32, float)`, `__nv_jn(i32, double)`."""
    name = f"__nv_{op.name}" + ("" if _s(op, 1).name == "fp64" else "f")
    return lw.b.call(lw.intrinsic(name, x.type, [n.type, x.type]), [n, x])


def _single(name):
    """A libdevice function that exists for one type only."""
    def fn(lw, op, *xs):
        return _float_call(lw, name, _s(op), *xs)
    return fn


_LIBDEVICE_ADDITIONS = {name: elementwise(_rounded) for name in ROUNDED_NAMES}
_LIBDEVICE_ADDITIONS.update({
    "cvt_r": elementwise(_cvt_r), "jn": elementwise(_bessel_of_order), "yn": elementwise(_bessel_of_order),
    "rsqrt_rn": elementwise(_single("__nv_frsqrt_rn")), "rcp64h": elementwise(_single("__nv_rcp64h")),
})
for _name in ("rcbrt", "erfcx", "j0", "j1", "y0", "y1", "cyl_bessel_i0", "cyl_bessel_i1",
              "norm3d", "rnorm3d", "norm4d", "rnorm4d"):
    _LIBDEVICE_ADDITIONS[_name] = elementwise(_libdevice(f"__nv_{_name}f", f"__nv_{_name}"))
RULES.update(_LIBDEVICE_ADDITIONS)
