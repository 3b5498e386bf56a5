"""The launch fast path: a binder generated once per kernel signature.

A call `kernel[grid](*args, **kwargs)` must cost no more than Triton's. `make_binder`
writes a Python function with the kernel's own parameters (and defaults) plus the
launch options as keyword-only parameters; it returns the specialization key and the
argument values without `inspect.signature.bind`. The key holds, per argument, only
what specialization reads: the pointer dtype and 16-byte alignment, the integer kind,
equality to 1 and divisibility by 16, or the constexpr's value.
"""
from __future__ import annotations

import numpy as np

from kiln.language.core import constexpr
from kiln.tools.tensor_descriptor import TensorDescriptor

from . import config

_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def _int_key(value: int):
    kind = "i32" if _INT32_MIN <= value <= _INT32_MAX else ("u64" if value >= 2**63 else "i64")
    return (kind, value == 1, value % 16 == 0)


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
    return ("other", type(value), repr(value))


def spec_key_unspecialized(value):
    """spec_key for do_not_specialize arguments: no equality to 1, no divisibility."""
    key = spec_key(value)
    return (key[0],) if isinstance(key, tuple) and key and key[0] in ("i32", "i64", "u64") else key


def constexpr_key(value):
    value = value.value if isinstance(value, constexpr) else value
    try:
        hash(value)
        return ("c", value)
    except TypeError:
        return ("c", repr(value))


def make_binder(jitfn):
    """f(*args, **kwargs) -> (key, argument values in signature order, options dict)."""
    params = jitfn.signature.parameters
    names = list(params)
    options = [o for o in config.LAUNCH_OPTIONS if o not in params]
    namespace = {"spec_key": spec_key, "spec_key_unspecialized": spec_key_unspecialized,
                 "constexpr_key": constexpr_key}
    sig, keys = [], []
    for i, (name, p) in enumerate(params.items()):
        if p.default is not p.empty:
            namespace[f"default_{i}"] = p.default
            sig.append(f"{name}=default_{i}")
        else:
            sig.append(name)
        if name in jitfn.constexpr_names:
            keys.append(f"constexpr_key({name})")
        elif name in jitfn.do_not_specialize:
            keys.append(f"spec_key_unspecialized({name})")
        else:
            keys.append(f"spec_key({name})")
    sig.append("*")
    sig.extend(f"{o}=None" for o in options)
    code_options = ", ".join(f"{o!r}: {o}" for o in options)
    # A launch option that is also a parameter (a kernel's `num_stages: tl.constexpr`) is both.
    shared = [o for o in config.LAUNCH_OPTIONS if o in params]
    code_options += "".join(f", {o!r}: {o}" for o in shared)
    key_options = ", ".join(o for o in options if o != "stream") + ("," if len(options) > 1 else "")
    src = (f"def binder({', '.join(sig)}):\n"
           f"    key = ({', '.join(keys)}{',' if keys else ''} {key_options})\n"
           f"    return key, ({', '.join(names)}{',' if names else ''}), {{{code_options}}}\n")
    exec(compile(src, f"<kiln binder for {jitfn.__name__}>", "exec"), namespace)
    return namespace["binder"]
