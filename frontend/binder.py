"""The launch fast path: a binder generated once per kernel signature.

A call `kernel[grid](*args, **kwargs)` must cost no more than Triton's. `make_binder`
writes a Python function with the kernel's own parameters (and defaults) plus the
launch options as keyword-only parameters; it returns the specialization key and the
argument values without `inspect.signature.bind`. The key holds, per argument, only
what specialization reads: the pointer dtype and 16-byte alignment, the integer kind,
equality to 1 and divisibility by 16 or 8, or the constexpr's value.
"""
from __future__ import annotations

import types

import numpy as np

from kiln.constexpr import constexpr
from kiln.tools.tensor_descriptor import TensorDescriptor

from . import config
from .errors import KilnError
from .jit_callable import JITCallable
from .specialize import int_divisibility

_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def _items(libraries):
    """`extern_libs` as a launch key holds it, and as Triton's options do: (name, path) pairs. kiln
    links libdevice itself, so a kernel launched with them is another specialization of the same code."""
    return tuple(libraries.items()) if isinstance(libraries, dict) else libraries


def _int_key(value: int):
    kind = "i32" if _INT32_MIN <= value <= _INT32_MAX else ("u64" if value >= 2**63 else "i64")
    return (kind, value == 1, int_divisibility(value))


def spec_key(value):
    """What specialization reads of a runtime argument, as a small hashable."""
    t = type(value)
    if t is int:
        return _int_key(value)
    if t is float:
        return "fp32"
    if t is bool:
        return "int1"
    data_ptr = getattr(value, "data_ptr", None)
    if data_ptr is not None:
        if getattr(value, "is_cuda", True) is False:  # a host tensor: whether the GPU can reach it
            return (value.dtype, data_ptr() % 16 == 0, "host", value.is_pinned())
        return (value.dtype, data_ptr() % 16 == 0)
    if t is np.ndarray:
        return (value.dtype, value.ctypes.data % 16 == 0)
    if value is None:
        return None
    if isinstance(value, (np.integer, np.bool_)):
        return _int_key(int(value)) if not isinstance(value, np.bool_) else "int1"
    if isinstance(value, np.floating):
        return "fp32"
    iface = getattr(value, "__cuda_array_interface__", None)
    if iface is not None:
        return (iface["typestr"], iface["data"][0] % 16 == 0)
    from .runtime.dlpack import dlpack_info, is_dlpack
    if is_dlpack(value):
        elem, address = dlpack_info(value)
        return (elem.name, address % 16 == 0)
    if isinstance(value, TensorDescriptor):
        return value.spec_key()
    if isinstance(value, tuple):  # a tuple or NamedTuple argument: its leaves' keys
        return ("tuple", t, tuple(constexpr_key(v) if isinstance(v, constexpr) else
                                  ("fn", id(v)) if callable(v) and not hasattr(v, "data_ptr") else spec_key(v)
                                  for v in value))
    return ("other", type(value), repr(value))


def spec_key_unspecialized(value):
    """spec_key for do_not_specialize arguments: no equality to 1, no divisibility."""
    key = spec_key(value)
    return (key[0],) if isinstance(key, tuple) and key and key[0] in ("i32", "i64", "u64") else key


def spec_key_unaligned(value):
    """spec_key for do_not_specialize_on_alignment arguments: equality to 1, no divisibility or alignment."""
    key = spec_key(value)
    if not isinstance(key, tuple) or not key:
        return key
    if key[0] in ("i32", "i64", "u64"):
        return key[:2]
    return (key[0], None) + key[2:] if len(key) >= 2 and isinstance(key[1], bool) else key


def constexpr_key(value):
    value = value.value if isinstance(value, constexpr) else value
    if isinstance(value, JITCallable):  # a function argument: a change of its source is a new kernel
        return ("c", value, value.hash or value._dependency_key())
    try:
        hash(value)
        return ("c", value)
    except TypeError:
        return ("c", repr(value))


def make_binder(jitfn):
    """f(*args, **kwargs) -> (key, argument values in signature order, stream).

    The launch options other than the stream end the key; `f.options(key, values)` gives
    them back as a dict for the slow paths (a compile, a grid callable), so that a cached
    launch builds no dictionary.
    """
    params = jitfn.signature.parameters
    names = list(params)
    options = [o for o in config.LAUNCH_OPTIONS if o not in params]
    keyed_options = [o for o in options if o != "stream"]
    # A launch option that is also a parameter (Liger's `num_stages: tl.constexpr`) is the parameter only, by
    # position or by keyword, and the option keeps its default: as Triton 3.6 compiles such a kernel.
    # Every name of the generated code other than the kernel's parameters starts with
    # `_kiln_`, so that a parameter called `grid` or `key` shadows nothing.
    namespace = {"_kiln_spec_key": spec_key, "_kiln_spec_key_unspecialized": spec_key_unspecialized,
                 "_kiln_spec_key_unaligned": spec_key_unaligned,
                 "_kiln_constexpr_key": constexpr_key, "_kiln_cache_get": jitfn.cache.get,
                 "_kiln_slow_launch": jitfn.slow_launch, "_kiln_grid_meta": jitfn.grid_meta,
                 "_kiln_callable": callable,
                 "_kiln_KilnError": KilnError, "_kiln_items": _items}
    sig, keys = [], []
    for i, (name, p) in enumerate(params.items()):
        if p.default is not p.empty:
            namespace[f"_kiln_default_{i}"] = p.default
            sig.append(f"{name}=_kiln_default_{i}")
        else:
            sig.append(name)
        if name in jitfn.constexpr_names:
            keys.append(f"_kiln_constexpr_key({name})")
        elif name in jitfn.do_not_specialize:
            keys.append(f"_kiln_spec_key_unspecialized({name})")
        elif name in getattr(jitfn, "do_not_specialize_on_alignment", ()):
            keys.append(f"_kiln_spec_key_unaligned({name})")
        else:
            keys.append(f"_kiln_spec_key({name})")
    sig.append("*")
    sig.extend(f"{o}=None" for o in options)
    stream = "stream" if "stream" in options else "None"
    key_options = [f"_kiln_items({o})" if o == "extern_libs" else o for o in keyed_options]
    key = f"({', '.join(keys + key_options)}{',' if keys or key_options else ''})"
    values = f"({', '.join(names)}{',' if names else ''})"
    src = (f"def _kiln_binder({', '.join(sig)}):\n"
           f"    return {key}, {values}, {stream}\n"
           # kernel[grid]: the whole cached launch in one frame (a grid callable's meta made by
           # JITFunction.grid_meta); a miss goes through JITFunction.run's slow path. An error
           # kiln raises on purpose leaves with this frame only (see kiln.errors.user_facing).
           f"def _kiln_bind_grid(_kiln_grid):\n"
           f"    def {jitfn.__name__}({', '.join(sig)}):\n"
           f"        _kiln_key, _kiln_values = {key}, {values}\n"
           f"        try:\n"
           f"            _kiln_kernel = _kiln_cache_get(_kiln_key)\n"
           f"            if _kiln_kernel is None:\n"
           f"                return _kiln_slow_launch(_kiln_grid, _kiln_key, _kiln_values, {stream})\n"
           f"            _kiln_kernel.launch(_kiln_grid(_kiln_grid_meta(_kiln_key, _kiln_values))\n"
           f"                                if _kiln_callable(_kiln_grid) else _kiln_grid,\n"
           f"                                _kiln_kernel.runtime_args(_kiln_values), {stream})\n"
           f"        except _kiln_KilnError as _kiln_error:\n"
           f"            raise _kiln_error.with_traceback(None)\n"
           f"        return _kiln_kernel\n"
           f"    return {jitfn.__name__}\n")
    exec(compile(src, f"<kiln binder for {jitfn.__name__}>", "exec"), namespace)
    binder = namespace["_kiln_binder"]

    def launch_options(key, values) -> dict:
        """The options of a call that `binder` returned (key, values) for; None for unset ones."""
        return dict(zip(keyed_options, key[len(key) - len(keyed_options):]))

    binder.options = launch_options
    binder.bind_grid = _qualnamed(namespace["_kiln_bind_grid"], jitfn.__name__)
    return binder


def _qualnamed(factory, name: str):
    """`factory` with its inner function qualified as `name`: a wrong call's TypeError
    then reads "name() missing 1 required positional argument", as for the kernel."""
    code = factory.__code__
    if hasattr(code, "co_qualname"):  # Python 3.11+; 3.10 prints the plain name
        consts = tuple(c.replace(co_qualname=name) if isinstance(c, types.CodeType) and c.co_name == name else c
                       for c in code.co_consts)
        factory.__code__ = code.replace(co_consts=consts)
    return factory


def grid3(grid) -> tuple:
    """A launch grid as (x, y, z)."""
    if type(grid) is tuple:
        n = len(grid)
        if n == 1:
            return (int(grid[0]), 1, 1)
        if n == 3 and type(grid[0]) is int and type(grid[1]) is int and type(grid[2]) is int:
            return grid  # Triton's tutorials launch compiled kernels on (programs, 1, 1)
    grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    if not 1 <= len(grid) <= 3:
        raise ValueError(f"the grid must have 1 to 3 dimensions, got {grid}")
    return grid + (1,) * (3 - len(grid))
