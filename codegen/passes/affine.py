"""Integer index values as polynomials, for proving what addresses and masks select.

A value's form is a polynomial with integer coefficients over atoms:
    ("idx", d)      the element's index along dim d of the value's own shape (an arange)
    ("wrap", d, n)  `(start + idx_d) % E` along dim d: `Forms.wraps[n]` is (start, E)
    ("v", n)        an opaque int32 scalar, `Forms.values[n]` (a kernel argument, a loop's
                    induction variable, pid * BLOCK ...)
A polynomial is a dict from monomials (sorted tuples of atoms) to coefficients; () is the
constant term. Ops the forms see through: constants, arange, splat, broadcast,
expand_dims (dims shift), add, sub, mul, int casts that widen, and the hints. Anything
else is an atom when it is a scalar and has no form when it is a block.
"""
from __future__ import annotations

from kiln.ir.types import block_type, scalar_of

MAX_TERMS = 32  # a larger polynomial is not an address this pass can use
HINTS = ("multiple_of", "max_contiguous", "max_constancy")


def add(a: dict, b: dict, scale: int = 1) -> dict:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + scale * c
        if out[m] == 0:
            del out[m]
    return out


def mul(a: dict, b: dict) -> dict | None:
    out: dict = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
            if out[m] == 0:
                del out[m]
    return out if len(out) <= MAX_TERMS else None


def constant(c: int) -> dict:
    return {(): c} if c else {}


def atoms_of(poly: dict) -> set:
    return {a for m in poly for a in m}


def substitute(poly: dict, atom, by: dict) -> dict | None:
    """`poly` with every factor `atom` replaced by the polynomial `by`."""
    out: dict = {}
    for m, c in poly.items():
        term = constant(c)
        for a in m:
            term = mul(term, by if a == atom else {(a,): 1})
            if term is None:
                return None
        out = add(out, term)
    return out


def shift(poly: dict, axis: int) -> dict:
    """Forms of an expand_dims at `axis`: dims from `axis` on move one up."""
    def moved(a):
        if a[0] in ("idx", "wrap") and a[1] >= axis:
            return (a[0], a[1] + 1) + a[2:]
        return a
    return {tuple(sorted(moved(a) for a in m)): c for m, c in poly.items()}


def _is_int(t) -> bool:
    s = scalar_of(t)
    return s.is_int() and not s.is_bool()


class Forms:
    """Forms of the values of one function, memoized; atoms numbered as they are met."""

    def __init__(self):
        self.values: list = []
        self.wraps: list = []
        self._index: dict = {}
        self._memo: dict = {}

    def atom(self, v) -> tuple:
        if v not in self._index:
            self._index[v] = len(self.values)
            self.values.append(v)
        return ("v", self._index[v])

    def scalar(self, v) -> dict:
        return {(self.atom(v),): 1}

    def of(self, v) -> dict | None:
        if v not in self._memo:
            self._memo[v] = self._form(v)
        return self._memo[v]

    def _form(self, v):
        if not _is_int(v.type):
            return None
        op = v.defining_op
        block = isinstance(v.type, block_type)
        opaque = None if block else self.scalar(v)
        if op is None:
            return opaque
        name, args = op.name, op.operands
        if name == "constant":
            value = op.attrs.get("value")
            return constant(value) if isinstance(value, int) and not isinstance(value, bool) else opaque
        if name == "arange":
            return add({(("idx", 0),): 1}, constant(op.attrs["start"]))
        if name in ("splat", "broadcast") or name in HINTS:
            return self.of(args[0])
        if name == "expand_dims":
            inner = self.of(args[0])
            return None if inner is None else shift(inner, op.attrs["axis"])
        if name in ("add", "sub", "mul"):
            a, b = self.of(args[0]), self.of(args[1])
            if a is None or b is None:
                return opaque
            got = mul(a, b) if name == "mul" else add(a, b, 1 if name == "add" else -1)
            return opaque if got is None else got
        if name == "cast" and _is_int(args[0].type):
            src, dst = scalar_of(args[0].type), scalar_of(v.type)
            same_value = dst.primitive_bitwidth >= src.primitive_bitwidth and dst.signed == src.signed
            return self.of(args[0]) if same_value else opaque
        if name == "rem" and block:
            return self._wrap(self.of(args[0]), self.of(args[1]))
        return opaque

    def _wrap(self, x, e):
        """`(start + idx_d) % E`, start and E scalars (E one atom): a wrap atom."""
        if x is None or e is None or len(e) != 1:
            return None
        (m, c), = e.items()
        if c != 1 or len(m) != 1 or m[0][0] != "v":
            return None
        dims = [a for mono in x for a in mono if a[0] != "v"]
        if len(dims) != 1 or dims[0][0] != "idx" or x.get((dims[0],)) != 1:
            return None
        start = add(x, {(dims[0],): 1}, -1)
        self.wraps.append((start, self.values[m[0][1]]))
        return {(("wrap", dims[0][1], len(self.wraps) - 1),): 1}
