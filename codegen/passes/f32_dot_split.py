"""fp32 dots at `input_precision` "tf32x3", "bf16x3" or "bf16x6" -> several tensor-core dots on the
operands split into parts, as Triton's F32DotTC pass does on NVIDIA GPUs (same parts, same order,
so the same sums).

tf32x3: a = big + small, big = a rounded to tf32 (nearest, ties away from zero: `cvt.rna.tf32.f32`,
here as integer arithmetic on the bits so that the emulator runs it too; NaNs kept as they are),
small = a - big (exact); likewise b. Then

    d = dot(a_small, b_big, 0); d = dot(a_big, b_small, d); d = NaNs of d as 0
    result = dot(a_big, b_big, d) + acc                                  (tf32 dots)

The NaNs zeroed are those of a non-finite part times a zero one (a big of 1.0 has a small of 0;
inf * 0). bf16x3 / bf16x6: a = hi + mid (+ lo), each part the rest rounded to bf16 (nearest
even), and the dots of mid x hi, hi x mid (bf16x6 first mid x mid, lo x hi, hi x lo) from zero,
NaNs zeroed, then hi x hi and + acc. The interpreter multiplies in fp32 whatever the precision.
"""
from __future__ import annotations

from kiln.ir.core import Operation
from kiln.ir.types import bfloat16, float32, int1, int32, scalar_of

from .rewrite import replace_uses

name = "f32_dot_split"

SPLIT = ("tf32x3", "bf16x3", "bf16x6")
TF32_HALF_ULP, TF32_MASK = 0x1000, -0x2000  # the 13 low bits fp32 has beyond tf32's 10 of mantissa


def apply(fn, ctx=None) -> None:
    mapping = {}
    for dot in [op for op in fn.walk() if op.name == "dot" and op.attrs.get("input_precision") in SPLIT]:
        a, b, acc = dot.operands
        if scalar_of(a.type) != float32 or scalar_of(b.type) != float32:
            continue
        ops = []
        build = _Builder(ops, dot.loc)
        precision = dot.attrs["input_precision"]
        if precision == "tf32x3":
            result = _tf32x3(build, a, b, acc, dot)
        else:
            result = _bf16xn(build, a, b, acc, dot, 2 if precision == "bf16x3" else 3)
        block = dot.parent
        at = block.ops.index(dot)
        for op in ops:
            op.parent = block
        block.ops[at:at + 1] = ops
        mapping[dot.results[0]] = result
    replace_uses(fn, mapping)


class _Builder:
    """Ops appended to a list, all at the dot's location."""

    def __init__(self, ops, loc):
        self.ops, self.loc = ops, loc

    def __call__(self, name, operands, t, **attrs):
        op = Operation(name, operands, [t], attrs, loc=self.loc)
        self.ops.append(op)
        return op.results[0]

    def splat(self, value, like, elem):
        return self("constant", [], _retyped(like.type, elem), value=value)

    def nans_to_zero(self, x):
        nan = self("cmp", [x, x], _retyped(x.type, int1), pred="ne")
        return self("select", [nan, self.splat(0.0, x, float32), x], x.type)

    def dot(self, a, b, acc, like, precision):
        attrs = dict(like.attrs, input_precision=precision)
        return self("dot", [a, b, acc], acc.type, **attrs)


def _retyped(t, elem):
    return t.with_element_ty(elem)


def _tf32_parts(build, x):
    """(big, small): x rounded to tf32 (nearest, ties away from zero), and x - big."""
    bits = build("bitcast", [x], _retyped(x.type, int32))
    rounded = build("and", [build("add", [bits, build.splat(TF32_HALF_ULP, x, int32)], bits.type),
                            build.splat(TF32_MASK, x, int32)], bits.type)
    nan = build("cmp", [x, x], _retyped(x.type, int1), pred="ne")
    big = build("select", [nan, x, build("bitcast", [rounded], x.type)], x.type)
    return big, build("sub", [x, big], x.type)


def _tf32x3(build, a, b, acc, dot):
    a_big, a_small = _tf32_parts(build, a)
    b_big, b_small = _tf32_parts(build, b)
    zero = build.splat(0.0, acc, float32)
    d = build.dot(a_small, b_big, zero, dot, "tf32")
    d = build.nans_to_zero(build.dot(a_big, b_small, d, dot, "tf32"))
    return build("add", [build.dot(a_big, b_big, d, dot, "tf32"), acc], acc.type)


def _bf16_parts(build, x, n):
    """x as n bf16 parts, each the rest of x rounded to bf16 (nearest even)."""
    parts = []
    for i in range(n):
        part = build("cast", [x], _retyped(x.type, bfloat16))
        if i != n - 1:
            x = build("sub", [x, build("cast", [part], x.type)], x.type)
        parts.append(part)
    return parts


def _bf16xn(build, a, b, acc, dot, n):
    hi, mid, lo = 0, 1, 2
    pa, pb = _bf16_parts(build, a, n), _bf16_parts(build, b, n)
    d = build.splat(0.0, acc, float32)
    if n == 3:
        for i, j in ((mid, mid), (lo, hi), (hi, lo)):
            d = build.dot(pa[i], pb[j], d, dot, "ieee")
    for i, j in ((mid, hi), (hi, mid)):
        d = build.dot(pa[i], pb[j], d, dot, "ieee")
    d = build.nans_to_zero(d)
    return build("add", [build.dot(pa[hi], pb[hi], d, dot, "ieee"), acc], acc.type)
