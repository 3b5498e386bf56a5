"""`triton.jit` in the drop-in mode: kiln's JITFunction with the attributes Triton's host API has.

Inductor and libraries read `params` (each with `num`, `name`, `is_constexpr`), `cache_key`,
`repr`, `__globals__` and `used_global_vals` of a JITFunction, set `fn` to None before pickling
one, and compile it with `triton.compile(ASTSource(fn, ...))` (kiln.dropin.compile).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kiln.jit import JITFunction as _KilnJITFunction
from kiln.jit import ConstexprFunction, KernelInterface, constexpr_function  # noqa: F401  (triton.runtime.jit has them)
from kiln.tensor_wrapper import TensorWrapper, reinterpret  # noqa: F401


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a kernel, as Triton's `JITFunction.params` lists them."""
    num: int
    name: str
    is_constexpr: bool
    do_not_specialize: bool
    default: object = None


class JITFunction(_KilnJITFunction):
    def __init__(self, fn, *, repr=None, **kwargs):
        super().__init__(fn, **kwargs)
        self.params = [KernelParam(i, name, name in self.constexpr_names, name in self.do_not_specialize,
                                   None if p.default is p.empty else p.default)
                       for i, (name, p) in enumerate(self.signature.parameters.items())]
        self.repr = repr if repr is not None else _name_repr
        self.__globals__ = fn.__globals__
        self.used_global_vals = {}  # kiln reads globals when it builds the IR, not at launch
        self.cache_key = hashlib.sha256(self.src.encode()).hexdigest()

    @property
    def constexprs(self) -> list:
        return [p.num for p in self.params if p.is_constexpr]

    def __getstate__(self):
        # what compiling needs (the source and the signature), not the compiled kernels or the binder
        state = dict(self.__dict__)
        for name in ("binder", "cache", "_by_specialization", "_tree", "__wrapped__"):
            state.pop(name, None)
        state["fn"] = None
        state["__globals__"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.cache, self._by_specialization, self._tree = {}, {}, None


def _name_repr(jitfn) -> str:
    return jitfn.__name__


def jit(fn=None, *, do_not_specialize=(), debug=None, noinline=False, repr=None, launch_metadata=None, prewarm=(),
        **unused):
    """Triton's `@jit`, giving the drop-in JITFunction."""
    def decorate(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline, repr=repr,
                           launch_metadata=launch_metadata, prewarm=prewarm)
    return decorate(fn) if fn is not None else decorate
