"""`tl.*` builtins: Triton's signatures, each handing over to `semantic`."""
from __future__ import annotations

from . import block_pointer, semantic
from .core import builtin, constexpr, float32, tensor
from .semantic import unwrap


def _shape_args(shape):
    """Accept both f(x, (a, b)) and f(x, a, b)."""
    if len(shape) == 1 and isinstance(unwrap(shape[0]), (tuple, list)):
        shape = unwrap(shape[0])
    return [unwrap(d) for d in shape]


# --- program model ----------------------------------------------------------------------

@builtin
def program_id(axis):
    """The index of this program along `axis` of the launch grid."""
    return semantic.program_id(axis)


@builtin
def num_programs(axis):
    """The number of programs along `axis` of the launch grid."""
    return semantic.num_programs(axis)


# --- creation and casts -----------------------------------------------------------------

@builtin
def arange(start, end):
    """The integers [start, end) as an int32 block; end - start must be a power of two."""
    return semantic.arange(start, end)


@builtin
def full(shape, value, dtype):
    """A block of `shape` filled with `value` of `dtype`."""
    return semantic.full(shape, value, dtype)


@builtin
def zeros(shape, dtype):
    """A block of `shape` filled with zeros of `dtype`."""
    return semantic.full(shape, 0, dtype)


@builtin
def zeros_like(input):
    """Zeros with the shape and dtype of `input`."""
    input = semantic.to_tensor(input)
    if not input.type.shape:
        return semantic.constant(0, input.dtype)
    return semantic.full(input.type.shape, 0, input.dtype)


@builtin
def full_like(input, value, dtype=None):
    input = semantic.to_tensor(input)
    dtype = unwrap(dtype) or input.dtype
    if not input.type.shape:
        return semantic.cast(value, dtype)
    return semantic.full(input.type.shape, value, dtype)


@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False):
    """Convert `input` to `dtype` (reinterpreting its bits with bitcast=True)."""
    return semantic.cast(input, dtype, fp_downcast_rounding, bitcast)


@builtin
def to_tensor(x):
    return semantic.to_tensor(x)


# --- memory -----------------------------------------------------------------------------

@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    """Load a block from `pointer`; lanes where `mask` is false take `other`."""
    if isinstance(pointer, block_pointer.BlockPointer):
        if unwrap(mask) is not None or unwrap(other) is not None:
            raise ValueError("a load through a block pointer takes boundary_check and padding_option, not mask/other")
        return block_pointer.load(pointer, boundary_check, padding_option, cache_modifier, eviction_policy, volatile)
    if unwrap(boundary_check) or unwrap(padding_option):
        raise ValueError("boundary_check and padding_option are for block pointers (tl.make_block_ptr)")
    return semantic.load(pointer, mask, other, cache_modifier, eviction_policy, volatile)


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    """Store `value` at `pointer` where `mask` is true."""
    if isinstance(pointer, block_pointer.BlockPointer):
        if unwrap(mask) is not None:
            raise ValueError("a store through a block pointer takes boundary_check, not mask")
        return block_pointer.store(pointer, value, boundary_check, cache_modifier, eviction_policy)
    if unwrap(boundary_check):
        raise ValueError("boundary_check is for block pointers (tl.make_block_ptr)")
    return semantic.store(pointer, value, mask, cache_modifier, eviction_policy)


def _atomic(kind):
    @builtin
    def atomic(pointer, val, mask=None, sem=None, scope=None):
        return semantic.atomic_rmw(kind, pointer, val, mask, sem, scope)
    atomic.__name__ = f"atomic_{kind}"
    atomic.__doc__ = f"Atomically apply `{kind}` of `val` at `pointer`; returns the old values."
    return atomic


atomic_add, atomic_max, atomic_min = _atomic("add"), _atomic("max"), _atomic("min")
atomic_and, atomic_or, atomic_xor, atomic_xchg = _atomic("and"), _atomic("or"), _atomic("xor"), _atomic("xchg")


@builtin
def atomic_load(pointer, mask=None, sem=None, scope=None):
    """Triton 3.9's: load `pointer` atomically, with `sem` "acquire" (default) or "relaxed" at
    `scope` "gpu" (default), "cta" or "sys"; where `mask` is false the value is unspecified (0 here)."""
    order = semantic.ordering(sem, scope, ("acquire", "relaxed"), "acquire", "atomic_load")
    return semantic.load(pointer, mask, None, ordering=order)


@builtin
def atomic_store(pointer, val, mask=None, sem=None, scope=None):
    """Triton 3.9's: store `val` at `pointer` atomically, with `sem` "release" (default) or
    "relaxed" at `scope` "gpu" (default), "cta" or "sys"; not where `mask` is false."""
    order = semantic.ordering(sem, scope, ("release", "relaxed"), "release", "atomic_store")
    return semantic.store(pointer, val, mask, ordering=order)


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None):
    """Atomically store `val` where the memory equals `cmp`; returns the old values."""
    return semantic.atomic_cas(pointer, cmp, val, sem, scope)


# --- elementwise ------------------------------------------------------------------------

@builtin
def where(condition, x, y):
    """`x` where `condition` is true, else `y`, broadcast together. A condition that is not
    boolean is compared with 0, with Triton's deprecation warning."""
    dtype = getattr(unwrap(condition), "dtype", None)
    if dtype is not None and not dtype.is_int1():
        semantic.warn_at_user_line("tl.where with a non-boolean condition is deprecated and will error out in a "
                                   f"future triton release. Got {dtype}")
    return semantic.where(condition, x, y)


@builtin
def maximum(x, y, propagate_nan=None):
    """Elementwise maximum; NaN wins only with propagate_nan=tl.PropagateNan.ALL."""
    return semantic.maximum(x, y, _propagates(propagate_nan))


@builtin
def minimum(x, y, propagate_nan=None):
    """Elementwise minimum; NaN wins only with propagate_nan=tl.PropagateNan.ALL."""
    return semantic.minimum(x, y, _propagates(propagate_nan))


@builtin
def clamp(x, min, max, propagate_nan=None):
    """`x` limited to [min, max] (floats only); a NaN `x` stays NaN only with PropagateNan.ALL."""
    return semantic.clamp(x, min, max, _propagates(propagate_nan))


class PropagateNan:
    NONE = constexpr(0)
    ALL = constexpr(0xFFFF)


def _propagates(p) -> bool:
    return bool(unwrap(p)) if p is not None else False


@builtin
def add(x, y, sanitize_overflow=True):
    """x + y; in a debug build, integers narrower than 64 bits assert that the sum fits unless
    `sanitize_overflow` is False."""
    return semantic.add(x, y, sanitize=bool(unwrap(sanitize_overflow)))


@builtin
def sub(x, y, sanitize_overflow=True):
    """x - y (checked as `add` is)."""
    return semantic.sub(x, y, sanitize=bool(unwrap(sanitize_overflow)))


@builtin
def mul(x, y, sanitize_overflow=True):
    """x * y (checked as `add` is)."""
    return semantic.mul(x, y, sanitize=bool(unwrap(sanitize_overflow)))


@builtin
def fdiv(x, y, ieee_rounding=False, approx=False):
    """x / y for floats of one type (ieee_rounding and Triton 3.9's approx are accepted; the
    result is correctly rounded either way, which an approximate division may also return).
    As Triton's, no promotion: a Python float is fp32, and an int is rejected."""
    x, y = semantic.to_tensor(x), semantic.to_tensor(y)
    if not x.dtype.is_floating() or not y.dtype.is_floating():
        raise TypeError(f"both operands of fdiv must have floating scalar type (not {x.dtype} and {y.dtype})")
    if x.dtype != y.dtype:  # Triton builds the division unconverted, which its IR rejects
        raise TypeError(f"fdiv takes two operands of one floating-point type, not {x.dtype} and {y.dtype}: "
                        "Triton does not promote them (its IR rejects the division); convert one first")
    x, y = semantic.broadcast_pair(x, y)
    return semantic._elementwise("div", x, y)


@builtin
def div_rn(x, y):
    """x / y rounded to nearest (fp32 tensors only, as Triton)."""
    _check_dtype("div_rn", ("fp32",), x, y)
    return semantic.math_binary("div_rn", x, y)


@builtin
def fma(x, y, z):
    """x * y + z with one rounding."""
    return semantic.fma(x, y, z)


@builtin
def umulhi(x, y):
    """The high half of the double-width product of two 32- or 64-bit integers."""
    _check_dtype("umulhi", ("int32", "int64", "uint32", "uint64"), x, y)
    return semantic.math_binary("umulhi", x, y)


_FP32_FP64 = ("fp32", "fp64")


def _check_dtype(name, dtypes, *args):
    """Triton's check on its libdevice-like math functions: every tensor argument (Python numbers
    and constexprs are not checked) must have one of `dtypes`, fp16 and bf16 included: Triton
    rejects them rather than compute in fp32 behind the user's back, and so does kiln."""
    for a in args:
        if isinstance(a, tensor) and a.dtype.name not in dtypes:
            raise ValueError(f"Expected dtype {list(dtypes)} but got {a.dtype.name} (tl.{name} takes "
                             f"{' or '.join(dtypes)} tensors, as in Triton: convert first, e.g. x.to(tl.float32))")


def _unary(name, dtypes=_FP32_FP64, doc=""):
    @builtin
    def fn(x):
        _check_dtype(name, dtypes, x)
        return semantic.math_unary(name, x)

    @builtin
    def method(x):  # Triton's tensor method (x.exp()) is the function before its dtype check
        return semantic.math_unary(name, x)
    fn.__name__, fn.__doc__ = name, doc or f"Elementwise {name}."
    method.__name__, method.__doc__ = name, fn.__doc__
    fn.method = method
    return fn


exp, exp2, log, log2 = _unary("exp"), _unary("exp2"), _unary("log"), _unary("log2")
sqrt, sqrt_rn, rsqrt = _unary("sqrt"), _unary("sqrt_rn", ("fp32",)), _unary("rsqrt")
sin, cos, erf = _unary("sin"), _unary("cos"), _unary("erf")
floor, ceil = _unary("floor"), _unary("ceil")


@builtin
def abs(x):
    """Elementwise absolute value."""
    return semantic.abs(x)


# --- shapes -----------------------------------------------------------------------------

@builtin
def reshape(input, *shape, can_reorder=False):
    """`input` with a new shape of the same number of elements (row-major)."""
    if not semantic.to_tensor(input).type.shape:  # as Triton, which fails on a scalar's missing shape
        raise ValueError("cannot reshape a scalar: reshape takes a block (Triton fails on it with "
                         "'dtype' object has no attribute 'numel')")
    return semantic.reshape(input, _shape_args(shape), can_reorder)


@builtin
def view(input, *shape):
    """Like reshape, but the order of elements may change (Triton's deprecated view)."""
    return semantic.reshape(input, _shape_args(shape), can_reorder=True)


@builtin
def permute(input, *dims):
    """`input` with its dimensions reordered."""
    return semantic.permute(input, _shape_args(dims))


@builtin
def trans(input, *dims):
    """Permute `input`; with no dims, swap its last two (a 2-D transpose, batched over the dims before)."""
    dims = _shape_args(dims)
    if not dims:
        rank = len(getattr(semantic.to_tensor(input).type, "shape", ()))
        if rank < 2:
            raise ValueError("tl.trans invoked with a 0- or 1-dimensional tensor")
        dims = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    return semantic.permute(input, dims)


@builtin
def broadcast(input, other):
    """`input` and `other` broadcast to each other's shape."""
    return semantic.broadcast_pair(semantic.to_tensor(input), semantic.to_tensor(other))


@builtin
def broadcast_to(input, *shape):
    """`input` broadcast to `shape`, of the same rank (a scalar broadcasts to any)."""
    input, shape = semantic.to_tensor(input), _shape_args(shape)
    if input.type.shape and len(input.type.shape) != len(shape):
        raise ValueError(f"Cannot broadcast, rank mismatch: {list(input.type.shape)}, {list(shape)} (Triton's "
                         "broadcast_to keeps the rank: add dimensions with x[None, :] or tl.expand_dims)")
    return semantic.broadcast_to(input, shape)


@builtin
def expand_dims(input, axis):
    """`input` with new size-1 dimensions at `axis` (an int or a sequence)."""
    return semantic.expand_dims(semantic.to_tensor(input), axis)


@builtin
def ravel(x, can_reorder=False):
    """`x` as a 1-D block."""
    x = semantic.to_tensor(x)
    if not x.type.shape:  # as Triton, which fails on a scalar's missing shape
        raise ValueError("cannot ravel a scalar: ravel takes a block (Triton fails on it with "
                         "'dtype' object has no attribute 'numel')")
    return semantic.reshape(x, [x.type.numel], can_reorder=True)


@builtin
def join(a, b):
    """Stack `a` and `b` along a new last dimension of size 2."""
    return semantic.join(a, b)


@builtin
def split(a):
    """Split a block whose last dimension is 2 into its two halves."""
    return semantic.split(a)


@builtin
def expect_zero(x, mask):
    """Triton 3.9's mark for values expected to have underflowed to zero where `mask` is true:
    `x` itself, with a device assertion that they are (kept, as every one, under KILN_DEBUG or a
    kernel's debug=True)."""
    x = semantic.to_tensor(x)
    zero = semantic.equal(x, semantic.to_tensor(0))
    semantic.device_assert(semantic.logical_or(zero, semantic.logical_not(semantic.to_tensor(mask))),
                           "expect_zero expected x == 0 where mask is true")
    return x


@builtin
def item(input):
    """The one element of a single-element block, as a scalar (Triton's `x.item()`)."""
    return semantic.unsplat(input)


@builtin
def cat(input, other, can_reorder=False, dim=0):
    """Concatenate two blocks of one shape along `dim` (Triton 3.9's; 3.6's joined them along
    dimension 0). The order of elements is kept whatever `can_reorder` says."""
    a, b = semantic.to_tensor(input), semantic.to_tensor(other)
    rank = len(a.type.shape)
    axis = unwrap(dim)
    if rank and not -rank <= axis < rank:
        raise ValueError(f"cat: dim {axis} is out of range for blocks of rank {rank}")
    axis = axis + rank if axis < 0 else axis
    if axis == 0:
        return semantic.cat(a, b, can_reorder)
    front = [axis] + [d for d in range(rank) if d != axis]  # the dimension to join first, then back
    joined = semantic.cat(semantic.permute(a, front), semantic.permute(b, front), can_reorder)
    return semantic.permute(joined, [front.index(d) for d in range(rank)])


@builtin
def interleave(a, b):
    """Interleave the elements of `a` and `b` along their last dimension."""
    joined = semantic.join(a, b)
    shape = list(joined.type.shape)
    if len(shape) == 1:  # two scalars: their join is already the pair
        return joined
    return semantic.reshape(joined, shape[:-2] + [shape[-2] * 2])


# --- indexing ---------------------------------------------------------------------------

@builtin
def gather(src, index, axis):
    """out[..., i, ...] = src[..., index[..., i, ...], ...] along `axis`; the result has index's shape."""
    return semantic.gather(src, index, axis)


@builtin
def histogram(input, num_bins, mask=None):
    """Counts of the values 0 .. num_bins-1 in the 1-D `input` (where `mask`), as int32."""
    return semantic.histogram(input, num_bins, mask)


@builtin
def inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack):
    """Run the PTX `asm` on `pack` elements of the broadcast `args` at a time; a tuple `dtype` gives
    several results."""
    return semantic.inline_asm_elementwise(asm, constraints, args, dtype, is_pure, pack)


# --- dot --------------------------------------------------------------------------------

@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=None):
    """The matrix product of two blocks, added to `acc`; of type `out_dtype` (by default the type of
    `acc`, fp32 without one: Triton 3.9's default, 3.6's fp32 wherever 3.6 accepted the call);
    blocks of rank 4 or more multiply batch by batch."""
    return semantic.dot(input, other, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype)


# --- reductions and scans ---------------------------------------------------------------

@builtin
def reduce(input, axis, combine_fn, keep_dims=False):
    """Reduce `input` (a tensor or a tuple of them) along `axis` with the @jit `combine_fn`."""
    return semantic.reduce(unwrap(input), axis, unwrap(combine_fn), keep_dims)


@builtin
def associative_scan(input, axis, combine_fn, reverse=False):
    """Inclusive scan of `input` (a tensor or a tuple) along `axis` with the @jit `combine_fn`."""
    return semantic.scan(unwrap(input), axis, unwrap(combine_fn), reverse)


# --- debugging and hints ----------------------------------------------------------------

@builtin
def static_assert(cond, msg=""):
    """Fail compilation with `msg` unless the constexpr `cond` holds."""
    if isinstance(cond, tensor):
        raise TypeError("static_assert needs a compile-time (constexpr) condition")
    if not unwrap(cond):
        raise AssertionError(f"static assertion failed: {unwrap(msg)}" if unwrap(msg) else "static assertion failed")


@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False):
    """Print at compile time."""
    print(*[unwrap(v) for v in values], sep=sep, end=end, file=file, flush=flush)


@builtin
def device_print(prefix, *args, hex=False):
    """Print `args` from every program at run time, after `prefix`."""
    return semantic.device_print(prefix, *args, hex=hex)


@builtin
def device_assert(cond, msg="", mask=None):
    """Stop the kernel with `msg` if `cond` is false anywhere `mask` (None: everywhere) is true."""
    mask = unwrap(mask)
    if mask is not None:
        cond = semantic.logical_or(cond, semantic.logical_not(mask))
    return semantic.device_assert(cond, msg)


@builtin
def condition(arg1, disable_licm=False):
    """A `while` loop's condition, as Triton spells it (`while tl.condition(c, disable_licm)`);
    `disable_licm` (the `while` op's attribute) keeps LLVM's loop-invariant code motion out of the
    loop, as Triton's loop annotation does."""
    return arg1


@builtin
def multiple_of(input, values):
    """Promise that every element of `input` is a multiple of `values`."""
    return semantic.hint("multiple_of", input, values)


@builtin
def max_contiguous(input, values):
    """Promise that `input` holds runs of `values` consecutive integers."""
    return semantic.hint("max_contiguous", input, values)


@builtin
def max_constancy(input, values):
    """Promise that `input` holds runs of `values` equal elements (accepted, unused)."""
    return semantic.to_tensor(input)


@builtin
def debug_barrier():
    """Synchronize the threads of the program."""
    semantic.debug_barrier()


@builtin
def assume(cond):
    """Promise the compiler that scalar `cond` holds (LLVM's `llvm.assume`: it may drop the code that
    would run otherwise); a false promise is undefined behaviour, as in Triton."""
    semantic.assume(cond)
