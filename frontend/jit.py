"""`@kiln.jit`: a kernel's source, its specializations and its launches."""
from __future__ import annotations

import __future__
import ast
import functools
import inspect
import linecache
import re
import textwrap
import threading
import types
from dataclasses import dataclass

from kiln.constexpr import constexpr

from . import config, jit_hooks
from .binder import make_binder
from .errors import CompilationError, InterpretedCompilationError, InterpreterError, user_facing
from .jit_callable import JITCallable
from .runtime import _async_compile, cuda_driver
from .specialize import COMPILE_ONLY, annotation_type, specialize
from .tensor_wrapper import MockTensor


@dataclass(frozen=True)
class SourceInfo:
    """Where a @jit function's source came from, and its text as the frontend parses it."""
    file: str
    first_line: int  # the file's line number of `lines[0]`
    indent: int      # columns to add to a column of the dedented text to get the file's column
    lines: tuple     # the source lines (not dedented), decorators included when read from the file

    def line_text(self, line: int):
        index = line - self.first_line
        if 0 <= index < len(self.lines):
            return self.lines[index]
        return linecache.getline(self.file, line) or None


@dataclass(frozen=True)
class SourceRecord:
    """`JITFunction.rewriter`: the function, its file and the file's line of its `def` (Triton's names)."""
    fn: object
    filename: str
    def_file_lineno: int


_PARSE_LOCK = threading.Lock()


def parse_source(text: str) -> ast.Module:
    """`ast.parse`, one thread at a time: CPython 3.11 keeps the AST builder's recursion depth in
    interpreter-wide state, so two threads building ASTs at once (the drop-in compiles kernels on
    several threads) can fail with "AST constructor recursion depth mismatch" (CPython gh-106905).
    A parse that still trips on it, raced by a thread outside kiln, is done again: parsing is pure."""
    with _PARSE_LOCK:
        try:
            return ast.parse(text)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error):
                raise
            return ast.parse(text)


def read_source(fn) -> SourceInfo:
    """The source of `fn`: from its file through `inspect`, else (a function built by `exec()`
    from a string) the string the caller handed to `exec`, recognised by compiling it."""
    file = fn.__code__.co_filename
    try:
        lines, first = inspect.findsource(fn)  # the file's lines; `first` the first decorator's (0-based)
        return _source_info(inspect.getsourcefile(fn) or file, first + 1, lines[first:], fn.__name__)
    except (OSError, TypeError):
        pass
    text = _exec_source(fn)
    if text is None:
        raise ValueError(f"@jit functions should be defined in a Python file: cannot read the source of "
                         f"{fn.__qualname__} (defined in {file}); build it from source text with "
                         f"exec() or give it with JITFunction(fn)._unsafe_update_src(text)")
    lines = text.splitlines(keepends=True)
    first_def = fn.__code__.co_firstlineno  # the line of its first decorator, in the exec'd text
    return _source_info(file, first_def, lines[first_def - 1:], fn.__name__)


def _source_info(file, first, lines, name) -> SourceInfo:
    """The function from its `def` line on (decorators dropped, as Triton's `.src`). `lines` start
    at its first decorator; the block is read from the `def` line, so that a long decorator (Inductor
    writes one per kernel, with all its metadata) is not tokenized."""
    def_line = re.compile(rf"\s*(async\s+)?def\s+{re.escape(name)}\b")
    start = next((i for i, text in enumerate(lines) if def_line.match(text)), None)
    if start is None:  # not found by name: the first `def` of the decorated block, as inspect reads it
        block = inspect.getblock(lines)
        start = next((i for i, text in enumerate(block) if re.match(r"\s*(async\s+)?def\s", text)), 0)
        block = block[start:]
    else:
        block = inspect.getblock(lines[start:])
    indent = len(block[0]) - len(block[0].lstrip())
    return SourceInfo(file, first + start, indent, tuple(block))


def _exec_source(fn):
    """The text that an `exec()` on the call stack compiled `fn` from, or None."""
    import sys
    code = fn.__code__
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_filename == code.co_filename and
                                     code in frame.f_code.co_consts):
        frame = frame.f_back
    if frame is None:
        return None
    module_code, caller = frame.f_code, frame.f_back
    for scope in (caller.f_locals, caller.f_globals) if caller is not None else ():
        for value in list(scope.values()):
            if isinstance(value, str) and code.co_name in value and _compiles_to(value, module_code):
                return value
    return None


_FUTURE_FLAGS = functools.reduce(lambda acc, name: acc | getattr(__future__, name).compiler_flag,
                                 __future__.all_feature_names, 0)


def _compiles_to(text: str, module_code) -> bool:
    flags = module_code.co_flags & _FUTURE_FLAGS  # `from __future__` imports the exec inherited
    try:
        compiled = compile(text, module_code.co_filename, "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return compiled.co_code == module_code.co_code and compiled.co_names == module_code.co_names


class KernelInterface:
    """`kernel[grid](*args)` launches `kernel.run(*args, grid=grid)`."""

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid)


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a @jit function, as Triton's `JITFunction.params` describes it."""
    num: int
    name: str
    annotation: object
    is_constexpr: bool
    do_not_specialize: bool
    annotation_type: str = ""  # the type an annotation gives it (`fp16`, `*fp16`), or ""


class JITFunction(JITCallable, KernelInterface):
    def __init__(self, fn, do_not_specialize=(), debug=None, noinline=False, repr=None, launch_metadata=None,
                 prewarm=(), do_not_specialize_on_alignment=()):
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.arg_names = list(self.signature.parameters)
        self.constexpr_names = {n for n, p in self.signature.parameters.items() if _is_constexpr_annotation(p.annotation, fn)}
        self.do_not_specialize = {self.arg_names[d] if isinstance(d, int) else d for d in do_not_specialize or ()}
        # Triton's: these keep the specialization of a 1, not that of an address or int divisible by 16
        self.do_not_specialize_on_alignment = {self.arg_names[d] if isinstance(d, int) else d
                                               for d in do_not_specialize_on_alignment or ()}
        # a runtime parameter annotated with a type takes it, whatever its value's (kiln.specialize)
        self.annotation_types = {name: t for name, p in self.signature.parameters.items()
                                 if name not in self.constexpr_names and (t := annotation_type(p.annotation))}
        self.params = [KernelParam(i, name, p.annotation, name in self.constexpr_names, name in self.do_not_specialize,
                                   self.annotation_types.get(name, ""))
                       for i, (name, p) in enumerate(self.signature.parameters.items())]  # Triton's records
        self.debug = debug
        self.noinline = noinline
        self.launch_metadata = launch_metadata  # for kiln.profiler sessions started with hook="triton"
        self._repr = repr  # names each compiled specialization (kernel_name)
        if isinstance(prewarm, dict):
            raise TypeError(f"{fn.__name__}: prewarm= takes a list of signatures (dicts), not one dict")
        self.prewarm = tuple(dict(signature) for signature in prewarm)  # see kiln.signatures
        self.is_internal = (fn.__module__ or "").startswith("kiln.")
        self.__globals__ = fn.__globals__
        self.cache: dict = LaunchCache()   # binder key -> CompiledKernel
        self._grid_options: dict = {}  # binder key -> the launch options a grid callable is given
        self._by_specialization: dict = {}  # specialization key -> CompiledKernel
        self._tree = None
        self._source = None
        if not linecache.getlines(fn.__code__.co_filename):
            self._source = read_source(fn)  # built by exec(): find its text while the exec runs
        functools.update_wrapper(self, fn)

    @property
    def constexprs(self) -> list:
        """The positions of the constexpr parameters, as Triton lists them."""
        return [i for i, name in enumerate(self.arg_names) if name in self.constexpr_names]

    def repr(self, specialization) -> str:
        """Triton's: what a specialization's kernel is named from, the function's full name
        (`module.qualname`) or what `@jit(repr=fn)` gives for it. Libraries build on it (triton_kernels'
        `specialize` names a kernel after the original's repr and its epilogues' `repr(None)`)."""
        return f"{self.__module__}.{self.__qualname__}" if self._repr is None else self._repr(specialization)

    def kernel_name(self, params: dict) -> str:
        """The name a specialization's kernel compiles under: `repr` of it after its last `.`, as Triton's:
        `@jit(repr=fn)` gets an object with `signature` (each runtime parameter's type, `*fp32`, `i32`) and
        `constants` (each constant parameter's value, a runtime int of 1 included)."""
        if self._repr is None:
            return self.__name__
        from types import SimpleNamespace
        signature, constants = {}, {}
        for name, param in params.items():
            if isinstance(param, constexpr):
                constants[name] = param.value
                signature[name] = "constexpr"
            else:
                signature[name] = _type_spelling(param)
        name = self.repr(SimpleNamespace(name=self.__name__, fn=self, signature=signature, constants=constants))
        if isinstance(name, str):
            name = name[name.rfind(".") + 1:]
        if not isinstance(name, str) or not _KERNEL_NAME.match(name):
            raise ValueError(f"{self.__name__}: its repr= gave {name!r}, which cannot name a kernel "
                             "(letters, digits and _, not starting with a digit)")
        return name

    @property
    def rewriter(self) -> SourceRecord:
        """Where the interpreter reads this function from (Triton's `kernel.rewriter`): its file and the
        file's line of its `def` (`def_file_lineno`), which errors and line info count from."""
        info = self.source_info()
        return SourceRecord(self.fn, info.file, info.first_line)

    def rewrite(self) -> ast.Module:
        """The function as the interpreter reads it: the AST that kiln builds block IR from (Triton's
        interpreter rewrites it into a Python function instead), numbered by the file's lines."""
        tree = parse_source(self.src)
        ast.increment_lineno(tree, self.source_info().first_line - 1)
        return tree

    @property
    def src(self) -> str:
        """The function's source from its `def` line, dedented (Triton's `JITFunction.src`)."""
        return textwrap.dedent("".join(self.source_info().lines))

    @src.setter
    def src(self, value):
        raise AttributeError("Cannot set attribute 'src' directly: use _unsafe_update_src(new_src), which also "
                             "drops this function's compiled kernels (kernels that inline it keep theirs)")

    def _unsafe_update_src(self, new_src: str) -> None:
        """Replace the source the frontend compiles (Triton's spelling: the name warns that
        the signature stays the function's own and callers are not recompiled)."""
        old = self.source_info()
        self._source = SourceInfo(old.file, old.first_line, 0, tuple(new_src.splitlines(keepends=True)))
        self._source_replaced = True
        self._tree = None
        self.hash = None  # its callers keep theirs: resetting them is the caller's job, as in Triton
        self.cache.clear()  # the binder holds this dict: clear it, never replace it
        self._grid_options.clear()
        self._by_specialization.clear()

    def source_info(self) -> SourceInfo:
        if self._source is None:
            self._source = read_source(self.fn)
        if getattr(self, "_source_replaced", False) and "_starting_line_number" in self.__dict__:
            # a library rebuilding a kernel from another's source (triton_kernels' specialize) then points it
            # at the original's file and lines, as Triton reads them: the function's file, and its
            # starting_line_number plus the `def` line's place in raw_src
            def_index = next((i for i, text in enumerate(self.raw_src) if text.lstrip().startswith("def ")), 0)
            return SourceInfo(self.fn.__code__.co_filename, self.starting_line_number + def_index, 0,
                              self._source.lines)
        return self._source

    def parse(self) -> ast.FunctionDef:
        if self._tree is None:
            module = parse_source(self.src)
            self._tree = next(n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        return self._tree

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"@jit function {self.__name__} can only be called inside a kernel; "
                           f"launch it with {self.__name__}[grid](...)")

    def __repr__(self):
        return f"JITFunction({self.fn.__module__}:{self.fn.__qualname__})"

    # --- compile and launch -----------------------------------------------------------
    def __getitem__(self, grid):
        """`kernel[grid]`: a launcher generated for this kernel's signature (kiln.binder)."""
        launcher = self.binder.bind_grid(grid)
        if not self.pre_run_hooks:
            return launcher

        def with_hooks(*args, **kwargs):
            for hook in self.pre_run_hooks:
                hook(*args, **kwargs)
            return launcher(*args, **kwargs)
        return with_hooks

    pre_run_hooks: list = []  # each instance's own list once a hook is added

    def add_pre_run_hook(self, hook) -> None:
        """Triton's: `hook(*args, **kwargs)` is called with a launch's arguments before each launch
        (`kernel[grid](...)` or `kernel.run(...)`), e.g. to zero an output."""
        if not callable(hook):
            raise TypeError(f"a pre-run hook is a callable, not a {type(hook).__name__}")
        if "pre_run_hooks" not in self.__dict__:
            self.pre_run_hooks = []
        self.pre_run_hooks.append(hook)

    @functools.cached_property
    def binder(self):
        return make_binder(self)

    @user_facing
    def run(self, *args, grid, warmup=False, **kwargs):
        for hook in self.pre_run_hooks:
            hook(*args, **kwargs)
        try:
            key, values, stream = self.binder(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}: {e}") from None
        if warmup:
            token = COMPILE_ONLY.set(True)
            try:
                return self._cached_or_compiled(key, values, warmup=True)
            finally:
                COMPILE_ONLY.reset(token)
        return self.slow_launch(grid, key, values, stream)

    def slow_launch(self, grid, key, values, stream):
        """A launch that may compile first or call a grid function."""
        kernel = self._cached_or_compiled(key, values)
        if kernel is None:  # knobs.runtime.jit_cache_hook said not to compile
            return None
        if callable(grid):
            grid = grid(self.grid_meta(key, values))
        kernel.launch(grid, kernel.runtime_args(values), stream)
        return kernel

    def grid_meta(self, key, values) -> dict:
        """What a grid callable is given: the arguments by name, then the launch options set that
        are not parameters (Triton's). Those follow from the launch key: made once per key."""
        options = self._grid_options.get(key)
        if options is None:
            options = self._grid_options[key] = {k: v for k, v in self.binder.options(key, values).items()
                                                 if v is not None and k not in self.arg_names}
        meta = dict(zip(self.arg_names, values))
        meta.update(options)
        return meta

    def _cached_or_compiled(self, key, values, warmup=False):
        kernel = self.cache.get(key)
        if kernel is None:
            from .dropin.knobs import runtime as hooks
            options = self.binder.options(key, values)
            if hooks.jit_cache_hook is not None and jit_hooks.call(hooks.jit_cache_hook, self, key, values, options,
                                                                   warmup, compiled=False):
                return None
            mode = _async_compile.active_mode.get()
            if mode is not None:  # in `AsyncCompileMode`: compiled by its executor
                return _async_compile.compile_in(mode, self, key, values, options, warmup)
            kernel = self._compiled(key, values, options, warmup, self._compile(values, options))
        return kernel

    def _compiled(self, key, values, options, warmup, kernel):
        """A compile is done: its kernel is cached under launch key `key`, and the post-compile hook told."""
        from .dropin.knobs import runtime as hooks
        self.cache[key] = kernel
        if hooks.jit_post_compile_hook is not None:
            jit_hooks.call(hooks.jit_post_compile_hook, self, key, values, options, warmup, compiled=True)
        return kernel

    @property
    def device_caches(self) -> dict:
        """Triton's per-device caches, `device_caches[device][0]` the compiled kernels by launch key:
        kiln's one cache serves every device (clearing it makes the next launch ask the hooks again)."""
        return _EveryDevice((self.cache, self.binder, None, None, None))

    @user_facing
    def preload(self, specialization_data: str):
        """Compile the specialization a jit hook's `compile["specialization_data"]` describes
        (Triton's), without its arguments; the compiled kernel, as `warmup` returns it."""
        args, options = jit_hooks.preload_arguments(self, specialization_data)
        return self.warmup(*args, grid=(1,), **options)

    def _compile(self, values, options):
        """The slow path of a first call: specialize, build IR (or reuse an equal specialization)."""
        from .compile_listener import CompileTimer, listener
        listening = listener()
        timer = CompileTimer() if listening is not None else None
        bound = dict(zip(self.arg_names, values))
        options = {k: v for k, v in options.items() if v is not None}
        # the source of this function and of all it calls (Triton's cache_key; a conflict between two
        # functions' views of one global is Triton's error, raised here)
        source_key = self._dependency_key()
        key, params, runtime_names = specialize(self, bound, options)
        key = (key, source_key, config.debug())  # TRITON_DEBUG changes what is built (compiler.debug_build)
        kernel = self._by_specialization.get(key)
        if kernel is None:
            from .compiler import compile_kernel
            try:
                kernel = compile_kernel(self, params, options)
            except CompilationError as e:
                if not config.interpret() or isinstance(e, InterpreterError):
                    raise
                raise _as_interpreter_error(e) from e.__cause__
            if timer is not None:
                timer.ir_initialized()
                _lower_for_listener(kernel, timer)
            # a host TensorDescriptor or a tuple argument is several values of the kernel's
            expanders = {self.arg_names.index(n): _expander(params[n])
                         for n in runtime_names if not isinstance(params[n], tuple)}
            kernel.set_runtime_positions([self.arg_names.index(n) for n in runtime_names], expanders)
            if self.launch_metadata is not None:
                kernel.launch_metadata = self.launch_metadata
                widths = [1 if isinstance(params[n], tuple) else len(params[n].pieces) for n in runtime_names]
                kernel.arg_names = (runtime_names, widths, {n: v for n, v in bound.items() if n not in runtime_names})
            _check_globals_too(kernel, self.used_global_vals)
            self._by_specialization[key] = kernel
            if timer is not None:
                _tell_listener(listening, timer, self, params, kernel, cache_hit=False)
        elif timer is not None:
            _tell_listener(listening, timer, self, params, kernel, cache_hit=True)
        return kernel

    @user_facing
    def warmup(self, *args, grid=(1,), target=None, **kwargs):
        """Compile without launching. With `target` ("sm_90a"...) the binary is built for
        it, which needs no GPU; otherwise it is built and loaded for the current GPU if
        there is one (in the interpreter only the block IR is built)."""
        args = MockTensor.wrap_dtypes(args)  # a torch dtype stands for a tensor of it, as in Triton
        if _async_compile.active_mode.get() is not None:  # a compile submitted builds for `target` too
            token = _async_compile.BUILD_TARGET.set(target)
            try:
                kernel = self.run(*args, grid=grid, warmup=True, **kwargs)
            finally:
                _async_compile.BUILD_TARGET.reset(token)
            if isinstance(kernel, _async_compile.FutureKernel) or kernel is None:
                return kernel
        else:
            kernel = self.run(*args, grid=grid, warmup=True, **kwargs)
        if target is None and kernel is not None and kernel.options.get("arch") is not None \
                and not config.interpret():
            target = kernel.target_for(0)  # a launch's `arch=`: built for it, GPU or not, as Triton's warmup
        if target is not None:
            kernel.build(target)
        elif not config.interpret():
            if cuda_driver.is_available():
                kernel._init_handles()
        return kernel


def _lower_for_listener(kernel, timer) -> None:
    """What the compile makes of the block IR when a compilation listener wants its times: the
    binary for the current GPU (otherwise built at the first launch), or the IR's text."""
    if config.interpret():
        kernel.asm["kir"]
        timer.stage("kir")
        return
    if cuda_driver.is_available():
        kernel.build(kernel.target_for(cuda_driver.device_and_stream()[0]))
        timer.stage("cubin")


def _listener_target():
    from kiln.runtime import GPUTarget
    if config.interpret():
        return GPUTarget("cpu", 0, 1)
    from kiln.runtime import driver
    return driver.active.get_current_target()


def _tell_listener(listening, timer, jitfn, params, kernel, cache_hit: bool) -> None:
    """knobs.compilation.listener(src=ASTSource, metadata=, metadata_group=, times=, cache_hit=)."""
    from .compile_listener import notify
    from .dropin.compile import ASTSource
    signature, constants, attrs = {}, {}, {}
    for i, name in enumerate(jitfn.arg_names):
        param = params[name]
        if isinstance(param, constexpr):
            signature[name], constants[(i,)] = "constexpr", param.value
        else:
            signature[name] = _type_spelling(param) if isinstance(param, tuple) else type(param).__name__
            if isinstance(param, tuple) and param[1].get("divisibility"):
                attrs[(i,)] = [["tt.divisibility", param[1]["divisibility"]]]
    metadata = {"hash": kernel.hash, "target": _listener_target(), "name": kernel.name, **kernel.metadata,
                **{k: v for k, v in kernel.options.items() if k not in ("stream",)}}
    notify(listening, timer, ASTSource(jitfn, signature, constants, attrs), metadata, cache_hit)


def _check_globals_too(kernel, used_global_vals: dict) -> None:
    """The launch checks (kiln.compiler) the globals and closure values the source names as well as
    those compiling read, each against a copy of its value then: a constexpr changed in place (a
    closure's `c.value = 43`) is a change, as in Triton."""
    reads = {(name, id(scope)): i for i, (name, scope, _) in enumerate(kernel.global_reads)}
    for (name, _), (value, scope) in used_global_vals.items():
        at = reads.get((name, id(scope)))
        if at is None:
            kernel.global_reads.append((name, scope, value))
        else:
            kernel.global_reads[at] = (name, scope, value)


class LaunchCache(dict):
    """A kernel's compiled specializations by launch key (Triton's `device_caches[device][0]`). The
    `key` Triton's jit hooks are given is text, so a key's text finds its kernel too (`key in cache`,
    `cache[key]`); a launch looks up the key itself."""

    def __missing__(self, key):
        if isinstance(key, str):
            for known, kernel in list(self.items()):
                if str(known) == key:
                    return kernel
        raise KeyError(key)

    def __contains__(self, key):
        return dict.__contains__(self, key) or (isinstance(key, str) and any(str(k) == key for k in list(self)))


class _EveryDevice(dict):
    """A mapping whose every key (a device) holds the same value."""

    def __init__(self, value):
        super().__init__()
        self.value = value

    def __missing__(self, device):
        return self.value

    def clear(self):
        """Triton's `device_caches.clear()`: the launches compile again (kiln finds the kernels it
        compiled before, as Triton finds them in its cache directory)."""
        self.value[0].clear()


_KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _type_spelling(param) -> str:
    """Triton's spelling of a runtime parameter's type: `*fp32`, `i32`, `fp32`; a descriptor or a
    tuple by its kind."""
    from kiln.ir.types import pointer_type
    from .dropin.jit import canonicalize_dtype
    if not isinstance(param, tuple):
        return type(param).__name__
    dtype = param[0]
    if isinstance(dtype, pointer_type):
        return "*" + canonicalize_dtype(dtype.element_ty_)
    return canonicalize_dtype(dtype)


def _expander(param):
    """The launch values of an argument that the kernel takes as several (kiln.specialize)."""
    from .specialize import TupleArgument
    return param.launch_pieces if isinstance(param, TupleArgument) else (lambda value: value.launch_pieces())


def _as_interpreter_error(e: CompilationError) -> InterpretedCompilationError:
    kind = InterpretedCompilationError if type(e) is CompilationError else _interpreted_kind(type(e))
    error = kind(e.file, e.line, e.col, e.source_line, e.reason, e.at)
    error.__suppress_context__ = True
    return error


@functools.lru_cache(maxsize=None)
def _interpreted_kind(kind: type) -> type:
    """InterpretedCompilationError that is also `kind` (a CompileTimeAssertionFailure stays one)."""
    from . import errors
    name = f"Interpreted{kind.__name__}"
    made = type(name, (kind, InterpretedCompilationError), {"__module__": errors.__name__})
    setattr(errors, name, made)  # found by name, so it pickles
    return made


def _is_constexpr_annotation(annotation, fn) -> bool:
    if annotation is constexpr:
        return True
    if isinstance(annotation, str):
        return annotation.split(".")[-1] == "constexpr"
    return False


class ConstexprFunction(JITCallable):
    """Triton's `@constexpr_function`: a plain Python function that kernels call on constexpr
    arguments, at compile time, for a constexpr result; it stays callable from host code. kiln
    evaluates every callable that is neither `@jit` nor a builtin that way already; the wrapper
    is what code generators look for (Inductor copies `src` into the kernels it writes)."""

    def __call__(self, *args, **kwargs):
        """The function's value, given its arguments' values (a constexpr passes its Python value)."""
        return self.fn(*[_value_of(a) for a in args], **{k: _value_of(v) for k, v in kwargs.items()})

    def __get__(self, instance, owner=None):
        """A method of a class (an aggregate's, called on an instance in `__init__` or in a kernel):
        bound to the instance, as a plain function is."""
        return self if instance is None else types.MethodType(self, instance)


def _value_of(value):
    return value.value if isinstance(value, constexpr) else value


def constexpr_function(fn):
    return ConstexprFunction(fn)


def jit(fn=None, *, do_not_specialize=(), debug=None, noinline=False, repr=None, launch_metadata=None, prewarm=(),
        do_not_specialize_on_alignment=(), **unused):
    """Turn a Python function into a kernel (or a device function callable from one).

    `prewarm` declares signatures to compile before any launch (`kiln prewarm`; see kiln.signatures)."""
    def decorate(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline, prewarm=prewarm,
                           launch_metadata=launch_metadata, repr=repr,
                           do_not_specialize_on_alignment=do_not_specialize_on_alignment)
    return decorate(fn) if fn is not None else decorate
