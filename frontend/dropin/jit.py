"""`triton.jit` in the drop-in mode: kiln's JITFunction with the attributes Triton's host API has.

Inductor and libraries read `params` (each with `num`, `name`, `is_constexpr`), `cache_key`,
`repr`, `__globals__` and `used_global_vals` of a JITFunction, set `fn` to None before pickling
one, and compile it with `triton.compile(ASTSource(fn, ...))` (kiln.dropin.compile).
"""
from __future__ import annotations

import inspect

from dataclasses import dataclass

from kiln.jit import JITFunction as _KilnJITFunction
from kiln.jit import ConstexprFunction, JITCallable, KernelInterface, constexpr_function  # noqa: F401
from kiln.jit import LaunchCache  # (triton.runtime.jit has those names)
from kiln.dependencies import DependenciesFinder  # noqa: F401
from kiln.jit_hooks import JitFunctionInfo  # noqa: F401  (a JIT hook's `fn`)
from kiln.tensor_wrapper import MockTensor, TensorWrapper, reinterpret  # noqa: F401

TRITON_MODULE = "triton.language"


def _canonical_names() -> dict:
    """Every spelling of a scalar type a signature or a test may use -> Triton's short name
    (`float32` and `float` -> `fp32`, `int` -> `i32`, every bool -> `u1`, torch's fp8 names ->
    Triton's); each short name maps to itself."""
    names = {"void": "void", "bool": "u1", "int1": "u1", "uint1": "u1", "i1": "u1", "int": "i32",
             "half": "fp16", "float": "fp32", "double": "fp64", "bfloat16": "bf16"}
    names.update({f"int{b}": f"i{b}" for b in (8, 16, 32, 64)})
    names.update({f"uint{b}": f"u{b}" for b in (8, 16, 32, 64)})
    names.update({f"float{b}": f"fp{b}" for b in (16, 32, 64)})
    for fp8 in ("e4nv", "e5", "e4b15", "e4b8", "e5b16"):
        names[f"float8{fp8}"] = f"fp8{fp8}"
    names.update({"float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "float8_e4m3fnuz": "fp8e4b8",
                  "float8_e5m2fnuz": "fp8e5b16"})
    names.update({short: short for short in list(names.values())})
    return names


type_canonicalisation_dict = _canonical_names()


def canonicalize_dtype(dtype) -> str:
    """Triton's short name of a dtype (a kiln/Triton dtype, a torch dtype or a name)."""
    name = str(dtype).split(".")[-1]
    if name not in type_canonicalisation_dict:
        raise ValueError(f"{dtype!r} names no scalar type a kernel takes "
                         f"(known: {', '.join(sorted(type_canonicalisation_dict))})")
    return type_canonicalisation_dict[name]


def mangle_type(arg, specialize: bool = False) -> str:
    """The signature string of one argument as Triton writes it: `*fp32` for a tensor of
    float32, `i32`/`i64`/`u64` for an int by its range, `fp32` for a float, `u1` for a bool,
    `constexpr` for None; `specialize` adds nothing kiln needs (hints are kept apart)."""
    if arg is None:
        return "constexpr"
    if isinstance(arg, bool):
        return "u1"
    if isinstance(arg, int):
        if -2**31 <= arg < 2**31:
            return "i32"
        return "i64" if -2**63 <= arg < 2**63 else "u64"
    if isinstance(arg, float):
        return "fp32"
    if hasattr(arg, "data_ptr") and hasattr(arg, "dtype"):
        return "*" + canonicalize_dtype(arg.dtype)
    if hasattr(arg, "dtype"):
        return canonicalize_dtype(arg.dtype)
    raise TypeError(f"a kernel argument cannot be a {type(arg).__name__} ({arg!r:.60})")


def native_specialize_impl(backend, arg, is_const: bool = False, specialize_value: bool = True, align: bool = True):
    """(type, specialization) of one argument, as Triton's launcher keys it: a tensor `*fp32` (`*kfp32`
    when const) with "D" where its address is 16-aligned (`backend.get_tensor_specialization`), an int
    `i32` / `i64` / `u64` by its range with "D" where it is a multiple of 16, an int 1 a constexpr, a float
    `fp32`, a bool `u1`, None and constexprs `constexpr`, a @jit function `constexpr` with its cache key,
    a host tensor descriptor `tensordesc<fp16[64, 64]>`, a tuple the tuples of its items'; without
    `specialize_value` no value is looked at (specialization None)."""
    from kiln.language.core import constexpr
    if arg is None:
        return "constexpr", None
    if isinstance(arg, constexpr):
        return "constexpr", arg
    if isinstance(arg, bool):
        return "u1", None
    if isinstance(arg, int):
        if specialize_value and arg == 1:
            return "constexpr", arg
        if not -2**63 <= arg < 2**64:
            raise OverflowError("integer to be specialized too large to represent")
        kind = "i32" if -2**31 <= arg < 2**31 else "i64" if arg < 2**63 else "u64"
        return kind, (backend.get_int_specialization(arg, align=align) if specialize_value else None)
    if isinstance(arg, float):
        return "fp32", None
    if isinstance(arg, tuple):
        if not arg:
            return arg, arg
        kinds, keys = zip(*(native_specialize_impl(backend, item) for item in arg))
        return (type(arg)(*kinds), type(arg)(*keys)) if hasattr(arg, "_fields") else (kinds, keys)
    if hasattr(arg, "data_ptr") and hasattr(arg, "dtype"):
        kind = ("*k" if is_const else "*") + canonicalize_dtype(arg.dtype)
        return kind, (backend.get_tensor_specialization(arg, align=align) if specialize_value else None)
    if isinstance(arg, JITCallable):  # a @jit function passed as an argument
        return "constexpr", arg.cache_key
    if hasattr(arg, "block_shape") and hasattr(getattr(arg, "base", None), "data_ptr"):  # a host tensor descriptor
        return f"tensordesc<{canonicalize_dtype(arg.base.dtype)}{list(arg.block_shape)}>", None
    raise TypeError(f"a kernel argument cannot be a {type(arg).__name__} ({arg!r:.60})")


def get_jit_fn_file_line(fn) -> tuple[str, int]:
    """The file of a kernel, a JITCallable, or an autotuner or heuristics around one, and the line of its `def`."""
    while not isinstance(fn, JITCallable):
        if not hasattr(fn, "fn"):
            raise TypeError(f"{fn!r:.60} is no @jit function nor a wrapper of one")
        fn = fn.fn
    rewriter = getattr(fn, "rewriter", None)  # a @jit function's: also for one built by exec()
    if rewriter is not None:
        return rewriter.filename, rewriter.def_file_lineno
    lines, first = inspect.getsourcelines(fn.fn)
    return fn.fn.__code__.co_filename, first + next((i for i, line in enumerate(lines)
                                                      if line.lstrip().startswith("def ")), 0)


def get_full_name(fn) -> str:
    """`module.qualname` of a function (or a @jit one), as Triton names kernels in its hooks' data."""
    return f"{fn.__module__}.{fn.__qualname__}"


def create_function_from_signature(sig: inspect.Signature, kparams, backend):
    """Triton's binder of a kernel's call: `f(*args, **options)` gives (every argument by name, defaults
    applied; each one's (type, specialization) as `native_specialize_impl` reads it with `backend`; the
    other keywords). A type annotation names the type; an annotated float or bool, or an argument not
    specialized, gets no specialization. kiln's own launches bind with kiln.binder; this serves tools."""
    if len(sig.parameters) != len(kparams):
        raise ValueError(f"{len(kparams)} kernel parameters for a signature of {len(sig.parameters)}")
    options = inspect.Parameter("_kiln_options", inspect.Parameter.VAR_KEYWORD)
    with_options = sig.replace(parameters=[*sig.parameters.values(), options])

    def specialize(param, value):
        if param.is_constexpr:
            return "constexpr", value
        annotated, values_read = getattr(param, "annotation_type", ""), not param.do_not_specialize
        if annotated and (annotated == "u1" or annotated[:2] in ("fp", "bf")):
            values_read = False  # a float or bool is never specialized on its value
        if annotated and not values_read:
            return annotated, None
        kind, key = native_specialize_impl(backend, value, param.is_const, values_read,
                                           not param.do_not_specialize_on_alignment)
        return annotated or kind, key

    def bind(*args, **kwargs):
        bound = with_options.bind(*args, **kwargs)
        bound.apply_defaults()
        extra = bound.arguments.pop("_kiln_options")
        return bound.arguments, [specialize(p, v) for p, v in zip(kparams, bound.arguments.values())], extra
    return bind


def convert_to_tuple_if_list(item):
    """A list as a tuple, its nested lists too (a tuple's items are left as they are, as in Triton)."""
    return tuple(convert_to_tuple_if_list(x) for x in item) if isinstance(item, list) else item


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a kernel, as Triton's `JITFunction.params` lists them."""
    num: int
    name: str
    is_constexpr: bool
    do_not_specialize: bool
    default: object = None
    do_not_specialize_on_alignment: bool = False
    is_const: bool = False  # annotated as a pointer to constant data (`*kfp32`, `tl.const`)
    annotation_type: str = ""  # the type an annotation gives it (`fp32`, `i64`, `*fp16`), or ""


def _is_const_annotation(annotation) -> bool:
    """Triton's rule: an annotation that says `const`, or a pointer type spelled `*k...`."""
    if annotation is inspect.Parameter.empty or not annotation:
        return False
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    text = text.strip()
    return "constexpr" not in text and ("const" in text or text.startswith("*k"))


class JITFunction(_KilnJITFunction):
    # Triton's parameters, in its order: libraries rebuild a kernel from another's attributes named by
    # this signature (triton_kernels' `specialize`); prewarm is kiln's
    def __init__(self, fn, version=None, do_not_specialize=None, do_not_specialize_on_alignment=None, debug=None,
                 noinline=None, repr=None, launch_metadata=None, prewarm=()):
        super().__init__(fn, do_not_specialize=do_not_specialize or (), debug=debug, noinline=bool(noinline),
                         repr=repr, launch_metadata=launch_metadata, prewarm=prewarm,
                         do_not_specialize_on_alignment=do_not_specialize_on_alignment or ())
        self.version = version
        self.params = [KernelParam(i, name, name in self.constexpr_names, name in self.do_not_specialize,
                                   None if p.default is p.empty else p.default,
                                   name in self.do_not_specialize_on_alignment,
                                   name not in self.constexpr_names and _is_const_annotation(p.annotation),
                                   self.annotation_types.get(name, ""))
                       for i, (name, p) in enumerate(self.signature.parameters.items())]

    @property
    def constexprs(self) -> list:
        return [p.num for p in self.params if p.is_constexpr]

    def __getstate__(self):
        # what compiling needs (the source and the signature), not the compiled kernels or the binder
        try:
            self._dependency_key()  # computed here: the copy has no function to read its callees from
        except Exception:  # noqa: BLE001  (the copy computes it again, from its source alone)
            pass
        state = dict(self.__dict__)
        state.pop("used_global_vals", None)  # the values seen, with the module dicts they came from
        for name in ("binder", "cache", "_by_specialization", "_tree", "__wrapped__"):
            state.pop(name, None)
        state["fn"] = None
        state["__globals__"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.cache, self._by_specialization, self._tree = LaunchCache(), {}, None


def jit(fn=None, *, do_not_specialize=(), debug=None, noinline=False, repr=None, launch_metadata=None, prewarm=(),
        do_not_specialize_on_alignment=(), **unused):
    """Triton's `@jit`, giving the drop-in JITFunction."""
    def decorate(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline, repr=repr,
                           launch_metadata=launch_metadata, prewarm=prewarm,
                           do_not_specialize_on_alignment=do_not_specialize_on_alignment)
    return decorate(fn) if fn is not None else decorate
