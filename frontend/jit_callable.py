"""What @jit functions and `@constexpr_function`s share (Triton's `JITCallable`): `cache_key`, a hash
of the source and of everything it calls (kiln.dependencies). A module of its own, below the JIT,
so that the binder and specialization can tell a function argument by its class at load.
"""
from __future__ import annotations

import functools
import inspect
import textwrap
import threading


class JITCallable:
    """What @jit functions and `@constexpr_function`s share (Triton's class of this name): `cache_key`,
    a hash of the source and of everything it calls (kiln.dependencies), kept in `hash` until
    that is set to None, and `used_global_vals`, the globals it and its callees name."""

    hash = None
    used_global_vals: dict = {}
    _unsupported_reference = None

    def __init__(self, fn):
        """Made from a plain Python function, as Triton's is (tools hash one so); @jit functions
        are made by their own class."""
        self.fn = fn
        self.__globals__ = fn.__globals__
        self._src = None
        functools.update_wrapper(self, fn)

    @property
    def src(self) -> str:
        """The function's source from its `def` (decorators left out)."""
        if self._src is None:
            text = textwrap.dedent(inspect.getsource(self.fn))
            self._src = text[text.index("def "):]
        return self._src

    def _unsafe_update_src(self, new_src: str) -> None:
        """Replace the source `cache_key` hashes (Triton's: the function called stays the one
        defined, and its callers' keys are theirs to reset)."""
        self._src = new_src
        self.hash = None

    def _dependency_key(self) -> str:
        """`cache_key`, also for a function that names a plain Python function (kiln calls those)."""
        key = self.hash
        if key is not None:
            return key
        with _HASH_LOCK:
            if self.hash is not None:
                return self.hash
            from .dependencies import compute_key
            self.hash = f"recursion:{self.__module__}.{self.__qualname__}"  # a function that calls itself
            try:
                key, used, unsupported = compute_key(self)
            except BaseException:
                self.hash = None
                raise
            self.used_global_vals, self._unsupported_reference = used, unsupported
            self.hash = key
            return key

    @property
    def cache_key(self) -> str:
        """Triton's: changes with the source of this function or of any function it calls."""
        key = self._dependency_key()
        if self._unsupported_reference is not None:
            raise RuntimeError(f"Unsupported function referenced: {self._unsupported_reference}")
        return key

    @property
    def starting_line_number(self) -> int:
        """The line of the function's first decorator (Triton's: where its source starts); settable, as
        a library that rebuilds a kernel from another's source sets it to the original's."""
        return self.__dict__.get("_starting_line_number", self.fn.__code__.co_firstlineno)

    @starting_line_number.setter
    def starting_line_number(self, line: int) -> None:
        self._starting_line_number = line
        self.hash = None  # part of cache_key, as in Triton

    @property
    def raw_src(self) -> list:
        """The function's source lines, decorators included (Triton's); settable as Triton's attribute is."""
        if "_raw_src" not in self.__dict__:
            self._raw_src = inspect.getsourcelines(self.fn)[0]
        return self._raw_src

    @raw_src.setter
    def raw_src(self, lines) -> None:
        self._raw_src = list(lines)

    def get_capture_scope(self) -> dict:
        """The names the function's body sees (Triton's): its globals, and its closure's variables over
        them."""
        closure = self.closure_vars()
        return self.__globals__ | closure if closure else self.__globals__

    def __repr__(self):
        return f"{type(self).__name__}({self.fn.__qualname__})"

    def closure_vars(self) -> dict:
        code, cells = self.fn.__code__, self.fn.__closure__ or ()
        out = {}
        for name, cell in zip(code.co_freevars, cells):
            try:
                out[name] = cell.cell_contents
            except ValueError:
                pass
        return out


_HASH_LOCK = threading.RLock()  # one for every function: keys are computed once each, callees within
