"""`constexpr`, a kernel's compile-time constant (`tl.constexpr`), and its type. A module of its own,
outside the language package: the JIT specializes arguments to constexprs, and the language's own
@jit functions (tl.rand, tl.sum) are built by the JIT, so the JIT cannot import the language.
`kiln.language.core` re-exports both names.
"""
from __future__ import annotations

import builtins
import operator as _op

# `kiln.language.core.tensor`, which sets it: a constexpr leaves an operation with a tensor to the
# tensor's (reflected) operator
_TENSOR: type = type("_NoTensorYet", (), {})


class constexpr_type:
    """The type of a compile-time constant (Triton's `tl.constexpr_type`): its value is part of it."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, constexpr_type) and type(self.value) is type(other.value) and \
            bool(self.value == other.value)

    def __hash__(self):
        return hash((constexpr_type, self.value))

    def __repr__(self):
        return f"constexpr_type[{self.value!r}]"


class constexpr:
    """A compile-time constant. Used as an annotation (`BLOCK: tl.constexpr`) and as a value."""

    def __init__(self, value):
        self.value = value.value if isinstance(value, constexpr) else value

    @property
    def type(self) -> constexpr_type:
        return constexpr_type(self.value)

    def __repr__(self):
        return f"constexpr[{self.value!r}]"

    def __index__(self):
        return self.value.__index__()

    def __int__(self):
        return int(self.value)

    def __float__(self):
        return float(self.value)

    def __bool__(self):
        return bool(self.value)

    def __hash__(self):
        return hash(self.value)

    def __call__(self, *args, **kwargs):
        return self.value(*args, **kwargs)

    def __getattr__(self, name):
        if name == "value":
            raise AttributeError(name)
        return getattr(self.value, name)

    def __iter__(self):
        return iter(self.value)

    def __len__(self):
        return len(self.value)

    def __getitem__(self, i):
        return constexpr(self.value[_unwrap(i)])


def _unwrap(v):
    return v.value if isinstance(v, constexpr) else v


def _constexpr_binary(op, reflected=False):
    def method(self, other):
        if isinstance(other, _TENSOR):
            return NotImplemented  # Python then calls the tensor's (reflected) operator
        a, b = self.value, _unwrap(other)
        return constexpr(op(b, a) if reflected else op(a, b))
    return method


def _constexpr_unary(op):
    def method(self):
        return constexpr(op(self.value))
    return method


for _name, _fn in [("add", _op.add), ("sub", _op.sub), ("mul", _op.mul), ("truediv", _op.truediv),
                   ("floordiv", _op.floordiv), ("mod", _op.mod), ("pow", _op.pow), ("and", _op.and_),
                   ("or", _op.or_), ("xor", _op.xor), ("lshift", _op.lshift), ("rshift", _op.rshift)]:
    setattr(constexpr, f"__{_name}__", _constexpr_binary(_fn))
    setattr(constexpr, f"__r{_name}__", _constexpr_binary(_fn, reflected=True))
for _name, _fn in [("eq", _op.eq), ("ne", _op.ne), ("lt", _op.lt), ("le", _op.le), ("gt", _op.gt), ("ge", _op.ge)]:
    setattr(constexpr, f"__{_name}__", _constexpr_binary(_fn))
for _name, _fn in [("neg", _op.neg), ("pos", _op.pos), ("invert", _op.invert), ("abs", builtins.abs)]:
    setattr(constexpr, f"__{_name}__", _constexpr_unary(_fn))
constexpr.__hash__ = lambda self: hash(self.value)


