"""Signatures declared on a kernel, so that it can be compiled before any launch (`kiln prewarm`).

    @kiln.jit(prewarm=[{"x_ptr": "*fp32:16", "n": "i32", "BLOCK": 1024, "num_warps": 4}])

Each dict is one specialization, spelt as Triton's ahead-of-time compiler spells them:
`*fp32` a pointer (`*fp32:16`: 16-byte aligned; `*kfp32`: to `tl.const` data), `i1 i32 i64
u64 fp32` a scalar (`u1` and `B` are i1 too, as Triton reads them; `i32:16`: divisible by 16;
`i32:8`: by 8, not 16, which kiln specializes on as well; `i32:1` or the plain value 1: equal
to 1), `tensordesc<fp16[64, 64]>` a host TensorDescriptor with that block (no size taken for a
multiple of 16), and plain Python values for constexpr parameters (a plain value for any other
parameter is specialized as a call would specialize it). `num_warps`, `num_stages` and the other
launch options may be given too; a parameter left out takes its default. The IR is built exactly as a launch
with such arguments builds it, so a prewarmed binary has the compile key a launch looks up.

An `@autotune` kernel's signatures are expanded over every Config; an `@heuristics`
wrapper is applied when its functions need only the plain values of a signature, and the
signature is skipped (with the reason) when they need a runtime argument.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kiln.ir.core import Function
from kiln.ir.types import SCALAR_TYPES, dtype, float32, int1, int32, int64, pointer_type, uint64
from kiln.language.core import constexpr

from . import config
from .autotuner import Autotuner, Heuristics
from .jit import JITFunction
from .specialize import specialize

# The scalar types a call specializes a runtime scalar to, and the others a signature (or a
# parameter's annotation) may declare (Inductor declares a Python float `fp64`, as Triton takes);
# the launcher passes each at its width (fp16 and bf16 as Triton packs them).
_SCALARS = {"i1": int1, "u1": int1, "B": int1, "i32": int32, "i64": int64, "u64": uint64, "fp32": float32,
            **{name: SCALAR_TYPES[kiln_name] for name, kiln_name in (
                ("i8", "int8"), ("i16", "int16"), ("u8", "uint8"), ("u16", "uint16"), ("u32", "uint32"),
                ("fp16", "fp16"), ("bf16", "bf16"), ("fp64", "fp64"))}}
# Pointer element types in Triton's short names, and in kiln's own (`*int8` as well as `*i8`).
_ELEMENTS = {**SCALAR_TYPES, "i1": int1, "u1": int1, "B": int1,
             **{f"i{b}": SCALAR_TYPES[f"int{b}"] for b in (8, 16, 32, 64)},
             **{f"u{b}": SCALAR_TYPES[f"uint{b}"] for b in (8, 16, 32, 64)}}
_OPTIONS = tuple(o for o in config.LAUNCH_OPTIONS if o != "stream")


class SignatureError(ValueError):
    """A declared signature that no launch could have."""


class SpelledTuple(tuple):
    """A tuple parameter spelt leaf by leaf (an ASTSource's signature: Triton spells a tuple
    argument's type as a tuple of its leaves' types): strings are parsed as `parse_arg` parses
    a parameter, nested SpelledTuples likewise, other values are constant leaves. `kind` is
    the tuple's type (a NamedTuple's class, or tuple)."""

    def __new__(cls, leaves, kind=tuple):
        spelled = super().__new__(cls, leaves)
        spelled.kind = kind
        return spelled


def _tuple_param(spelled: SpelledTuple):
    from .specialize import TupleArgument
    leaves = [_tuple_param(leaf) if isinstance(leaf, SpelledTuple) else parse_arg(leaf) if isinstance(leaf, str)
              else constexpr(leaf) for leaf in spelled]
    param = TupleArgument(spelled.kind, leaves)
    return param if param.pieces else constexpr(param.build([]))  # every leaf constant: the tuple is one


def parse_arg(text: str):
    """`"*fp16:16"` -> (ptr<fp16>, {"divisibility": 16}); `"i32:8"` -> (int32, {"divisibility": 8});
    `"i32:1"` -> constexpr(1); `"tensordesc<fp16[64, 64]>"` -> a host TensorDescriptor's argument."""
    if text.strip().startswith("tensordesc"):
        return _descriptor(text)
    spelling, _, hint = text.strip().partition(":")
    if hint not in ("", "1", "8", "16"):
        raise SignatureError(f"{text!r}: the only hints are :16 (aligned or divisible by 16), :8 (an integer "
                             "divisible by 8) and :1 (equal to 1)")
    if spelling.startswith("*"):
        const = spelling.startswith("*k") and spelling[2:] in _ELEMENTS  # `*kfp32`: to tl.const data
        name = spelling[2:] if const else spelling[1:]
        element = _ELEMENTS.get(name)
        if element is None:
            raise SignatureError(f"{text!r}: unknown pointer element type {name!r}")
        if hint in ("1", "8"):
            raise SignatureError(f"{text!r}: a pointer is 16-byte aligned (:16) or not")
        return pointer_type(element, 1, const), ({"divisibility": 16} if hint == "16" else {})
    scalar = _SCALARS.get(spelling)
    if scalar is None:
        raise SignatureError(f"{text!r}: a runtime scalar is one of {', '.join(_SCALARS)} "
                             "(what a call specializes Python ints, floats and bools to, and the other widths a "
                             "signature may declare), or a pointer *TYPE")
    if hint and (scalar is int1 or not scalar.is_int()):
        raise SignatureError(f"{text!r}: only integers take the hints :1, :8 and :16")
    if hint == "1":
        return constexpr(1)
    return scalar, ({"divisibility": int(hint)} if hint in ("8", "16") else {})


_DESCRIPTOR = re.compile(r"tensordesc<\s*(\w+)\s*\[([\d,\s]+)\]\s*(,.*)?>")


def _descriptor(text: str):
    """`tensordesc<fp16[64, 64]>` (Triton's spelling of a host TensorDescriptor argument; Inductor
    declares one so): its pieces as a call with such a descriptor passes them. The spelling says
    nothing of the sizes, so none is taken for a multiple of 16, nor of the padding: zeros, the
    TensorDescriptor's default."""
    match = _DESCRIPTOR.fullmatch(text.strip())
    if match is None:
        raise SignatureError(f"{text!r}: a tensor descriptor is spelt tensordesc<DTYPE[B0, B1, ...]>")
    element, block, layout = match.groups()
    if layout:
        raise SignatureError(f"{text!r}: a shared-memory layout in a descriptor's type is Gluon's; kiln has none")
    if element not in _ELEMENTS:
        raise SignatureError(f"{text!r}: unknown element type {element!r}")
    block_shape = [int(b) for b in block.split(",") if b.strip()]
    if not 1 <= len(block_shape) <= 5:
        raise SignatureError(f"{text!r}: a descriptor's block has 1 to 5 dimensions")
    from kiln.language.tensor_descriptor import DescriptorArgument
    return DescriptorArgument(_ELEMENTS[element], len(block_shape), block_shape, "zero")


@dataclass(frozen=True)
class Declared:
    """One declared specialization of `jitfn`: parameter values and launch options."""

    jitfn: JITFunction
    values: dict
    error: str = ""  # why no launch could have it, found while expanding

    @property
    def label(self) -> str:
        return f"{self.jitfn.__name__}({', '.join(f'{k}={v}' for k, v in self.values.items())})"

    def params_and_options(self) -> tuple[dict, dict]:
        """`build_kernel`'s params (in signature order) and the launch options."""
        if self.error:
            raise SignatureError(self.error)
        fn = self.jitfn
        unknown = [k for k in self.values if k not in fn.arg_names and k not in _OPTIONS]
        if unknown:
            raise SignatureError(f"{fn.__name__} has no parameter {', '.join(unknown)}")
        params = {}
        for name, p in fn.signature.parameters.items():
            if name in self.values:
                params[name] = self._param(name, self.values[name])
            elif p.default is not p.empty:
                params[name] = self._param(name, p.default)
            else:
                raise SignatureError(f"the signature gives no {name} (nor has {fn.__name__} a default for it)")
        # a name that is also a parameter (`num_stages: tl.constexpr`) is the parameter only, as at a launch
        options = {k: v for k, v in self.values.items() if k in _OPTIONS and v is not None and k not in params}
        return params, options

    def _param(self, name: str, value):
        fn = self.jitfn
        if isinstance(value, SpelledTuple) and name not in fn.constexpr_names:
            return _tuple_param(value)
        if isinstance(value, str) and name not in fn.constexpr_names:
            param = parse_arg(value)
            if name in fn.do_not_specialize and (isinstance(param, constexpr) or isinstance(param, tuple) and param[1]):
                raise SignatureError(f"{name} is do_not_specialize: a call never specializes it as {value!r}")
            return param
        # a plain value: specialized as a call with that argument would specialize it
        return specialize(fn, {name: value}, {})[1][name]

    def build(self) -> tuple[Function, dict]:
        """The block IR and codegen options that a launch with this signature compiles."""
        from .compiler import compile_kernel
        params, options = self.params_and_options()
        return compile_kernel(self.jitfn, params, options).binary_inputs()


@dataclass(frozen=True)
class Skipped:
    label: str
    reason: str


@dataclass
class Expansion:
    declared: list = field(default_factory=list)  # Declared, buildable or with their error
    skipped: list = field(default_factory=list)   # Skipped


def is_kernel(obj) -> bool:
    return isinstance(obj, (JITFunction, Autotuner, Heuristics))


def innermost(kernel) -> JITFunction:
    """The JITFunction under any autotune/heuristics wrappers."""
    while not isinstance(kernel, JITFunction):
        kernel = kernel.fn
    return kernel


def expand(kernel) -> Expansion:
    """Every specialization `kernel`'s declared signatures stand for."""
    out = Expansion()
    for signature in innermost(kernel).prewarm:
        _expand(kernel, dict(signature), out)
    return out


def _expand(kernel, values: dict, out: Expansion) -> None:
    if isinstance(kernel, JITFunction):
        out.declared.append(Declared(kernel, values))
    elif isinstance(kernel, Autotuner):
        clash = sorted({k for cfg in kernel.configs for k in cfg.kwargs if k in values})
        if clash:  # as at a launch: a value both given and tuned is an error
            error = f"{', '.join(clash)} given by the signature and by the autotuner's configs"
            out.declared.append(Declared(innermost(kernel), values, error))
            return
        for cfg in kernel.configs:  # every config: prewarming is for the configs a run may pick
            _expand(kernel.fn, {**values, **cfg.all_kwargs()}, out)
    elif isinstance(kernel, Heuristics):
        _expand_heuristics(kernel, values, out)
    else:
        raise TypeError(f"not a kernel: {kernel!r}")


def _expand_heuristics(kernel: Heuristics, values: dict, out: Expansion) -> None:
    jitfn = innermost(kernel)
    # what a heuristic sees at a launch, less the runtime arguments a signature only types
    nargs = {k: (v.value if isinstance(v, constexpr) else v) for k, v in values.items()
             if not (isinstance(v, str) and k not in jitfn.constexpr_names)}
    values = dict(values)
    for name, heuristic in kernel.values.items():
        try:
            values[name] = nargs[name] = heuristic(nargs)
        except Exception as e:  # noqa: BLE001 - any failure means it needs what we do not have
            if name in values:  # declared by hand: take it as given
                continue
            label = Declared(jitfn, values).label
            out.skipped.append(Skipped(label, f"the heuristic for {name} needs more than the signature's plain "
                                              f"values ({type(e).__name__}: {e}); declare {name} in the signature"))
            return
    _expand(kernel.fn, values, out)
