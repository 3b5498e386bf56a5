"""`@kiln.jit`: a kernel's source, its specializations and its launches."""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from dataclasses import dataclass

from kiln.language.core import constexpr

from . import config
from .binder import grid3, make_binder
from .specialize import specialize


@dataclass(frozen=True)
class SourceInfo:
    file: str
    first_line: int  # line number of the `def` line's first line (decorators included)
    indent: int
    lines: tuple

    def line_text(self, line: int):
        text = linecache.getline(self.file, line)
        if text:
            return text
        index = line - self.first_line
        return self.lines[index] if 0 <= index < len(self.lines) else None


class KernelInterface:
    """`kernel[grid](*args)` launches `kernel.run(*args, grid=grid)`."""

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid)


class JITFunction(KernelInterface):
    def __init__(self, fn, do_not_specialize=(), debug=None, noinline=False, repr=None, launch_metadata=None,
                 prewarm=()):
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.arg_names = list(self.signature.parameters)
        self.constexpr_names = {n for n, p in self.signature.parameters.items() if _is_constexpr_annotation(p.annotation, fn)}
        self.do_not_specialize = {self.arg_names[d] if isinstance(d, int) else d for d in do_not_specialize}
        self.debug = debug
        self.noinline = noinline
        if isinstance(prewarm, dict):
            raise TypeError(f"{fn.__name__}: prewarm= takes a list of signatures (dicts), not one dict")
        self.prewarm = tuple(dict(signature) for signature in prewarm)  # see kiln.signatures
        self.is_internal = fn.__module__.startswith("kiln.")
        self.cache: dict = {}              # binder key -> CompiledKernel
        self._by_specialization: dict = {}  # specialization key -> CompiledKernel
        self._tree = None
        self._source = None
        functools.update_wrapper(self, fn)

    @property
    def src(self) -> str:
        return "".join(self.source_info().lines)

    def source_info(self) -> SourceInfo:
        if self._source is None:
            try:
                lines, first = inspect.getsourcelines(self.fn)
                file = inspect.getsourcefile(self.fn) or "<unknown>"
            except (OSError, TypeError) as e:
                raise RuntimeError(f"cannot read the source of @jit function {self.fn.__qualname__}: {e}") from None
            indent = len(lines[0]) - len(lines[0].lstrip())
            self._source = SourceInfo(file, first, indent, tuple(lines))
        return self._source

    def parse(self) -> ast.FunctionDef:
        if self._tree is None:
            src = textwrap.dedent("".join(self.source_info().lines))
            module = ast.parse(src)
            self._tree = next(n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        return self._tree

    def closure_vars(self) -> dict:
        code, cells = self.fn.__code__, self.fn.__closure__ or ()
        out = {}
        for name, cell in zip(code.co_freevars, cells):
            try:
                out[name] = cell.cell_contents
            except ValueError:
                pass
        return out

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"@jit function {self.__name__} can only be called inside a kernel; "
                           f"launch it with {self.__name__}[grid](...)")

    def __repr__(self):
        return f"JITFunction({self.fn.__module__}:{self.fn.__qualname__})"

    # --- compile and launch -----------------------------------------------------------
    def __getitem__(self, grid):
        """`kernel[grid]`: a launcher generated for this kernel's signature (kiln.binder)."""
        return self.binder.bind_grid(grid)

    @functools.cached_property
    def binder(self):
        return make_binder(self)

    def run(self, *args, grid, warmup=False, **kwargs):
        try:
            key, values, stream = self.binder(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}: {e}") from None
        if warmup:
            return self._cached_or_compiled(key, values)
        return self.slow_launch(grid, key, values, stream)

    def slow_launch(self, grid, key, values, stream):
        """A launch that may compile first or call a grid function."""
        kernel = self._cached_or_compiled(key, values)
        if callable(grid):
            meta = dict(zip(self.arg_names, values))
            meta.update((k, v) for k, v in self.binder.options(key, values).items() if v is not None and k not in meta)
            grid = grid(meta)
        kernel.launch(grid3(grid), kernel.runtime_args(values), stream)
        return kernel

    def _cached_or_compiled(self, key, values):
        kernel = self.cache.get(key)
        if kernel is None:
            kernel = self.cache[key] = self._compile(values, self.binder.options(key, values))
        return kernel

    def _compile(self, values, options):
        """The slow path of a first call: specialize, build IR (or reuse an equal specialization)."""
        bound = dict(zip(self.arg_names, values))
        options = {k: v for k, v in options.items() if v is not None}
        key, params, runtime_names = specialize(self, bound, options)
        kernel = self._by_specialization.get(key)
        if kernel is None:
            from .compiler import compile_kernel
            kernel = compile_kernel(self, params, options)
            descriptors = {self.arg_names.index(n) for n in runtime_names if not isinstance(params[n], tuple)}
            kernel.set_runtime_positions([self.arg_names.index(n) for n in runtime_names], descriptors)
            self._by_specialization[key] = kernel
        return kernel

    def warmup(self, *args, grid=(1,), target=None, **kwargs):
        """Compile without launching. With `target` ("sm_90a"...) the binary is built for
        it, which needs no GPU; otherwise it is built and loaded for the current GPU if
        there is one (in the interpreter only the block IR is built)."""
        kernel = self.run(*args, grid=grid, warmup=True, **kwargs)
        if target is not None:
            kernel.build(target)
        elif not config.interpret():
            from .runtime import cuda_driver
            if cuda_driver.is_available():
                kernel._init_handles()
        return kernel


def _is_constexpr_annotation(annotation, fn) -> bool:
    if annotation is constexpr:
        return True
    if isinstance(annotation, str):
        return annotation.split(".")[-1] == "constexpr"
    return False


def constexpr_function(fn):
    """Triton's mark for a plain Python function that kernels call on constexpr arguments,
    at compile time, for a constexpr result. kiln evaluates every callable that is neither
    `@jit` nor a builtin that way already, so the function is returned as it is and stays
    callable from host code."""
    return fn


def jit(fn=None, *, do_not_specialize=(), debug=None, noinline=False, repr=None, launch_metadata=None, prewarm=(),
        **unused):
    """Turn a Python function into a kernel (or a device function callable from one).

    `prewarm` declares signatures to compile before any launch (`kiln prewarm`; see kiln.signatures)."""
    def decorate(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline, prewarm=prewarm)
    return decorate(fn) if fn is not None else decorate
