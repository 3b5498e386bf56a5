"""Triton 3.6's host API in kiln.dropin, as Inductor drives it: ASTSource -> triton.compile ->
a CompiledKernel that pickles (compile workers) and launches through Triton's `run` signature."""
import os
import pickle
import re

import numpy as np
import pytest

import kiln.language as tl
from kiln.dropin import backends, knobs
from kiln.dropin.compile import ASTSource, CompiledKernel, compile
from kiln.dropin.jit import jit
from kiln.runtime import GPUTarget


@jit
def scale(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "factor": "fp32", "BLOCK": "constexpr"}
ATTRS = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}


def test_jit_function_has_tritons_params():
    assert [(p.num, p.name, p.is_constexpr) for p in scale.params][-1] == (4, "BLOCK", True)
    assert scale.constexprs == [4] and len(scale.cache_key) == 64 and scale.repr(None) == f"{__name__}.scale"


def _template():
    pass


def test_a_kernel_rebuilt_from_anothers_attributes_as_libraries_do():
    """triton_kernels' `specialize` reads a JITFunction's attributes by the names of Triton's
    `JITFunction.__init__` parameters, makes a new one from them and a source of its own, and sets the
    original's `raw_src` and `starting_line_number` on it; it names the names the body sees with
    `get_capture_scope()`. The drop-in's `__init__(fn, *, repr, **kwargs)` gave it a `kwargs` keyword."""
    import inspect
    import types
    from kiln.dropin.jit import JITFunction
    names = [p.name for p in list(inspect.signature(JITFunction.__init__).parameters.values())[2:]]
    assert names[:7] == ["version", "do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline",
                         "repr", "launch_metadata"]
    factor = 3.0

    @jit
    def closed_over(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * factor)
    assert closed_over.get_capture_scope()["factor"] == 3.0 and "tl" in closed_over.get_capture_scope()
    attrs = {name: getattr(scale, name, None) for name in names}
    source = "def doubled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n" \
             "    offs = tl.arange(0, BLOCK)\n" \
             "    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0, mask=offs < n)\n"
    scope = dict(scale.get_capture_scope())
    exec(source, scope)
    template = types.FunctionType(_template.__code__, scope)  # a function of a file, given another's source
    template.__signature__, template.__name__ = inspect.signature(scope["doubled"]), "doubled"
    rebuilt = JITFunction(template, **attrs)
    rebuilt._unsafe_update_src(source)
    rebuilt.raw_src, rebuilt.starting_line_number = list(scale.raw_src), scale.starting_line_number + 100
    assert rebuilt.raw_src[0].startswith("@jit") and rebuilt.starting_line_number == scale.starting_line_number + 100
    where = rebuilt.source_info()  # what errors and line tables cite: the original's file, its lines moved
    assert where.file == __file__ and where.first_line == scale.fn.__code__.co_firstlineno + 1 + 100
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, dtype=np.float32)
    rebuilt[(1,)](x, out, 8, BLOCK=8)
    assert (out == 2 * x).all()


def test_compile_for_the_cpu_pickle_and_launch():
    kernel = compile(ASTSource(scale, SIGNATURE, {"BLOCK": 64}, ATTRS), target=GPUTarget("cpu", 0, 1),
                     options={"num_warps": 2, "unknown_option": 1})
    assert kernel.metadata.num_warps == 2 and kernel.metadata.name == "scale"
    kernel = pickle.loads(pickle.dumps(kernel))  # as from an Inductor compile worker
    kernel._init_handles()
    x, out = np.arange(100, dtype=np.float32), np.zeros(100, dtype=np.float32)
    seen = []
    kernel.run(2, 1, 1, 0, kernel.function, kernel.packed_metadata, {"name": "m"}, seen.append, None,
               x, out, 100, 2.5, 64)  # every argument, the constexpr too, as Triton passes them
    np.testing.assert_array_equal(out, x * 2.5)
    assert seen == [{"name": "m"}]
    out[:] = 0
    kernel[(2,)](x, out, 100, 0.5, 64)
    np.testing.assert_array_equal(out, x * 0.5)


def test_compile_for_a_gpu_target_builds_the_binary_without_a_gpu():
    kernel = compile(ASTSource(scale, SIGNATURE, {(4,): 128}, ATTRS), target=GPUTarget("cuda", 90, 32),
                     options={"num_warps": 4})
    assert ".entry scale" in kernel.asm["ptx"] and kernel.asm["cubin"][:4] == b"\x7fELF"
    assert isinstance(pickle.loads(pickle.dumps(kernel)), CompiledKernel)


@jit
def _offsets(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs, mask=offs < n)


def test_inductor_s_debug_builds_keep_asserts_without_overflow_checks():
    """Inductor compiles with debug=True (its indirect-indexing asserts) and sanitize_overflow=False;
    Triton's default, sanitize_overflow=True, checks a debug build's integer arithmetic."""
    signature = {"out_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}

    def kir(**options):
        source = ASTSource(_offsets, signature, {"BLOCK": 64}, {(0,): [["tt.divisibility", 16]]})
        return compile(source, target=GPUTarget("cpu", 0, 1), options=options).asm["kir"]

    assert "overflow" not in kir(debug=True, sanitize_overflow=False)
    assert "int32 overflow in mul" in kir(debug=True) and "int32 overflow in add" in kir(debug=True)
    assert "overflow" not in kir()


def test_divisibility_attrs_of_16_and_8_are_the_signatures_hints():
    attrs = {**ATTRS, (2,): [["tt.divisibility", 8]]}
    kernel = compile(ASTSource(scale, SIGNATURE, {"BLOCK": 64}, attrs), target=GPUTarget("cuda", 90, 32))
    header = kernel.asm["kir"].splitlines()[0]
    assert '%2: int32 {divisibility = 8, name = "n"}' in header and header.count("divisibility = 16") == 2
    odd = compile(ASTSource(scale, SIGNATURE, {"BLOCK": 64}, {(0,): [["tt.divisibility", 8]]}),
                  target=GPUTarget("cuda", 90, 32))
    assert "divisibility" not in odd.asm["kir"].splitlines()[0]  # a pointer is 16-byte aligned or not


@pytest.mark.parametrize("arch, name", [(80, "sm_80"), (89, "sm_89"), (90, "sm_90a"), (100, "sm_100a"), (120, "sm_120a")])
def test_a_cuda_target_is_compiled_for_tritons_arch_name(arch, name):
    """As Triton names it: the architecture-specific variant (`a`) from capability 9.0 on."""
    assert backends.make_backend(GPUTarget("cuda", arch, 32)).binary_target == name
    if arch == 100:
        kernel = compile(ASTSource(scale, SIGNATURE, {(4,): 128}, ATTRS), target=GPUTarget("cuda", 100, 32))
        assert ".target sm_100a" in kernel.asm["ptx"] and kernel.asm["cubin"][:4] == b"\x7fELF"


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match="Signature keys must be string"):
        ASTSource(scale, {0: "*fp32"})
    with pytest.raises(ValueError, match="has no parameter 'B'"):
        ASTSource(scale, SIGNATURE, {"B": 1})
    with pytest.raises(ValueError, match="BLOCK is constexpr in the signature but has no value"):
        compile(ASTSource(scale, SIGNATURE), target=GPUTarget("cpu", 0, 1))
    with pytest.raises(ValueError, match="unknown pointer element type"):
        compile(ASTSource(scale, {**SIGNATURE, "x_ptr": "*fp99"}, {"BLOCK": 64}), target=GPUTarget("cpu", 0, 1))
    with pytest.raises(TypeError, match="GPUTarget"):
        backends.make_backend(("cuda", 90))
    with pytest.raises(RuntimeError, match="no kiln backend"):
        backends.make_backend(GPUTarget("hip", "gfx942", 64))
    with pytest.raises(AttributeError, match="no knob runtime.nonsense"):
        knobs.runtime.nonsense = 1


def test_triton_key_and_backend_hash_are_stable_strings():
    assert backends.triton_key() == backends.triton_key() and backends.triton_key().startswith("kiln-")
    assert backends.make_backend(GPUTarget("cuda", 90, 32)).hash() != backends.make_backend(GPUTarget("cpu", 0, 1)).hash()


def test_a_cuda_kernel_from_a_compile_worker_launches_its_own_binary_on_the_given_stream(monkeypatch):
    """The GPU path without a GPU: a kernel pickled as Inductor's TritonCompileResult pickles it (its
    metadata a dict, rebuilt as a namedtuple of sorted fields) loads the binary it carries, not a
    compile of its own, and launches its runtime arguments on the stream Inductor passes."""
    from collections import namedtuple

    import kiln.compiler
    from kiln.runtime import cuda_driver

    kernel = compile(ASTSource(scale, SIGNATURE, {"BLOCK": 128}, ATTRS), target=GPUTarget("cuda", 90, 32))
    state = {**kernel.__dict__, "metadata": kernel.metadata._asdict(), "packed_metadata": kernel.metadata._asdict(),
             "module": None, "function": None, "run": None}
    state = pickle.loads(pickle.dumps(state))  # from the worker to the job
    fields = namedtuple("KernelMetadata", sorted(state["metadata"]))
    handed = CompiledKernel.__new__(CompiledKernel)
    handed.__dict__.update({**state, "metadata": fields(**state["metadata"]),
                            "packed_metadata": fields(**state["packed_metadata"])})

    launches, loaded = [], []

    def prepare(self, device):  # stands for loading the cubin: it must be the one carried
        binary = self.build("sm_90a")
        loaded.append(binary.cubin)
        self.launchers[device] = lambda grid, args, stream: launches.append((grid, list(args), stream))
        self.metadata["n_regs"] = 32
        return self.launchers[device]

    monkeypatch.setenv("KILN_INTERPRET", "0")
    monkeypatch.setattr(kiln.compiler, "compile_binary", lambda *a: pytest.fail("compiled again in the job"))
    monkeypatch.setattr(kiln.compiler.CompiledKernel, "_prepare", prepare)
    monkeypatch.setattr(cuda_driver, "device_and_stream", lambda: (0, 7))
    handed._init_handles()
    assert loaded == [kernel.asm["cubin"]] and handed.n_regs == 32
    x, out = object(), object()
    handed.run(3, 1, 1, 1234, handed.function, handed.packed_metadata, None, None, None, x, out, 100, 2.5, 128)
    handed.run(3, 1, 1, None, handed.function, handed.packed_metadata, None, None, None, x, out, 100, 2.5, 128)
    assert launches == [((3, 1, 1), [x, out, 100, 2.5], 1234), ((3, 1, 1), [x, out, 100, 2.5], 7)]


def test_import_kiln_as_triton_compiles_with_the_same_ast_source_and_compile():
    """`kiln.compile` and `triton.compile` under the drop-in are one implementation: kiln's only
    picks its default target (the current GPU, else the interpreter) and takes target names."""
    import kiln
    import kiln.compiler
    import kiln.dropin.compile
    assert kiln.compiler.ASTSource is kiln.dropin.compile.ASTSource
    source = ASTSource(scale, SIGNATURE, {"BLOCK": 64}, ATTRS)
    named = kiln.compile(source, target="sm_80", options={"num_warps": 2})
    assert ".target sm_80" in named.asm["ptx"] and named.binary.target == "sm_80"
    interpreted = kiln.compile(source)  # KILN_INTERPRET=1 in the tests: the interpreter's target
    assert interpreted.metadata.target == GPUTarget("cpu", 0, 1) and "ptx" not in interpreted.asm
    x, out = np.arange(100, dtype=np.float32), np.zeros(100, dtype=np.float32)
    interpreted[(2,)](x, out, 100, 3.0, 64)
    np.testing.assert_array_equal(out, x * 3.0)
    with pytest.raises(ValueError, match="sm_XY"):
        kiln.compile(source, target="hopper")


def test_knobs_are_triton_knobs_under_import_kiln_as_triton():
    import importlib

    import kiln as triton
    assert importlib.import_module("kiln.knobs") is triton.knobs is knobs
    # Triton's test helpers read the assembler's version as "major.minor" (a ptxas program's or nvJitLink's)
    major, minor = (int(p) for p in triton.knobs.nvidia.ptxas.version.split("."))
    assert major >= 12 and minor >= 0


@jit
def axpy(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha.to(tl.float32), mask=mask)


@pytest.mark.parametrize("scalar", ["fp64", "i8", "i16", "u8", "u16", "u32"])
def test_signatures_take_tritons_other_scalar_widths(scalar):
    """Inductor declares a Python float argument `fp64` (Liger-Kernel's KL divergence under
    torch.compile); Triton's signatures also name 8- and 16-bit integers."""
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": scalar, "BLOCK": "constexpr"}
    gpu = compile(ASTSource(axpy, signature, {"BLOCK": 64}, ATTRS), target=GPUTarget("cuda", 90, 32))
    width = {"fp64": "f64", "i8": "u8", "i16": "u16", "u8": "u8", "u16": "u16", "u32": "u32"}[scalar]
    assert f".param .{width} axpy_param_3" in gpu.asm["ptx"]  # passed at its own width
    cpu = compile(ASTSource(axpy, signature, {"BLOCK": 64}, ATTRS), target=GPUTarget("cpu", 0, 1))
    cpu._init_handles()
    x, out = np.arange(10, dtype=np.float32), np.zeros(10, dtype=np.float32)
    cpu[(1,)](x, out, 10, 3, 64)
    np.testing.assert_array_equal(out, x * 3)


def test_a_compile_s_cache_key_names_source_backend_options_and_environment():
    from kiln.dropin.compile import get_cache_key
    backend = backends.make_backend(GPUTarget("cuda", 90, 32))
    src = ASTSource(scale, SIGNATURE, {"BLOCK": 64}, ATTRS)
    options = backend.parse_options({})
    key = get_cache_key(src, backend, options, {"TRITON_X": "1"})
    assert key.startswith(backends.triton_key()) and src.hash() in key and options.hash() in key
    assert key.endswith("[('TRITON_X', '1')]")
    assert options.hash() != backend.parse_options({"num_warps": 8}).hash()
    assert get_cache_key(ASTSource(scale, SIGNATURE, {"BLOCK": 32}, ATTRS), backend, options, {}) != \
        get_cache_key(src, backend, options, {})


def test_every_knob_set_is_one_module_global(monkeypatch):
    """Triton's fresh_knobs fixture swaps every knob set among `triton.knobs`' globals for a fresh
    copy, deleting their variables from the environment and putting them back after: a knob set
    held under two names (kiln's launch-hook bookkeeping once held `runtime` so) made it delete
    TRITON_INTERPRET for good."""
    sets = {name: value for name, value in vars(knobs).items()
            if isinstance(value, knobs.base_knobs) and value is not knobs.base_knobs}
    assert len({id(v) for v in sets.values()}) == len(sets)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    knobs.recount_launch_hooks()
    env_to_unset = []
    with monkeypatch.context() as fresh:  # what fresh_knobs does to the environment, then undoes
        for knobset in sets.values():
            for knob in knobset.knob_descriptors.values():
                if knob.key in os.environ:
                    fresh.delenv(knob.key)
                else:
                    env_to_unset.append(knob.key)
    assert "TRITON_INTERPRET" not in env_to_unset and os.environ["TRITON_INTERPRET"] == "1"


def test_the_compiler_module_has_tritons_lazy_dict_and_knobs_their_env_spelling():
    from kiln.dropin import compile as compiler  # (kiln.dropin.runtime is never imported here: it claims triton's names)
    lazy = compiler.LazyDict({"name": "k"})
    lazy.add(lambda grid: {"grid": grid}, ((4, 1, 1),))
    assert lazy.get() == {"name": "k", "grid": (4, 1, 1)}
    assert knobs.toenv(True) == ("1",) and knobs.toenv(7) == ("7",) and knobs.toenv(None) == (None,)
    assert knobs.toenv(1.5) is None  # no text form: the variable is left as it is


def test_launcher_module_keys_as_tritons_cache_spells_them():
    from kiln.dropin import file_cache
    key = file_cache.make_so_cache_key("v1", {"x": "*fp32", "n": "i32"}, {(2,): 64}, [(0,)])
    assert key == file_cache.make_so_cache_key("v1", {"x": "*fp16", "n": "i32"}, {(2,): 64}, [(0,)])  # any pointer
    assert key != file_cache.make_so_cache_key("v1", {"x": "*fp32", "n": "i64"}, {(2,): 64}, [(0,)])
    assert key != file_cache.make_so_cache_key("v1", {"x": "*fp32", "n": "i32"}, {(2,): 64}, [(0,)], shared=1024)
    assert len(key) == 52 and set(key) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
    assert file_cache.triton_key() == backends.triton_key()


@jit
def _copy_tiles(in_desc, out_desc, BLOCK: tl.constexpr):
    row = tl.program_id(0) * BLOCK
    out_desc.store([row, 0], in_desc.load([row, 0]) * 2)


DESC_SIGNATURE = {"in_desc": "tensordesc<fp32[16, 32]>", "out_desc": "tensordesc<fp32[16, 32]>", "BLOCK": "constexpr"}


def test_a_host_descriptor_declared_as_triton_spells_it_compiles_and_launches():
    """`tensordesc<fp32[16, 32]>` in an ASTSource's signature (Inductor declares a user kernel's host
    TensorDescriptor so): the kernel launches with TensorDescriptors, as a JIT call passes them."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    kernel = compile(ASTSource(_copy_tiles, DESC_SIGNATURE, {"BLOCK": 16}), target=GPUTarget("cpu", 0, 1))
    x = np.arange(40 * 32, dtype=np.float32).reshape(40, 32)
    out = np.zeros_like(x)
    descs = [TensorDescriptor.from_tensor(t, [16, 32]) for t in (x, out)]
    kernel[(3,)](*descs, 16)
    np.testing.assert_array_equal(out, x * 2)  # the last tile's rows past 40 neither read nor written
    # for a GPU: the binary a JIT call with such descriptors builds (sizes not multiples of 16, as
    # the spelling says nothing of them)
    declared = compile(ASTSource(_copy_tiles, DESC_SIGNATURE, {"BLOCK": 16}), target=GPUTarget("cuda", 90, 32))
    odd = TensorDescriptor.from_tensor(np.zeros((40, 40), np.float32), [16, 32])
    assert declared.asm["ptx"] == _copy_tiles.warmup(odd, odd, BLOCK=16, grid=(1,), target="sm_90a").asm["ptx"]


@pytest.mark.parametrize("spelling, message", [
    ("tensordesc<fp32[16, 32],NVMMASharedLayout(swizzle_byte_width=128)>", "Gluon"),
    ("tensordesc<fp13[16, 32]>", "unknown element type"),
    ("tensordesc<fp32>", "spelt tensordesc<DTYPE"),
    ("tensordesc<fp32[1, 2, 3, 4, 5, 6]>", "1 to 5 dimensions")])
def test_a_host_descriptor_spelt_wrong_is_a_clear_error(spelling, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        compile(ASTSource(_copy_tiles, {**DESC_SIGNATURE, "in_desc": spelling}, {"BLOCK": 16}),
                target=GPUTarget("cpu", 0, 1))


def test_a_const_pointer_declared_as_triton_spells_it_is_read_only():
    """`*kfp32` (Triton's spelling of a `tl.const` pointer): loads through it compile and run; a
    store through it is Triton's CompilationError."""
    kernel = compile(ASTSource(scale, {**SIGNATURE, "x_ptr": "*kfp32"}, {"BLOCK": 64}, ATTRS),
                     target=GPUTarget("cpu", 0, 1))
    x, out = np.arange(100, dtype=np.float32), np.zeros(100, dtype=np.float32)
    kernel[(2,)](x, out, 100, 3.0, 64)
    np.testing.assert_array_equal(out, x * 3.0)
    from kiln.errors import CompilationError
    with pytest.raises(CompilationError, match="Cannot store to a constant pointer"):
        compile(ASTSource(scale, {**SIGNATURE, "out_ptr": "*kfp32"}, {"BLOCK": 64}, ATTRS),
                target=GPUTarget("cpu", 0, 1))


@jit
def _scaled_pair(pair, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x_ptr, (factor, shift), bias = pair
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * factor + shift + bias)


def test_a_tuple_parameter_declared_as_triton_spells_it():
    """A tuple argument's type as Triton's ASTSource has it: a tuple of its leaves' types, nested
    alike, a constant leaf given in constexprs under its path ((0, 2) here); the kernel launches
    with the tuple, as a JIT call takes it."""
    signature = {"pair": ("*fp32", ("fp32", "i32"), "constexpr"), "out_ptr": "*fp32", "BLOCK": "constexpr"}
    kernel = compile(ASTSource(_scaled_pair, signature, {"BLOCK": 16, (0, 2): 100}), target=GPUTarget("cpu", 0, 1))
    x, out = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    kernel[(1,)]((x, (2.0, 3), 100), out, 16)
    np.testing.assert_array_equal(out, x * 2 + 3 + 100)
    header = kernel.asm["kir"].splitlines()[0]  # the runtime leaves are the kernel's arguments; the constant is not
    assert re.findall(r"%\d+: ([^ ]+) ", header) == ["ptr<fp32>", "fp32", "int32", "ptr<fp32>"]
    with pytest.raises(ValueError, match=r"leaf \(0, 2\) is constexpr"):
        compile(ASTSource(_scaled_pair, signature, {"BLOCK": 16}), target=GPUTarget("cpu", 0, 1))


@pytest.mark.parametrize("setting, dropin, native", [(None, False, True), ("1", True, True), ("0", False, False)])
def test_kernels_of_triton_compile_keep_few_program_launches_as_written_unless_asked(setting, dropin, native,
                                                                                     monkeypatch):
    """Inductor times each config at its first launch: a split-K build there would be a second
    compile per config on the job's critical path, so kernels of `triton.compile` split only with
    KILN_SPLIT_K=1; kiln's JIT's split unless KILN_SPLIT_K=0."""
    import kiln.compiler
    from kiln import config
    if setting is None:
        monkeypatch.delenv("KILN_SPLIT_K", raising=False)
    else:
        monkeypatch.setenv("KILN_SPLIT_K", setting)
    compiled = compile(ASTSource(scale, SIGNATURE, {"BLOCK": 128}, ATTRS), target=GPUTarget("cuda", 90, 32))
    kernel = kiln.compiler.CompiledKernel("scale", compiled.asm["kir"], {"num_warps": 4})
    assert config.split_k_enabled(kernel.split_k_default) == native
    backends.make_backend(GPUTarget("cuda", 90, 32)).launcher(kernel, compiled.binary, [0, 1, 2, 3])
    assert config.split_k_enabled(kernel.split_k_default) == dropin
