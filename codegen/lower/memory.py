"""Global loads, stores and atomics.

A thread's registers are grouped into vectors of up to 16 bytes where the pointer's axis
info says they are contiguous and aligned and the mask is constant over the group. An
unmasked group is one LLVM vector access with `align` = its size (`ld.global.v4.b32`);
a masked one is inline PTX predicated on the mask, with the destination registers
preset to `other`, so a masked tail costs no branch.
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import block_type, scalar_of

from ..analysis.access import access_width
from .types import GLOBAL_PTR, I1, I8, I16, I32, I64, mem_type, reg_type


def _to_mem(lw, x, t):
    return lw.b.zext(x, I8) if scalar_of(t).is_bool() else x


def _from_mem(lw, x, t):
    return lw.b.icmp_unsigned("!=", x, ir.Constant(I8, 0)) if scalar_of(t).is_bool() else x


def _words(total_bits, whole_bits=0):
    """(word bits, count, PTX type) for one access of `total_bits`; `whole_bits` 64: words of 64
    bits, so that an atomic load or store reads or writes each 64-bit element at once."""
    if whole_bits == 64:
        return 64, total_bits // 64, "b64"
    if total_bits >= 32:
        return 32, total_bits // 32, "b32"
    return total_bits, 1, ("b16" if total_bits == 16 else "u8")


def _word_type(bits):
    return {64: I64, 32: I32}.get(bits, I16)


_CONSTRAINT = {64: "l", 32: "r", 16: "h", 8: "h"}  # an inline asm operand of a word of these bits


def _ordered(quals: str) -> bool:
    """An atomic load's or store's qualifiers (`.acquire.gpu.global`, ...): it must not tear an element."""
    return quals.startswith((".acquire", ".relaxed", ".release"))


def _pack(lw, values, elem_ty, word_bits, nwords):
    """Element values -> `nwords` integer words (bit patterns)."""
    if len(values) == 1 and word_bits == 8:
        v = values[0]
        return [lw.b.zext(lw.b.bitcast(v, I8) if v.type != I8 else v, I16)]
    vec = ir.VectorType(elem_ty, len(values))
    acc = ir.Constant(vec, ir.Undefined)
    for i, v in enumerate(values):
        acc = lw.b.insert_element(acc, v, lw.i32(i))
    if elem_ty == GLOBAL_PTR:
        acc = lw.b.ptrtoint(acc, ir.VectorType(I64, len(values)))
    words = lw.b.bitcast(acc, ir.VectorType(_word_type(word_bits), nwords))
    return [lw.b.extract_element(words, lw.i32(i)) for i in range(nwords)]


def _unpack(lw, words, elem_ty, count, word_bits):
    if word_bits == 8:
        return [lw.b.trunc(words[0], I8) if elem_ty == I8 else lw.b.bitcast(lw.b.trunc(words[0], I8), elem_ty)]
    wty = _word_type(word_bits)
    vec = ir.Constant(ir.VectorType(wty, len(words)), ir.Undefined)
    for i, w in enumerate(words):
        vec = lw.b.insert_element(vec, w, lw.i32(i))
    if elem_ty == GLOBAL_PTR:
        ints = lw.b.bitcast(vec, ir.VectorType(I64, count))
        return [lw.b.inttoptr(lw.b.extract_element(ints, lw.i32(i)), GLOBAL_PTR) for i in range(count)]
    elems = lw.b.bitcast(vec, ir.VectorType(elem_ty, count))
    return [lw.b.extract_element(elems, lw.i32(i)) for i in range(count)]


def _vector_type(elem_ty, n):
    return elem_ty if n == 1 else ir.VectorType(elem_ty, n)


def _plain_load(lw, ptr, elem_ty, n, align):
    ty = _vector_type(elem_ty if elem_ty != GLOBAL_PTR else I64, n)
    v = lw.b.load(ptr, typ=ty, align=align)
    vals = [v] if n == 1 else [lw.b.extract_element(v, lw.i32(i)) for i in range(n)]
    return [lw.b.inttoptr(x, GLOBAL_PTR) for x in vals] if elem_ty == GLOBAL_PTR else vals


_LOAD_CACHE = (".ca", ".cg", ".cs", ".lu", ".cv")
_STORE_CACHE = (".wb", ".cg", ".cs", ".wt")
_EVICT = ("evict_first", "evict_last")


def qualifiers(op, lw=None) -> str:
    """PTX qualifiers after `ld`/`st` for the op's cache/evict/volatile attributes
    (a cache operator and an eviction priority exclude each other in PTX)."""
    cache, evict = op.attrs.get("cache") or "", op.attrs.get("evict") or ""
    if op.attrs.get("sem"):  # an atomic load or store (ld.acquire.gpu.global, st.release.sys.global, ...)
        return f".{op.attrs['sem']}.{op.attrs['scope']}.global"
    if op.attrs.get("volatile"):
        return ".volatile.global"
    if cache in (_LOAD_CACHE if op.name == "load" else _STORE_CACHE):
        return ".global" + cache
    if evict in _EVICT and (lw is None or lw.ctx.target.ptx_version >= 74):  # PTX 7.4 added them
        return ".global.L1::" + evict + _L2_HINT
    return ".global"


# Triton's eviction_policy also tells L2 (sm_80+): a policy made where the access is (createpolicy,
# scoped to the access's own asm block) and passed to it as `.L2::cache_hint`
_L2_HINT = ".L2::cache_hint"


def _access_asm(quals: str, before: str, access: str) -> str:
    """The inline asm of `before` (movs) and `access` (an ld or st, no `;`); where `quals` asks for
    an L2 hint, in a block of its own that makes the policy and passes it as the access's last operand."""
    if _L2_HINT not in quals:
        return f"{before}{access};"
    evict = quals.split("L1::")[1].split(".")[0]
    return (f"{{ .reg .b64 %l2policy; createpolicy.fractional.L2::{evict}.b64 %l2policy, 1.0; "
            f"{before}{access}, %l2policy; }}")


def _masked_load(lw, ptr, mask, others, elem_ty, n, quals=".global"):
    ebits = 64 if elem_ty == GLOBAL_PTR else _bits(elem_ty)
    word_bits, nwords, ptx_ty = _words(ebits * n, ebits if _ordered(quals) else 0)
    wty = _word_type(word_bits)
    con = _CONSTRAINT[word_bits]
    outs = ", ".join(f"${i}" for i in range(nwords))
    mov = "".join(f"mov.b{max(16, word_bits)} ${i}, ${nwords + 2 + i}; " for i in range(nwords))
    vec = f".v{nwords}" if nwords > 1 else ""
    dst = f"{{{outs}}}" if nwords > 1 else outs
    text = _access_asm(quals, mov, f"@${nwords} ld{quals}{vec}.{ptx_ty} {dst}, [${nwords + 1}]")
    cons = ",".join([f"={con}"] * nwords + ["b", "l"] + [con] * nwords)
    ret = wty if nwords == 1 else ir.LiteralStructType([wty] * nwords)
    fty = ir.FunctionType(ret, [I1, GLOBAL_PTR] + [wty] * nwords)
    other_words = _pack(lw, others, elem_ty, word_bits, nwords)
    if lw.ctx.portable:  # the same words, loaded under a branch (CPU emulation)
        words = branchy_load(lw, ptr, mask, other_words, wty, nwords, max(1, word_bits // 8))
        if word_bits == 8:
            words = [lw.b.zext(lw.b.trunc(w, I8), I16) for w in words]
        return _unpack(lw, words, elem_ty, n, word_bits)
    got = lw.b.call(ir.InlineAsm(fty, text, cons, side_effect=True), [mask, ptr] + other_words)
    words = [got] if nwords == 1 else [lw.b.extract_value(got, i) for i in range(nwords)]
    return _unpack(lw, words, elem_ty, n, word_bits)


def _masked_store(lw, ptr, mask, values, elem_ty, quals=".global"):
    ebits = 64 if elem_ty == GLOBAL_PTR else _bits(elem_ty)
    word_bits, nwords, ptx_ty = _words(ebits * len(values), ebits if _ordered(quals) else 0)
    wty = _word_type(word_bits)
    con = _CONSTRAINT[word_bits]
    words = _pack(lw, values, elem_ty, word_bits, nwords)
    if lw.ctx.portable:  # the same words, stored under a branch (CPU emulation)
        with lw.b.if_then(mask):
            if word_bits == 8:
                lw.b.store(lw.b.trunc(words[0], I8), ptr, align=1)
            else:
                plain_store(lw, ptr, words, wty, max(1, word_bits // 8))
        return
    srcs = ", ".join(f"${i + 2}" for i in range(nwords))
    vec = f".v{nwords}" if nwords > 1 else ""
    src = f"{{{srcs}}}" if nwords > 1 else srcs
    text = _access_asm(quals, "", f"@$0 st{quals}{vec}.{ptx_ty} [$1], {src}")
    cons = ",".join(["b", "l"] + [con] * nwords)
    fty = ir.FunctionType(ir.VoidType(), [I1, GLOBAL_PTR] + [wty] * nwords)
    lw.b.call(ir.InlineAsm(fty, text, cons, side_effect=True), [mask, ptr] + words)


def branchy_load(lw, ptr, mask, others, ty, n, elem_bytes):
    """The portable form of a predicated load: a branch around a plain load."""
    before = lw.b.block
    with lw.b.if_then(mask):
        if ty == I16 and elem_bytes == 1:  # one byte, carried in a 16-bit word
            got = [lw.b.zext(lw.b.load(ptr, typ=I8, align=1), I16)]
        else:
            got = _plain_load(lw, ptr, ty, n, n * elem_bytes)
        inside = lw.b.block
    out = []
    for g, o in zip(got, others):
        phi = lw.b.phi(g.type)
        phi.add_incoming(g, inside)
        phi.add_incoming(o, before)
        out.append(phi)
    return out


def plain_store(lw, ptr, chunk, elem_ty, elem_bytes=None):
    n = len(chunk)
    elem_bytes = elem_bytes or _elem_bytes(elem_ty)
    if n == 1:
        lw.b.store(chunk[0], ptr, align=elem_bytes)
        return
    vec = ir.Constant(ir.VectorType(elem_ty, n), ir.Undefined)
    for i, x in enumerate(chunk):
        vec = lw.b.insert_element(vec, x, lw.i32(i))
    lw.b.store(vec, ptr, align=n * elem_bytes)


def _bits(ty):
    if isinstance(ty, ir.IntType):
        return ty.width
    return {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(ty)]


def _load(lw, op):
    ptr, out = op.operands[0], op.results[0]
    elem_ty = mem_type(out.type)
    if not isinstance(out.type, block_type):
        return _scalar_load(lw, op, elem_ty)
    layout = lw.layout(out)
    ptrs = lw.regs(ptr, layout)
    masks = lw.regs(op.operands[1], layout) if len(op.operands) > 1 else None
    others = [_to_mem(lw, x, out.type) for x in lw.regs(op.operands[2], layout)] if len(op.operands) > 2 else None
    n = access_width(lw.ctx, op, layout, out.type.shape, _bits(elem_ty) if elem_ty != GLOBAL_PTR else 64)
    zero = ir.Constant(elem_ty, 0 if isinstance(elem_ty, ir.IntType) else 0.0) if elem_ty != GLOBAL_PTR else \
        ir.Constant(GLOBAL_PTR, None)
    quals = qualifiers(op, lw)
    if masks is None and quals != ".global":  # cache hints need PTX: predicate on true
        masks = [ir.Constant(I1, 1)] * len(ptrs)
    regs = []
    for g in range(0, len(ptrs), n):
        if masks is None:
            regs += _plain_load(lw, ptrs[g], elem_ty, n, n * _elem_bytes(elem_ty))
        else:
            other = others[g:g + n] if others else [zero] * n
            regs += _masked_load(lw, ptrs[g], masks[g], other, elem_ty, n, quals)
    lw.bind(out, [_from_mem(lw, x, out.type) for x in regs], layout)


def _elem_bytes(ty):
    return 8 if ty == GLOBAL_PTR else max(1, _bits(ty) // 8)


def _scalar_load(lw, op, elem_ty):
    out = op.results[0]
    ptr = lw.scalar(op.operands[0])
    quals = qualifiers(op, lw)
    if len(op.operands) == 1 and quals == ".global":
        (v,) = _plain_load(lw, ptr, elem_ty, 1, _elem_bytes(elem_ty))
    else:  # masked or hinted (a volatile load in a spin loop must stay in the loop)
        other = _to_mem(lw, lw.scalar(op.operands[2]), out.type) if len(op.operands) > 2 else \
            (ir.Constant(elem_ty, None) if elem_ty == GLOBAL_PTR else ir.Constant(elem_ty, 0 if isinstance(elem_ty, ir.IntType) else 0.0))
        mask = lw.scalar(op.operands[1]) if len(op.operands) > 1 else ir.Constant(I1, 1)
        (v,) = _masked_load(lw, ptr, mask, [other], elem_ty, 1, quals)
    lw.bind(out, [_from_mem(lw, v, out.type)])


def _store(lw, op):
    ptr, val = op.operands[:2]
    elem_ty = mem_type(val.type)
    if not isinstance(val.type, block_type):
        # every thread holds the scalar; thread 0 alone writes it, so a thread that
        # loads it later in the kernel cannot see (and re-store) a newer value
        v = _to_mem(lw, lw.scalar(val), val.type)
        first = lw.entry.icmp_unsigned("==", lw.thread, lw.i32(0))
        mask = lw.b.and_(lw.scalar(op.operands[2]), first) if len(op.operands) > 2 else first
        _masked_store(lw, lw.scalar(ptr), mask, [v], elem_ty, qualifiers(op, lw))
        return
    layout = lw.layout(ptr)  # the convert_layouts pass chose it for the pointers, the value and the mask
    ptrs = lw.regs(ptr, layout)
    vals = [_to_mem(lw, x, val.type) for x in lw.regs(val, layout)]
    masks = lw.regs(op.operands[2], layout) if len(op.operands) > 2 else None
    owner = lw.owner_mask(layout, val.type.shape)  # where threads share elements, one writes
    if owner is not None:
        masks = [lw.b.and_(m, owner) for m in masks] if masks else [owner] * len(ptrs)
    quals = qualifiers(op, lw)
    if masks is None and quals != ".global":
        masks = [ir.Constant(I1, 1)] * len(ptrs)
    n = access_width(lw.ctx, op, layout, val.type.shape, _bits(elem_ty) if elem_ty != GLOBAL_PTR else 64)
    for g in range(0, len(ptrs), n):
        chunk = vals[g:g + n]
        if masks is None:
            plain_store(lw, ptrs[g], chunk, elem_ty)
        else:
            _masked_store(lw, ptrs[g], masks[g], chunk, elem_ty, quals)


# --- atomics -------------------------------------------------------------------------
_ORDER = {"relaxed": "monotonic", "acquire": "acquire", "release": "release", "acq_rel": "acq_rel"}
_FAIL_ORDER = {"relaxed": "monotonic", "acquire": "acquire", "release": "monotonic", "acq_rel": "acquire"}
_SCOPE = {"gpu": 'syncscope("device") ', "cta": 'syncscope("block") ', "sys": ""}


def _rmw_op(kind, s):
    if s.is_floating():
        return {"add": "fadd", "max": "fmax", "min": "fmin", "xchg": "xchg"}[kind]
    if kind in ("max", "min") and not (s.signed and not s.is_bool()):
        return "u" + kind
    return kind


def _atomic_each(lw, op, emit):
    """Run `emit(i)` for every owned, unmasked element; results merge through phis."""
    out = op.results[0]
    is_block = isinstance(out.type, block_type)
    layout = lw.layout(out) if is_block else None
    n = len(layout.offsets(out.type.shape)) if is_block else 1
    owner = lw.owner_mask(layout, out.type.shape) if is_block else \
        lw.entry.icmp_unsigned("==", lw.thread, lw.i32(0))
    masks = (lw.regs(op.operands[2], layout) if is_block else [lw.scalar(op.operands[2])]) \
        if op.name == "atomic_rmw" else None
    results = []
    ty = reg_type(out.type)
    for i in range(n):
        cond = masks[i] if masks else None
        if owner is not None:
            cond = owner if cond is None else lw.b.and_(cond, owner)
        if cond is None:
            results.append(emit(i))
            continue
        before = lw.b.block
        with lw.b.if_then(cond):
            got = emit(i)
            inside = lw.b.block
        phi = lw.b.phi(ty)
        phi.add_incoming(got, inside)
        phi.add_incoming(ir.Constant(ty, ir.Undefined), before)
        results.append(phi)
    if out in lw.used and owner is not None:
        results = _share_from_owners(lw, results, layout, out.type, owner)
    lw.bind(out, results, layout)


def _share_from_owners(lw, results, layout, t, owner):
    """Only the owner of each element ran its atomic: pass its result to the threads
    that hold the same element."""
    from .shared import elem_bytes, flats_of
    ty = results[0].type
    n = t.numel if isinstance(t, block_type) else 1
    flats = flats_of(lw, layout, t.shape) if layout else [lw.i32(0)]
    base = lw.smem(n * elem_bytes(ty))
    with lw.b.if_then(owner):
        for r, f in zip(results, flats):
            lw.b.store(r, lw.smem_ptr(base, ty, f))
    lw.barrier()
    return [lw.b.load(lw.smem_ptr(base, ty, f), typ=ty) for f in flats]


def _ptx_rmw(kind, s, capability):
    """PTX's `op.type` of `atom` for an RMW of `kind` on scalar type `s`, or None where no atom
    instruction does it on this target (int8 and int16, bf16 adds before sm_90, 16-bit exchanges:
    LLVM's lowering, a CAS loop where it needs one). Signed and unsigned adds are the same bits."""
    bits = s.primitive_bitwidth
    if s.is_floating():
        if kind == "add" and bits == 16:
            return None if s.name == "bf16" and capability < 90 else f"add.noftz.{'bf' if s.name == 'bf16' else 'f'}16"
        if kind == "add" and bits in (32, 64):
            return f"add.f{bits}"
        return f"exch.b{bits}" if kind == "xchg" and bits in (32, 64) else None
    if bits not in (32, 64) or s.is_bool():
        return None
    if kind in ("max", "min"):
        return f"{kind}.{'s' if s.signed else 'u'}{bits}"
    return {"add": f"add.u{bits}", "and": f"and.b{bits}", "or": f"or.b{bits}", "xor": f"xor.b{bits}",
            "xchg": f"exch.b{bits}"}.get(kind)


def _atom_asm(lw, text, s, operands):
    """An `atom` of PTX `text` on `operands` (a pointer, then values of scalar type `s`), as Triton
    writes it (its tests read the PTX); its old value in `s`'s register type."""
    bits = s.primitive_bitwidth
    word = ir.IntType(bits)
    asm = ir.InlineAsm(ir.FunctionType(word, [GLOBAL_PTR] + [word] * (len(operands) - 1)), text,
                       ",".join([f"={_CONSTRAINT[bits]}", "l"] + [_CONSTRAINT[bits]] * (len(operands) - 1)) +
                       ",~{memory}", side_effect=True)
    ty = reg_type(s)
    words = [v if v.type == word else lw.b.bitcast(v, word) for v in operands[1:]]
    old = lw.b.call(asm, [operands[0]] + words)
    return old if ty == word else lw.b.bitcast(old, ty)


def _atomic_rmw(lw, op):
    ptr, val = op.operands[:2]
    s = scalar_of(val.type)
    layout = lw.layout(op.results[0])
    ptrs = lw.regs(ptr, layout) if layout else [lw.scalar(ptr)]
    vals = lw.regs(val, layout) if layout else [lw.scalar(val)]
    sem, scope = op.attrs["sem"], op.attrs["scope"]
    ptx = None if lw.ctx.portable else _ptx_rmw(op.attrs["kind"], s, lw.ctx.target.capability)
    if ptx is not None:  # one ordered, scoped atom an element
        text = f"atom.global.{scope}.{sem}.{ptx} $0, [$1], $2;"
        _atomic_each(lw, op, lambda i: _atom_asm(lw, text, s, [ptrs[i], vals[i]]))
        return
    # LLVM's own: x86 in portable builds (CPU emulation), a CAS loop that keeps the ordering on NVPTX
    rmw = _rmw_op(op.attrs["kind"], s)
    _atomic_each(lw, op, lambda i: lw.b.atomic_rmw(rmw, ptrs[i], vals[i], _SCOPE[scope] + _ORDER[sem]))


def _atomic_cas(lw, op):
    ptr, cmp, val = op.operands
    s = scalar_of(val.type)
    layout = lw.layout(op.results[0])
    get = (lambda v: lw.regs(v, layout)) if layout else (lambda v: [lw.scalar(v)])
    ptrs, cmps, vals = get(ptr), get(cmp), get(val)
    sem, scope = op.attrs["sem"], op.attrs["scope"]
    if not lw.ctx.portable and s.primitive_bitwidth in (16, 32, 64):
        text = f"atom.global.{sem}.{scope}.cas.b{s.primitive_bitwidth} $0, [$1], $2, $3;"
        _atomic_each(lw, op, lambda i: _atom_asm(lw, text, s, [ptrs[i], cmps[i], vals[i]]))
        return
    ity = ir.IntType(s.primitive_bitwidth)

    def emit(i):
        c, v = cmps[i], vals[i]
        if s.is_floating():
            c, v = lw.b.bitcast(c, ity), lw.b.bitcast(v, ity)
        pair = lw.b.cmpxchg(ptrs[i], c, v, _SCOPE[scope] + _ORDER[sem], _FAIL_ORDER[sem])
        old = lw.b.extract_value(pair, 0)
        return lw.b.bitcast(old, reg_type(s)) if s.is_floating() else old
    _atomic_each(lw, op, emit)


RULES = {"load": _load, "store": _store, "atomic_rmw": _atomic_rmw, "atomic_cas": _atomic_cas}
