"""Axis analysis: per dim of every integer or pointer value, how many consecutive
elements are contiguous (`contiguity`), the largest power of two dividing the first
element of each contiguous run (`divisibility`, in bytes for pointers) and how many
consecutive elements are equal (`constancy`).

It feeds the layout pass: a load whose pointer is contiguous over 4 fp32 and 16-byte
divisible, with a mask constant over 4, becomes one `ld.global.v4.b32`. Sources are the
runtime's `divisibility` arg attrs, `arange`, constants, `splat`/`broadcast` and the
`multiple_of`/`max_contiguous` hints; loops are iterated to a fixed point. It is an analysis,
not a pass: whoever needs it computes it from the IR (kiln.codegen.analysis).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from kiln.ir.types import block_type, scalar_of

MAX_DIV = 1 << 30


@dataclass(frozen=True)
class AxisInfo:
    contiguity: tuple[int, ...]
    divisibility: tuple[int, ...]
    constancy: tuple[int, ...]
    value: int | None = None  # the constant value, when every element is known

    @property
    def rank(self):
        return len(self.contiguity)


def _shape(t):
    return t.shape if isinstance(t, block_type) else (1,)


def pow2_divisor(v: int) -> int:
    if v == 0:
        return MAX_DIV
    return min(MAX_DIV, v & -v)


def unknown(t) -> AxisInfo:
    r = len(_shape(t))
    return AxisInfo((1,) * r, (1,) * r, (1,) * r)


def uniform(t, div: int, value=None) -> AxisInfo:
    shape = _shape(t)
    return AxisInfo((1,) * len(shape), (div,) * len(shape), tuple(shape), value)


def join(a: AxisInfo, b: AxisInfo) -> AxisInfo:
    """What holds for a value that is either a or b (loop-carried values)."""
    v = a.value if a.value == b.value else None
    return AxisInfo(tuple(map(min, a.contiguity, b.contiguity)), tuple(map(gcd, a.divisibility, b.divisibility)),
                    tuple(map(min, a.constancy, b.constancy)), v)


class AxisAnalysis:
    def __init__(self, fn):
        self.info: dict = {}
        for arg, attrs in zip(fn.args, fn.arg_attrs):
            div = int(attrs.get("divisibility", 1))
            self.info[arg] = uniform(arg.type, max(1, div))
        self.block(fn.body)

    def get(self, v) -> AxisInfo:
        got = self.info.get(v)
        return got if got is not None else unknown(v.type)

    def block(self, block):
        for op in block.ops:
            rule = _RULES.get(op.name)
            if op.name in ("for", "while"):
                self.loop(op)
            elif op.name == "if":
                for region in op.regions:
                    self.block(region)
                for i, r in enumerate(op.results):
                    a, b = (self.get(reg.ops[-1].operands[i]) for reg in op.regions)
                    self.info[r] = join(a, b)
            elif op.regions:
                for region in op.regions:
                    self.block(region)
            elif rule is not None and op.results:
                self.info[op.results[0]] = rule(self, op, *[self.get(v) for v in op.operands])

    def loop(self, op):
        body = op.regions[0] if op.name == "for" else op.regions[1]
        inits = op.operands[3:] if op.name == "for" else op.operands
        carried = op.regions[0].args[1:] if op.name == "for" else op.regions[0].args
        if op.name == "for":
            lb, _, step = (self.get(v) for v in op.operands[:3])
            self.info[op.regions[0].args[0]] = uniform(op.operands[0].type, gcd(lb.divisibility[0], step.divisibility[0]))
        for a, v in zip(carried, inits):
            self.info[a] = self.get(v)
        for _ in range(4):  # values only weaken, so a few rounds reach the fixed point
            for region in op.regions:
                self.block(region)
            yielded = body.ops[-1].operands
            new = [join(self.get(a), self.get(y)) for a, y in zip(carried, yielded)]
            if all(self.get(a) == n for a, n in zip(carried, new)):
                break
            for a, n in zip(carried, new):
                self.info[a] = n
        if op.name == "while":
            cond = op.regions[0].ops[-1].operands[1:]
            for a, v in zip(op.regions[1].args, cond):
                self.info[a] = self.get(v)
            for r, v in zip(op.results, cond):
                self.info[r] = self.get(v)
        else:
            for r, a in zip(op.results, carried):
                self.info[r] = self.get(a)


def _constant(an, op):
    v = op.attrs["value"]
    t = op.results[0].type
    if isinstance(v, bool) or not isinstance(v, int):
        return uniform(t, 1)
    return uniform(t, pow2_divisor(v), v)


def _arange(an, op):
    start, end = op.attrs["start"], op.attrs["end"]
    return AxisInfo((end - start,), (pow2_divisor(start),), (1,))


def _splat(an, op, a):
    return uniform(op.results[0].type, a.divisibility[0], a.value)


def _broadcast(an, op, a):
    src, dst = _shape(op.operands[0].type), _shape(op.results[0].type)
    const = tuple(d if s == 1 and d > 1 else c for s, d, c in zip(src, dst, a.constancy))
    contig = tuple(1 if s == 1 and d > 1 else c for s, d, c in zip(src, dst, a.contiguity))
    return AxisInfo(contig, a.divisibility, const, a.value)


def _expand_dims(an, op, a):
    axis = op.attrs["axis"]
    elem_div = min((dv if c == 1 else 1) for dv, c in zip(a.divisibility, a.contiguity))
    ins = lambda t, v: t[:axis] + (v,) + t[axis:]
    return AxisInfo(ins(a.contiguity, 1), ins(a.divisibility, elem_div), ins(a.constancy, 1), a.value)


def _elem_bytes(op):
    s = scalar_of(op.results[0].type)
    return s.element_ty.itemsize if s.is_ptr() else 1


def _add(an, op, a, b):
    scale = _elem_bytes(op) if op.name == "addptr" else 1
    contig = tuple(max(gcd(ca, kb), gcd(ka, cb)) for ca, cb, ka, kb in zip(a.contiguity, b.contiguity, a.constancy, b.constancy))
    if op.name == "sub":
        contig = tuple(gcd(ca, kb) for ca, kb in zip(a.contiguity, b.constancy))
    div = tuple(gcd(da, min(MAX_DIV, db * scale)) for da, db in zip(a.divisibility, b.divisibility))
    const = tuple(map(gcd, a.constancy, b.constancy))
    value = None
    if a.value is not None and b.value is not None and op.name != "addptr":
        value = a.value + b.value if op.name == "add" else a.value - b.value
    return AxisInfo(contig, div, const, value)


def _mul(an, op, a, b):
    contig = tuple(ca if b.value == 1 else (cb if a.value == 1 else 1) for ca, cb in zip(a.contiguity, b.contiguity))
    div = tuple(min(MAX_DIV, da * db) for da, db in zip(a.divisibility, b.divisibility))
    value = a.value * b.value if a.value is not None and b.value is not None else None
    return AxisInfo(contig, div, tuple(map(gcd, a.constancy, b.constancy)), value)


def _rem(an, op, a, b):
    """x % n: a run of consecutive x that starts at a multiple of g (g dividing n, and n
    the same over the run) never crosses a multiple of n, so it stays contiguous."""
    if b.value is not None and b.value <= 0:
        return unknown(op.results[0].type)
    nd = [pow2_divisor(b.value)] * a.rank if b.value is not None else list(b.divisibility)
    contig = tuple(gcd(gcd(c, d), gcd(n, k)) for c, d, n, k in zip(a.contiguity, a.divisibility, nd, b.constancy))
    div = tuple(gcd(d, n) for d, n in zip(a.divisibility, nd))
    return AxisInfo(contig, div, tuple(map(gcd, a.constancy, b.constancy)))


def _div(an, op, a, b):
    if b.value is None or b.value <= 0:
        return unknown(op.results[0].type)
    p = pow2_divisor(b.value)
    const = tuple(max(k, gcd(c, gcd(d, p))) for k, c, d in zip(a.constancy, a.contiguity, a.divisibility))
    div = tuple(max(1, d // p) if d >= p and c == 1 else 1 for d, c in zip(a.divisibility, a.contiguity))
    return AxisInfo((1,) * a.rank, div, const)


def _cmp(an, op, a, b):
    const = []
    for ca, cb, ka, kb, da, db in zip(a.contiguity, b.contiguity, a.constancy, b.constancy, a.divisibility, b.divisibility):
        k = gcd(ka, kb)
        if op.attrs["pred"] in ("lt", "ge") and kb > 1 and ca > 1:
            # a run of consecutive ints starting at a multiple of g crosses a multiple of g
            # only at its start: the predicate is constant over aligned groups of g.
            k = max(k, gcd(ca, gcd(da, db)))
        if op.attrs["pred"] in ("gt", "le") and ka > 1 and cb > 1:
            k = max(k, gcd(cb, gcd(da, db)))
        const.append(k)
    return AxisInfo((1,) * a.rank, (1,) * a.rank, tuple(const))


def _select(an, op, c, a, b):
    contig = tuple(min(gcd(ca, cb), kc) for ca, cb, kc in zip(a.contiguity, b.contiguity, c.constancy))
    return AxisInfo(contig, tuple(map(gcd, a.divisibility, b.divisibility)),
                    tuple(gcd(gcd(ka, kb), kc) for ka, kb, kc in zip(a.constancy, b.constancy, c.constancy)))


def _same(an, op, a, *rest):
    return a


def _logical(an, op, a, b):
    return AxisInfo((1,) * a.rank, (1,) * a.rank, tuple(map(gcd, a.constancy, b.constancy)))


def _cast(an, op, a):
    src, dst = scalar_of(op.operands[0].type), scalar_of(op.results[0].type)
    if src.is_int() and dst.is_int() and not dst.is_bool() and dst.primitive_bitwidth >= src.primitive_bitwidth:
        return a
    if src.is_int() and dst.is_int() and not dst.is_bool():
        # a narrowing cast keeps the low bits: a multiple of 2^k stays one (k below the width), runs may wrap
        cap = 1 << (dst.primitive_bitwidth - 1)
        return AxisInfo((1,) * a.rank, tuple(min(d, cap) for d in a.divisibility), a.constancy)
    return AxisInfo((1,) * a.rank, (1,) * a.rank, a.constancy)


def _multiple_of(an, op, a):
    return AxisInfo(a.contiguity, tuple(max(x, int(v)) for x, v in zip(a.divisibility, op.attrs["values"])), a.constancy, a.value)


def _max_contiguous(an, op, a):
    return AxisInfo(tuple(max(x, int(v)) for x, v in zip(a.contiguity, op.attrs["values"])), a.divisibility, a.constancy, a.value)


def _program_id(an, op):
    return uniform(op.results[0].type, 1)


def _moved(an, op, a):
    return a  # the same values, held by other threads


_RULES = {
    "constant": _constant, "arange": _arange, "splat": _splat, "broadcast": _broadcast,
    "expand_dims": _expand_dims, "add": _add, "sub": _add, "addptr": _add, "mul": _mul,
    "rem": _rem, "div": _div, "cmp": _cmp, "select": _select,
    "and": _logical, "or": _logical, "xor": _logical,
    "cast": _cast, "bitcast": _cast, "multiple_of": _multiple_of, "max_contiguous": _max_contiguous,
    "program_id": _program_id, "num_programs": _program_id, "convert_layout": _moved,
}
