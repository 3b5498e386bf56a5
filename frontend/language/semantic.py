"""The rules layer: typing, promotion, broadcasting and IR emission for every builtin.

The public functions of `kiln.language` are thin: they unwrap constexprs and hand over
to the functions here, which check types, apply Triton's promotion table and
broadcasting rules, and append block-IR ops through the builder of the kernel being
built. Errors are `TypeError`/`ValueError` with a plain message; the AST frontend adds
the user's file, line and caret.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import threading
import warnings

import numpy as np

from kiln.ir import Block, Builder
from kiln.ir.ops import PREDICATE_OPS, mixed_fp8
from kiln.ir.types import (
    bfloat16_value, block_type, dtype, float16, float32, float64, int1, int32, int64, is_power_of_two,
    pointer_type, scalar_of, uint32, uint64, with_shape,
)

from .core import constexpr, tensor


# --- the kernel being built -------------------------------------------------------------

class _State(threading.local):
    builder: Builder | None = None
    generator = None  # the AST generator, which knows how to inline @jit calls
    options: dict = {}  # the kernel's compile options (num_warps, ...) while it is built
    global_reads: dict | None = None  # (name, id(module dict)) -> (module dict, value) the kernel read
    keep_calls: bool = False  # @jit calls become `call` ops, not inlined (kiln.ttir's text only)


state = _State()


def builder() -> Builder:
    if state.builder is None:
        raise RuntimeError("kiln.language functions can only be called inside a @kiln.jit function")
    return state.builder


@contextlib.contextmanager
def insertion_block(block: Block):
    """Emit ops into `block` for the duration of the `with`."""
    b = builder()
    saved = b.block
    b.block = block
    try:
        yield block
    finally:
        b.block = saved


def warn_at_user_line(message: str) -> None:
    """A UserWarning shown at the kernel line being built (the user's), not inside kiln."""
    loc = state.builder.loc if state.builder is not None else None
    if loc is None:
        warnings.warn(message, stacklevel=3)
    else:
        warnings.warn_explicit(message, UserWarning, loc.file, loc.line)


def call_jit(fn, args, kwargs=None, elementwise=False):
    """Inline a @jit function (e.g. a reduce's combine function) at the insertion point; with
    `elementwise`, an `if` on a block inside it selects per element (tl.map_elementwise)."""
    return state.generator.call_jit_function(fn, list(args), dict(kwargs or {}), elementwise)


def _emit(name, operands, result_type, **attrs) -> tensor:
    value = builder().value(name, [t.handle for t in operands], result_type, **attrs)
    return tensor(value, result_type)


# --- scalars and constants --------------------------------------------------------------

def unwrap(v):
    return v.value if isinstance(v, constexpr) else v


def is_python_scalar(v) -> bool:
    v = unwrap(v)
    return isinstance(v, (bool, numbers.Number, np.generic)) and not isinstance(v, tensor)


def python_scalar_type(v) -> dtype:
    """Triton's type for a Python number used in a kernel."""
    v = unwrap(v)
    if isinstance(v, (bool, np.bool_)):
        return int1
    if isinstance(v, (int, np.integer)):
        v = int(v)
        if -2**31 <= v < 2**31:
            return int32
        if 2**31 <= v < 2**32:
            return uint32
        if -2**63 <= v < 2**63:
            return int64
        if 2**63 <= v < 2**64:
            return uint64
        raise ValueError(f"integer {v} does not fit in 64 bits")
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if v != v or math.isinf(v) or v == 0.0 or 2.0**-126 <= math.fabs(v) <= 3.4028234663852886e38:
            return float32  # like Triton: fp32 subnormals and overflows become fp64
        return float64
    raise TypeError(f"cannot use {type(v).__name__} {v!r} as a kernel value")


def _normalize_constant(value, t: dtype):
    """`value` as stored in a constant attribute of scalar type `t`, exactly as NumPy rounds it."""
    scalar = t.scalar
    if scalar.is_bf16():
        return bfloat16_value(value)  # as NumPy (ml_dtypes) rounds it, without importing ml_dtypes
    if scalar.is_floating():
        with np.errstate(over="ignore"):  # a number beyond the type's range is its infinity
            return float(np.array(value, dtype=np.float64).astype(scalar.to_numpy()).astype(np.float64))
    if scalar == int1:
        return bool(value)
    if scalar.is_ptr():
        return int(value)
    bits = scalar.primitive_bitwidth
    v = int(value) & ((1 << bits) - 1)
    if scalar.is_int_signed() and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def constant(value, t: dtype) -> tensor:
    return _emit("constant", [], t, value=_normalize_constant(unwrap(value), t))


def to_tensor(v) -> tensor:
    if isinstance(v, tensor):
        return v
    v = unwrap(v)
    if isinstance(v, tensor):
        return v
    if v is None:
        raise TypeError("None cannot be used as a value here")
    return constant(v, python_scalar_type(v))


def _constant_value(t: tensor):
    op = t.handle.defining_op
    return op.attrs["value"] if op is not None and op.name == "constant" else None


# --- broadcasting -----------------------------------------------------------------------

def splat(t: tensor, shape) -> tensor:
    shape = tuple(shape)
    if not shape:
        return t
    c = _constant_value(t)
    if c is not None:
        return _emit("constant", [], block_type(t.type, shape), value=c)
    return _emit("splat", [t], block_type(t.type, shape))


def expand_dims(t: tensor, axis) -> tensor:
    axes = [unwrap(a) for a in (axis if isinstance(unwrap(axis), (list, tuple)) else [axis])]
    axes = [unwrap(a) for a in axes]
    new_rank = len(t.type.shape) + len(axes)
    for a in axes:
        if not -new_rank <= a < new_rank:
            raise ValueError(f"invalid axis {a}: expand_dims of a rank-{len(t.type.shape)} tensor by "
                             f"{len(axes)} axes gives rank {new_rank}")
    axes = sorted(a + new_rank if a < 0 else a for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"expand_dims: duplicate axes, normalized axes = {axes}")
    for a in axes:
        shape = list(t.type.shape)
        shape.insert(a, 1)
        if len(shape) == 1:
            t = splat(t, shape)
        else:
            t = _emit("expand_dims", [t], block_type(t.dtype, shape), axis=a)
    return t


def broadcast_to(t: tensor, shape) -> tensor:
    shape = tuple(int(unwrap(d)) for d in shape)
    t = to_tensor(t)
    src = t.type.shape
    if src == shape:
        return t
    if not src:
        return splat(t, shape)
    if len(src) > len(shape):
        raise ValueError(f"cannot broadcast shape {list(src)} to {list(shape)}")
    while len(t.type.shape) < len(shape):
        t = expand_dims(t, 0)
    src = t.type.shape
    for s, d in zip(src, shape):
        if s != d and s != 1:
            raise ValueError(f"cannot broadcast shape {list(src)} to {list(shape)}")
    return _emit("broadcast", [t], block_type(t.dtype, shape))


def broadcast_shapes(a, b):
    if not a:
        return tuple(b)
    if not b:
        return tuple(a)
    a, b = list(a), list(b)
    while len(a) < len(b):
        a.insert(0, 1)
    while len(b) < len(a):
        b.insert(0, 1)
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and 1 not in (x, y):
            raise ValueError(f"cannot broadcast shapes {a} and {b}: dimension {i} is {x} vs {y}")
        out.append(max(x, y))
    return tuple(out)


def broadcast_pair(a: tensor, b: tensor):
    shape = broadcast_shapes(a.type.shape, b.type.shape)
    return broadcast_to(a, shape), broadcast_to(b, shape)


# --- promotion --------------------------------------------------------------------------

_KIND_RANK = {"bool": 0, "int": 1, "float": 2}


def integer_promote(a: dtype, b: dtype) -> dtype:
    """C's usual arithmetic conversions on two integer types."""
    if a.signed == b.signed:
        return a if a.primitive_bitwidth > b.primitive_bitwidth else b
    unsigned, signed = (a, b) if not a.signed else (b, a)
    return unsigned if unsigned.primitive_bitwidth >= signed.primitive_bitwidth else signed


def is_fp8e4b15(t) -> bool:
    return scalar_of(t).name == "fp8e4b15"


def fp8e4b15_to_fp16(x: tensor) -> tensor:
    """fp8e4b15 -> fp16 exactly as Triton's GPU conversion: both have exponent bias 15, so the
    byte's sign goes to bit 15 and its other seven bits shift into fp16's exponent and mantissa
    (every byte is finite; 0x7f is 1.875)."""
    w = cast(cast(x, dtype("uint8"), bitcast=True), dtype("uint16"))
    bits = or_(shl(and_(w, 0x80), 8), shl(and_(w, 0x7F), 7))
    return cast(bits, float16, bitcast=True)


def fp16_to_fp8e4b15(h: tensor) -> tensor:
    """fp16 -> fp8e4b15 as Triton's GPU conversion: the magnitude clamped at 1.75 (infinities and
    NaN included), rounded to 3 mantissa bits with ties away from zero, the sign kept."""
    bits = cast(h, dtype("uint16"), bitcast=True)
    magnitude = minimum(and_(bits, 0x7FFF), 0x3F00)  # bit order is value order for finite halves
    byte = or_(shr(add(magnitude, 0x40), 7), and_(shr(bits, 8), 0x80))
    return cast(cast(byte, dtype("uint8")), dtype("fp8e4b15"), bitcast=True)


def _cast_fp8e4b15(x: tensor, dst: dtype) -> tensor:
    """A conversion to or from fp8e4b15, through fp16 as Triton does (fp32 reaches fp16 rounding
    toward zero; other types go through fp32 first)."""
    if is_fp8e4b15(x.dtype):
        return cast(fp8e4b15_to_fp16(x), dst)
    if not x.dtype.is_fp16():
        x = cast(cast(x, float32), float16, fp_downcast_rounding="rtz")
    return fp16_to_fp8e4b15(x)


def computation_type(a: dtype, a_is_py: bool, b: dtype, b_is_py: bool, div_or_mod: bool) -> dtype:
    """Triton's promotion table for a binary arithmetic op."""
    if a_is_py != b_is_py:
        py, ten = (a, b) if a_is_py else (b, a)
        if _KIND_RANK[py.kind] <= _KIND_RANK[ten.kind]:
            if div_or_mod and ten in (float16,) or (div_or_mod and ten.is_bf16()):
                return float32
            return ten
    if a.is_fp64() or b.is_fp64():
        return float64
    if a.is_fp32() or b.is_fp32():
        return float32
    if a.is_fp16() or b.is_fp16():
        return float32 if div_or_mod else float16
    if a.is_bf16() or b.is_bf16():
        if div_or_mod or not (a.is_bf16() and b.is_bf16()):
            return float32
        return a
    if a.is_fp8() or b.is_fp8():
        if a.is_fp8() and b.is_fp8():
            return a if a == b else float16
        return float16 if (a.is_fp8() and b.is_int()) or (b.is_fp8() and a.is_int()) else float32
    if not a.is_int() or not b.is_int():
        raise TypeError(f"unexpected types {a} and {b}")
    if div_or_mod and a.signed != b.signed:  # int1 counts as unsigned, as in Triton
        raise TypeError(f"Cannot use /, #, or % with {a!r} and {b!r} because they have different signedness; "
                        "cast them to one signedness first (Triton's words; // is meant by #)")
    return integer_promote(a, b)


def _check_negative_unsigned(py_value, t: dtype):
    if isinstance(py_value, (int, float)) and not isinstance(py_value, bool) and py_value < 0 and t.is_int_unsigned():
        raise ValueError(f"cannot do a binary operation between an unsigned tensor ({t}) and a negative scalar "
                         f"({py_value}); cast the tensor to a signed type first")


def _check_scalar_range(py_value, t: dtype):
    if t.is_int() and isinstance(py_value, (int, np.integer)) and not isinstance(py_value, (bool, np.bool_)):
        bits, signed = t.primitive_bitwidth, t.is_int_signed()
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not lo <= int(py_value) <= hi:
            raise ValueError(f"scalar {py_value} is out of range for type {t}")


def binary_operands(a, b, *, allow_ptr=False, arithmetic=True, div_or_mod=False):
    """Convert, broadcast and promote two operands to one type.

    A Python scalar of a kind no higher than the tensor's (bool < int < float) takes the
    tensor's type and must fit in it, as in Triton.
    """
    a_py, b_py = is_python_scalar(a), is_python_scalar(b)
    a_val, b_val = unwrap(a), unwrap(b)
    sa = python_scalar_type(a_val) if a_py else to_tensor(a).dtype
    sb = python_scalar_type(b_val) if b_py else to_tensor(b).dtype
    if sa.is_ptr() or sb.is_ptr():
        if not allow_ptr:
            raise TypeError(f"invalid operands of types {sa} and {sb}")
        return broadcast_pair(to_tensor(a), to_tensor(b))
    if not arithmetic:
        return broadcast_pair(to_tensor(a), to_tensor(b))
    t = computation_type(sa, a_py, sb, b_py, div_or_mod)
    operands = []
    for is_py, value in ((a_py, a_val), (b_py, b_val)):
        if is_py:  # as Triton: the Python number becomes a constant of the computation type directly
            _check_negative_unsigned(value, t)
            _check_scalar_range(value, t)
            operands.append(constant(value, t))
        else:
            operands.append(cast(to_tensor(value), t))
    return broadcast_pair(*operands)


# --- arithmetic -------------------------------------------------------------------------

_FOLDABLE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor}


def _fold_binary(name, a: tensor, b: tensor):
    """The constant result of `name` on two constants, when NumPy computes it exactly as the target does."""
    fn, ca, cb, t = _FOLDABLE.get(name), _constant_value(a), _constant_value(b), a.dtype
    exact = (t.is_int() and not t.is_int1()) or t.is_fp32() or t.is_fp64() or (t.is_int1() and name in _BITWISE)
    if fn is None or ca is None or cb is None or not exact:
        return None
    with np.errstate(all="ignore"):
        value = fn(np.array(ca, t.to_numpy()), np.array(cb, t.to_numpy()))
    return constant(value.item(), a.type)


_BITWISE = ("and", "or", "xor")


def _elementwise(name, a: tensor, b: tensor, **attrs) -> tensor:
    if is_fp8e4b15(a.dtype):  # no hardware computes in it: compute in fp16, convert back
        return cast(_elementwise(name, fp8e4b15_to_fp16(a), fp8e4b15_to_fp16(b), **attrs), a.dtype)
    folded = None if attrs else _fold_binary(name, a, b)
    return folded if folded is not None else _emit(name, [a, b], a.type, **attrs)


def add(a, b, sanitize=False):
    a, b = binary_operands(a, b, allow_ptr=True)
    if a.dtype.is_ptr() and b.dtype.is_ptr():
        raise TypeError("cannot add two pointers")
    if b.dtype.is_ptr():
        a, b = b, a
    if a.dtype.is_ptr():
        return addptr(a, b)
    if sanitize:
        _check_overflow("add", a, b)
    return _elementwise("add", a, b)


def addptr(p: tensor, offset: tensor) -> tensor:
    if not offset.dtype.is_int():
        raise TypeError(f"a pointer offset must be an integer, not {offset.dtype}")
    p, offset = broadcast_pair(p, offset)
    return _emit("addptr", [p, offset], p.type)


def sub(a, b, sanitize=False):
    a, b = binary_operands(a, b, allow_ptr=True)
    if a.dtype.is_ptr():
        if b.dtype.is_ptr():
            raise TypeError("subtracting two pointers is not supported; cast them to int64 first")
        return addptr(a, neg(b))
    if b.dtype.is_ptr():
        raise TypeError("cannot subtract a pointer from a number")
    if sanitize:
        _check_overflow("sub", a, b)
    return _elementwise("sub", a, b)


def mul(a, b, sanitize=False):
    a, b = binary_operands(a, b)
    if sanitize:
        _check_overflow("mul", a, b)
    return _elementwise("mul", a, b)


def _check_overflow(name, a: tensor, b: tensor) -> None:
    """In a debug build (unless compiled with sanitize_overflow=False), `a name b` on integers narrower
    than 64 bits asserts that the exact result fits the type (Triton's sanitize_overflow: its +, - and *
    of tensors, and tl.add/sub/mul): the operation done again in int64, its result compared with the
    type's bounds."""
    t = a.dtype
    if not _overflow_checked(t):
        return
    exact = _elementwise(name, cast(a, int64), cast(b, int64))
    fits = and_(greater_equal(exact, constant(t.get_int_min_value(), int64)),
                less_equal(exact, constant(t.get_int_max_value(), int64)))
    device_assert(fits, f"{t.name} overflow in {name}")


def _overflow_checked(t) -> bool:
    """Does this build check arithmetic on `t` for overflow (`_check_overflow`)?"""
    wanted = state.options.get("debug") and state.options.get("sanitize_overflow", True)
    return bool(wanted) and t.is_int() and t.primitive_bitwidth in (8, 16, 32)


def truediv(a, b):
    a, b = binary_operands(a, b, div_or_mod=True)
    if a.dtype.is_int():
        a, b = cast(a, float32), cast(b, float32)
    return _elementwise("div", a, b)


def floordiv(a, b):
    a, b = binary_operands(a, b, div_or_mod=True)
    if not a.dtype.is_int():
        raise TypeError(f"// needs integer operands, not {a.dtype}")
    return _elementwise("div", a, b)


def mod(a, b):
    a, b = binary_operands(a, b, div_or_mod=True)
    return _elementwise("rem", a, b)


def pow(a, b):
    a, b = binary_operands(a, b)
    if not a.dtype.is_floating():
        raise TypeError("** needs floating-point operands")
    return _elementwise("pow", a, b)


def _bitwise_operands(a, b):
    sa, sb = to_tensor(a).dtype, to_tensor(b).dtype
    if not sa.is_int() or not sb.is_int():
        raise TypeError(f"invalid operands of type {sa!r} and {sb!r}: bitwise operators and shifts need integers")
    a, b = binary_operands(a, b)  # Python scalars follow the arithmetic rule: int8 & 0xF stays int8
    sa, sb = a.dtype, b.dtype
    t = integer_promote(sa, sb)
    return cast(a, t), cast(b, t)


def and_(a, b):
    return _elementwise("and", *_bitwise_operands(a, b))


def or_(a, b):
    return _elementwise("or", *_bitwise_operands(a, b))


def xor_(a, b):
    return _elementwise("xor", *_bitwise_operands(a, b))


def shl(a, b):
    return _elementwise("shl", *_bitwise_operands(a, b))


def shr(a, b, signed=None):
    """`a >> b`: arithmetic when `a` is signed, logical when unsigned, whatever type the two
    promote to (as Triton: int8 >> uint32 shifts the uint32 bit pattern arithmetically).
    `signed` overrides: Triton takes the signedness from the tensor whose operator runs, so
    `200 >> x` with x uint8 shifts logically (`tensor.__rrshift__`)."""
    if signed is None:
        signed = to_tensor(a).dtype.is_int_signed()
    a, b = _bitwise_operands(a, b)
    t = a.dtype
    if t.is_int1() or t.is_int_signed() == signed:
        return _elementwise("shr", a, b)
    like = dtype(("int" if signed else "uint") + str(t.primitive_bitwidth))
    shifted = _elementwise("shr", cast(a, like, bitcast=True), cast(b, like, bitcast=True))
    return cast(shifted, t, bitcast=True)


def logical_and(a, b):
    a, b = cast(to_tensor(a), int1), cast(to_tensor(b), int1)
    return and_(a, b)


def logical_or(a, b):
    a, b = cast(to_tensor(a), int1), cast(to_tensor(b), int1)
    return or_(a, b)


def logical_not(a):
    return invert(cast(to_tensor(a), int1))


def logical_operand(t: tensor, what: str) -> tensor:
    """An operand of the kernel's `and`, `or` or `not` (or of x.logical_and/or): Triton bitcasts
    it to int1, which only int1 survives (a pointer is compared with null); any other type is
    rejected, in Triton's words."""
    if t.dtype.is_int1():
        return t
    if t.dtype.is_ptr():
        return cast(t, int1)
    raise ValueError(f"Cannot bitcast data-type of size {t.dtype.primitive_bitwidth} to data-type of size 1 "
                     f"(Triton's `{what}` takes boolean (int1) tensors only: compare with 0 first, e.g. "
                     f"`(x != 0)`, or use the bitwise & | ~)")


def neg(a, sanitize=False):
    a = to_tensor(a)
    if a.dtype.is_ptr():
        raise TypeError("cannot negate a pointer")
    if sanitize and _overflow_checked(a.dtype):  # Triton's unary minus is 0 - x, checked as any subtraction
        _check_overflow("sub", constant(0, a.type), a)
    if is_fp8e4b15(a.dtype):  # flip the sign bit
        return cast(xor_(cast(a, dtype("uint8"), bitcast=True), 0x80), a.dtype, bitcast=True)
    if a.dtype.is_floating():  # Triton's unary minus is 0 - x: -(+0.0) and -(-0.0) are both +0.0
        return _elementwise("sub", constant(0, a.type), a)
    return _emit("neg", [a], a.type)


def invert(a):
    a = to_tensor(a)
    if not a.dtype.is_int():
        raise TypeError(f"~ needs an integer operand, not {a.dtype}")
    return _emit("not", [a], a.type)


def abs(a):
    a = to_tensor(a)
    if a.dtype.is_ptr():
        raise TypeError(f"Unexpected dtype {a.dtype!r} (abs takes numbers, not pointers)")
    if a.dtype.is_int_unsigned():
        return a
    if is_fp8e4b15(a.dtype):  # clear the sign bit, as Triton does
        return cast(and_(cast(a, dtype("uint8"), bitcast=True), 0x7F), a.dtype, bitcast=True)
    return _emit("abs", [a], a.type)


def _compare(pred, a, b):
    # Triton makes Python scalars tensors first here, so int8 < 300 compares in int32
    a, b = binary_operands(to_tensor(a), to_tensor(b), allow_ptr=True)
    if a.dtype.is_ptr() != b.dtype.is_ptr():
        raise TypeError(f"cannot compare {a.dtype} with {b.dtype}")
    if a.dtype.is_ptr():  # Triton's comparisons take no pointers at all
        raise TypeError(f"invalid operands of type {a.dtype!r} and {b.dtype!r} "
                        "(Triton does not compare pointers: compare their offsets, or cast them to int64)")
    if is_fp8e4b15(a.dtype):
        a, b = fp8e4b15_to_fp16(a), fp8e4b15_to_fp16(b)
    return _emit("cmp", [a, b], with_shape(int1, a.type.shape), pred=pred)


def less(a, b): return _compare("lt", a, b)
def less_equal(a, b): return _compare("le", a, b)
def greater(a, b): return _compare("gt", a, b)
def greater_equal(a, b): return _compare("ge", a, b)
def equal(a, b): return _compare("eq", a, b)
def not_equal(a, b): return _compare("ne", a, b)


def _bf16_as_fp32(t: tensor) -> tensor:
    return cast(t, float32) if t.dtype.is_bf16() else t


def minimum(a, b, propagate_nan=False):
    # no scalar rule, and bfloat16 is computed in float32, as in Triton
    a, b = binary_operands(_bf16_as_fp32(to_tensor(a)), _bf16_as_fp32(to_tensor(b)))
    attrs = {"propagate_nan": True} if a.dtype.is_floating() and propagate_nan else {}
    return _elementwise("min", a, b, **attrs)


def maximum(a, b, propagate_nan=False):
    # no scalar rule, and bfloat16 is computed in float32, as in Triton
    a, b = binary_operands(_bf16_as_fp32(to_tensor(a)), _bf16_as_fp32(to_tensor(b)))
    attrs = {"propagate_nan": True} if a.dtype.is_floating() and propagate_nan else {}
    return _elementwise("max", a, b, **attrs)


def where(cond, x, y):
    cond = cast(to_tensor(cond), int1)
    x, y = binary_operands(x, y, allow_ptr=True)
    if (x.dtype.is_ptr() or y.dtype.is_ptr()) and x.dtype != y.dtype:
        raise TypeError(f"where: cannot select between {x.dtype} and {y.dtype}; pointers select only "
                        "with pointers of the same type")
    shape = broadcast_shapes(cond.type.shape, x.type.shape)
    cond, x, y = broadcast_to(cond, shape), broadcast_to(x, shape), broadcast_to(y, shape)
    return _emit("select", [cond, x, y], x.type)


def math_unary(name, x, *, allow_int=False):
    x = to_tensor(x)
    if is_fp8e4b15(x.dtype):
        y = math_unary(name, fp8e4b15_to_fp16(x), allow_int=allow_int)
        return y if name in PREDICATE_OPS else cast(y, x.dtype)
    if not x.dtype.is_floating() and not (allow_int and x.dtype.is_int()):
        raise TypeError(f"{name} needs a floating-point operand, not {x.dtype}")
    result = with_shape(int1, x.type.shape) if name in PREDICATE_OPS else x.type
    return _emit(name, [x], result)


def math_binary(name, a, b):
    a, b = binary_operands(a, b)
    if name == "umulhi":
        if not a.dtype.is_int():
            raise TypeError(f"umulhi needs integer operands, not {a.dtype}")
        if a.dtype.is_int_signed():
            # Triton's umulhi multiplies the bit patterns as unsigned numbers (__nv_umulhi,
            # checked on an H100 with Triton 3.6), whatever the signedness of the type
            unsigned = dtype(f"uint{a.dtype.primitive_bitwidth}")
            high = _elementwise(name, cast(a, unsigned, bitcast=True), cast(b, unsigned, bitcast=True))
            return cast(high, a.dtype, bitcast=True)
    elif not a.dtype.is_floating():
        raise TypeError(f"{name} needs floating-point operands, not {a.dtype}")
    return _elementwise(name, a, b)


def mulhi(a, b):
    """libdevice mulhi: the high half of the product, signed for signed types (the umulhi op
    reads the signedness of its type; tl.umulhi itself always multiplies as unsigned)."""
    a, b = binary_operands(a, b)
    if not a.dtype.is_int():
        raise TypeError(f"mulhi needs integer operands, not {a.dtype}")
    return _elementwise("umulhi", a, b)


def ldexp(x, n):
    """x * 2**n, exact where the result is representable: 2**n is applied as two halves, each a
    power of two built from exponent bits (so n may reach twice the exponent range)."""
    x, n = to_tensor(x), to_tensor(n)
    if not x.dtype.is_floating() or not n.dtype.is_int():
        raise TypeError(f"ldexp needs a float and an integer, not {x.dtype} and {n.dtype}")
    wide = x.dtype.is_fp64()
    t, bits, mantissa, bias = (float64, int64, 52, 1023) if wide else (float32, int32, 23, 127)
    x, n = cast(x, t), cast(n, bits)
    n = maximum(minimum(n, 2 * bias), -2 * bias)  # beyond this the result is 0 or inf anyway
    half = floordiv(n, 2)
    for part in (half, sub(n, half)):
        x = mul(x, cast(shl(add(part, bias), mantissa), t, bitcast=True))
    return x


def bit_count(name, x):
    """popc and clz (counts, returned as int32) and brev (same type) of an integer."""
    x = to_tensor(x)
    if not x.dtype.is_int() or x.dtype.is_int1():
        raise TypeError(f"{name} needs an integer operand, not {x.dtype}")
    result = _emit(name, [x], x.type)
    return result if name == "brev" else cast(result, int32)


def fma(x, y, z):
    x, y = binary_operands(x, y)
    x, z = binary_operands(x, z)
    x, y = binary_operands(x, y)
    if not x.dtype.is_floating():
        raise TypeError(f"fma needs floating-point operands, not {x.dtype}")
    return _emit("fma", [x, y, z], x.type)


def clamp(x, lo, hi, propagate_nan=False):
    """min(max(x, lo), hi) in the common float type, as Triton's clamp (floats only). A NaN
    in x gives lo unless propagate_nan; a NaN bound gives an unspecified result in Triton."""
    lo, hi = binary_operands(lo, hi)
    x, lo = binary_operands(x, lo)
    x, hi = binary_operands(x, hi)
    lo = broadcast_to(cast(lo, x.dtype), x.type.shape)
    if not x.dtype.is_floating():
        raise TypeError(f"clamp needs floating-point operands, not {x.dtype}; use tl.minimum and tl.maximum")
    attrs = {"propagate_nan": True} if propagate_nan else {}
    return _elementwise("min", _elementwise("max", x, lo, **attrs), hi, **attrs)


# --- libdevice's typed functions -------------------------------------------------------

def _dtype_names(args):
    return tuple(a.dtype.name for a in args)


def libdevice_operands(name, args, signatures):
    """`args` as tensors of one shape whose dtypes are one of `signatures` (tuples of dtype
    names), as Triton's libdevice dispatch: an exact match, else the operands promoted to
    their common arithmetic type. Anything else is a TypeError naming what is accepted."""
    args = [to_tensor(a) for a in args]
    if _dtype_names(args) not in signatures and len(args) > 1 and all(not a.dtype.is_ptr() for a in args):
        common = args[0]
        for a in args[1:]:
            common, _ = binary_operands(common, a)
        args = [cast(a, common.dtype) for a in args]
    if _dtype_names(args) not in signatures:
        accepted = " or ".join("(" + ", ".join(sig) + ")" for sig in signatures)
        raise TypeError(f"{name} takes {accepted}, not ({', '.join(_dtype_names(args))})")
    shape = ()
    for a in args:
        shape = broadcast_shapes(shape, a.type.shape)
    return [broadcast_to(a, shape) for a in args]


def libdevice_op(name, args, result_dtype=None, **attrs) -> tensor:
    """One op on operands of one shape (from `libdevice_operands`); the result has the last
    operand's type unless `result_dtype` is given."""
    result = args[-1].type if result_dtype is None else with_shape(result_dtype, args[-1].type.shape)
    return _emit(name, args, result, **attrs)


# --- indexing ---------------------------------------------------------------------------

def gather(src, index, axis):
    src, index = to_tensor(src), to_tensor(index)
    axis, rank = int(unwrap(axis)), len(src.type.shape)
    if not index.dtype.is_int():
        raise TypeError(f"gather's index must be an integer tensor, not {index.dtype}")
    if rank == 0 or len(index.type.shape) != rank:
        raise ValueError(f"gather: source {list(src.type.shape)} and index {list(index.type.shape)} "
                         "must be blocks of the same rank")
    if not -rank <= axis < rank:
        raise ValueError(f"gather axis {axis} is out of range for rank {rank}")
    axis %= rank
    for d, (s, i) in enumerate(zip(src.type.shape, index.type.shape)):
        if d != axis and s != i:
            raise ValueError(f"gather: index dimension {d} ({i}) must match the source's ({s})")
    return _emit("gather", [src, index], block_type(src.dtype, index.type.shape), axis=axis)


def histogram(values, num_bins, mask=None):
    values, num_bins = to_tensor(values), unwrap(num_bins)
    if len(values.type.shape) != 1:
        raise ValueError(f"histogram needs a 1-D input, not {list(values.type.shape)}")
    if not values.dtype.is_int():
        raise TypeError(f"histogram needs integer input, not {values.dtype}")
    (num_bins,) = check_shape([num_bins])
    operands = [values]
    if unwrap(mask) is not None:
        mask = broadcast_to(to_tensor(mask), values.type.shape)
        if not mask.dtype.is_int1():
            raise TypeError(f"histogram's mask must be boolean, not {mask.dtype}")
        operands.append(mask)
    return _emit("histogram", operands, block_type(int32, [num_bins]), num_bins=num_bins)


def inline_asm_elementwise(asm, constraints, args, dtypes, is_pure, pack):
    """Run `asm` on each group of `pack` elements of the broadcast `args`; one result per dtype."""
    asm, constraints, pack = unwrap(asm), unwrap(constraints), int(unwrap(pack))
    if not isinstance(asm, str) or not isinstance(constraints, str):
        raise TypeError("inline_asm_elementwise needs the asm and its constraints as strings")
    if pack < 1:
        raise ValueError(f"inline_asm_elementwise's pack must be positive, not {pack}")
    dtypes = unwrap(dtypes)
    single = not isinstance(dtypes, (tuple, list))
    dtypes = [unwrap(d) for d in ([dtypes] if single else dtypes)]
    if not dtypes or not all(isinstance(d, dtype) for d in dtypes):
        raise TypeError("inline_asm_elementwise's dtype must be a dtype or a tuple of them")
    args = [to_tensor(a) for a in unwrap(args)]
    shape = ()
    for a in args:
        shape = broadcast_shapes(shape, a.type.shape)
    args = [broadcast_to(a, shape) for a in args]
    types = [with_shape(d, shape) for d in dtypes]
    attrs = {"asm": asm, "constraints": constraints, "pack": pack}
    if not unwrap(is_pure):
        attrs["volatile"] = True  # keeps an impure asm from being merged or dropped
    op = builder().create("inline_asm", [a.handle for a in args], types, attrs)
    results = [tensor(v, t) for v, t in zip(op.results, types)]
    return results[0] if single else tuple(results)


# --- casts ------------------------------------------------------------------------------

def _fold_cast(value, src: dtype, dst: dtype):
    """The constant `value` of type `src` converted to `dst`, or None to leave it to the backend."""
    if src.is_floating() and dst.is_int() and not dst.is_int1():
        return None  # float->int saturation and NaN handling belong to the backend
    exact_as_float = src.is_floating() and not src.is_fp8() or src.is_int() and -(1 << 24) <= value <= 1 << 24
    if dst.is_bf16() and exact_as_float:
        return bfloat16_value(value)  # rounded once, as ml_dtypes does, without importing it
    # (a bf16 value is exact in fp32: read so, ml_dtypes stays unimported)
    arr = np.array(value, dtype=np.float32 if src.is_bf16() else src.to_numpy())
    if dst.is_int1():
        return bool(arr != 0)
    with np.errstate(all="ignore"):
        out = arr.astype(dst.to_numpy())
    return float(out) if dst.is_floating() else int(out)


def cast(x, dst, fp_downcast_rounding=None, bitcast=False) -> tensor:
    x = to_tensor(x)
    dst = unwrap(dst)
    if isinstance(dst, block_type):  # as Triton: a block type converts to its element (`bp.type.element_ty`)
        dst = dst.scalar
    if not isinstance(dst, dtype):
        raise TypeError(f"cast needs a scalar or pointer dtype, not {dst!r}")
    src = x.dtype
    bitcast = unwrap(bitcast)
    fp_downcast_rounding = unwrap(fp_downcast_rounding)
    result = with_shape(dst, x.type.shape)
    if src == dst:
        return x
    if bitcast:
        if src.primitive_bitwidth != dst.primitive_bitwidth:
            raise ValueError(f"cannot bitcast {src} ({src.primitive_bitwidth} bits) to {dst} "
                             f"({dst.primitive_bitwidth} bits)")
        return _emit("bitcast", [x], result)
    if src.is_ptr() and dst.is_ptr():
        return _emit("bitcast", [x], result)
    if (is_fp8e4b15(src) or is_fp8e4b15(dst)) and not (src.is_ptr() or dst.is_ptr()):
        if fp_downcast_rounding is not None:
            raise ValueError("fp_downcast_rounding is not taken by conversions to or from float8e4b15")
        return _cast_fp8e4b15(x, dst)
    if (src.is_ptr() and not dst.is_int()) or (dst.is_ptr() and not src.is_int()):
        raise TypeError(f"cannot cast {src} to {dst}")
    attrs = {}
    if fp_downcast_rounding is not None:
        if fp_downcast_rounding not in ("rtne", "rtz"):
            raise ValueError(f"fp_downcast_rounding must be 'rtne' or 'rtz', not {fp_downcast_rounding!r}")
        if not (src.is_floating() and dst.is_floating() and dst.primitive_bitwidth < src.primitive_bitwidth):
            raise ValueError("fp_downcast_rounding is only for narrowing float conversions")
        attrs["rounding"] = fp_downcast_rounding
    c = _constant_value(x)
    if c is not None and not attrs and not src.is_ptr() and not dst.is_ptr():
        folded = _fold_cast(c, src, dst)
        if folded is not None:
            return constant(folded, result)
    if dst.is_int1() and not src.is_ptr():
        return not_equal(x, 0)
    return _emit("cast", [x], result, **attrs)


# --- creation ---------------------------------------------------------------------------

def check_shape(shape):
    shape = tuple(int(unwrap(d)) for d in shape)
    for i, d in enumerate(shape):
        if not is_power_of_two(d):
            raise ValueError(f"Shape element {i} must be a power of 2")  # Triton's words
    return shape


def full(shape, value, t) -> tensor:
    shape = check_shape(unwrap(shape) if isinstance(unwrap(shape), (list, tuple)) else [shape])
    t = unwrap(t)
    if is_python_scalar(value):
        v = unwrap(value)
        # Triton fills with its null value where value == 0 (0.0 into a uint32 block too) and calls
        # get_<type>(value) otherwise, whose integer casts refuse floats and unsigned ones negatives
        if v == 0:
            return constant(0 if t.is_int() else 0.0, with_shape(t, shape))
        if t.is_int() and not t.is_int1() and isinstance(v, (float, np.floating)):
            raise TypeError(f"tl.full: a float ({v}) cannot fill a {t.name} block (Triton's builder rejects it: "
                            f"get_{t.name}(): incompatible function arguments); pass an integer")
        if t.is_int_unsigned() and not t.is_int1() and not isinstance(v, (bool, np.bool_)) and v < 0:
            raise TypeError(f"tl.full: a negative value ({v}) cannot fill a {t.name} block (Triton's builder "
                            f"rejects it: get_{t.name}(): incompatible function arguments)")
        return constant(v, with_shape(t, shape))
    return splat(cast(to_tensor(value), t), shape)


def arange(start, end) -> tensor:
    start, end = unwrap(start), unwrap(end)
    if not isinstance(start, int) or not isinstance(end, int):
        raise TypeError("arange's start and end must be constexpr integers")
    if end <= start:
        raise ValueError(f"arange needs start < end, got {start} and {end}")
    if not is_power_of_two(end - start):
        raise ValueError("arange's range must be a power of 2")  # Triton's words; the caret shows the call
    if not (-2**31 <= start and end <= 2**31):
        raise ValueError("arange must fit in int32")
    return _emit("arange", [], block_type(int32, [end - start]), start=start, end=end)


def program_id(axis) -> tensor:
    axis = unwrap(axis)
    if axis not in (0, 1, 2):
        raise ValueError(f"program_id axis must be 0, 1, or 2 but got {axis}")
    return _emit("program_id", [], int32, axis=axis)


def num_programs(axis) -> tensor:
    axis = unwrap(axis)
    if axis not in (0, 1, 2):
        raise ValueError(f"num_programs axis must be 0, 1, or 2 but got {axis}")
    return _emit("num_programs", [], int32, axis=axis)


# --- shapes -----------------------------------------------------------------------------

def subscript(x: tensor, slices):
    slices = unwrap(slices)
    if not isinstance(slices, tuple):
        slices = (slices,)
    out, dim = x, 0
    for s in slices:
        s = python_index(s)
        if s is None:
            # at most the rank so far, as Triton's list insert: a scalar's `s[:, None]` is a [1] block
            out = expand_dims(out, min(dim, len(out.type.shape)))
            dim += 1
        elif isinstance(s, slice) and s == slice(None, None, None):
            dim += 1
        else:
            raise IndexError(f"unsupported tensor index {s!r}: only `:` and `None` are allowed")
    # A scalar takes any number of `:` (Triton: `scalar_ptr[None, None, :]` is a [1, 1] block).
    if x.type.shape and dim > len(x.type.shape) + sum(1 for s in slices if unwrap(s) is None):
        raise IndexError("too many indices for the tensor")
    return out


def python_index(index):
    """An index as Python takes it: a constexpr's value, a `tl.slice` as Python's slice."""
    from .core import Slice
    index = unwrap(index)
    return index.as_python() if isinstance(index, Slice) else index


def reshape(x, shape, can_reorder=False) -> tensor:
    x = to_tensor(x)
    shape = check_shape(shape)
    numel = 1
    for d in shape:
        numel *= d
    if numel != x.type.numel:
        raise ValueError(f"cannot reshape {list(x.type.shape)} ({x.type.numel} elements) to {list(shape)}")
    if not x.type.shape:
        return splat(x, shape)
    if x.type.shape == shape:
        return x
    return _emit("reshape", [x], with_shape(x.dtype, shape), can_reorder=bool(unwrap(can_reorder)))


def permute(x, dims) -> tensor:
    x = to_tensor(x)
    dims = [int(unwrap(d)) for d in dims]
    shape = x.type.shape
    if len(dims) != len(shape):  # Triton's words
        raise ValueError(f"permute dims must have the same length as input shape, got {dims} for {list(shape)}")
    if sorted(dims) != list(range(len(shape))):
        raise ValueError(f"permute: {dims} is not a permutation of the {len(shape)} dimensions of {list(shape)}")
    if dims == list(range(len(shape))):
        return x
    return _emit("permute", [x], block_type(x.dtype, [shape[d] for d in dims]), order=dims)


def join(a, b) -> tensor:
    a, b = binary_operands(a, b, arithmetic=False, allow_ptr=True)
    if a.dtype != b.dtype:
        raise TypeError(f"join needs two values of one dtype, not {a.dtype} and {b.dtype}")
    if not a.type.shape:
        a, b = splat(a, (1,)), splat(b, (1,))
        return reshape(_emit("join", [a, b], block_type(a.dtype, [1, 2])), (2,))
    return _emit("join", [a, b], block_type(a.dtype, list(a.type.shape) + [2]))


def split(a):
    a = to_tensor(a)
    shape = a.type.shape
    if not shape or shape[-1] != 2:
        raise ValueError(f"split needs a tensor whose last dimension is 2, not {list(shape)}")
    t = with_shape(a.dtype, shape[:-1])
    op = builder().create("split", [a.handle], [t, t])
    return tensor(op.results[0], t), tensor(op.results[1], t)


def unsplat(x) -> tensor:
    """A single-element block's element as a scalar (a scalar stays as it is)."""
    x = to_tensor(x)
    if not x.type.shape:
        return x
    if x.type.numel != 1:
        raise ValueError(f"can only unsplat single-element tensors, not {list(x.type.shape)}")
    x = reshape(x, (1,))
    first, _ = split(reshape(join(x, x), (2,)))  # join/split are the ops that make a block's elements scalars
    return first


def cat(a, b, can_reorder=False) -> tensor:
    a, b = to_tensor(a), to_tensor(b)
    if a.type != b.type or not a.type.shape:
        raise ValueError(f"cat needs two blocks of one type, not {a.type} and {b.type}")
    shape = list(a.type.shape)
    shape[0] *= 2
    return _emit("cat", [a, b], block_type(a.dtype, shape))


# --- memory -----------------------------------------------------------------------------

_LOAD_CACHE = ("", ".ca", ".cg", ".cv")
_STORE_CACHE = ("", ".wb", ".cg", ".cs", ".wt")
_EVICTION = ("", "evict_normal", "evict_first", "evict_last", "no_allocate")
_SEMANTICS = {"acquire", "release", "acq_rel", "relaxed"}
_SCOPES = {"gpu", "cta", "sys"}


def _pointer(ptr) -> tensor:
    ptr = to_tensor(ptr)
    if not ptr.dtype.is_ptr():
        raise TypeError(f"expected a pointer, got {ptr.dtype}")
    return ptr


def _boolean_mask(mask) -> tensor:
    mask = to_tensor(mask)
    if not mask.dtype.is_int1():  # Triton's store says so; its load builds IR that its verifier rejects
        raise ValueError(f"Mask must have boolean scalar type, not {mask.dtype} (compare it, e.g. `mask != 0`)")
    return mask


def _mask(mask, ptr: tensor):
    mask = _boolean_mask(mask)
    shape = broadcast_shapes(ptr.type.shape, mask.type.shape)
    return broadcast_to(ptr, shape), broadcast_to(mask, shape)


def load(ptr, mask=None, other=None, cache_modifier="", eviction_policy="", volatile=False, ordering=None):
    """`ordering`: (sem, scope) of an atomic load (Triton 3.9's tl.atomic_load), kept in place as a
    volatile one is."""
    ptr = _pointer(ptr)
    cache_modifier, eviction_policy = unwrap(cache_modifier) or "", unwrap(eviction_policy) or ""
    if cache_modifier not in _LOAD_CACHE:
        raise ValueError(f"unknown cache modifier {cache_modifier!r}; expected one of {_LOAD_CACHE}")
    if eviction_policy not in _EVICTION:
        raise ValueError(f"unknown eviction policy {eviction_policy!r}; expected one of {_EVICTION}")
    elem = ptr.dtype.element_ty
    operands = [ptr]
    if not ptr.type.shape:
        for name, t in (("Mask", mask), ("Other", other)):
            if isinstance(unwrap(t), tensor) and unwrap(t).type.shape:
                raise ValueError(f"{name} argument cannot be block type if pointer argument is not a block")
    if unwrap(mask) is not None:
        ptr, mask = _mask(mask, ptr)
        operands = [ptr, mask]
    elif unwrap(other) is not None:
        raise ValueError("`other` cannot be given without `mask`")
    if unwrap(other) is not None:
        operands.append(broadcast_to(cast(to_tensor(other), elem), ptr.type.shape))
    attrs = {}
    if cache_modifier:
        attrs["cache"] = cache_modifier
    if eviction_policy:
        attrs["evict"] = eviction_policy
    if unwrap(volatile):
        attrs["volatile"] = True
    if ordering is not None:
        attrs.update(volatile=True, sem=ordering[0], scope=ordering[1])
    return _emit("load", operands, with_shape(elem, ptr.type.shape), **attrs)


def store(ptr, value, mask=None, cache_modifier="", eviction_policy="", ordering=None):
    """`ordering`: (sem, scope) of an atomic store (Triton 3.9's tl.atomic_store)."""
    ptr = _pointer(ptr)
    cache_modifier, eviction_policy = unwrap(cache_modifier) or "", unwrap(eviction_policy) or ""
    if cache_modifier not in _STORE_CACHE:
        raise ValueError(f"unknown cache modifier {cache_modifier!r}; expected one of {_STORE_CACHE}")
    if eviction_policy not in _EVICTION:
        raise ValueError(f"unknown eviction policy {eviction_policy!r}; expected one of {_EVICTION}")
    if ptr.dtype.is_const():
        raise ValueError("Cannot store to a constant pointer")
    value = to_tensor(value)
    mask = None if unwrap(mask) is None else _boolean_mask(mask)
    if not ptr.type.shape:
        if value.type.shape:
            raise ValueError("Value argument cannot be block type if pointer argument is not a block")
        if mask is not None and mask.type.shape:
            raise ValueError("Mask argument cannot be block type if pointer argument is not a block")
    # as Triton: value and mask broadcast with the pointer, which must keep its shape
    shape = ptr.type.shape
    for t in (value, mask):
        if t is not None:
            shape = broadcast_shapes(shape, t.type.shape)
    if shape != ptr.type.shape:
        raise ValueError(f"Expected pointer argument to have shape {list(shape)} but got {list(ptr.type.shape)}")
    if mask is not None:
        mask = broadcast_to(mask, shape)
    value = broadcast_to(cast(value, ptr.dtype.element_ty), shape)
    operands = [ptr, value] + ([mask] if unwrap(mask) is not None else [])
    attrs = {}
    if cache_modifier:
        attrs["cache"] = cache_modifier
    if eviction_policy:
        attrs["evict"] = eviction_policy
    if ordering is not None:
        attrs.update(sem=ordering[0], scope=ordering[1])
    builder().create("store", [t.handle for t in operands], [], attrs)


def _memory_order(sem, scope):
    sem, scope = unwrap(sem) or "acq_rel", unwrap(scope) or "gpu"
    if sem not in _SEMANTICS:
        raise ValueError(f"unknown memory semantics {sem!r}; expected one of {sorted(_SEMANTICS)}")
    if scope not in _SCOPES:
        raise ValueError(f"unknown memory scope {scope!r}; expected one of {sorted(_SCOPES)}")
    return sem, scope


def _check_atomic_element(kind, elem):
    """Triton's element types for atomic read-modify-writes: 32 and 64 bits, and fp16/bf16 for add."""
    if (elem.is_fp16() or elem.is_bf16()) and kind != "add":
        raise ValueError(f"atomic_{kind} does not support {elem.name} (Triton's atomic_{kind} takes 32- and 64-bit "
                         "elements)")
    if elem.name in ("int16", "uint16") or elem.primitive_bitwidth < 16:
        raise ValueError(f"atomic_{kind} does not support {elem.name} (Triton's atomics take 32- and 64-bit "
                         "elements, and fp16/bf16 for atomic_add)")


def ordering(sem, scope, allowed: tuple, default: str, what: str) -> tuple:
    """(sem, scope) of an atomic load or store: `sem` one of `allowed` (`default` when None), scope
    gpu (default), cta or sys."""
    sem, scope = unwrap(sem) or default, unwrap(scope) or "gpu"
    if sem not in allowed:
        raise ValueError(f"{what}: sem must be one of {allowed}, not {sem!r}")
    if scope not in _SCOPES:
        raise ValueError(f"{what}: scope must be one of {sorted(_SCOPES)}, not {scope!r}")
    return sem, scope


def atomic_rmw(kind, ptr, val, mask=None, sem=None, scope=None, half_min_max=False):
    """`half_min_max`: fp16/bf16 min and max taken too (a tensor descriptor's reduction: Hopper's TMA reduces
    take them; Triton's pointer atomics do not). They run as a compare-and-swap loop on the 32-bit word."""
    ptr = _pointer(ptr)
    if ptr.dtype.is_const():
        raise ValueError("Cannot store to a constant pointer")
    sem, scope = _memory_order(sem, scope)
    elem = ptr.dtype.element_ty
    if not (half_min_max and kind in ("min", "max") and (elem.is_fp16() or elem.is_bf16())):
        _check_atomic_element(kind, elem)
    val = to_tensor(val)
    shape = broadcast_shapes(ptr.type.shape, val.type.shape)
    if unwrap(mask) is not None:
        shape = broadcast_shapes(shape, to_tensor(mask).type.shape)
        mask = broadcast_to(cast(to_tensor(mask), int1), shape)
    else:
        mask = constant(True, with_shape(int1, shape))
    ptr, val = broadcast_to(ptr, shape), broadcast_to(cast(val, elem), shape)
    if kind in ("and", "or", "xor") and elem.is_floating():
        # as Triton's compiled code (atom.and.b32): the operation on the bit patterns, the old
        # value returned as a float
        bits = dtype(f"int{elem.primitive_bitwidth}")
        int_ptr, int_val = cast(ptr, pointer_type(bits)), cast(val, bits, bitcast=True)
        old = _emit("atomic_rmw", [int_ptr, int_val, mask], int_val.type, kind=kind, sem=sem, scope=scope)
        return cast(old, elem, bitcast=True)
    if kind in ("and", "or", "xor") and not elem.is_int():
        raise TypeError(f"atomic_{kind} needs an integer pointer, not {ptr.dtype}")
    if kind in ("max", "min") and (elem.is_fp32() or elem.is_fp64()):
        return _float_atomic_min_max(kind, ptr, val, mask, sem, scope)
    return _emit("atomic_rmw", [ptr, val, mask], val.type, kind=kind, sem=sem, scope=scope)


def _float_atomic_min_max(kind, ptr, val, mask, sem, scope):
    """Triton's fp32/fp64 atomic max (min): an integer atomic on the bits, a signed max (min)
    where the value's sign bit is clear and an unsigned min (max) where it is set. Floats of one
    sign order as their bits do, so this is the float max, with -0.0 below +0.0 and NaNs placed
    by their bits (a positive NaN is the largest), exactly as in Triton."""
    bits = val.dtype.primitive_bitwidth
    signed, unsigned = dtype(f"int{bits}"), dtype(f"uint{bits}")
    negative = cast(shr(cast(val, unsigned, bitcast=True), bits - 1), int1)
    positive = logical_not(negative)
    results = []
    for t, rmw, lanes in ((signed, kind, positive), (unsigned, "min" if kind == "max" else "max", negative)):
        operands = [cast(ptr, pointer_type(t)), cast(val, t, bitcast=True), and_(mask, lanes)]
        old = _emit("atomic_rmw", operands, with_shape(t, val.type.shape), kind=rmw, sem=sem, scope=scope)
        results.append(cast(old, signed, bitcast=True))
    return cast(where(positive, results[0], results[1]), val.dtype, bitcast=True)


def atomic_cas(ptr, cmp, val, sem=None, scope=None):
    ptr = _pointer(ptr)
    if ptr.dtype.is_const():
        raise ValueError("Cannot store to a constant pointer")
    sem, scope = _memory_order(sem, scope)
    elem = ptr.dtype.element_ty
    if elem.primitive_bitwidth not in (16, 32, 64):
        raise ValueError(f"atomic_cas only supports elements with width {{16, 32, 64}} (not {elem.name})")
    cmp, val = to_tensor(cmp), to_tensor(val)
    shape = broadcast_shapes(broadcast_shapes(ptr.type.shape, cmp.type.shape), val.type.shape)
    ptr = broadcast_to(ptr, shape)
    cmp, val = broadcast_to(cast(cmp, elem), shape), broadcast_to(cast(val, elem), shape)
    return _emit("atomic_cas", [ptr, cmp, val], val.type, sem=sem, scope=scope)


# --- dot --------------------------------------------------------------------------------

_PRECISIONS = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")  # Triton's on NVIDIA GPUs


def fp32_default() -> str | None:
    """`triton.knobs.language.fp32_default` (TRITON_F32_DEFAULT): the input precision of a dot that
    names none, ahead of allow_tf32, as Triton's tl.dot takes it."""
    from kiln.dropin.knobs import language
    return language.fp32_default


def mma_min_k(bitwidth: int) -> int:
    """The smallest K a tensor-core instruction takes for operands of `bitwidth` bits: a dot of fewer is
    padded with zeros along K up to it."""
    return 32 if bitwidth == 8 else 16


def dot(a, b, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None, out_dtype=None):
    a, b = to_tensor(a), to_tensor(b)
    out_dtype = unwrap(out_dtype)
    if out_dtype is None:  # Triton 3.9's default: the accumulator's type, fp32 without one (3.6 said fp32)
        out_dtype = float32 if unwrap(acc) is None else to_tensor(acc).dtype
    if len(a.type.shape) >= 4 and len(a.type.shape) == len(b.type.shape):
        return _batched_dot(a, b, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype)
    input_precision, allow_tf32 = unwrap(input_precision), unwrap(allow_tf32)
    if input_precision is not None and allow_tf32 is not None:
        raise ValueError("give only one of input_precision and allow_tf32")
    if input_precision is None:
        input_precision = fp32_default() or ("tf32" if allow_tf32 in (None, True) else "ieee")
    if input_precision not in _PRECISIONS:
        raise ValueError(f"input_precision must be one of {_PRECISIONS}, not {input_precision!r}")
    if is_fp8e4b15(a.dtype) or is_fp8e4b15(b.dtype):  # upcast, as Triton does
        a, b = cast(a, float16), cast(b, float16)
    sa, sb = a.type.shape, b.type.shape
    if len(sa) not in (2, 3) or len(sa) != len(sb):
        raise ValueError(f"dot needs two 2-D (or batched 3-D) blocks, got {list(sa)} and {list(sb)}")
    if sa[-1] != sb[-2]:
        raise ValueError(f"dot: the inner dimensions must agree, got {list(sa)} and {list(sb)}")
    if sa[:-2] != sb[:-2]:
        raise ValueError(f"dot: the batch dimensions must agree, got {list(sa)} and {list(sb)}")
    while sa[-1] < mma_min_k(a.dtype.primitive_bitwidth):  # zeros added along K change no sum
        a, b = _pad_k(a, b)
        sa, sb = a.type.shape, b.type.shape
    if a.dtype != b.dtype and not mixed_fp8(a.dtype, b.dtype):  # e4m3 x e5m2 stays fp8, as on Triton
        if a.dtype.is_floating() and b.dtype.is_floating():
            t = computation_type(a.dtype, False, b.dtype, False, False)
            a, b = cast(a, t), cast(b, t)
        else:
            raise TypeError(f"dot operands must have one dtype, got {a.dtype} and {b.dtype}")
    if a.dtype.is_int():
        if a.dtype.primitive_bitwidth != 8:
            raise TypeError(f"integer dot needs int8/uint8 operands, not {a.dtype}")
        out_dtype = int32
    elif out_dtype.is_bf16():
        raise TypeError("dot: out_dtype=bfloat16 is not supported; use float32 or float16 and cast the result")
    elif a.dtype.is_fp32() or a.dtype.is_bf16():
        out_dtype = float32  # Triton: out_dtype only applies to fp16 and fp8 inputs
    elif a.dtype.is_fp64():
        out_dtype = float64
    out_shape = list(sa[:-1]) + [sb[-1]]
    if unwrap(acc) is None:
        acc = full(out_shape, 0, out_dtype)
    else:
        acc = to_tensor(acc)
        if list(acc.type.shape) != out_shape:
            raise ValueError(f"dot: acc has shape {list(acc.type.shape)}, expected {out_shape}")
        if acc.dtype != out_dtype:
            raise TypeError(f"dot: acc is {acc.dtype} but this dot produces {out_dtype}; "
                            f"for {a.dtype} inputs pass out_dtype={acc.dtype} or convert acc")
    attrs = {"input_precision": input_precision if a.dtype.is_fp32() else "ieee"}
    if unwrap(max_num_imprecise_acc) is not None:
        attrs["max_num_imprecise_acc"] = int(unwrap(max_num_imprecise_acc))
        if a.dtype.is_fp8() and b.dtype.is_fp8() and attrs["max_num_imprecise_acc"] > sa[-1]:
            raise ValueError(f"max_num_imprecise_acc ({attrs['max_num_imprecise_acc']}) must be <= K ({sa[-1]})")
    return _emit("dot", [a, b, acc], acc.type, **attrs)


def _batched_dot(a, b, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype):
    """A dot of rank 4 or more (Triton 3.9): its batch dimensions flattened into one, a batched
    3-D dot, and the result shaped back."""
    sa, sb = list(a.type.shape), list(b.type.shape)
    if sa[:-2] != sb[:-2]:
        raise ValueError(f"dot: the batch dimensions must agree, got {sa} and {sb}")
    batch = 1
    for n in sa[:-2]:
        batch *= n
    out_shape = sa[:-1] + [sb[-1]]
    flat_acc = None if unwrap(acc) is None else reshape(to_tensor(acc), [batch] + out_shape[-2:])
    flat = dot(reshape(a, [batch] + sa[-2:]), reshape(b, [batch] + sb[-2:]), flat_acc, input_precision, allow_tf32,
               max_num_imprecise_acc, out_dtype)
    return reshape(flat, out_shape)


def _pad_k(a: tensor, b: tensor):
    """a [.., M, K] and b [.., K, N] with K doubled: a zero after every element along K."""
    def interleave_zeros(x):  # [.., R, K] -> [.., R, 2K]
        joined = join(x, full(x.type.shape, 0, x.dtype))
        return reshape(joined, list(x.type.shape[:-1]) + [2 * x.type.shape[-1]])
    rank = len(b.type.shape)
    swap = list(range(rank - 2)) + [rank - 1, rank - 2]
    return interleave_zeros(a), permute(interleave_zeros(permute(b, swap)), swap)


# --- reductions and scans ---------------------------------------------------------------

def _combine_region(inputs, combine_fn):
    """A region that applies `combine_fn` to (lhs..., rhs...) scalars of the inputs' dtypes."""
    scalars = [t.dtype for t in inputs]
    region = Block(scalars * 2)
    with insertion_block(region):
        args = [tensor(v, v.type) for v in region.args]
        result = call_jit(combine_fn, args)
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) != len(inputs):
            raise TypeError(f"the combine function returned {len(results)} values, expected {len(inputs)}")
        handles = []
        for r, t in zip(results, scalars):
            r = to_tensor(r)
            if r.type != t:
                raise TypeError(f"the combine function returned {r.type} where {t} was expected")
            handles.append(r.handle)
        builder().create("yield", handles, [])
    return region


def reduce(inputs, axis, combine_fn, keep_dims=False):
    single = not isinstance(inputs, (tuple, list))
    inputs = [to_tensor(t) for t in ([inputs] if single else inputs)]
    axis, keep_dims = unwrap(axis), unwrap(keep_dims)
    if not inputs[0].type.shape:  # Triton fails on a scalar's missing shape ('dtype' has no 'numel')
        raise ValueError("cannot reduce a scalar: a reduction takes a block (Triton fails on it with "
                         "'dtype' object has no attribute 'numel')")
    all_axes = None  # reducing everything: keep_dims restores every axis, as size 1 (as Triton)
    if axis is None:
        all_axes = list(range(len(inputs[0].type.shape)))
        inputs = [reshape(t, (t.type.numel,), can_reorder=True) for t in inputs]
        axis = 0
    shape = inputs[0].type.shape
    if not shape:
        raise ValueError("cannot reduce a scalar")
    if any(t.type.shape != shape for t in inputs):
        raise ValueError("every input of a reduction must have the same shape")
    axis = int(axis)
    if axis < 0:
        axis += len(shape)
    if not 0 <= axis < len(shape):
        raise ValueError(f"reduction axis {axis} is out of range for shape {list(shape)}")
    region = _combine_region(inputs, combine_fn)
    out_shape = shape[:axis] + shape[axis + 1:]
    types = [with_shape(t.dtype, out_shape) for t in inputs]
    op = builder().create("reduce", [t.handle for t in inputs], types, {"axis": axis}, [region])
    results = [tensor(v, t) for v, t in zip(op.results, types)]
    if keep_dims:
        results = [expand_dims(r, axis if all_axes is None else all_axes) for r in results]
    return results[0] if single else tuple(results)


def scan(inputs, axis, combine_fn, reverse=False):
    single = not isinstance(inputs, (tuple, list))
    inputs = [to_tensor(t) for t in ([inputs] if single else inputs)]
    axis = int(unwrap(axis))
    shape = inputs[0].type.shape
    if not shape:
        raise ValueError("cannot scan a scalar")
    if axis < 0:
        axis += len(shape)
    if not 0 <= axis < len(shape):
        raise ValueError(f"scan axis {axis} is out of range for shape {list(shape)}")
    region = _combine_region(inputs, combine_fn)
    types = [t.type for t in inputs]
    op = builder().create("scan", [t.handle for t in inputs], types,
                          {"axis": axis, "reverse": bool(unwrap(reverse))}, [region])
    results = [tensor(v, t) for v, t in zip(op.results, types)]
    return results[0] if single else tuple(results)


# --- debugging and hints ----------------------------------------------------------------

def device_print(prefix, *args, hex=False):
    prefix = unwrap(prefix)
    if not isinstance(prefix, str):
        raise TypeError("device_print's prefix must be a string")
    values = [to_tensor(a) for a in args]
    builder().create("print", [v.handle for v in values], [], {"prefix": prefix, "hex": bool(unwrap(hex))})


def device_assert(cond, msg=""):
    cond = cast(to_tensor(cond), int1)
    builder().create("assert", [cond.handle], [], {"message": str(unwrap(msg))})


def hint(name, x, values):
    x = to_tensor(x)
    values = unwrap(values)
    values = [int(unwrap(v)) for v in (values if isinstance(values, (list, tuple)) else [values])]
    if len(values) != max(1, len(x.type.shape)):
        raise ValueError(f"{name} needs one value per dimension of {list(x.type.shape)}")
    hinted = _emit(name, [x], x.type, values=values)
    # Triton puts the hint on the value itself, so one whose result is dropped (tutorial 08's
    # `tl.multiple_of(a_ptrs, [16, 16])` on a line of its own) still holds for the value's later
    # uses: here they read the hinted value, where the value was made in this same block
    # (elsewhere, a later use outside this block could not see a value made in it).
    made_in = x.handle.owner if isinstance(x.handle.owner, Block) else x.handle.owner.parent
    if made_in is builder().block:
        x.handle = hinted.handle
    return hinted


def debug_barrier():
    builder().create("barrier", [], [])


def assume(cond):
    cond = to_tensor(cond)
    if cond.type.is_block():  # (LLVM's assume takes one i1, as Triton's)
        raise TypeError(f"tl.assume takes a scalar condition, not a block of {list(cond.type.shape)}")
    builder().create("assume", [cast(cond, int1).handle], [])


def grid_dependency_control(action: str):
    """`griddepcontrol.<action>`: `wait` or `launch_dependents` (tl.extra.cuda.gdc_*)."""
    builder().create(f"gdc_{action}", [], [])
