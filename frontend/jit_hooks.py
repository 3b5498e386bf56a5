"""Triton's JIT hooks and `preload`: `knobs.runtime.jit_cache_hook` is called before a kernel
specialization compiles (a true answer skips the compile: the launch or warmup returns None),
`knobs.runtime.jit_post_compile_hook` after it; both get Triton's keywords (`key`, `repr`, `fn`,
`compile`, `is_manual_warmup`, `already_compiled`), `compile["specialization_data"]` among them:
a JSON text from which `JITFunction.preload(data)` compiles the same specialization again,
without the arguments (another process, a cache warmer).

The data names the kernel and holds each argument as what decides the specialization: numbers
and booleans by value (kiln specializes on 1 and on divisibility by 16), constexprs, tuples and
dtypes by value, a tensor by its dtype and whether its address is 16-byte aligned; and the
launch options. An argument of another kind makes the data None (nothing to preload from).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .tensor_wrapper import MockTensor


@dataclass
class JitFunctionInfo:
    """Triton's `fn` of a hook: the kernel's module, its name, and the JITFunction."""
    module: str
    name: str
    jit_function: object


def call(hook, jitfn, key, values, options: dict, warmup: bool, compiled: bool):
    """`hook`'s answer for compiling `values` (the bound arguments) with `options`."""
    named = dict(zip(jitfn.arg_names, values))
    compile = {"key": str(key), "signature": {n: _kind(v) for n, v in named.items()},
               "constants": {n: v for n, v in named.items() if n in jitfn.constexpr_names},
               **{k: v for k, v in options.items() if v is not None},
               "specialization_data": specialization_data(jitfn, values, options), "is_warmup": warmup}
    return hook(key=str(key), repr=f"{jitfn.__name__}[{str(key)[:200]}]",
                fn=JitFunctionInfo(jitfn.fn.__module__, jitfn.__qualname__, jitfn), compile=compile,
                is_manual_warmup=warmup, already_compiled=compiled)


def specialization_data(jitfn, values, options: dict) -> str | None:
    try:
        encoded = [_encode(v) for v in values]
        kept = {k: v for k, v in options.items() if v is not None and isinstance(v, (bool, int, float, str))}
    except _NotData:
        return None
    return json.dumps({"kernel": _full_name(jitfn), "args": encoded, "options": kept})


def _full_name(jitfn) -> str:
    return f"{jitfn.fn.__module__}.{jitfn.__qualname__}"


def preload_arguments(jitfn, data: str) -> tuple[list, dict]:
    """The arguments and options `data` (specialization_data) stands for, to warm `jitfn` up with."""
    try:
        parsed = json.loads(data)
        name, args, options = parsed["kernel"], parsed["args"], parsed["options"]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{jitfn.__name__}.preload: not specialization data ({e})") from None
    if name != _full_name(jitfn):
        raise RuntimeError(f"Specialization data is for {name} but trying to preload for {_full_name(jitfn)}")
    return [_decode(a) for a in args], dict(options)


class _NotData(Exception):
    """An argument the data cannot hold."""


def _kind(value) -> str:
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return f"*{value.dtype}"
    return type(value).__name__


def _encode(value):
    from kiln.language.core import constexpr, dtype
    if value is None or isinstance(value, str):
        return {"str": value}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, constexpr):
        return {"constexpr": _encode(value.value)}
    if isinstance(value, dtype):
        return {"dtype": value.name}
    if isinstance(value, (tuple, list)):
        return {"tuple": [_encode(v) for v in value]}
    from kiln.specialize import pointer_info
    try:
        tensor = pointer_info(value)  # a torch tensor, a NumPy array, ...: its element type and address
    except TypeError:
        tensor = None
    if tensor is None:
        raise _NotData()
    encoded = {"tensor": tensor[0].name, "aligned": tensor[1] % 16 == 0}
    torch_dtype = str(getattr(value, "dtype", ""))
    if torch_dtype.startswith("torch."):  # preloaded, it stands for a tensor of the same torch dtype
        encoded["torch"] = torch_dtype.removeprefix("torch.")
    return encoded


def _decode(item):
    from kiln.language.core import constexpr, dtype
    (tag, value), *extra = item.items()
    if tag == "str":
        return value
    if tag in ("bool", "int"):
        return value
    if tag == "float":
        return float.fromhex(value)
    if tag == "constexpr":
        return constexpr(_decode(value))
    if tag == "dtype":
        return dtype(value)
    if tag == "tuple":
        return tuple(_decode(v) for v in value)
    if tag == "tensor":
        return _StandIn(_torch_dtype(item.get("torch")) or dtype(value), item.get("aligned", True))
    raise ValueError(f"preload: unknown argument {item!r}")


def _torch_dtype(name):
    """torch's dtype `name` (the launch key of a warmup with it is the same), or None."""
    if not name:
        return None
    try:
        import torch
    except ImportError:
        return None
    found = getattr(torch, name, None)
    return found if isinstance(found, torch.dtype) else None


class _StandIn(MockTensor):
    """A tensor where only its element type and alignment matter: a MockTensor with an address."""

    def __init__(self, dt, aligned: bool):
        super().__init__(dt)
        self._address = 0 if aligned else 4

    def data_ptr(self):
        return self._address
