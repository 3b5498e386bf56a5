"""The warm hit of the drop-in `triton.compile` (kiln.dropin.warm): a kernel compiled before is
found from its source key without building its IR, gives what the full path gives, and anything
that could change the IR (the source, a @jit function it calls, a global it reads, kiln itself)
or a record that is not its key's takes the full path."""
import json

import numpy as np
import pytest

import kiln.compiler
import kiln.language as tl
from kiln.cache import Cache
from kiln.daemon import tiers
from kiln.dropin import warm
from kiln.dropin.compile import ASTSource, compile
from kiln.dropin.jit import jit
from kiln.runtime import GPUTarget

SCALE = tl.constexpr(2.0)  # a constexpr global (Triton refuses plain ones in kernels)
CUDA, CPU = GPUTarget("cuda", 90, 32), GPUTarget("cpu", 0, 1)


@jit
def twice(x):
    return x * 2


@jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, twice(tl.load(x_ptr + offs, mask=mask)) * SCALE, mask=mask)


def host_helper(x):
    return x


@jit
def reads_a_python_function(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), host_helper(1.0))


SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
ATTRS = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """A fresh node cache; the list of kernels whose IR the frontend built."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tiers, "_state", tiers._State())
    built = []
    real = kiln.compiler.build_kernel

    def counting(jitfn, *args, **kwargs):
        built.append(jitfn.__name__)
        return real(jitfn, *args, **kwargs)
    monkeypatch.setattr(kiln.compiler, "build_kernel", counting)
    return built


def compile_scale(target, block=64, **options):
    return compile(ASTSource(scale, SIGNATURE, {"BLOCK": block}, ATTRS), target=target,
                   options={"num_warps": 2, **options})


def run_on_cpu(kernel, n=100):
    kernel._init_handles()
    x, out = np.arange(n, dtype=np.float32), np.zeros(n, dtype=np.float32)
    kernel[(2,)](x, out, n, 64)
    return out


def test_a_warm_cuda_compile_builds_no_ir_and_gives_the_same_kernel(builds):
    cold = compile_scale(CUDA)
    warm_hit = compile_scale(CUDA)
    assert builds == ["scale"]
    assert warm_hit.asm == cold.asm and warm_hit.metadata == cold.metadata
    assert warm_hit.runtime_positions == cold.runtime_positions == (0, 1, 2)
    assert warm_hit.binary.source == "cache" and warm_hit.binary.key == cold.binary.key
    assert warm_hit.n_spills == cold.n_spills and warm_hit.debug == cold.debug


def test_a_warm_cpu_compile_builds_no_ir_and_runs_the_same(builds):
    cold = compile_scale(CPU)
    warm_hit = compile_scale(CPU)
    assert builds == ["scale"]
    assert warm_hit.asm == cold.asm and warm_hit.metadata == cold.metadata
    np.testing.assert_array_equal(run_on_cpu(warm_hit), np.arange(100, dtype=np.float32) * 4)


def test_what_changes_the_ir_changes_the_key(builds, monkeypatch):
    compile_scale(CPU)
    compile_scale(CPU, block=128)  # another constexpr
    compile_scale(CPU, num_warps=4)  # another option
    compile_scale(CUDA)  # another target
    assert builds == ["scale"] * 4
    monkeypatch.setitem(globals(), "SCALE", tl.constexpr(3.0))  # a global the kernel reads
    np.testing.assert_array_equal(run_on_cpu(compile_scale(CPU)), np.arange(100, dtype=np.float32) * 6)
    src = twice.src
    twice._unsafe_update_src(src.replace("x * 2", "x * 5"))  # a @jit function it calls
    try:
        np.testing.assert_array_equal(run_on_cpu(compile_scale(CPU)), np.arange(100, dtype=np.float32) * 15)
    finally:
        twice._unsafe_update_src(src)
    assert builds == ["scale"] * 6
    monkeypatch.setenv("KILN_DEBUG", "1")
    compile_scale(CPU)
    assert builds == ["scale"] * 7


def test_a_kernel_reading_a_python_function_always_builds(builds):
    src = ASTSource(reads_a_python_function, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 16})
    from kiln.dropin.backends import make_backend
    backend = make_backend(CPU)
    assert warm.source_key(src, backend, backend.parse_options({}), False) is None
    compile(src, target=CPU)
    compile(src, target=CPU)
    assert builds == ["reads_a_python_function"] * 2


def test_a_record_whose_binary_is_gone_takes_the_full_path(builds):
    cold = compile_scale(CUDA)
    tiers._state.node_cache()._dc.delete("action/" + cold.binary.key)
    again = compile_scale(CUDA)
    assert builds == ["scale"] * 2 and again.asm["cubin"] == cold.asm["cubin"]
    assert compile_scale(CUDA).binary.source == "cache" and builds == ["scale"] * 2


def test_a_record_not_bound_to_its_key_is_a_miss(tmp_path, builds):
    cache = Cache(tmp_path / "records")
    key, other = "a" * 64, "b" * 64
    cache.put_record(key, {"name": "k"})
    assert cache.get_record(key) == {"name": "k"}
    cache._dc.set("record/" + other, cache._dc.get("record/" + key))  # moved to another key
    assert cache.get_record(other) is None and "record/" + other not in cache._dc
    entry = json.loads(cache._dc.get("record/" + key))
    entry["record"]["name"] = "evil"  # changed without its digest
    cache._dc.set("record/" + key, json.dumps(entry))
    assert cache.get_record(key) is None
    with pytest.raises(ValueError):
        cache.put_record("../x", {})


def test_a_malformed_record_takes_the_full_path(builds):
    compile_scale(CPU)
    cache = tiers._state.node_cache()
    key = next(k[len("record/"):] for k in cache._dc.iterkeys() if k.startswith("record/"))
    record = cache.get_record(key)
    cache.put_record(key, {**record, "runtime": ["0"]})  # well bound, but not a record's shape
    assert warm.load(key) is None
    np.testing.assert_array_equal(run_on_cpu(compile_scale(CPU)), np.arange(100, dtype=np.float32) * 4)
    assert builds == ["scale"] * 2


def test_a_manifest_run_builds_every_kernel(builds, tmp_path, monkeypatch):
    compile_scale(CUDA)
    monkeypatch.setenv("KILN_MANIFEST", str(tmp_path / "manifest.jsonl"))
    compile_scale(CUDA)
    assert builds == ["scale"] * 2 and (tmp_path / "manifest.jsonl").exists()


def test_the_compiled_kernel_pickles_as_inductor_pickles_it(builds):
    """Inductor's compile workers pickle the kernel's `__dict__` (module, function and run set to
    None): what kiln keeps of an in-process build is not in it."""
    import pickle
    for kernel in (compile_scale(CPU), compile_scale(CPU)):
        state = pickle.loads(pickle.dumps({**kernel.__dict__, "module": None, "function": None, "run": None}))
        again = type(kernel).__new__(type(kernel))
        again.__dict__.update(state)
        np.testing.assert_array_equal(run_on_cpu(again), np.arange(100, dtype=np.float32) * 4)


def test_a_warm_hit_loads_on_a_gpu_without_parsing_its_ir(builds, monkeypatch):
    """The launcher of a kernel found from its source key gets the argument types of its record;
    the IR text is parsed only if something (the interpreter) needs the IR."""
    import kiln.runtime.launcher
    import kiln.runtime.module
    from kiln.runtime import cuda_driver

    cold = compile_scale(CUDA)
    warm_hit = compile_scale(CUDA)
    made = []
    monkeypatch.setenv("KILN_INTERPRET", "0")
    monkeypatch.setattr(kiln.compiler, "parse_function", lambda text: pytest.fail("parsed the IR"))
    monkeypatch.setattr(kiln.compiler, "compile_binary", lambda *a: pytest.fail("compiled again"))
    monkeypatch.setattr(cuda_driver, "device_and_stream", lambda: (0, 7))
    monkeypatch.setattr(cuda_driver, "ensure_context", lambda device: None)
    monkeypatch.setattr(cuda_driver, "target", lambda device: "sm_90a")
    monkeypatch.setattr(cuda_driver, "max_shared_memory", lambda device: 232448)
    monkeypatch.setattr(kiln.runtime.module, "LoadedKernel", lambda name, cubin, ptx, shared: type(
        "Loaded", (), {"n_regs": 32, "cubin": cubin, "handle": 1})())
    monkeypatch.setattr(kiln.runtime.launcher, "make_launcher", lambda loaded, types, *rest: made.append(
        (loaded.cubin, [str(t) for t in types])) or (lambda grid, args, stream: None))
    warm_hit._init_handles()
    assert made == [(cold.asm["cubin"], ["ptr<fp32>", "ptr<fp32>", "int32"])]
    assert warm_hit.n_regs == 32 and builds == ["scale"]


@jit
def asks_the_target(x_ptr, BLOCK: tl.constexpr):
    if tl.target_info.is_cuda():
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)
    else:
        tl.store(x_ptr + tl.arange(0, BLOCK), 2.0)


def test_a_kernel_asking_tl_target_info_is_keyed_by_this_processs_gpu(builds, monkeypatch):
    import kiln.language.target_info as target_info
    src = ASTSource(asks_the_target, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 16})
    compile(src, target=CPU)
    compile(src, target=CPU)
    assert builds == ["asks_the_target"]
    monkeypatch.setattr(target_info, "current_target", lambda: GPUTarget("cuda", 90, 32))
    kernel = compile(src, target=CPU)
    assert builds == ["asks_the_target"] * 2
    kernel._init_handles()
    x = np.zeros(16, dtype=np.float32)
    kernel[(1,)](x, 16)
    np.testing.assert_array_equal(x, np.ones(16, dtype=np.float32))
