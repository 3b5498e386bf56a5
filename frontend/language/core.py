"""The values a kernel computes with: `constexpr` and `tensor`, and the `builtin` mark.

A `tensor` wraps one block-IR value (a scalar, a pointer or a block). Its operators and
methods hand over to `kiln.language.semantic`, which holds the typing and broadcasting
rules and emits the IR. A `constexpr` is a Python value known at compile time;
arithmetic on constexprs stays in Python.
"""
from __future__ import annotations

import builtins
import functools
import inspect
from typing import Any

from kiln.constexpr import _unwrap, constexpr, constexpr_type  # noqa: F401  (tl.constexpr, tl.constexpr_type)
from kiln.ir.types import (  # noqa: F401  (re-exported as tl.*)
    bfloat16, block_type, dtype, float8e4b8, float8e4b15, float8e4nv, float8e5, float8e5b16, float16, float32, float64,
    int1, int8, int16, int32, int64, pointer_type, uint8, uint16, uint32, uint64,
)

void = None  # Triton exposes tl.void; kernels only compare against it.
CONSTEXPR_0 = constexpr(0)  # Triton's default for `descending` parameters
_unwrap_if_constexpr = _unwrap  # Triton's name, which Inductor's helper kernels call

# Triton's dtype class attributes and exponent_bias, which Triton's tests and users read
# (`tl.dtype.SINT_TYPES`, `tl.float16.exponent_bias`).
dtype.SINT_TYPES = ["int8", "int16", "int32", "int64"]
dtype.UINT_TYPES = ["int1", "uint8", "uint16", "uint32", "uint64"]
dtype.FP_TYPES = ["fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64"]
dtype.STANDARD_FP_TYPES = ["fp16", "bf16", "fp32", "fp64"]
dtype.OTHER_TYPES = ["void"]
_EXPONENT_BIAS = {"fp8e4b15": 15, "fp8e4nv": 7, "fp8e4b8": 8, "fp8e5": 15, "fp8e5b16": 16, "fp16": 15, "bf16": 127,
                  "fp32": 127, "fp64": 1023}
dtype.exponent_bias = property(lambda self: _EXPONENT_BIAS.get(self.name))


def builtin(fn):
    """Mark `fn` as a kiln builtin: the AST frontend calls it with tensors and constexprs as they are.

    Triton's builtins take the code generator's state as `_semantic=` (some also `_generator=`), and
    Python code that a kernel runs (an aggregate's `__init__`, a user's `@builtin`) hands it on:
    `tl.arange(0, 4, _semantic=_semantic)`. kiln's state is the builder's, so a builtin that does
    not name them gets a wrapper that drops them."""
    if "_semantic" in inspect.signature(fn).parameters:
        fn.__kiln_builtin__ = True
        return fn

    @functools.wraps(fn)
    def call(*args, _semantic=None, _generator=None, **kwargs):
        return fn(*args, **kwargs)
    call.__kiln_builtin__ = True
    return call


def is_builtin(fn) -> bool:
    if isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__kiln_builtin__", False) or isinstance(getattr(fn, "__self__", None), tensor)


class tuple_type:
    """The type of a kernel's tuple (Triton's `tl.tuple_type`): its elements' types, and the field
    names of a named tuple ("" each otherwise)."""

    def __init__(self, types, fields=None):
        self.types = list(types)
        self.fields = list(fields) if fields else [""] * len(self.types)

    @classmethod
    def of(cls, values: tuple) -> "tuple_type":
        types = [cls.of(v) if isinstance(v, builtins.tuple) else
                 constexpr_type(v) if not hasattr(v, "type") else v.type for v in values]
        return cls(types, getattr(type(values), "_fields", None))

    def __iter__(self):
        return iter(self.types)

    def __getitem__(self, index):
        return self.types[index]

    def __eq__(self, other):
        return type(self) is type(other) and self.types == other.types and self.fields == other.fields

    def __hash__(self):
        return hash((builtins.tuple(map(str, self.types)), builtins.tuple(self.fields)))

    def __repr__(self):
        return "[" + ",".join(f"{k}:{v}" for k, v in zip(self.fields, self.types)) + "]"


def must_use_result(fn, message=True):
    """Triton's mark for a function whose result a kernel must use: calling it as a statement of
    its own is a compile error (`@must_use_result("why")` adds the reason to the message)."""
    if isinstance(fn, str):
        return lambda f: must_use_result(f, fn)
    fn._must_use_result = message
    return fn


def _semantic():
    from . import semantic
    return semantic


def _binary(name, reflected=False, **flags):
    def method(self, other):
        fn = getattr(_semantic(), name)
        return fn(other, self, **flags) if reflected else fn(self, other, **flags)
    method.__name__ = name
    return method


class Shape(list):
    """A block's shape in a kernel: a list of constexprs whose slices are shapes too, and which
    adds and compares with a tuple or a list alike."""

    def __getitem__(self, index):
        got = super().__getitem__(index)
        return Shape(got) if isinstance(index, builtins.slice) else got

    def __add__(self, other):
        return Shape([*self, *other])

    def __radd__(self, other):
        return Shape([*other, *self])

    def __eq__(self, other):
        return isinstance(other, (list, builtins.tuple)) and list(self) == list(other)

    def __ne__(self, other):
        return not self == other

    __hash__ = None


class tensor:
    """A value in a kernel: a scalar, pointer or block held by one block-IR value."""

    def __init__(self, handle, type: dtype):
        self.handle = handle
        self.type = type

    @property
    def dtype(self) -> dtype:
        return self.type.scalar

    @property
    def shape(self):
        """A list of constexprs, as Triton's (`x.shape == [1, N]` holds), that also adds and compares
        with tuples (`x.shape[:1] + (1,)`), as Triton's tuple of them does."""
        return Shape(constexpr(d) for d in self.type.shape)

    @property
    def numel(self):
        return constexpr(self.type.numel)

    @property
    def T(self):
        return _semantic().permute(self, (1, 0))  # as Triton: only a 2-D block has one

    def __repr__(self):
        return f"tensor({self.type})"

    def __bool__(self):
        raise TypeError("a tensor has no truth value at compile time; use it in an `if` of the kernel "
                        "or compare constexprs instead")

    def __index__(self):
        raise TypeError("a tensor cannot be used where a compile-time integer (constexpr) is needed")

    # (in a debug build, integer +, - and * assert that their results fit: Triton's sanitize_overflow)
    __add__, __radd__ = _binary("add", sanitize=True), _binary("add", True, sanitize=True)
    __sub__, __rsub__ = _binary("sub", sanitize=True), _binary("sub", True, sanitize=True)
    __mul__, __rmul__ = _binary("mul", sanitize=True), _binary("mul", True, sanitize=True)
    __truediv__, __rtruediv__ = _binary("truediv"), _binary("truediv", True)
    __floordiv__, __rfloordiv__ = _binary("floordiv"), _binary("floordiv", True)
    __mod__, __rmod__ = _binary("mod"), _binary("mod", True)
    __and__, __rand__ = _binary("and_"), _binary("and_", True)
    __or__, __ror__ = _binary("or_"), _binary("or_", True)
    __xor__, __rxor__ = _binary("xor_"), _binary("xor_", True)
    __lshift__, __rlshift__ = _binary("shl"), _binary("shl", True)
    __rshift__ = _binary("shr")

    def __rrshift__(self, other):  # the shift is arithmetic when this tensor (the right operand) is signed
        return _semantic().shr(other, self, signed=self.dtype.is_int_signed())

    __lt__, __le__ = _binary("less"), _binary("less_equal")
    __gt__, __ge__ = _binary("greater"), _binary("greater_equal")
    __eq__, __ne__ = _binary("equal"), _binary("not_equal")

    # Triton's tensors have no `**` and no unary `+`: its code generator looks the operator up on
    # the tensor and fails with AttributeError, and so does kiln, in the same words
    def __pow__(self, other):
        raise AttributeError("'tensor' object has no attribute '__pow__' (Triton's tensors have no ** operator: "
                             "multiply, or use tl.extra.cuda.libdevice.pow for floats)")

    def __rpow__(self, other):
        raise AttributeError("'tensor' object has no attribute '__rpow__' (Triton's tensors have no ** operator: "
                             "use tl.exp2 or tl.extra.cuda.libdevice.pow for floats)")

    def __hash__(self):
        return id(self)

    def __neg__(self):
        return _semantic().neg(self, sanitize=True)

    def __pos__(self):
        raise AttributeError("'tensor' object has no attribute '__pos__' (Triton's tensors have no unary +: "
                             "drop it)")

    def __invert__(self):
        return _semantic().invert(self)

    def __abs__(self):
        return _semantic().abs(self)

    def __getitem__(self, slices):
        return _semantic().subscript(self, slices)

    def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
        return _semantic().cast(self, dtype, fp_downcast_rounding=fp_downcast_rounding, bitcast=bitcast)

    def logical_and(self, other):
        s = _semantic()
        return s.logical_and(s.logical_operand(self, "and"), s.logical_operand(s.to_tensor(other), "and"))

    def logical_or(self, other):
        s = _semantic()
        return s.logical_or(s.logical_operand(self, "or"), s.logical_operand(s.to_tensor(other), "or"))

    def __getattr__(self, name):
        # Triton's tensor methods: x.sum(0), x.reshape(...), x.broadcast_to(...), ...
        from . import _methods
        fn = _methods.get(name)
        if fn is None:
            raise AttributeError(f"'tensor' object has no attribute '{name}'")
        return functools.partial(fn, self)


def to_value(v: Any):
    """Unwrap a constexpr; leave tensors and other objects alone."""
    return _unwrap(v)


class range:
    """`for i in tl.range(start, end, step, num_stages=...)`: a loop of the kernel with hints to the
    compiler, attributes of its `for` op (kiln.ast_to_ir): `num_stages`, `loop_unroll_factor`, and the
    switches `disallow_acc_multi_buffer`, `flatten`, `warp_specialize` and `disable_licm` (hoist no
    loop-invariant code out of the loop)."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False, disable_licm=False):
        raise RuntimeError("tl.range can only be used as the iterable of a for loop inside a kernel")


class static_range:
    """`for i in tl.static_range(start, end, step)`: a loop unrolled at compile time; i is a constexpr."""

    def __init__(self, arg1, arg2=None, step=None):
        raise RuntimeError("tl.static_range can only be used as the iterable of a for loop inside a kernel")


def get_int_dtype(bitwidth: int, signed: bool) -> dtype:
    """The integer dtype of `bitwidth` bits (Triton's core.get_int_dtype)."""
    name = ("int" if signed or bitwidth == 1 else "uint") + str(int(bitwidth))
    return dtype(name)


def _aggregate(cls):
    """Triton's `@tl.core._aggregate`: a class whose instances, made inside a kernel, hold tensors
    and constexprs in the fields its annotations name. Its `__init__` runs as Python (given
    `_semantic=None` if it asks for it) and must set every field; in a kernel the fields read as
    attributes, `@jit` methods take the instance as `self`, plain methods run as Python, and the
    instance goes into @jit calls and through loops and branches field by field. A field cannot be
    assigned in a kernel: an aggregate is a value."""
    if not isinstance(cls, type):
        raise TypeError(f"@_aggregate decorates a class, not a {type(cls).__name__}")
    fields = builtins.tuple(getattr(cls, "__annotations__", {}))
    init = cls.__init__
    takes_semantic = "_semantic" in inspect.signature(init).parameters

    def __init__(self, *args, **kwargs):
        if takes_semantic:
            kwargs.setdefault("_semantic", None)
        init(self, *args, **kwargs)
        missing = [name for name in fields if name not in self.__dict__]
        if missing:
            raise TypeError(f"{cls.__name__}.__init__ left {', '.join(missing)} unset (every annotated field needs a value)")

    def rebuild(self, values: dict):
        made = object.__new__(type(self))
        made.__dict__.update(values)
        return made

    namespace = {"__init__": functools.wraps(init)(__init__), "__kiln_aggregate_fields__": fields,
                 "_rebuild": rebuild, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                 "__doc__": cls.__doc__}
    return type(cls.__name__, (cls,), namespace)


def is_aggregate(value) -> bool:
    return hasattr(type(value), "__kiln_aggregate_fields__")


@builtin
def aggregate_replace(instance, **changes):
    """Triton 3.9's `tl.aggregate_replace`: a new aggregate of `instance`'s class made with its
    fields, `changes` replacing some (as `dataclasses.replace`: the class's `__init__` runs)."""
    if not is_aggregate(instance):
        raise TypeError(f"aggregate_replace() expects an aggregate instance, got {type(instance).__name__}")
    fields = type(instance).__kiln_aggregate_fields__
    unknown = [name for name in changes if name not in fields]
    if unknown:
        raise TypeError(f"{type(instance).__name__} has no field {unknown[0]!r}")
    return type(instance)(**{**{name: getattr(instance, name) for name in fields}, **changes})


# constexpr lives in kiln.constexpr (the JIT imports it without the language); this module is its
# public home (tl.constexpr), by which it is named and pickled, and tells it what a tensor is
import kiln.constexpr as _constexpr_module  # noqa: E402

constexpr.__module__ = constexpr_type.__module__ = __name__
_constexpr_module._TENSOR = tensor


class slice_type:
    """The type of a `tl.slice` (Triton 3.9's `slice_type`)."""
    name = "slice_type"

    def __eq__(self, other) -> bool:
        return isinstance(other, slice_type)

    def __hash__(self) -> int:
        return hash(self.name)


class Slice:
    """Triton 3.9's `tl.slice(start, stop, step)`, exported under that name: a slice as a kernel's value.
    Indexing takes it as Python's `start:stop:step` (a block takes `:` alone, a tuple any slice)."""

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step
        self.type = slice_type()

    def as_python(self):
        """Python's slice of the same (constexpr) bounds."""
        return builtins.slice(_unwrap(self.start), _unwrap(self.stop), _unwrap(self.step))
