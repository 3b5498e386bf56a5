"""Library functions of `kiln.language` built from the builtins: reductions, scans and friends."""
from __future__ import annotations

import math

from kiln.jit import jit

from . import semantic
from .builtins import arange, atomic_load, broadcast_to, exp, expand_dims, fdiv, maximum, minimum, static_assert, where
from .core import builtin, constexpr, float32, int32, uint32
from .semantic import unwrap


@jit
def cdiv(x, div):
    """Ceiling division of integers."""
    return (x + div - 1) // div


@jit
def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return 1 / (1 + exp(-x))


@jit
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False):
    """exp(x - max) / sum(exp(x - max)) along `dim` (dimension 0 by default)."""
    axis: constexpr = 0 if dim is None else dim
    shifted = x - max(x, axis, keep_dims=keep_dims)
    numerator = exp(shifted)
    denominator = sum(numerator, axis, keep_dims=keep_dims)
    return fdiv(numerator, denominator, ieee_rounding)


@jit
def squeeze(x, dim: constexpr):
    """`x` without its dimension `dim`, which must have length 1 (Triton 3.9)."""
    static_assert(-len(x.shape) <= dim and dim < len(x.shape), "squeeze: dim out of range")
    axis: constexpr = dim + len(x.shape) if dim < 0 else dim
    static_assert(x.shape[axis] == 1, "squeeze: the dimension must have length 1")
    return x.reshape(x.shape[:axis] + x.shape[axis + 1:])


@jit
def unsqueeze(x, dim: constexpr):
    """`x` with a new dimension of length 1 at `dim` (Triton 3.9; as expand_dims)."""
    rank: constexpr = len(x.shape) + 1
    static_assert(-rank <= dim and dim < rank, "unsqueeze: dim out of range")
    axis: constexpr = dim + rank if dim < 0 else dim
    return x.reshape(x.shape[:axis] + (1,) + x.shape[axis:])


@jit
def atomic_poll(pointer, expected_value, sem=None, scope=None, timeout_ns=None):
    """Triton 3.9's: spin until the value at each of `pointer` (16-, 32- or 64-bit integers) equals
    `expected_value`, or until `timeout_ns` nanoseconds of the GPU's global timer have passed for
    the whole block (each value is read at least once); true where the value was seen. Each read
    has `sem` "acquire" (default) or "relaxed" at `scope` "gpu" (default), "cta" or "sys"."""
    static_assert(pointer.dtype.element_ty.is_int() and pointer.dtype.element_ty.primitive_bitwidth >= 16,
                  "atomic_poll polls 16-, 32- or 64-bit integers")
    order: constexpr = "acquire" if sem is None else sem
    seen = atomic_load(pointer, sem=order, scope=scope) == expected_value
    if timeout_ns is None:
        while _all_true(seen) == 0:
            seen = seen | (atomic_load(pointer, mask=seen == 0, sem=order, scope=scope) == expected_value)
    else:
        start = _globaltimer()
        while (_all_true(seen) == 0) & (_globaltimer() - start < timeout_ns):
            seen = seen | (atomic_load(pointer, mask=seen == 0, sem=order, scope=scope) == expected_value)
    return seen


@jit
def _all_true(x):
    if len(x.shape) == 0:
        return x.to(int32)
    else:
        return min(x.to(int32))


@builtin
def _globaltimer():
    from .extra.cuda.utils import globaltimer
    return globaltimer()


@jit
def swizzle2d(i, j, size_i, size_j, size_g):
    """Renumber a size_i x size_j grid so that groups of size_g rows are walked column by column."""
    linear = i * size_j + j
    group_size = size_g * size_j
    first_row = (linear // group_size) * size_g
    rows_in_group = minimum(size_i - first_row, size_g)
    within = linear % group_size
    return first_row + within % rows_in_group, within // rows_in_group


# --- combine functions ------------------------------------------------------------------

@jit
def _add(a, b):
    return a + b


@jit
def _mul(a, b):
    return a * b


@jit
def _max(a, b):
    return maximum(a, b)


@jit
def _min(a, b):
    return minimum(a, b)


@jit
def _xor(a, b):
    return a ^ b


@jit
def _or(a, b):
    return a | b


@jit
def _argmax_left(v1, i1, v2, i2):
    take_first = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return where(take_first, v1, v2), where(take_first, i1, i2)


@jit
def _argmax_any(v1, i1, v2, i2):
    take_first = v1 > v2
    return where(take_first, v1, v2), where(take_first, i1, i2)


@jit
def _argmin_left(v1, i1, v2, i2):
    take_first = (v1 < v2) | ((v1 == v2) & (i1 < i2))
    return where(take_first, v1, v2), where(take_first, i1, i2)


@jit
def _argmin_any(v1, i1, v2, i2):
    take_first = v1 < v2
    return where(take_first, v1, v2), where(take_first, i1, i2)


# --- reductions -------------------------------------------------------------------------

def _sum_dtype(input, dtype):
    """Triton accumulates integers narrower than 32 bits in 32 bits."""
    dtype = unwrap(dtype)
    if dtype is not None:
        return semantic.cast(input, dtype)
    t = input.dtype
    if t.is_int() and t.primitive_bitwidth < 32:
        return semantic.cast(input, int32 if t.is_int_signed() else uint32)
    return input


def _bf16_to_fp32(input):
    """Triton computes max/min/cumsum/cumprod of bfloat16 in float32."""
    return semantic.cast(input, float32) if input.dtype.is_bf16() else input


def _widen_for_minmax(input):
    t = input.dtype
    if t.primitive_bitwidth < 32:
        return semantic.cast(input, float32 if t.is_floating() else int32)
    return input


def _with_indices(input, axis, combine, keep_dims):
    input = semantic.to_tensor(input)
    axis = unwrap(axis)
    if axis is None:
        input = semantic.reshape(input, (input.type.numel,), can_reorder=True)
        axis = 0
    shape = input.type.shape
    axis = axis + len(shape) if axis < 0 else axis
    index = semantic.arange(0, shape[axis])
    if len(shape) > 1:
        index = semantic.expand_dims(index, [d for d in range(len(shape)) if d != axis])
        index = semantic.broadcast_to(index, shape)
    return semantic.reduce((input, index), axis, combine, keep_dims)


@builtin
def sum(input, axis=None, keep_dims=False, dtype=None):
    """The sum along `axis` (all elements when None)."""
    return semantic.reduce(_sum_dtype(semantic.to_tensor(input), dtype), axis, _add, keep_dims)


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    """The maximum along `axis`, and with return_indices=True the index of its first occurrence."""
    input = _bf16_to_fp32(semantic.to_tensor(input))
    if unwrap(return_indices):  # values keep their dtype (as in Triton), plain max widens below 32 bits
        combine = _argmax_left if unwrap(return_indices_tie_break_left) else _argmax_any
        return _with_indices(input, axis, combine, keep_dims)
    return semantic.reduce(_widen_for_minmax(input), axis, _max, keep_dims)


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    """The minimum along `axis`, and with return_indices=True the index of its first occurrence."""
    input = _bf16_to_fp32(semantic.to_tensor(input))
    if unwrap(return_indices):  # values keep their dtype (as in Triton), plain min widens below 32 bits
        combine = _argmin_left if unwrap(return_indices_tie_break_left) else _argmin_any
        return _with_indices(input, axis, combine, keep_dims)
    return semantic.reduce(_widen_for_minmax(input), axis, _min, keep_dims)


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False):
    """The index of the maximum along `axis`."""
    return max(input, axis, True, tie_break_left, keep_dims)[1]


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False):
    """The index of the minimum along `axis`."""
    return min(input, axis, True, tie_break_left, keep_dims)[1]


@builtin
def xor_sum(input, axis=None, keep_dims=False):
    """The bitwise xor of the elements along `axis`."""
    input = semantic.to_tensor(input)
    if not input.dtype.is_int():
        raise TypeError(f"xor_sum needs integers, not {input.dtype}")
    return semantic.reduce(input, axis, _xor, keep_dims)


@builtin
def reduce_or(input, axis, keep_dims=False):
    """The bitwise or of the integers along `axis`."""
    input = semantic.to_tensor(input)
    if not input.dtype.is_int():
        raise TypeError(f"reduce_or needs integers, not {input.dtype}")
    return semantic.reduce(input, axis, _or, keep_dims)


@builtin
def map_elementwise(scalar_fn, *args, pack=1):
    """`scalar_fn` (a @jit function) applied to every element of the broadcast `args`.
    kiln runs it on whole blocks: an `if` on an element's value runs both branches and
    selects per element (so neither branch may store or loop on it). With `pack=p` it takes p
    consecutive elements (in row-major order) of each argument, `fn(a0, .., a_p-1, b0, ..)`, and
    gives p values of each result in turn, `(c0, .., c_p-1, d0, ..)`, as Triton's does."""
    tensors = [semantic.to_tensor(a) for a in args]
    shape = ()
    for t in tensors:
        shape = semantic.broadcast_shapes(shape, t.type.shape)
    args = [semantic.broadcast_to(t, shape) for t in tensors]
    pack = int(unwrap(pack))
    if pack == 1:
        return semantic.call_jit(unwrap(scalar_fn), args, elementwise=True)
    numel = math.prod(shape)
    if pack < 1 or pack & (pack - 1) or numel % pack:
        raise ValueError(f"map_elementwise: pack must be a power of two dividing the {numel} elements, not {pack}")
    rows = [numel // pack, pack]
    pieces = [piece for a in args for piece in _pack_pieces(semantic.reshape(a, rows), pack)]
    results = semantic.call_jit(unwrap(scalar_fn), pieces, elementwise=True)
    results = list(results) if isinstance(results, tuple) else [results]
    if len(results) % pack:
        raise ValueError(f"map_elementwise: with pack={pack} the function returns {pack} values of each "
                         f"result, not {len(results)} values")
    outputs = [semantic.reshape(_joined(results[i:i + pack]), list(shape))
               for i in range(0, len(results), pack)]
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _pack_pieces(x, pack):
    """The `pack` columns of `x` (..., m, pack) as blocks (..., m): column k holds elements k, k+pack, .."""
    *lead, m, _ = x.type.shape
    if pack == 1:
        return [semantic.reshape(x, [*lead, m])]
    even, odd = semantic.split(semantic.reshape(x, [*lead, m, pack // 2, 2]))
    evens, odds = _pack_pieces(even, pack // 2), _pack_pieces(odd, pack // 2)
    return [piece for pair in zip(evens, odds) for piece in pair]  # column 2j is even's j, 2j+1 odd's j


def _joined(pieces):
    """`_pack_pieces` undone: blocks (..., m) -> (..., m, len(pieces))."""
    if len(pieces) == 1:
        return semantic.reshape(pieces[0], [*pieces[0].type.shape, 1])
    even, odd = _joined(pieces[0::2]), _joined(pieces[1::2])
    joined = semantic.join(even, odd)  # (..., m, p/2, 2)
    *lead, half, two = joined.type.shape
    return semantic.reshape(joined, [*lead, half * two])


@builtin
def cumsum(input, axis=0, reverse=False, dtype=None):
    """The inclusive running sum along `axis`."""
    return semantic.scan(_sum_dtype(_bf16_to_fp32(semantic.to_tensor(input)), dtype), axis, _add, reverse)


@builtin
def cumprod(input, axis=0, reverse=False, dtype=None):
    """The inclusive running product along `axis` (narrow integers are not widened, as in Triton)."""
    input = _bf16_to_fp32(semantic.to_tensor(input))
    if unwrap(dtype) is not None:
        input = semantic.cast(input, unwrap(dtype))
    return semantic.scan(input, axis, _mul, reverse)


def _log2(n):
    """log2 of a power of two, at compile time (Triton's standard._log2, used by hand-written sorts)."""
    return constexpr(int(unwrap(n)).bit_length() - 1)


def _is_power_of_two(n):
    n = int(unwrap(n))
    return constexpr(n > 0 and n & (n - 1) == 0)


_ = (arange, broadcast_to, expand_dims)  # re-exported through kiln.language
