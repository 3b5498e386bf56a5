"""`triton.knobs`: Triton 3.6's settings, grouped by area, with its semantics.

A knob is a class-level descriptor bound to an environment variable: reading it gives the value
set in Python, else the variable's, else a default; setting it also sets the variable (unless
`propagate_env` is False), so kiln's own readers and child processes see it; setting it to
`knobs.env` (or deleting it) goes back to the variable. Each group is a `base_knobs`: `knobs`
(name -> value), `knob_descriptors`, `copy()`, `reset()`, and `scope()`, a context in which
changes to the group and to its variables are undone on exit.

What the knobs mean for kiln: `runtime.interpret` is TRITON_INTERPRET (the interpreter);
`runtime.launch_enter_hook`/`launch_exit_hook` (a `HookChain`, or a callable set in its place)
are called around every launch of a kernel compiled by `triton.compile`; `autotuning.print`
prints each autotuning's choice and `autotuning.cache` shares it (kiln.tuning_results);
`compilation.allow_non_constexpr_globals` lets kernels read plain globals; `cache.dir` is kiln's
node cache unless set (`triton.runtime.cache`'s file managers use it); `nvidia.libdevice_path`
the libdevice kiln links; `nvidia.ptxas`, `ptxas_blackwell`, `cuobjdump` and `nvdisasm` are
`NvidiaTool`s (a path and a CUDA release) for tools that run those programs: the one
`TRITON_<NAME>_PATH` names, else the one on PATH; kiln runs none of them, and with no ptxas program
the assemblers are kiln's own, nvJitLink's ptxas (`path` None, nvJitLink's `version`); a missing
cuobjdump or nvdisasm is Triton's RuntimeError. The other knobs are
kept and read back as Triton's are. Setting a name that is no knob of a group is an error
rather than silently ignored.
"""
from __future__ import annotations

import importlib
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypedDict

from . import nvidia_tools
from .nvidia_tools import NvidiaTool  # noqa: F401  (triton.knobs has it)

_TRUE = ("1", "true", "yes", "on", "y")
_FALSE = ("0", "false", "no", "off", "n", "")


class Env:
    """The value that sends a knob back to its environment variable (`knobs.runtime.debug = knobs.env`)."""


env = Env()
propagate_env = True  # setting a knob also sets its environment variable


def setenv(key: str, value: str | None) -> None:
    """Set environment variable `key` to `value` (None: unset it), unless `propagate_env` is off."""
    if not propagate_env:
        return
    if value is not None:
        os.environ[key] = value
    else:
        os.environ.pop(key, None)


def toenv(value) -> tuple | None:
    """A knob's value as its variable's text, in a 1-tuple (`(None,)`: unset); None for a value with no
    text form (a class, a function), which leaves the variable as it is. Exact types, as Triton's."""
    kind = type(value)
    if value is None:
        return (None,)
    if kind is bool:
        return ("1" if value else "0",)
    if kind is str:
        return (value,)
    if kind is int:
        return (str(value),)
    return None


_UNSET = object()


class env_base:
    """A knob read from environment variable `key` unless set in Python."""

    def __init__(self, key: str):
        self.key = key

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__.get(self.name, _UNSET)
        return self.get() if value is _UNSET else self.transform(value)

    def __set__(self, obj, value):
        if isinstance(value, Env):
            obj.__dict__.pop(self.name, None)
            return
        obj.__dict__[self.name] = value
        text = toenv(value)
        if text is not None:
            setenv(self.key, text[0])

    def __delete__(self, obj):
        obj.__dict__.pop(self.name, None)

    def get(self):
        raise NotImplementedError

    def transform(self, value):
        return value


class env_str(env_base):
    def __init__(self, key: str, default: str):
        super().__init__(key)
        self.default = default

    def get(self):
        return os.environ.get(self.key, self.default)


class env_str_callable_default(env_base):
    def __init__(self, key: str, default_factory):
        super().__init__(key)
        self.default_factory = default_factory

    def get(self):
        value = os.environ.get(self.key)
        return self.default_factory() if value is None else value


class env_opt_str(env_base):
    def get(self):
        return os.environ.get(self.key)


def _parse_bool(key: str, text: str | None, default):
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise RuntimeError(f"{key}={text!r}: expected a boolean (1/0, true/false, yes/no, on/off)")


class env_bool(env_base):
    def __init__(self, key: str, default: bool = False):
        super().__init__(key)
        self.default = default

    def get(self):
        return _parse_bool(self.key, os.environ.get(self.key), self.default)


class env_opt_bool(env_base):
    def get(self):
        return _parse_bool(self.key, os.environ.get(self.key), None)


class env_int(env_base):
    def __init__(self, key: str, default: int = 0):
        super().__init__(key)
        self.default = default

    def get(self):
        text = os.environ.get(self.key)
        if text is None:
            return self.default
        try:
            return int(text)
        except ValueError:
            raise RuntimeError(f"{self.key}={text!r}: expected an int") from None


class env_class(env_base):
    """A class named `module:Class` in the variable, which must derive from a class named `type`."""

    def __init__(self, key: str, type: str):
        super().__init__(key)
        self.type = type

    def get(self):
        text = os.environ.get(self.key)
        if text is None:
            return None
        module, _, name = text.partition(":")
        if not module or not name:
            raise RuntimeError(f"{self.key}={text!r}: expected MODULE:CLASS")
        cls = getattr(importlib.import_module(module), name)
        if not any(base.__name__ == self.type for base in cls.mro()):
            raise RuntimeError(f"{self.key}={text!r}: {name} is not a {self.type}")
        return cls


class LaunchHook(Protocol):
    """A launch hook (`runtime.launch_enter_hook` / `launch_exit_hook`): called with the launch's lazy
    metadata (`metadata.get()`: the kernel's name, function handle, stream, and its launch_metadata's)."""

    def __call__(self, metadata) -> None: ...


class InitHandleHook(Protocol):
    """A kernel-load hook (`runtime.kernel_load_start_hook` / `_end_hook`); module and function are None
    before the load."""

    def __call__(self, module, function, name: str, metadata_group: dict, hash: str) -> None: ...


class JITHookCompileInfo(TypedDict):
    """What a JIT hook learns of the compile it is asked about (`compile=`)."""
    key: str
    signature: dict
    device: int
    constants: None
    num_warps: int
    num_ctas: int
    num_stages: int
    enable_fp_fusion: bool
    launch_cooperative_grid: bool
    extern_libs: tuple
    configs: list
    specialization_data: str
    is_warmup: bool


class JITHook(Protocol):
    """`runtime.jit_cache_hook` / `jit_post_compile_hook`: a falsy answer to the cache hook skips the compile."""

    def __call__(self, *, key: str, repr: str, fn, compile: JITHookCompileInfo, is_manual_warmup: bool,
                 already_compiled: bool) -> bool | None: ...


class PipelineStagesHook(Protocol):
    """`runtime.add_stages_inspection_hook`: sees (and may edit) a backend's compile stages."""

    def __call__(self, stages, options, language, capability): ...


class BuildImpl(Protocol):
    """`build.impl`: builds C source `src` as module `name` in `srcdir`, giving the built file's path."""

    def __call__(self, name: str, src: str, srcdir: str, library_dirs: list, include_dirs: list,
                 libraries: list, /) -> str: ...


class HookChain:
    """Hooks called in order (or in reverse, for the exit hooks): `add`, `remove`, and a call
    calls each. It is false while it holds none, so a launcher can skip building the metadata."""

    def __init__(self, reversed: bool = False):
        self.calls: list = []
        self.reversed = reversed

    def add(self, func) -> None:
        if not callable(func):
            raise TypeError(f"a hook is a callable, not a {type(func).__name__}")
        if func not in self.calls:
            self.calls.append(func)
        recount_launch_hooks()

    def remove(self, func) -> None:
        if func in self.calls:
            self.calls.remove(func)
        recount_launch_hooks()

    def __call__(self, *args, **kwargs):
        for call in (self.calls[::-1] if self.reversed else self.calls):
            call(*args, **kwargs)

    def __bool__(self):
        return bool(self.calls)


class base_knobs:
    """A group of knobs (Triton's class of the same name)."""

    _plain: tuple = ()  # the group's settings that are not environment-backed knobs

    def __setattr__(self, name, value):
        if name not in self.knob_descriptors and name not in self._plain:
            group = type(self).__name__.removesuffix("_knobs")
            raise AttributeError(f"kiln has no knob {group}.{name} (it has: "
                                 f"{', '.join(sorted([*self.knob_descriptors, *self._plain]))})")
        object.__setattr__(self, name, value)
        self._changed()

    def __delattr__(self, name):
        object.__delattr__(self, name)
        self._changed()

    def _changed(self) -> None:
        """A setting of this group was set, deleted or restored."""

    @property
    def knob_descriptors(self) -> dict:
        return {name: value for cls in reversed(type(self).__mro__) for name, value in vars(cls).items()
                if isinstance(value, env_base)}

    @property
    def knobs(self) -> dict:
        return {name: getattr(self, name) for name in self.knob_descriptors}

    def copy(self):
        clone = type(self)()
        clone.__dict__.update(self.__dict__)
        return clone

    def reset(self):
        for name in self.knob_descriptors:
            delattr(self, name)
        self._changed()
        return self

    @contextmanager
    def scope(self):
        saved_env = {knob.key: os.environ.get(knob.key) for knob in self.knob_descriptors.values()}
        saved = dict(self.__dict__)
        try:
            yield
        finally:
            self.__dict__.clear()
            self.__dict__.update(saved)
            self._changed()
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class _KilnCacheDir(env_base):
    """`cache.dir`: kiln's node cache whatever TRITON_CACHE_DIR says (Inductor sets that variable
    for the cubins it reads in Triton's layout, kiln.dropin.triton_files); set in Python, the value set."""

    def get(self):
        from kiln.cache.env import cache_dir
        return str(cache_dir())


class build_knobs(base_knobs):
    cc = env_opt_str("CC")
    cudacrt_path = env_opt_str("TRITON_CUDACRT_PATH")
    cudart_path = env_opt_str("TRITON_CUDART_PATH")
    impl = None
    _plain = ("impl",)

    @property
    def backend_dirs(self) -> set:
        return {path for path in (self.cudacrt_path, self.cudart_path) if path is not None}


class redis_knobs(base_knobs):
    key_format = env_str("TRITON_REDIS_KEY_FORMAT", "triton:{key}:{filename}")
    host = env_str("TRITON_REDIS_HOST", "localhost")
    port = env_int("TRITON_REDIS_PORT", 6379)


class cache_knobs(base_knobs):
    """`dir` is kiln's node cache unless set here; `dump_dir` and `override_dir` lie under it
    unless TRITON_DUMP_DIR / TRITON_OVERRIDE_DIR say otherwise. `manager_class`: None means
    TRITON_CACHE_MANAGER, else Triton's file manager (kiln.dropin.file_cache decides)."""
    home_dir = env_str("TRITON_HOME", os.path.expanduser("~/"))
    dir = _KilnCacheDir("TRITON_CACHE_DIR")
    dump_dir = env_str_callable_default("TRITON_DUMP_DIR", lambda: os.path.join(cache.dir, "dump"))
    override_dir = env_str_callable_default("TRITON_OVERRIDE_DIR", lambda: os.path.join(cache.dir, "override"))
    remote_manager_class = env_class("TRITON_REMOTE_CACHE_BACKEND", "RemoteCacheBackend")
    manager_class = None
    _plain = ("manager_class",)

    def get_triton_dir(self, dirname: str) -> str:
        return os.path.join(self.home_dir, ".triton", dirname)


class compilation_knobs(base_knobs):
    override = env_bool("TRITON_KERNEL_OVERRIDE")
    dump_ir = env_bool("TRITON_KERNEL_DUMP")
    dump_ir_extract_di_local_variables = env_bool("LLVM_EXTRACT_DI_LOCAL_VARIABLES")
    store_binary_only = env_bool("TRITON_STORE_BINARY_ONLY")
    always_compile = env_bool("TRITON_ALWAYS_COMPILE")
    use_ir_loc = env_opt_str("USE_IR_LOC")
    enable_asan = env_bool("TRITON_ENABLE_ASAN")
    disable_line_info = env_bool("TRITON_DISABLE_LINE_INFO")
    front_end_debugging = env_bool("TRITON_FRONT_END_DEBUGGING")
    allow_non_constexpr_globals = env_bool("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS")
    instrumentation_mode = os.environ.get("TRITON_INSTRUMENTATION_MODE", "")
    fpsan_homomorphic_casts = env_bool("TRITON_FPSAN_HOMOMORPHIC_CASTS")  # Triton 3.9's fp sanitizer; kiln has none
    listener = None
    _plain = ("instrumentation_mode", "listener")


@dataclass
class CompileTimes:
    """Triton's timing of one compile, in microseconds: `ir_initialization` (the source to IR, or
    the lookup of a cached kernel), `lowering_stages` ((stage, duration) in order; none for a
    cached kernel) and `store_results` (keeping what was compiled). A stage that ran counts at
    least 1."""
    ir_initialization: int
    lowering_stages: list
    store_results: int

    @property
    def total_lowering(self) -> int:
        return sum(duration for _, duration in self.lowering_stages)

    @property
    def total(self) -> int:
        return self.ir_initialization + self.total_lowering + self.store_results


class CompilationListener:
    """Triton's protocol of `knobs.compilation.listener`: called after each compile, a kernel's JIT
    specialization or `triton.compile`, hit or miss, as `listener(src=, metadata=, metadata_group=,
    times=, cache_hit=)` (`src` an ASTSource, `metadata` a dict with `hash` and `target`, `times` a
    CompileTimes)."""

    def __call__(self, *, src, metadata, metadata_group, times, cache_hit) -> None:
        ...


class AutotuneListener:
    """Triton 3.9's protocol of `knobs.autotuning.listener`: called once per autotuning of a key,
    `listener(fn=, key=, best_config=, configs_timings=, duration=, cache_hit=)` (`duration` None
    and `configs_timings` None where the choice came from the shared results, `cache_hit` True)."""

    def __call__(self, *, fn, key, best_config, configs_timings, duration, cache_hit) -> None:
        ...


class autotuning_knobs(base_knobs):
    """`cache`: share each autotuning's choice (as `@autotune(cache_results=True)`); `print`: print
    the config chosen, with the key and the time the tuning took, as Triton does; `listener`: an
    AutotuneListener (Triton 3.9)."""
    cache = env_bool("TRITON_CACHE_AUTOTUNING")
    print = env_bool("TRITON_PRINT_AUTOTUNING")
    listener = None
    _plain = ("listener",)


class runtime_knobs(base_knobs):
    interpret = env_bool("TRITON_INTERPRET")
    debug = env_bool("TRITON_DEBUG")
    override_arch = env_opt_str("TRITON_OVERRIDE_ARCH")
    launch_enter_hook = HookChain()
    launch_exit_hook = HookChain(reversed=True)
    kernel_load_start_hook = HookChain()
    kernel_load_end_hook = HookChain(reversed=True)
    # Triton 3.9's, called as a kernel's module is unloaded: kiln never unloads a module it loaded,
    # so it is never called
    kernel_unload_hook = HookChain()
    jit_cache_hook = None
    jit_post_compile_hook = None
    add_stages_inspection_hook = None
    _plain = ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook",
              "kernel_unload_hook", "jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook")

    def _changed(self) -> None:
        if self is runtime:
            recount_launch_hooks()


class language_knobs(base_knobs):
    fp32_default = env_opt_str("TRITON_F32_DEFAULT")
    default_fp_fusion = env_bool("TRITON_DEFAULT_FP_FUSION", True)
    force_disable_fp_fusion = env_bool("TRITON_FORCE_DISABLE_FP_FUSION")  # Triton 3.9's: whatever a launch asks

    def fp_fusion_enabled(self, requested) -> bool:
        """Triton 3.9's: whether a compile that asks `requested` (None: nothing said) fuses a*b+c into
        one rounding. (Triton 3.9 warns where TRITON_DEFAULT_FP_FUSION is unset that its default will
        change in 3.10; kiln follows 3.6's default and says nothing.)"""
        return not self.force_disable_fp_fusion and (self.default_fp_fusion if requested is None else bool(requested))


class env_nvidia_tool(env_base):
    """An NVIDIA program, read as an `NvidiaTool`: the one the variable (or the path set in Python)
    names, else the one on PATH, else an NVIDIA wheel's, else `fallback()`'s; RuntimeError if none,
    as Triton's."""

    def __init__(self, binary: str, fallback=None):
        super().__init__(f"TRITON_{binary.upper().replace('-', '_')}_PATH")
        self.binary, self.fallback = binary, fallback

    def get(self):
        return self.transform(os.environ.get(self.key))

    def transform(self, value):
        tool = nvidia_tools.find(self.binary, value) or (self.fallback and self.fallback())
        if tool is None:
            raise RuntimeError(f"Cannot find {self.binary}: no {self.key}, none on PATH and no NVIDIA wheel's "
                               f"(kiln itself runs no {self.binary}; a tool that does needs one)")
        return tool


def _libdevice() -> str | None:
    from kiln.codegen.libdevice import libdevice_path  # the libdevice kiln's compiles link
    try:
        return libdevice_path()
    except Exception:  # noqa: BLE001  (no CUDA libdevice here: Inductor then skips what needs it)
        return None


class _OptionalDefault(env_base):
    def __init__(self, key: str, default_factory):
        super().__init__(key)
        self.default_factory = default_factory

    def get(self):
        return os.environ.get(self.key) or self.default_factory()


class nvidia_knobs(base_knobs):
    cuobjdump = env_nvidia_tool("cuobjdump")
    nvdisasm = env_nvidia_tool("nvdisasm")
    ptxas = env_nvidia_tool("ptxas", nvidia_tools.nvjitlink_assembler)
    ptxas_blackwell = env_nvidia_tool("ptxas-blackwell", nvidia_tools.nvjitlink_assembler)
    dump_nvptx = env_bool("NVPTX_ENABLE_DUMP")
    disable_ptxas_opt = env_bool("DISABLE_PTXAS_OPT")
    ptxas_options = env_opt_str("PTXAS_OPTIONS")
    mock_ptx_version = env_opt_str("TRITON_MOCK_PTX_VERSION")
    dump_ptxas_log = env_bool("TRITON_DUMP_PTXAS_LOG")
    libdevice_path = _OptionalDefault("TRITON_LIBDEVICE_PATH", _libdevice)
    libcuda_path = env_opt_str("TRITON_LIBCUDA_PATH")


class amd_knobs(base_knobs):
    use_buffer_ops = env_bool("AMDGCN_USE_BUFFER_OPS", True)
    use_buffer_atomics = env_bool("AMDGCN_USE_BUFFER_ATOMICS", True)
    buffer_ops_analyze_small_tensor_range = env_bool("AMDGCN_ANALYZE_SMALL_TENSOR_RANGE", False)
    dump_amdgcn = env_bool("AMDGCN_ENABLE_DUMP")
    libhip_path = env_opt_str("TRITON_LIBHIP_PATH")
    use_block_pingpong = env_opt_bool("TRITON_HIP_USE_BLOCK_PINGPONG")
    use_in_thread_transpose = env_opt_bool("TRITON_HIP_USE_IN_THREAD_TRANSPOSE")
    use_async_copy = env_bool("TRITON_HIP_USE_ASYNC_COPY")
    scalarize_packed_fops = env_bool("AMDGCN_SCALARIZE_PACKED_FOPS")


class proton_knobs(base_knobs):
    disable = env_bool("TRITON_PROTON_DISABLE", False)
    cupti_lib_dir = env_opt_str("TRITON_CUPTI_LIB_PATH")
    enable_nvtx = env_bool("TRITON_ENABLE_NVTX", True)


build = build_knobs()
redis = redis_knobs()
cache = cache_knobs()
compilation = compilation_knobs()
autotuning = autotuning_knobs()
runtime = runtime_knobs()
language = language_knobs()
nvidia = nvidia_knobs()
amd = amd_knobs()
proton = proton_knobs()

class _Counted:
    """The `runtime` the launch_hooked flag was counted for. Held in an object of its own, not as a
    module global: Triton's fresh_knobs fixture takes every knob set among the module's globals, and a
    second `runtime` there made it drop TRITON_INTERPRET from the environment when it restored it."""
    __slots__ = ("runtime",)

    def __init__(self):
        self.runtime = None


# Whether a launch hook is set on `runtime`, and the `runtime` that answer is for: kept as the hooks
# change, so that a launch reads a flag (kiln.launch_hooks) rather than asking two chains; a
# `runtime` put in its place (as Triton's test fixtures do, a copy) is asked again
launch_hooked = False
hooked = _Counted()


def recount_launch_hooks() -> bool:
    global launch_hooked
    counted = hooked.runtime = globals().get("runtime")  # None while the module is loading
    launch_hooked = counted is not None and bool(counted.launch_enter_hook or counted.launch_exit_hook)
    return launch_hooked


def refresh_knobs() -> None:
    """Read again the knobs Triton reads once (kiln reads every knob when it is used)."""
    compilation.instrumentation_mode = os.environ.get("TRITON_INSTRUMENTATION_MODE", "")
