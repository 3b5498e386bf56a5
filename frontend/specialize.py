"""Triton's specialization of a kernel's arguments.

Pointers become `ptr<dtype>` with `divisibility = 16` when the address is 16-byte
aligned; integers become int32/int64/uint64 by value, are folded to a constexpr when
equal to 1 and marked `divisibility = 16` when divisible by 16, `divisibility = 8` when
divisible by 8 only (`int_divisibility`; neither for `do_not_specialize` arguments); floats
are fp32, bools int1; constexpr parameters, None and dtypes are compile-time constants. A
host TensorDescriptor becomes its pieces (`DescriptorArgument`). A parameter annotated with a type (`x: tl.float16`, `n: "u8"`,
`p: "*fp16"`) takes that type whatever the value's, as Triton's JIT does (`annotation_type`).
"""
from __future__ import annotations

import contextvars
import inspect

import numpy as np

from kiln.ir.types import SCALAR_TYPES, dtype, float32, from_numpy, int1, int32, int64, pointer_type, uint64
from kiln.constexpr import constexpr
from kiln.tools.tensor_descriptor import TensorDescriptor

from . import config
from .jit_callable import JITCallable

_TORCH_DTYPES = {
    "torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float64": "fp64",
    "torch.int8": "int8", "torch.int16": "int16", "torch.int32": "int32", "torch.int64": "int64",
    "torch.uint8": "uint8", "torch.uint16": "uint16", "torch.uint32": "uint32", "torch.uint64": "uint64",
    "torch.bool": "int1", "torch.float8_e4m3fn": "fp8e4nv", "torch.float8_e5m2": "fp8e5",
    "torch.float8_e4m3fnuz": "fp8e4b8", "torch.float8_e5m2fnuz": "fp8e5b16",
}


def pointer_info(arg):
    """(element dtype, address) of a tensor-like argument, or None if `arg` is not one."""
    if isinstance(arg, np.ndarray):
        return from_numpy(arg.dtype), arg.ctypes.data
    if hasattr(arg, "data_ptr") and isinstance(getattr(arg, "dtype", None), dtype):  # kiln.reinterpret
        return arg.dtype, arg.data_ptr()
    if hasattr(arg, "data_ptr") and hasattr(arg, "dtype"):
        name = _TORCH_DTYPES.get(str(arg.dtype))
        if name is None:
            raise TypeError(f"unsupported tensor dtype {arg.dtype}")
        return dtype(name), arg.data_ptr()
    iface = getattr(arg, "__cuda_array_interface__", None)
    if iface is not None:
        return from_numpy(np.dtype(iface["typestr"])), iface["data"][0]
    from .runtime.dlpack import dlpack_info, is_dlpack
    if is_dlpack(arg):
        return dlpack_info(arg)
    return None


# An integer's divisibility as a kernel is specialized on: by 16, as Triton's, and by 8 beside it. A
# row of 1000 fp16 elements starts 16-byte aligned: known, tutorial 03's matmul at 3000x5000x1000 reads
# its tiles with TMA into wgmma; unknown (Triton's 16 alone), with 2-byte loads into mma.sync, where
# cuBLAS runs 5.6x faster. A size that is a multiple of 8 and not of 16 is a kernel of its own.
DIVISIBILITIES = (16, 8)


def int_divisibility(value: int) -> int:
    """The largest of DIVISIBILITIES that divides `value`, else 1."""
    for divisor in DIVISIBILITIES:
        if value % divisor == 0:
            return divisor
    return 1


def integer_type(value: int) -> dtype:
    if -2**31 <= value < 2**31:
        return int32
    if 2**63 <= value < 2**64:
        return uint64
    if -2**63 <= value < 2**63:
        return int64
    raise OverflowError(f"integer argument {value} does not fit in 64 bits")


# Set while `warmup` compiles: host tensors are fine then, as in Triton, which checks pointers at launch
COMPILE_ONLY = contextvars.ContextVar("kiln_compile_only", default=False)


def specialize(jitfn, bound: dict, options: dict):
    """(cache key, params for build_kernel, names of the runtime arguments in order)."""
    params, key, runtime = {}, [], []
    num_warps = options.get("num_warps")
    if num_warps is not None and (int(num_warps) <= 0 or int(num_warps) & (int(num_warps) - 1)):
        raise AssertionError("num_warps must be a power of 2")  # Triton's exception and words
    annotated = getattr(jitfn, "annotation_types", {})
    for name, value in bound.items():
        param, leaf_key = _param(jitfn, name, value, name in jitfn.constexpr_names,
                                 name not in jitfn.do_not_specialize, annotated.get(name, ""),
                                 name not in getattr(jitfn, "do_not_specialize_on_alignment", ()))
        params[name] = param
        key.append((name,) + leaf_key)
        if not isinstance(param, constexpr):
            runtime.append(name)
    key.append(tuple(sorted((k, _hashable(v)) for k, v in options.items() if k != "stream" and v is not None)))
    return tuple(key), params, runtime


def _param(jitfn, name, value, is_constexpr: bool, specializable: bool, annotated: str = "", align: bool = True):
    """(param, key) of one argument: `constexpr(value)`, `(dtype, attrs)` of a runtime
    value, or a DescriptorArgument / TupleArgument that becomes several runtime values;
    `annotated`: the parameter's annotation_type, if any; `align` False: no divisibility by 16
    (do_not_specialize_on_alignment)."""
    if isinstance(value, constexpr):  # tl.constexpr(4) given for any parameter is a constant
        value, is_constexpr = value.value, True
    if is_constexpr or value is None or isinstance(value, (dtype, str)) or (callable(value) and
                                                                          not hasattr(value, "data_ptr")):
        if isinstance(value, JITCallable):  # a function argument: by its source too
            return constexpr(value), ("c", value, value._dependency_key())
        return constexpr(value), ("c", _hashable(value))
    if annotated:
        param = _annotated(jitfn, name, value, annotated, specializable and align)
        return param, ("a", str(param[0]), tuple(sorted(param[1].items())))
    if isinstance(value, (bool, np.bool_)):
        param = (int1, {})
    elif isinstance(value, (int, np.integer)):
        value = int(value)
        if specializable and value == 1:
            return constexpr(1), ("c", 1)
        divisor = int_divisibility(value) if specializable and align else 1
        param = (integer_type(value), {"divisibility": divisor} if divisor > 1 else {})
    elif isinstance(value, (float, np.floating)):
        param = (float32, {})
    elif isinstance(value, TensorDescriptor):  # becomes several runtime arguments
        from kiln.language.tensor_descriptor import DescriptorArgument
        param = DescriptorArgument(value._elem, len(value.shape), value.block_shape, value.padding,
                                   value.shape_multiples_of_16(), value.round_f32_to_tf32)
        return param, ("d",) + value.spec_key()
    elif isinstance(value, tuple) and not hasattr(value, "data_ptr"):
        leaves = [_param(jitfn, name, v, False, specializable) for v in value]
        param = TupleArgument(type(value), [leaf for leaf, _ in leaves])
        if not param.pieces:  # every leaf is a constant: the tuple is one
            return constexpr(param.build([])), ("c", _hashable(value))
        return param, ("t", type(value)) + tuple(k for _, k in leaves)
    else:
        info = pointer_info(value)
        if info is None:
            raise TypeError(f"{jitfn.__name__}: unsupported argument {name} of type {type(value).__name__}")
        elem, address = info
        _check_reachable(jitfn, name, value)
        attrs = {"divisibility": 16} if specializable and align and address % 16 == 0 else {}
        param = (pointer_type(elem, 1, _is_const(jitfn, name)), attrs)
    return param, ("a", str(param[0]), tuple(sorted(param[1].items())))


def _check_reachable(jitfn, name, value) -> None:
    """A host tensor passed for a pointer is refused where the kernel runs on the GPU."""
    if getattr(value, "is_cuda", True) is False and not value.is_pinned() and not config.interpret() \
            and not COMPILE_ONLY.get():
        raise ValueError(f"Pointer argument (at {jitfn.arg_names.index(name)}) cannot be accessed from Triton "
                         f"(cpu tensor?): '{name}' is in host memory that the GPU cannot read; move it to the "
                         "GPU, pin it, or run with KILN_INTERPRET=1")


# Triton's short names of the types an annotation may give a parameter -> kiln's scalar types
_SHORT_TYPES = {"u1": int1, **{f"i{b}": SCALAR_TYPES[f"int{b}"] for b in (8, 16, 32, 64)},
                **{f"u{b}": SCALAR_TYPES[f"uint{b}"] for b in (8, 16, 32, 64)},
                **{name: SCALAR_TYPES[name] for name in ("fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16",
                                                         "fp16", "bf16", "fp32", "fp64")}}


def normalize_annotation(annotation) -> str:
    """Triton's normal form of a parameter's annotation (its JIT's `_normalize_ty`): a type's short
    name where it names one (`tl.float16`, `"fp16"`, `"tl.uint8"`, `int` -> `fp16`, `fp16`, `u8`,
    `i32`), `*T` for a pointer (`"*fp16"`, `"fp16*"`, `tl.pointer_type(tl.float16)`), `*kT` for a
    pointer to constant data (`"const *fp16"`); anything else as text (`Tensor`, `constexpr`)."""
    from .dropin.jit import type_canonicalisation_dict as short_names
    if annotation is None or annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        text = annotation.strip()
        if text.startswith("const "):
            inner = normalize_annotation(text.removeprefix("const"))
            return "*k" + inner[1:] if inner.startswith("*") else text
        if text.endswith("*"):
            return "*" + normalize_annotation(text[:-1])
        if text.startswith("*"):
            return "*" + normalize_annotation(text[1:])
        if text.startswith("tl."):
            return normalize_annotation(text.removeprefix("tl."))
    elif isinstance(annotation, pointer_type):
        return "*" + normalize_annotation(annotation.element_ty_)
    elif isinstance(annotation, dtype):
        text = annotation.name
    elif isinstance(annotation, type):
        text = annotation.__name__
    else:
        text = str(annotation)
    return short_names.get(text.replace("_t", ""), text)


def annotation_type(annotation) -> str:
    """The type a parameter's annotation gives it (Triton's `KernelParam.annotation_type`): the
    normal form where it names a scalar type or a pointer to one (`fp16`, `u8`, `*fp16`, `*kfp16`),
    else "" (no annotation, `tl.constexpr`, `torch.Tensor`: the value's type decides)."""
    text = normalize_annotation(annotation)
    element = text[2:] if text.startswith("*k") else text[1:] if text.startswith("*") else text
    return text if element in _SHORT_TYPES else ""


def _annotated(jitfn, name, value, annotated: str, specializable: bool):
    """(dtype, attrs) of a runtime argument whose parameter is annotated with a type: Triton's JIT
    types it by the annotation, whatever the value's type. An integer type keeps the value's
    divisibility (int_divisibility) but never folds a 1 into a constant; a float or bool type takes no hint."""
    where = f"{jitfn.__name__}: argument {name} (annotated {annotated})"
    is_number = isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))
    if annotated.startswith("*"):
        info = None if is_number else pointer_info(value)
        if info is None:
            raise TypeError(f"{where} is a pointer, not a {type(value).__name__}")
        _check_reachable(jitfn, name, value)
        const = annotated.startswith("*k")
        attrs = {"divisibility": 16} if specializable and info[1] % 16 == 0 else {}
        return pointer_type(_SHORT_TYPES[annotated[2 if const else 1:]], 1, const or _is_const(jitfn, name)), attrs
    if not is_number:
        raise TypeError(f"{where} is a scalar, not a {type(value).__name__}")
    t = _SHORT_TYPES[annotated]
    integral = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    divisor = int_divisibility(int(value)) if specializable and integral and t.is_int() and t is not int1 else 1
    return t, ({"divisibility": divisor} if divisor > 1 else {})


class TupleArgument:
    """A tuple (or NamedTuple) argument: its runtime leaves become the function's arguments
    (`pieces`, in order, nested tuples and descriptors flattened), its constant leaves stay
    constexprs; in the kernel it is a tuple of the same type."""

    def __init__(self, kind, leaves):
        self.kind, self.leaves = kind, leaves
        self.pieces = [piece for leaf in leaves for piece in _pieces(leaf)]

    def build(self, values):
        values, out = list(values), []
        for leaf in self.leaves:
            n = len(_pieces(leaf))
            taken, values = values[:n], values[n:]
            out.append(leaf if isinstance(leaf, constexpr) else
                       taken[0] if isinstance(leaf, tuple) else leaf.build(taken))
        return self.kind(*out) if hasattr(self.kind, "_fields") else tuple(out)

    def launch_pieces(self, value) -> list:
        """The launch values of a host tuple of this structure."""
        out = []
        for leaf, v in zip(self.leaves, value):
            if isinstance(leaf, tuple):
                out.append(v)
            elif isinstance(leaf, TupleArgument):
                out.extend(leaf.launch_pieces(v))
            elif not isinstance(leaf, constexpr):
                out.extend(v.launch_pieces())
        return out


def _pieces(leaf) -> list:
    return [] if isinstance(leaf, constexpr) else [leaf] if isinstance(leaf, tuple) else leaf.pieces


def _is_const(jitfn, name) -> bool:
    """`x_ptr: tl.const`: a pointer to read-only data, which the kernel may not store through."""
    from kiln.language import const
    annotation = jitfn.signature.parameters[name].annotation
    return annotation is const or (isinstance(annotation, str) and annotation.split(".")[-1] == "const")


def _hashable(value):
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)
