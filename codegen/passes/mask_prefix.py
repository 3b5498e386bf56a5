"""Prefix-shaped masks: along one dim, in every aligned run of w elements, true for the
first n of the run (0 <= n <= w) and false after.

A ring copy (smem_pipeline) of a run with such a mask copies its first n elements and
zero-fills the rest with one cp.async (the src-size operand), where a mask that is only
known to change anywhere would cap the copy at one element. Edge masks have this shape:
`cols < bound` for contiguous `cols`, and-ed with terms constant over the run (row masks,
a loop's in-range predicate, `cols >= 0` for `cols` whose runs start at multiples of w).

`prefix_run` proves the shape from the expression tree and the axis info, never assumes
it: any other mask gets the run over which it is constant (its constancy), a prefix too.
`count_true` builds n from the same tree: a bound's distance clamped to the run, a
select per constant term. Adding up the mask's bits instead cost ~4 SASS instructions a
bit (tutorial 08's loop: 779 instructions, most of them that).
"""
from __future__ import annotations

from math import gcd

from kiln.ir.types import block_type, int32, scalar_of, uint8, uint16, uint32, uint64

MAX_DEPTH = 64  # deeper trees are left to the axis info's constancy


def prefix_run(mask, dim: int, axis) -> int:
    """The largest power of two w for which `mask` is a prefix of every aligned run of w
    elements along `dim` (1 where nothing better is proved). `axis` is an AxisAnalysis."""
    return _Prover(axis).run(mask, dim, 0)


def _pow2(n: int) -> int:
    """The largest power of two dividing `n` (runs are aligned at powers of two)."""
    return max(1, n & -n)


def _shape(v) -> tuple:
    return tuple(v.type.shape) if isinstance(v.type, block_type) else ()


def _size(v, dim) -> int:
    shape = _shape(v)
    return shape[dim] if dim < len(shape) else 1


class _Prover:
    def __init__(self, axis):
        self.axis = axis
        self.memo: dict = {}

    def run(self, v, dim, depth) -> int:
        key = (v, dim)
        if key not in self.memo:
            if dim >= len(_shape(v)):
                return 1
            constant = _pow2(self.axis.get(v).constancy[dim])  # a constant run is a prefix (all or none)
            shaped = self._shaped(v, dim, depth) if depth < MAX_DEPTH else 1
            self.memo[key] = max(constant, shaped)
        return self.memo[key]

    def _shaped(self, v, dim, depth) -> int:
        op = v.defining_op
        if op is None:
            return 1
        if op.name in ("and", "or"):
            # two prefixes of one run: their intersection and their union are prefixes
            a, b = (self.run(x, dim, depth + 1) for x in op.operands)
            return gcd(a, b)
        if op.name == "cmp":
            return self._bound(op, dim)
        if op.name == "broadcast":
            src = op.operands[0]
            if _size(src, dim) == 1:
                return _pow2(_size(v, dim))  # one value repeated along dim
            return self.run(src, dim, depth + 1)
        if op.name == "expand_dims":
            axis = op.attrs["axis"]
            if dim == axis:
                return 1  # a new dim of size 1
            return self.run(op.operands[0], dim - (dim > axis), depth + 1)
        return 1

    def _bound(self, op, dim) -> int:
        """`x < y` / `x <= y` (or `y > x` / `y >= x`) with x rising by one along `dim` and y
        constant over the run: true up to the bound, false after. x's runs must start at
        multiples of w, so that no run wraps around the integer's range."""
        pred = op.attrs["pred"]
        if pred in ("lt", "le"):
            rising, bound = op.operands
        elif pred in ("gt", "ge"):
            bound, rising = op.operands
        else:
            return 1
        if not scalar_of(rising.type).is_int() or scalar_of(rising.type).is_bool():
            return 1
        x, y = self.axis.get(rising), self.axis.get(bound)
        return _pow2(gcd(gcd(x.contiguity[dim], x.divisibility[dim]), y.constancy[dim]))


def count_true(mask, dim: int, run: int, axis, emit, value):
    """An int32 block n of `mask`'s shape such that, for every aligned run of v elements
    along `dim` (v a power of two, at most `run`) starting at element e, min(n[e], v) is
    how many elements of the run `mask` holds true: the run's first ones. The caller has
    proved `prefix_run(mask, dim, axis) >= run`. Every n[e] is in [0, run]. `emit(name, operands, type, **attrs)`
    builds an op and returns its result; `value(v)` is what stands for a value of the
    mask's tree where the ops go (the pipeliner's clone of a later iteration's)."""
    return _Counter(axis, run, emit, value).count(mask, dim)


_UNSIGNED = {8: uint8, 16: uint16, 32: uint32, 64: uint64}


class _Counter:
    def __init__(self, axis, run, emit, value):
        self.axis, self.run, self.emit, self.value = axis, run, emit, value

    def constant(self, v, dim) -> bool:
        """Is `v` constant over each run (its constancy, or a broadcast of one value along dim)?"""
        op = v.defining_op
        if op is not None and op.name == "broadcast" and _size(op.operands[0], dim) == 1:
            return True
        return _pow2(self.axis.get(v).constancy[dim]) % self.run == 0

    def splat(self, t, number):
        return self.emit("constant", [], t, value=number)

    def count(self, v, dim):
        t = block_type(int32, _shape(v))
        op = v.defining_op
        if self.constant(v, dim):  # all of the run or none of it
            return self.emit("select", [self.value(v), self.splat(t, self.run), self.splat(t, 0)], t)
        if op.name in ("and", "or"):
            a, b = op.operands
            if self.constant(b, dim):
                a, b = b, a
            if self.constant(a, dim):  # a term constant over the run picks the other's count or none / all
                other = self.count(b, dim)
                picks = [other, self.splat(t, 0)] if op.name == "and" else [self.splat(t, self.run), other]
                return self.emit("select", [self.value(a), *picks], t)
            return self.emit("min" if op.name == "and" else "max", [self.count(a, dim), self.count(b, dim)], t)
        if op.name == "cmp":
            return self._bound(v, op, t)
        if op.name == "broadcast":
            return self.emit("broadcast", [self.count(op.operands[0], dim)], t)
        if op.name == "expand_dims" and op.attrs["axis"] != dim:
            axis = op.attrs["axis"]
            return self.emit("expand_dims", [self.count(op.operands[0], dim - (dim > axis))], t, axis=axis)
        raise ValueError(f"{op.name} is not a proved prefix of runs of {self.run}")  # prefix_run said otherwise

    def _bound(self, v, op, t):
        """x < y: the distance y - x clamped to the run where x < y, else 0 (x <= y: one
        more, the bound itself). Taken unsigned: exact wherever x < y, even past the signed
        range."""
        rising, bound = op.operands if op.attrs["pred"] in ("lt", "le") else op.operands[::-1]
        x, y = self.value(rising), self.value(bound)
        s = scalar_of(rising.type)
        u = _UNSIGNED[s.primitive_bitwidth]
        wide = block_type(s, _shape(v))
        distance = self.emit("sub", [y, x], wide)
        if s != u:
            distance = self.emit("cast", [distance], block_type(u, _shape(v)))  # the same bits
        inclusive = op.attrs["pred"] in ("le", "ge")
        cap = self.splat(distance.type, self.run - inclusive)
        n = self.emit("cast", [self.emit("min", [distance, cap], distance.type)], t)
        if inclusive:
            n = self.emit("add", [n, self.splat(t, 1)], t)
        return self.emit("select", [self.value(v), n, self.splat(t, 0)], t)
