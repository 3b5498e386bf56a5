"""`triton.compile`, `ASTSource` and `CompiledKernel`, as Triton 3.6 offers them to Inductor: the one
implementation, also `kiln.compile` and `kiln.compiler.ASTSource` (`import kiln as triton`).

`compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget(...), options={...})`
finds a kernel compiled before from its source key without building its IR (kiln.dropin.warm);
otherwise it builds kiln's block IR for that specialization (kiln.signatures spells it the way
Triton does: `*fp32:16`, `i32`), then, for a CUDA target (a GPUTarget or a name, "sm_90a"), the
binary through kiln's tiers (memory, node cache, shared tier, node daemon, this process): every
rank and compile worker of a node that asks for the same kernel gets one compile, and
`KILN_MANIFEST` records it; the cubin is also left in Triton's cache layout, where Inductor's
static launcher and Triton bundler look, when that launcher would launch it as kiln does
(kiln.dropin.triton_files, kiln.dropin.static_abi). For the `cpu` target (Inductor's
`cpu_backend = "triton"`, or `kiln.compile` with no GPU) kiln's interpreter runs the block IR.

The result pickles (Inductor compiles in worker processes and launches in the parent): it
carries the block IR as text, its argument types and the binary's bytes, and `_init_handles()`
makes the launcher (parsing the IR only for the interpreter).
"""
from __future__ import annotations

import hashlib
import sys
import weakref
from collections import namedtuple

from kiln import errors  # noqa: F401  (triton.compiler.errors, an attribute after `import triton` as in Triton)
from kiln.errors import CompilationError, CompileTimeAssertionFailure, KilnError, OutOfResources  # noqa: F401
from kiln.cache.metadata import launched_warps
from kiln.interpret.device import interpreted_resources
from kiln.launch_hooks import LaunchMetadata as LazyDict  # noqa: F401  (Triton's name for the hooks' lazy dict)
from kiln.runtime import GPUTarget

from . import warm
from .backends import PTXASError, make_backend, triton_key  # noqa: F401  (triton.compiler.compiler has them)

# the divisibilities a signature can state (kiln.signatures): 16, and 8 for an integer (kiln specializes on it)
_DIVISIBILITY_HINTS = {16: ":16", 8: ":8"}


class ASTSource:
    """A kernel and one specialization of it: `signature` maps every parameter name to its type
    (`*fp32`, `i32`, ..., or `constexpr`); `constexprs` the constant ones (by name or as `(index,)`)
    to their values; `attrs` maps `(index,)` to hints, `[["tt.divisibility", 16]]`."""

    def __init__(self, fn, signature: dict, constexprs: dict | None = None, attrs: dict | None = None):
        self.fn = fn
        self.name = fn.__name__
        self.signature = dict(signature)
        if not all(isinstance(k, str) for k in self.signature):
            raise TypeError("Signature keys must be string")
        names = list(fn.arg_names)
        self.constants = {}
        for k, v in (constexprs or {}).items():
            if isinstance(k, str):
                if k not in names:
                    raise ValueError(f"{self.name} has no parameter {k!r} (constexprs: {sorted(constexprs)})")
                k = (names.index(k),)
            if not isinstance(k, tuple):
                raise TypeError(f"a constexpr key is a parameter name or an (index,) tuple, not {k!r}")
            self.constants[k] = v
        self.attrs = dict(attrs or {})

    def hash(self) -> str:
        # the function's cache_key (its source and its callees'), also for one that calls a plain
        # Python function (which Triton's cache_key refuses and kiln evaluates)
        key_of = getattr(self.fn, "_dependency_key", None)
        cache_key = key_of() if key_of is not None else hashlib.sha256(self.fn.src.encode()).hexdigest()
        text = f"{cache_key}-{sorted(self.signature.items())}-{sorted(self.constants.items(), key=str)}-" \
               f"{sorted(self.attrs.items(), key=str)}"
        return hashlib.sha256(text.encode()).hexdigest()

    def make_ir(self, target, options, codegen_fns, module_map, context):
        """The kernel's TTIR as a module to walk (kiln.ttir_module), its @jit calls kept as `tt.call`s.
        Its `tt.func`'s arguments are the kernel's runtime arguments in order, as Triton's are (constexprs
        and None left out); a kernel taking a host tensor descriptor is refused, since kiln passes one
        as other arguments than Triton does."""
        from kiln import signatures
        from kiln.ast_to_ir import build_kernel
        from kiln.compiler import codegen_options
        from kiln.language.tensor_descriptor import DescriptorArgument
        from kiln.specialize import COMPILE_ONLY, TupleArgument
        from kiln.ttir_module import Module

        try:
            params, launch_options = signatures.Declared(self.fn, self.declared_values(vars(options))).params_and_options()
        except signatures.SignatureError as e:
            raise ValueError(f"{self.name}: {e}") from None
        if any(isinstance(p, (DescriptorArgument, TupleArgument)) for p in params.values()):
            raise NotImplementedError(f"{self.name}: kiln's TTIR module of a kernel taking a tensor descriptor or "
                                      "a tuple")
        compile_only = COMPILE_ONLY.set(True)  # nothing runs: host tensors are fine, as in Triton's frontend
        try:
            fn = build_kernel(self.fn, params, name=self.name, options=codegen_options(launch_options), keep_calls=True)
        finally:
            COMPILE_ONLY.reset(compile_only)
        runtime = [name for name in self.fn.arg_names if name in params and not _is_constant(params[name])]
        if fn.arg_names != runtime:
            raise RuntimeError(f"{self.name}: the IR's arguments {fn.arg_names} are not the runtime ones {runtime}")
        return Module(fn)

    def _spelled(self, kind: tuple, path: tuple):
        """kiln.signatures' spelling of a tuple parameter: its leaves' types (with their hints) or,
        for constant leaves, the values constexprs give them under their paths (`(i, j, ...)`)."""
        from kiln.signatures import SpelledTuple
        leaves = []
        for j, leaf in enumerate(kind):
            at = path + (j,)
            if at in self.constants:
                leaves.append(self.constants[at])
            elif isinstance(leaf, tuple):
                leaves.append(self._spelled(leaf, at))
            elif leaf == "constexpr":
                raise ValueError(f"{self.name}: the leaf {at} is constexpr in the signature but has no value in "
                                 "constexprs")
            else:
                leaves.append(leaf + _divisibility_hint(leaf, self.attrs.get(at, ())))
        return SpelledTuple(leaves, type(kind) if hasattr(kind, "_fields") else tuple)

    def launch_expanders(self, positions) -> dict:
        """position -> the launch values of an argument the kernel takes as several (a host
        TensorDescriptor, a tuple), as this signature spells them."""
        names = self.fn.arg_names
        out = {}
        for i in positions:
            expand = _expander(self.signature.get(names[i]), (i,), self.constants)
            if expand is not None:
                out[i] = expand
        return out

    def declared_values(self, options: dict) -> dict:
        """kiln.signatures' spelling of this specialization, with the launch options."""
        values = {}
        for i, name in enumerate(self.fn.arg_names):
            kind = self.signature.get(name)
            if (i,) in self.constants:
                values[name] = self.constants[(i,)]
            elif kind is None:
                continue  # left to the parameter's default
            elif kind == "constexpr":
                raise ValueError(f"{self.name}: {name} is constexpr in the signature but has no value in constexprs")
            elif isinstance(kind, tuple):
                values[name] = self._spelled(kind, (i,))
            else:
                values[name] = kind + _divisibility_hint(kind, self.attrs.get((i,), ()))
        values.update({k: options[k] for k in ("num_warps", "num_stages", "maxnreg", "enable_fp_fusion",
                                               "enable_reflect_ftz") if options.get(k) is not None})
        return values


def _expander(kind, path: tuple, constants: dict):
    """The launch values of an argument of type `kind` (the signature's spelling), or None where
    the argument is one value."""
    if isinstance(kind, str):
        return (lambda value: value.launch_pieces()) if kind.startswith("tensordesc") else None
    if not isinstance(kind, tuple):
        return None
    leaves = []  # (index, expander or None) of the leaves the kernel takes
    for j, leaf in enumerate(kind):
        if path + (j,) not in constants and leaf != "constexpr":
            leaves.append((j, _expander(leaf, path + (j,), constants)))

    def expand(value):
        return [piece for j, sub in leaves for piece in (sub(value[j]) if sub is not None else (value[j],))]
    return expand


def _divisibility_hint(kind: str, pairs) -> str:
    """The signature's hint for an argument's `tt.divisibility` attrs: the largest it can state."""
    stated = [value for key, value in _hints(pairs) if key == "tt.divisibility" and value in _DIVISIBILITY_HINTS]
    if kind.startswith("*"):  # a pointer is 16-byte aligned or not
        stated = [value for value in stated if value == 16]
    return _DIVISIBILITY_HINTS[max(stated)] if stated else ""


def _hints(pairs):
    for pair in pairs:
        key, value = pair
        yield key, value


class IRSource:
    """Triton's source of a compile from an IR file (`.ttir`, `.ttgir`, `.ptx`): kiln compiles
    kernels from their Python source only (an ASTSource)."""

    def __init__(self, path, context=None, backend=None):
        raise NotImplementedError(f"kiln compiles kernels from their Python source (ASTSource), not from IR files "
                                  f"such as {path!r}: those are Triton's own IR")


# Triton's CompiledKernel.metadata is a namedtuple of the compile's options and results. `clc`
# (Triton 3.9) comes last, with a default, so that a kernel pickled without it still loads.
KernelMetadata = namedtuple("KernelMetadata", (
    "name", "hash", "target", "num_warps", "num_stages", "num_ctas", "cluster_dims", "maxnreg", "shared", "debug",
    "enable_fp_fusion", "launch_cooperative_grid", "launch_pdl", "global_scratch_size", "global_scratch_align",
    "profile_scratch_size", "profile_scratch_align", "tmem_size", "clc"), defaults=(False,))


def compile(src, target=None, options=None, _env_vars=None):
    """Triton's `triton.compile`: a CompiledKernel of `src` (an ASTSource) for `target` (a
    GPUTarget; default: the active driver's). `options`: num_warps, num_stages, debug, ...

    A kernel compiled before is found from its source key without building its IR again
    (kiln.dropin.warm); otherwise the IR is built and the binary comes through kiln's tiers."""
    from kiln import config
    from kiln.compiler import codegen_options
    from kiln.runtime import driver

    if not isinstance(src, ASTSource):
        raise TypeError(f"kiln compiles Triton kernels from an ASTSource, not {type(src).__name__} "
                        "(IR files are Triton's own)")
    from kiln.compile_listener import CompileTimer, listener, notify
    listening = listener()
    timer = CompileTimer() if listening is not None else None
    target = driver.active.get_current_target() if target is None else target
    backend = make_backend(target)
    options = backend.parse_options(dict(options or {}))
    key = _source_key(src, backend, options, config.debug())
    record = warm.load(key) if key is not None else None
    found = _from_record(src, target, backend, options, record) if record is not None else None
    if found is not None:
        found = _published(found)
        if timer is not None:
            notify(listening, timer, src, found.metadata._asdict(), cache_hit=True)
        return found
    kernel, runtime, binary, binary_key = _build(src, backend, options, timer)
    arg_types = [str(t) for t in kernel.arg_types]
    if key is not None:
        warm.store(key, {"name": src.name, "kir": kernel.asm["kir"], "runtime": runtime, "arg_types": arg_types,
                         "num_warps": kernel.metadata["num_warps"], "num_stages": kernel.metadata["num_stages"],
                         "debug": kernel.debug, "compile_key": binary_key, "binary_target": backend.binary_target,
                         "binary_options": codegen_options(kernel.options) if binary is not None else {}})
    compiled = _published(_compiled(src, target, options, kernel.asm["kir"], binary, runtime, kernel.debug,
                                    arg_types, kernel.metadata["num_warps"], kernel.metadata["num_stages"], kernel))
    if timer is not None:
        notify(listening, timer, src, compiled.metadata._asdict(), cache_hit=False)
    return compiled


def get_cache_key(src, backend, backend_options, env_vars) -> str:
    """Triton's key of a compile in its file cache: the compiler (`triton_key`), the source and its
    specialization, the backend, its options and the environment variables that change the output."""
    return f"{triton_key()}-{src.hash()}-{backend.hash()}-{backend_options.hash()}-{sorted(env_vars.items())}"


def max_shared_mem(device) -> int:
    """Triton 3.9's `triton.compiler.max_shared_mem`: the shared memory a block of `device` may opt in to."""
    from kiln.runtime import driver
    return driver.active.utils.get_device_properties(device)["max_shared_mem"]


def _published(compiled):
    """A CUDA kernel's cubin is also left in Triton's cache layout when Inductor's static launcher
    can launch it as kiln does (kiln.dropin.triton_files); a warm hit rewrites what is missing."""
    if compiled.binary is not None:
        from . import triton_files
        triton_files.publish(compiled)
    return compiled


def _source_key(src, backend, options, debug) -> str | None:
    from kiln.cache import env
    if env.manifest_path() is not None:
        return None  # KILN_MANIFEST records each kernel's IR: build it
    return warm.source_key(src, backend, options, debug)


def _build(src, backend, options, timer=None):
    """The full path: the block IR from the AST, the binary through the tiers (`timer`: a compilation
    listener's, told where the stages end)."""
    from kiln import signatures
    from kiln.compiler import compile_kernel

    values = src.declared_values(vars(options))
    try:
        params, launch_options = signatures.Declared(src.fn, values).params_and_options()
    except signatures.SignatureError as e:
        raise ValueError(f"{src.name}: {e}") from None
    kernel = compile_kernel(src.fn, params,  # named as the ASTSource is: its records and binaries say src.name
                            {**launch_options, "debug": options.debug, "launch_pdl": options.launch_pdl,
                             "clc": options.clc, "sanitize_overflow": options.sanitize_overflow}, name=src.name)
    if timer is not None:
        timer.ir_initialized()
    binary = kernel.build(backend.binary_target) if backend.binary_target is not None else None
    if timer is not None:
        if binary is not None:
            timer.stage("cubin")
        else:
            kernel.asm["kir"]
            timer.stage("kir")
    runtime = [i for i, name in enumerate(src.fn.arg_names) if name in params and not _is_constant(params[name])]
    return kernel, runtime, binary, binary.key if binary is not None else None


def _from_record(src, target, backend, options, record):
    """The CompiledKernel a record describes, with its binary from the node cache or the shared
    tier; None (the full path) when the record is not this compile's or its binary is gone."""
    if record["name"] != src.name or record["binary_target"] != backend.binary_target:
        return None
    binary = None
    if backend.binary_target is not None:
        from kiln.daemon.tiers import cached_binary
        if record["compile_key"] is None:
            return None
        binary = cached_binary(record["compile_key"], src.name, backend.binary_target, record["binary_options"])
        if binary is None:
            return None
    return _compiled(src, target, options, record["kir"], binary, record["runtime"], record["debug"],
                     record["arg_types"], record["num_warps"], record["num_stages"], None)


def _compiled(src, target, options, ir_text, binary, runtime, debug, arg_types, num_warps, num_stages, kernel):
    if binary is not None:  # as Triton: the warps a CTA runs, a warp-specialized kernel's producer warps too
            num_warps = launched_warps(binary.metadata)
    metadata = KernelMetadata(
        name=src.name, hash=_kernel_hash(src, target, options, binary), target=target, num_warps=num_warps,
        num_stages=num_stages, num_ctas=1, cluster_dims=(1, 1, 1), maxnreg=options.maxnreg,
        shared=binary.metadata.get("shared", 0) if binary is not None else interpreted_resources(num_warps)["shared"],
        debug=options.debug,
        enable_fp_fusion=options.enable_fp_fusion, launch_cooperative_grid=options.launch_cooperative_grid,
        launch_pdl=options.launch_pdl, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
        profile_scratch_align=1, tmem_size=0, clc=options.clc)
    return CompiledKernel(src, metadata, ir_text, binary, runtime, debug, arg_types, kernel)


def _kernel_hash(src, target, options, binary) -> str:
    """The kernel's `hash`, which names its directory in Triton's cache layout (kiln.dropin.
    triton_files): one per source specialization, target, options and binary, as Triton's covers
    its options. The binary's compile key covers the block IR, codegen options and kiln's
    compiler; the source's hash alone would give two configs of one kernel one directory."""
    binary_id = None if binary is None else (binary.key or hashlib.sha256(binary.cubin).hexdigest())
    parts = [src.hash(), str(target), sorted((k, repr(v)) for k, v in vars(options).items()), binary_id]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _is_constant(param) -> bool:
    from kiln.language.core import constexpr
    from kiln.language.tensor_descriptor import DescriptorArgument
    from kiln.specialize import TupleArgument
    return isinstance(param, constexpr) or not isinstance(param, (tuple, DescriptorArgument, TupleArgument))


# kiln's own compiled kernel of a CompiledKernel built in this process, so that `_init_handles`
# need not parse its IR text again. Kept outside the object: Inductor pickles `__dict__` itself.
_BUILT_HERE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class AsmDict(dict):
    """A compiled kernel's `asm` (Triton's class of the name): `'sass'`, read once there is a cubin, is
    cuobjdump's listing of it (`triton.tools.disasm.get_sass`), `'ttir'` the block IR in Triton's spelling
    (`kiln.ttir`), and `'ttgir'`, read once there is a binary, its GPU-stage IR so (`kiln.ttgir`)."""

    binary = None  # the build whose texts these are
    debug = False  # whose block IR keeps its device_asserts (kiln.compiler.without_asserts)

    def __missing__(self, key):
        if key == "ttgir" and self.binary is not None:
            from kiln.ttgir import binary_ttgir
            self["ttgir"] = text = binary_ttgir(self.binary)
            return text
        if key == "ttir":
            from kiln.compiler import without_asserts
            from kiln.ir import parse_function
            from kiln.ttir import render_ttir
            ir = parse_function(self["kir"])
            self["ttir"] = text = render_ttir(ir if self.debug else without_asserts(ir))
            return text
        if key != "sass":
            raise KeyError(f"Unknown key: '{key}'")
        from kiln.tools.disasm import get_sass
        self["sass"] = text = get_sass(self["cubin"])
        return text


class CompiledKernel:
    """One compiled specialization, with Triton's host interface: `metadata`, `packed_metadata`,
    `asm`, `hash`, `n_regs`, `n_spills`, `shared`, `name`, `src`, `function`, `run(gridX, gridY,
    gridZ, stream, function, metadata, launch_metadata, enter_hook, exit_hook, *args)` with every
    argument of the kernel (constexprs included, as Triton passes them), and `kernel[grid](*args)`."""

    launch_enter_hook = None
    launch_exit_hook = None

    def __init__(self, src, metadata, ir_text, binary, runtime_positions, debug, arg_types, kernel=None):
        self.src = src
        self.arg_types = tuple(arg_types)  # as block IR spells them: a launch on a GPU needs no more of the IR
        if kernel is not None:
            _BUILT_HERE[self] = kernel
        self.metadata = self.packed_metadata = metadata
        self.name = metadata.name
        self.hash = metadata.hash
        self.asm = AsmDict(kir=ir_text)
        self.asm.debug = debug
        if binary is not None:
            self.asm.update(llir=binary.llir, ptx=binary.ptx, cubin=binary.cubin)
            self.asm.binary = binary
        self.binary = binary
        self.runtime_positions = tuple(runtime_positions)
        self.debug = debug
        self.shared = metadata.shared
        if binary is not None:
            self.n_regs, self.n_spills = None, binary.metadata.get("n_spills", 0)  # n_regs: known once loaded
        else:  # interpreted: the CPU device's resources
            interpreted = interpreted_resources(metadata.num_warps)
            self.n_regs, self.n_spills = interpreted["n_regs"], interpreted["n_spills"]
        self.module = self.function = self.run = None

    @property
    def num_warps(self):
        return self.metadata.num_warps

    def _init_handles(self):
        """Make `run` (and, for a GPU, load the binary): after a compile, and again after unpickling."""
        if self.run is not None:
            return
        kernel = _BUILT_HERE.pop(self, None)
        if kernel is None:  # unpickled, or found from its source key: the IR parsed if a launch needs it
            from kiln.compiler import CompiledKernel as KilnKernel
            from kiln.ir.types import parse_type
            arg_types = getattr(self, "arg_types", None)  # absent from a kernel pickled by an older kiln
            kernel = KilnKernel(self.name, self.asm["kir"], {
                "num_warps": self.metadata.num_warps, "num_stages": self.metadata.num_stages,
                "launch_pdl": self.metadata.launch_pdl}, self.debug,
                None if arg_types is None else [parse_type(t) for t in arg_types])
        backend = make_backend(self.metadata.target)
        self.run = backend.launcher(kernel, self.binary, self.runtime_positions,
                                    self.src.launch_expanders(self.runtime_positions))
        self.module = kernel
        self.function = backend.function_handle(kernel)
        if self.binary is not None:
            self.n_regs = kernel.metadata.get("n_regs")

    def launch_metadata(self, grid, stream, *args):
        """What a launch hook receives (Triton's LazyDict: name, function and stream, and the values
        of the kernel's `@jit(launch_metadata=)` function once read); None when no hook is set."""
        from kiln import launch_hooks
        if not launch_hooks.launching():
            return None
        self._init_handles()
        fn = getattr(self.src, "fn", None)
        user = getattr(fn, "launch_metadata", None)
        arguments = dict(zip(fn.arg_names, args)) if user is not None else None
        return launch_hooks.metadata_of(self.name, self.function, stream, user, grid, self.metadata, arguments)

    def __getitem__(self, grid):
        self._init_handles()

        def runner(*args, stream=None):
            from .knobs import runtime
            sizes = tuple(grid) + (1,) * (3 - len(grid))
            meta = self.launch_metadata(grid, stream, *args)  # the grid as given, as Triton's hooks see it
            self.run(*sizes, stream, self.function, self.packed_metadata, meta,
                     runtime.launch_enter_hook, runtime.launch_exit_hook, *args)
        return runner

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(module=None, function=None, run=None)
        return state

    def __repr__(self):
        return f"CompiledKernel({self.name}, target={self.metadata.target})"


compiler = sys.modules[__name__]  # triton.compiler.compiler is this module too (an attribute, as in Triton)
