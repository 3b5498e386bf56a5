"""`kiln.language`, imported as `tl`: Triton's kernel language."""
from . import extra, math, random, target_info  # noqa: F401
from .block_pointer import advance, make_block_ptr  # noqa: F401
from .builtins import *  # noqa: F401,F403
from .builtins import PropagateNan, abs, cast, full, static_assert  # noqa: F401

del full_like, item  # noqa: F821  (kiln's builtins, not names of Triton's tl: x.item() is)
from .core import aggregate_replace  # noqa: F401  (Triton 3.9)
from .core import Slice as slice, slice_type  # noqa: F401,A001  (Triton 3.9)
from .core import (  # noqa: F401
    bfloat16, block_type, builtin, constexpr, constexpr_type, dtype, float8e4b8, float8e4b15, float8e4nv, float8e5, float8e5b16, float16,
    float32, float64, int1, int8, int16, int32, int64, pointer_type, range, static_range, tensor, tuple_type, uint8, uint16,
    uint32, uint64, void,
)
from .dot_scaled import dot_scaled  # noqa: F401
from .sorting import bitonic_merge, flip, sort, topk  # noqa: F401
from .tensor_descriptor import (  # noqa: F401
    load_tensor_descriptor, make_tensor_descriptor, store_tensor_descriptor, tensor_descriptor,
)
from .random import (  # noqa: F401
    pair_uniform_to_normal, philox, philox_impl, rand, rand4x, randint, randint4x, randn, randn4x,
    uint_to_uniform_float,
)
from .standard import (  # noqa: F401
    argmax, argmin, atomic_poll, cdiv, cumprod, cumsum, map_elementwise, max, min, reduce_or, sigmoid, softmax,
    squeeze, sum, swizzle2d, unsqueeze, xor_sum,
)

dtype_t = dtype
pi32_t = pointer_type(int32)


class const:
    """Triton's annotation for a pointer to read-only data (`x_ptr: tl.const`): storing through it
    (or an atomic on it) is a compile error."""


class tuple(__builtins__["tuple"] if isinstance(__builtins__, dict) else __builtins__.tuple):
    """Triton's `tl.tuple(values)`. A kernel's tuples are Python tuples in kiln; this is one."""

    def __new__(cls, args=(), type=None):
        return super().__new__(cls, args)


def str_to_ty(name, c=None):
    """The dtype a signature string names, as Triton's `tl.str_to_ty`: "fp32", "i32", "u8", "i1",
    "*fp16" (a pointer), "*kfp16" (a pointer to constant data); a tuple of strings gives a tuple."""
    if isinstance(name, __builtins__["tuple"] if isinstance(__builtins__, dict) else __builtins__.tuple):
        return tuple(str_to_ty(x, c) for x in name)
    if name.startswith("*"):
        const = name.startswith("*k")
        return pointer_type(str_to_ty(name[2:] if const else name[1:], c), const=const)
    if name.startswith("constexpr"):
        return constexpr(c)
    names = {"i1": "int1", "u1": "int1", "B": "int1", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
             "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "bf16": "bf16"}
    return dtype(names.get(name, name))


TRITON_MAX_TENSOR_NUMEL = 1048576  # Triton's limit on a block's elements; kiln only reports it

from . import _methods as _m  # noqa: E402
_methods = _m.METHODS


def _as_in_triton():
    """Triton defines its builtins in `triton.language.core` and its library functions in
    `triton.language.standard`; kernels that import them from there find them here too."""
    from kiln.jit import JITCallable, constexpr_function
    from . import builtins as _builtins, core as _core, sorting as _sorting, standard as _standard
    for name, fn in vars(_builtins).items():
        if getattr(fn, "__kiln_builtin__", False) and not hasattr(_core, name):
            setattr(_core, name, fn)
    # defined in Triton's core.py, in other modules of this package here
    for name in ("PropagateNan", "TRITON_MAX_TENSOR_NUMEL", "advance", "const", "dot_scaled", "load_tensor_descriptor",
                 "make_block_ptr", "make_tensor_descriptor", "map_elementwise", "pi32_t", "slice",
                 "store_tensor_descriptor", "tensor_descriptor", "tuple"):
        setattr(_core, name, globals()[name])
    _core.JITCallable = JITCallable
    for name in ("zeros", "zeros_like", "ravel", "interleave"):
        setattr(_standard, name, getattr(_builtins, name))
    for name in ("flip", "sort", "topk", "bitonic_merge", "sort_impl"):
        setattr(_standard, name, getattr(_sorting, name))
    _standard.core, _standard.constexpr_function = _core, constexpr_function


_as_in_triton()
