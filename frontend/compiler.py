"""From a specialization to something that can be launched."""
from __future__ import annotations

import hashlib
import json
import operator
import sys

from kiln.ir import Function, copy_function, parse_function, print_function
from kiln.ir import options as options_record
from kiln.language.semantic import unwrap

from . import config, errors, fp8_targets, launch_hooks, profiler  # noqa: F401  (errors: Triton's triton.compiler.errors)
from . import ir_dump, ir_override, target_options
from .runtime import cuda_driver as driver
from .runtime.tensormap import DerivedMapUnusable
from .ast_to_ir import build_kernel
from .binder import grid3
from .ttir import render_ttir
from .errors import CompilationError, OutOfResources, PTXASError  # noqa: F401  (triton.compiler.CompilationError)
from .dropin.compile import ASTSource, max_shared_mem  # noqa: F401,E402  (triton.compiler's: the ones there are)

NO_CURRENT_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT: a driver call on a thread with no current context

# `from triton.compiler.errors import CompilationError` as in Triton: kiln.errors under that name too.
sys.modules.setdefault(__name__ + ".errors", errors)

# The launch options that change the generated code; the rest only affect the launch.
CODEGEN_OPTIONS = options_record.CODEGEN_OPTIONS
# The tl.range hints that codegen reads (disable_licm: the LLVM loop's own hint); the others (flatten,
# disallow_acc_multi_buffer, and loop_unroll_factor, whose unrolling the frontend already did:
# kiln.loop_unroll) change nothing it generates, so they are left out of what is compiled: kernels that
# differ only in them share one compile key (tutorial 09 built each config twice).
CODEGEN_LOOP_HINTS = ("num_stages", "warp_specialize", "disable_licm")


def codegen_options(options: dict) -> dict:
    out = {"num_warps": config.DEFAULT_NUM_WARPS, "num_stages": config.DEFAULT_NUM_STAGES}
    out.update({k: int(v) for k, v in options.items() if k in CODEGEN_OPTIONS and v is not None})
    from .dropin.knobs import language  # the knob's default where a launch says nothing; 3.9's force-off
    fusion_default = bool(language.default_fp_fusion)
    out["enable_fp_fusion"] = int(language.fp_fusion_enabled(out.get("enable_fp_fusion")))
    # the defaults leave: one compile key whether or not they were said (a 1 the knob's default does not
    # give stays, so that the options given again give the same: this runs on its own output too)
    if out["enable_fp_fusion"] == 1 and fusion_default:
        del out["enable_fp_fusion"]
    if out.get("enable_reflect_ftz") == 1:
        del out["enable_reflect_ftz"]
    from .dropin.knobs import compilation
    if compilation.disable_line_info:  # TRITON_DISABLE_LINE_INFO=1: no source lines in the PTX
        out["line_info"] = 0
    elif out.get("line_info") == 1:
        del out["line_info"]
    return out


def compile_binary(ir: Function, target: str, options: dict):
    """PTX and cubin of `ir` for `target` (e.g. "sm_90a"); needs no GPU.

    Looked up in the node cache (read directly), else compiled by the node's daemon, else
    in this process (`kiln.daemon.tiers`).
    """
    from kiln.daemon.tiers import cached_compile
    return cached_compile(ir, target, codegen_options(options))


def without_asserts(ir: Function) -> Function:
    """A copy of `ir` with its device_assert checks removed (Triton keeps them only in debug mode)."""
    if not any(op.name == "assert" for op in ir.walk()):
        return ir
    copy = copy_function(ir)
    blocks = [copy.body]
    while blocks:
        block = blocks.pop()
        block.ops = [op for op in block.ops if op.name != "assert"]
        blocks.extend(region for op in block.ops for region in op.regions)
    return copy


def _has_unread_hints(op) -> bool:
    return op.name == "for" and any(key not in CODEGEN_LOOP_HINTS for key in op.attrs)


def without_unread_loop_hints(ir: Function) -> Function:
    """A copy of `ir` whose loops keep only the hints codegen reads (CODEGEN_LOOP_HINTS)."""
    if not any(_has_unread_hints(op) for op in ir.walk()):
        return ir
    copy = copy_function(ir)
    for op in copy.walk():
        if op.name == "for":
            op.attrs = {key: value for key, value in op.attrs.items() if key in CODEGEN_LOOP_HINTS}
    return copy


class Metadata(dict):
    """A compiled kernel's metadata, readable as keys or attributes (`kernel.metadata.shared`)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _Asm(dict):
    """A compiled kernel's `asm`: `'ttir'` is rendered when first read (a drop-in compile reads
    `'kir'` only) and is listed among the keys as soon as it is; as the binary, it has the kernel's
    device_asserts only in debug mode. `'sass'`, once there is a cubin, is cuobjdump's listing of it
    (`kiln.tools.disasm`, as Triton's `asm["sass"]`), and `'ttgir'`, once there is a binary, its
    GPU-stage IR in Triton's spelling (kiln.ttgir)."""

    def __init__(self, kernel, items):
        super().__init__(items)
        self._kernel = kernel

    def __missing__(self, key):
        if key == "sass" and "cubin" in self:
            from kiln.tools.disasm import get_sass
            self["sass"] = text = get_sass(self["cubin"])
            return text
        if key == "ttgir" and self._kernel.built is not None:
            from .ttgir import binary_ttgir
            self["ttgir"] = text = binary_ttgir(self._kernel.built)
            return text
        if key != "ttir":
            raise KeyError(key)
        ir = self._kernel.ir  # as Triton's: device_assert is there only in debug mode
        self["ttir"] = text = render_ttir(ir if self._kernel.debug else without_asserts(ir))
        return text

    def get(self, key, default=None):
        return self[key] if key in self or key == "ttir" or (key == "ttgir" and self._kernel.built) else default


class CompiledKernel:
    """One specialization of a kernel: its block IR and, once built for a GPU, its binary.

    `asm` holds the compiler's outputs by name (`'kir'` block IR text, then `'llir'`,
    `'ptx'`, `'cubin'`), and `n_regs`, `n_spills`, `shared` its resources, as on Triton's
    compiled kernels.
    """

    def __init__(self, name: str, ir: Function | str, options: dict, debug: bool = False, arg_types=None):
        self.name = name
        # The IR, or its text, parsed on first use: a GPU launch of a kernel whose binary is
        # built needs only `arg_types` (a warm drop-in hit gives them and never parses the IR).
        self._ir = ir
        self._kept_ir = None  # `kept_ir`, made on first use
        self._arg_types = list(arg_types) if arg_types is not None else None
        self.options = options
        self.debug = debug
        self._asm: dict = {}
        self.metadata = Metadata(name=name, **codegen_options(options), launch_pdl=bool(options.get("launch_pdl")),
                                 clc=bool(options.get("clc")))
        self.binaries: dict = {}
        self.built = None  # the binary `build` made or found last: what `asm` shows
        self.functions: dict = {}  # device -> the loaded kernel's CUfunction handle, as an int
        self.loaded_in_interpreter = False  # the kernel-load hooks have run for the interpreter
        self.launchers: dict = {}
        self.pointer_launchers: dict = {}  # device -> launcher of the build without derived TMA maps
        self.pointer_binaries: dict = {}  # target -> that build
        self.few_programs: dict = {}  # device -> launches of at most this many programs take the split-K build
        self.split_launchers: dict = {}  # device -> its launcher (kiln.codegen.passes.split_k)
        self.split_binaries: dict = {}  # target -> that build
        self.split_trips_spec = None  # its K loop's trip count from the arguments (metadata split_trips)
        self.split_k_default = True  # where KILN_SPLIT_K is unset (kernels of the drop-in's triton.compile: False)
        self.runtime_args = lambda values: list(values)
        self.launch_metadata = None  # the @jit(launch_metadata=) function, with the names of its arguments
        self.global_reads = []  # (name, module dict, value) of the globals its source read (compile_kernel)
        self.arg_names = ((), (), {})  # runtime argument names, how many launch values each takes, constants
        self.source = None  # the @jit function's SourceInfo, for errors found when a binary is built

    def set_runtime_positions(self, positions, expanders=None):
        """Which of a call's argument values the kernel takes, in order; `expanders` maps the
        positions of arguments the kernel takes as several values (a host TensorDescriptor, a
        tuple) to a function giving those values."""
        if expanders:
            def expand(values):
                return [piece for i in positions
                        for piece in (expanders[i](values[i]) if i in expanders else (values[i],))]
            self.runtime_args = expand
            return
        getter = operator.itemgetter(*positions) if positions else (lambda values: ())
        self.runtime_args = (lambda values: [getter(values)]) if len(positions) == 1 else getter

    def __getitem__(self, grid):
        """`compiled[grid](*args)`: launch this specialization as Triton's CompiledKernel does, with
        every argument of the kernel in order (its constexprs included, and left out of the launch).
        The arguments are not checked against the specialization: that is `kernel[grid]`'s job."""
        def runner(*args, stream=None):
            self.launch(grid, self.runtime_args(args), stream)
        return runner

    @property
    def ir(self) -> Function:
        """The kernel's block IR, device_asserts included (`kept_ir` is what runs)."""
        if isinstance(self._ir, str):
            self._ir = parse_function(self._ir)
        return self._ir

    @property
    def kept_ir(self) -> Function:
        """What runs, compiled or interpreted: the block IR, without its device_asserts outside a
        debug build (Triton keeps them only in debug mode)."""
        if self._kept_ir is None:
            self._kept_ir = self.ir if self.debug else without_asserts(self.ir)
        return self._kept_ir

    @property
    def arg_types(self) -> list:
        """The types of the kernel's arguments, in order: what a launch passes."""
        if self._arg_types is None:
            self._arg_types = [a.type for a in self.ir.args]
        return self._arg_types

    @property
    def asm(self) -> dict:
        """By name: `'kir'` (block IR), `'ttir'` (the same in Triton's spelling, kiln.ttir), and
        once built, `'ttgir'` (what the passes made of it, in Triton's spelling, kiln.ttgir), `'llir'`,
        `'ptx'`, `'cubin'`. The IR texts are printed on first use: the launch path never needs them."""
        if "kir" not in self._asm:
            self._asm = _Asm(self, self._asm)
            self._asm["kir"] = self._ir if isinstance(self._ir, str) else print_function(self._ir)
        return self._asm

    @property
    def hash(self) -> str:
        """Triton's `CompiledKernel.hash`: one per specialization (its block IR and options)."""
        text = json.dumps([self.name, self.asm["kir"], sorted((k, repr(v)) for k, v in self.options.items())])
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def num_warps(self):
        return self.metadata["num_warps"]

    @property
    def launch_pdl(self) -> bool:
        """Whether launches are programmatic dependent launches (the `launch_pdl` option): the
        binary is the same, only the launch differs."""
        return bool(self.options.get("launch_pdl"))

    n_regs = property(lambda self: self.metadata.get("n_regs"))
    n_spills = property(lambda self: self.metadata.get("n_spills"))
    shared = property(lambda self: self.metadata.get("shared"))

    def binary_inputs(self) -> tuple[Function, dict]:
        """The IR and codegen options that `build` compiles; `kiln prewarm` compiles the same,
        so that its binaries have the compile keys a launch looks up."""
        return without_unread_loop_hints(self.kept_ir), codegen_options(self.options)

    def build(self, target: str):
        """Compile for `target` once; `asm` and `metadata` then show that target's binary
        (also when it was built before another target's)."""
        binary = self.binaries.get(target)
        fresh = binary is None
        if fresh:
            ir, options = self.binary_inputs()
            self._check_target(ir, target)
            from kiln.codegen.nvjitlink import PTXAssembleError
            try:
                binary = compile_binary(ir, target, options)
                if ir_override.wanted():
                    binary = ir_override.overridden(self, binary, lambda fn: compile_binary(fn, target, options))
            except PTXAssembleError as e:  # Triton's type: autotuners skip such a config
                raise PTXASError(str(e)) from None
            self.binaries[target] = binary
        self._asm.update(llir=binary.llir, ptx=binary.ptx, cubin=binary.cubin)
        self._asm.pop("ttgir", None)  # rendered from `built` when read
        self._asm.pop("sass", None)
        self.built = binary
        if fresh and ir_dump.wanted():
            ir_dump.dump(self, binary)
        self.metadata.update(binary.metadata)
        return binary

    def launch(self, grid, args, stream=None):
        """Launch on `grid` as the caller gave it: a `@jit(launch_metadata=)` function sees it so,
        as Triton's does (`(4,)` stays one size); the launch itself pads it to (x, y, z)."""
        if self.global_reads:
            self._check_global_reads()
        sizes = grid3(grid)
        hooks = launch_hooks.knobs
        if (hooks.launch_hooked or hooks.runtime is not hooks.hooked.runtime) and launch_hooks.launching():
            stream, metadata = self._hook_metadata(grid, args, stream)
            launch_hooks.around_launch(lambda: self._measured_launch(grid, sizes, args, stream), metadata)
            return
        self._measured_launch(grid, sizes, args, stream)

    def _hook_metadata(self, grid, args, stream):
        """The stream of a launch, and what Triton's launch hooks get for it (`launch_hooks`)."""
        function = None
        if not config.interpret():
            device, current = driver.device_and_stream()
            stream = current if stream is None else int(stream)
            if device not in self.launchers:
                self._prepare(device)
            function = self.functions[device]
        user = self.launch_metadata
        arguments = self.arguments_by_name(args) if user is not None else None
        return stream, launch_hooks.metadata_of(self.name, function, stream, user, grid, self.metadata, arguments)

    def arguments_by_name(self, args) -> dict:
        """A launch's runtime values (a tensor descriptor's pieces as a tuple) and the constexprs, by
        argument name: what a `@jit(launch_metadata=)` function is given."""
        names, widths, constants = self.arg_names
        bound, at = dict(constants), 0
        for name, width in zip(names, widths):
            bound[name] = args[at] if width == 1 else tuple(args[at:at + width])
            at += width
        return bound

    def _measured_launch(self, grid, sizes, args, stream):
        if profiler._active:  # a kiln.profiler session records this launch
            interpreted = config.interpret()
            on = None if interpreted else (driver.device_and_stream()[1] if stream is None else int(stream))
            profiler.measure(self, grid, args, lambda: self._launch(sizes, args, on), on, interpreted)
            return
        self._launch(sizes, args, stream)

    def _check_global_reads(self):
        """Triton's check: the kernel was compiled with the values its globals had then."""
        missing = object()
        for name, scope, value in self.global_reads:
            now = scope.get(name, missing)
            if now is not value and not _same_value(now, value):
                raise RuntimeError(f"Global variable {name} has changed since we compiled this kernel, "
                                   f"from {value} to {now if now is not missing else '<deleted>'}")

    def _launch(self, grid, args, stream=None):
        if config.interpret():
            from kiln.interpret import run
            from .host_copies import run_on_host
            if not self.loaded_in_interpreter:
                launch_hooks.around_load(lambda: None, self.name, lambda: self.hash)
                self.loaded_in_interpreter = True
            run_on_host(lambda host_args: run(self.kept_ir, grid, host_args, name=self.name), args)
            return
        device, current = driver.device_and_stream()
        stream = current if stream is None else int(stream)
        try:
            self._launch_on(device, grid, args, stream)
        except driver.CudaError as e:
            if e.code != NO_CURRENT_CONTEXT:
                raise
            # a thread where nothing made the device's context current (autograd's backward thread on device 0:
            # PyTorch sets no device it thinks is set): make it current and launch again, as Triton's launcher does
            driver.ensure_context(device)
            self._launch_on(device, grid, args, stream)

    def _launch_on(self, device, grid, args, stream):
        launcher = self.launchers.get(device)
        if launcher is None:
            launcher = self._prepare(device)
        few = self.few_programs.get(device)
        if few is not None and grid[0] * grid[1] * grid[2] <= few and self._split_pays(grid, args, few):
            # too few to fill the GPU, and a K loop long enough to share: split K
            launcher = self.split_launchers.get(device) or self._prepare_split(device) or launcher
        try:
            launcher(grid, args, stream)
        except DerivedMapUnusable:
            # these arguments make no TMA map for a load the compiler turned into TMA copies
            # (or too many programs for a persistent loop): the build of the kernel as written
            self._prepare(device, derived_maps=False)(grid, args, stream)
        except driver.CudaError as e:
            from .runtime.launcher import CLUSTER_REFUSALS
            if launcher is not self.split_launchers.get(device) or e.code not in CLUSTER_REFUSALS:
                raise
            self._drop_split(device, f"its split-K launch in clusters was refused ({e})")
            self._launch_on(device, grid, args, stream)

    def _init_handles(self):
        """Load the kernel on the current device now (Triton's name), so n_regs and friends are known."""
        if not config.interpret():
            device = driver.device_and_stream()[0]
            if device not in self.launchers:
                self._prepare(device)

    def _prepare(self, device: int, derived_maps: bool = True):
        """The launcher of this kernel on `device`; `derived_maps=False`: of the build as
        written (no arguments derived by the compiler: no TMA maps for pointer loads, not persistent)."""
        from kiln.cache.metadata import launched_warps
        from .runtime.launcher import launcher_for
        launchers = self.launchers if derived_maps else self.pointer_launchers
        if device in launchers:
            return launchers[device]
        driver.ensure_context(device)
        target = self.target_for(device)
        binary = self.build(target) if derived_maps else self.build_as_written(target)
        shared, limit = binary.metadata["shared"], driver.max_shared_memory(device)
        if shared > limit:
            raise OutOfResources(shared, limit, "shared memory")
        loaded = self._load(binary)
        if derived_maps:
            self.metadata["n_regs"] = loaded.n_regs  # the driver's count is authoritative
            self.functions[device] = loaded.handle
            if self._may_split(binary):
                # programs that leave half the CTAs the GPU holds at once idle, or more
                resident = loaded.resident_ctas(32 * launched_warps(binary.metadata), shared) * driver.sm_count(device)
                self.few_programs[device] = resident // 2
                self.split_trips_spec = binary.metadata.get("split_trips")
        launcher = launcher_for(loaded, self.arg_types, binary.metadata, self.name, device, self.launch_pdl)
        launchers[device] = launcher
        return launcher

    def _split_pays(self, grid, args, few: int) -> bool:
        """Would a split-K launch of `grid` give each CTA a long enough share of the K loop
        (kiln.runtime.launcher.cluster_ctas, as the split build's launcher sizes its clusters)?"""
        from .runtime import launcher
        trips = launcher.split_trips(self.split_trips_spec, args)
        return launcher.cluster_ctas(grid[0] * grid[1] * grid[2], 2 * few, trips) > 1

    def _prepare_split(self, device: int):
        """The launcher of the split-K build (kiln.codegen.passes.split_k) on `device`: each
        program a cluster of CTAs that share its K loop. None where that build cannot be made or
        loaded: the launches keep the kernel as written (an optimization never fails a launch), with
        a warning, since it is a compiler bug."""
        from .runtime.launcher import launcher_for
        target = self.target_for(device)
        try:
            binary = self._variant_build(self.split_binaries, target, split_k=1)
            loaded = self._load(binary)
        except Exception as e:  # noqa: BLE001 - reported, and the kernel as written runs instead
            self._drop_split(device, f"its split-K build failed ({type(e).__name__}: {e})")
            return None
        launcher = launcher_for(loaded, self.arg_types, binary.metadata, self.name, device)
        self.split_launchers[device] = launcher
        return launcher

    def _may_split(self, binary) -> bool:
        """May launches of few programs of `binary` take its split-K build (KILN_SPLIT_K, the kernel's
        default; a launch with PDL keeps the kernel as written)?"""
        return bool(binary.metadata.get("splittable")) and not self.launch_pdl and \
            config.split_k_enabled(self.split_k_default)

    def build_split_for(self, target: str, programs: int, device: int, named: dict | None = None) -> None:
        """Build the split-K variant for `target` now where a launch of `programs` programs on
        `device` with the arguments `named` (by name) would take it (an autotuner's builds side by
        side: timing config after config would otherwise compile each split build in turn). Registers
        and shared memory from the binary, as kiln.codegen.occupancy counts them: the driver's count
        at the launch may differ by a CTA, costing a build that is not read or one made at that launch."""
        from kiln.cache.metadata import launched_warps
        from kiln.codegen.occupancy import ctas_per_sm
        from kiln.codegen.target import parse_target
        from .runtime import launcher
        binary = self.binaries.get(target)
        if binary is None or not self._may_split(binary):
            return
        meta = binary.metadata
        per_sm = ctas_per_sm(meta["n_regs"], 32 * launched_warps(meta), meta["shared"],
                             parse_target(target).capability)
        resident = per_sm * driver.sm_count(device)
        if programs > resident // 2:
            return
        spec, trips = meta.get("split_trips"), None
        if spec is not None and named is not None and spec[0] < len(meta["args"]):
            trips = launcher.loop_trips(spec, named.get(meta["args"][spec[0]]["name"]) if spec[0] >= 0 else 0)
        if launcher.cluster_ctas(programs, resident, trips) > 1:
            self._variant_build(self.split_binaries, target, split_k=1)

    def _drop_split(self, device: int, why: str) -> None:
        """No more split-K launches of this kernel on `device`, and a warning saying `why`."""
        import warnings
        self.few_programs.pop(device, None)
        self.split_launchers.pop(device, None)
        warnings.warn(f"kernel {self.name}: {why}; its launches keep the kernel as written "
                      "(KILN_SPLIT_K=0 says so up front)", RuntimeWarning, stacklevel=4)

    def target_for(self, device: int) -> str:
        """The target this kernel is built for on `device`: its launch's `arch=` (Triton's option: `sm80`),
        else the device's (kiln.runtime.cuda_driver.compile_target)."""
        arch = self.options.get("arch")
        if arch is not None:
            from kiln.codegen.target import arch_target
            return arch_target(arch)
        return driver.compile_target(device)

    def _check_target(self, ir, target: str) -> None:
        """The fp8 formats and launch options `target` takes, as Triton decides (kiln.fp8_targets,
        kiln.target_options)."""
        from kiln.codegen.target import parse_target
        capability = parse_target(target).capability
        target_options.check(self.options, capability)
        fp8_targets.check(ir, capability, self.source)

    def build_as_written(self, target: str):
        """The binary of the kernel as written (no derived TMA maps, not persistent), for
        launches whose arguments make no map or too many programs, and for kiln.tools.compile
        (a C launch passes the kernel's own arguments only)."""
        return self._variant_build(self.pointer_binaries, target, derived_args=0)

    def _variant_build(self, binaries: dict, target: str, **attrs):
        """The binary for `target` of the kernel with the kernel attributes `attrs` (a variant the
        runtime picks per launch), built once and kept in `binaries`."""
        binary = binaries.get(target)
        if binary is None:
            ir, options = self.binary_inputs()
            self._check_target(ir, target)
            ir = copy_function(ir)
            ir.attrs.update(attrs)
            binary = binaries[target] = compile_binary(ir, target, options)
        return binary

    def _load(self, binary):
        """`binary` loaded on the current device, through the launch hooks (Triton's)."""
        from .runtime.module import LoadedKernel
        return launch_hooks.around_load(lambda: LoadedKernel(self.name, binary.cubin, binary.ptx,
                                                             binary.metadata["shared"]),
                                        self.name, lambda: self.hash, lambda k: (int(k.module), k.handle))


def debug_build(jitfn, options) -> bool:
    """Triton's precedence: the launch's `debug=` where it gives one, else the @jit's; TRITON_DEBUG
    (or KILN_DEBUG) turns it on for every kernel. A debug build keeps its device_asserts and checks
    its integer arithmetic for overflow."""
    return bool(options["debug"] if options.get("debug") is not None else jitfn.debug) or config.debug()


def compile_kernel(jitfn, params, options, name: str | None = None) -> CompiledKernel:
    """The kernel of one specialization, named `name` or as the @jit function names it (its `repr=`)."""
    reads = {}
    if name is None:
        name = jitfn.kernel_name(params)
    debug = debug_build(jitfn, options)
    # a debug build checks integer arithmetic for overflow unless `sanitize_overflow=False` (Inductor's)
    checks = {"debug": debug, "sanitize_overflow": options.get("sanitize_overflow") is not False}
    ir = build_kernel(jitfn, params, name=name, options={**codegen_options(options), **checks}, global_reads=reads)
    kernel = CompiledKernel(ir.name, ir, options, debug)
    if config.interpret():  # no binary: the resources the interpreter's CPU device reports
        from .interpret.device import interpreted_resources
        kernel.metadata.update(interpreted_resources(kernel.num_warps))
    kernel.global_reads = [(name, scope, value) for (name, _), (scope, value) in reads.items()]
    kernel.source = jitfn.source_info()
    return kernel


def compile(src, target=None, options: dict | None = None):
    """Triton's `triton.compile` under `import kiln as triton`: kiln.dropin.compile's (the one
    implementation; its CompiledKernel is Triton's shape). `target` is a GPUTarget or a name
    ("sm_90a"); by default the current GPU's, and with no GPU (or under KILN_INTERPRET=1) kiln's
    interpreter, for which only the block IR is built (as `warmup` does)."""
    from kiln.dropin.compile import compile as compile_source
    from kiln.runtime import GPUTarget
    if target is None:
        gpu = not config.interpret() and driver.is_available()
        target = driver.current_compile_target() if gpu else GPUTarget("cpu", 0, 1)
    return compile_source(src, target, options)


def _same_value(a, b) -> bool:
    a, b = unwrap(a), unwrap(b)
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001  (an array's == is not one truth value: changed unless identical)
        return a is b

