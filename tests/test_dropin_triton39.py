"""Triton 3.9's user-facing additions that kiln takes beside 3.6's API: the `clc` launch option,
`tl.range(..., disable_licm=)`, `triton.testing.do_bench_proton` / `do_bench_cudagraph_proton` (on
kiln.profiler, whose `deactivate(flushing=)` and `data.get` they use), `triton.testing.cublas`,
`TensorDescriptor(round_f32_to_tf32=)`, the knobs `language.force_disable_fp_fusion`,
`runtime.kernel_unload_hook` and `compilation.fpsan_homomorphic_casts`, and the module names
`triton.errors` and `triton.runtime.autotuner` / `build`. The GPU checks are marked `gpu`."""
import inspect
import itertools
import os
import pickle
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import kiln
import kiln.language as tl
import kiln.profiler as proton
from kiln import testing
from kiln.dropin import backends, knobs
from kiln.dropin.compile import ASTSource, KernelMetadata, compile
from kiln.errors import CompilationError, NoGPUError
from kiln.ir import print_function
from kiln.runtime import GPUTarget, cuda_driver
from kiln.tools.tensor_descriptor import TensorDescriptor


@kiln.jit
def _iota(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs, mask=offs < n)


def _out():
    return np.zeros(64, np.int32)


pytestmark = pytest.mark.usefixtures("no_profiler_session_left")  # tests/conftest.py


# --- clc= (cluster launch control) ------------------------------------------------------------

def test_clc_false_is_a_launch_option_everywhere():
    out = _out()
    _iota[(2,)](out, 64, BLOCK=32, clc=False)  # tutorial 10 passes it on every launch
    np.testing.assert_array_equal(out, np.arange(64))
    assert _iota.run(_out(), 64, BLOCK=32, clc=False, grid=(2,)) is not None


def test_clc_true_runs_in_the_interpreter_as_in_tritons():
    out = _out()
    _iota[(2,)](out, 64, BLOCK=32, clc=True)
    np.testing.assert_array_equal(out, np.arange(64))


@pytest.mark.parametrize("target, capability", [("sm_90a", 90), ("sm_80", 80)])
def test_clc_true_below_sm100_is_tritons_value_error(target, capability):
    with pytest.raises(ValueError, match=rf"^clc=True requires NVIDIA SM100\+ \(Blackwell\); current target is "
                                         rf"sm_{capability}$"):
        _iota.warmup(_out(), 64, BLOCK=32, clc=True, grid=(1,), target=target)


def test_clc_is_its_own_specialization_with_the_same_binary_on_sm100():
    on = _iota.warmup(_out(), 64, BLOCK=32, clc=True, grid=(1,), target="sm_100a")
    off = _iota.warmup(_out(), 64, BLOCK=32, clc=False, grid=(1,), target="sm_100a")
    assert on is not off and on.metadata["clc"] is True and off.metadata["clc"] is False
    # kiln launches the kernel as written: the option changes no code, so the two share a compile
    assert on.binaries["sm_100a"].key == off.binaries["sm_100a"].key


def test_clc_is_a_prewarm_option():
    from kiln.signatures import Declared
    params, options = Declared(_iota, {"out_ptr": "*i32:16", "n": "i32", "BLOCK": 32, "clc": True}).params_and_options()
    assert options == {"clc": True} and set(params) == {"out_ptr", "n", "BLOCK"}


def test_clc_is_in_a_jit_hook_s_specialization_data_and_preload_keeps_it():
    import json
    heard = []
    _iota.device_caches[0][0].clear()
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = lambda **kwargs: heard.append(kwargs)
        warm = _iota.warmup(_out(), 64, BLOCK=32, clc=True, grid=(1,))
    data = heard[0]["compile"]["specialization_data"]
    assert heard[0]["compile"]["clc"] is True and json.loads(data)["options"]["clc"] is True
    _iota.device_caches[0][0].clear()
    again = _iota.preload(data)
    assert again.metadata["clc"] is True and again.hash == warm.hash


def _iota_source():
    return ASTSource(_iota, {"out_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}, {(2,): 32})


def test_triton_compile_takes_clc_from_sm100_and_refuses_it_below():
    with pytest.raises(ValueError, match="clc=True requires NVIDIA SM100"):
        compile(_iota_source(), target=GPUTarget("cuda", 90, 32), options={"clc": True})
    kernel = compile(_iota_source(), target=GPUTarget("cuda", 100, 32), options={"clc": True})
    assert kernel.metadata.clc is True
    assert compile(_iota_source(), target=GPUTarget("cuda", 90, 32), options={"clc": False}).metadata.clc is False


def test_clc_is_part_of_the_options_hash():
    backend = backends.make_backend(GPUTarget("cuda", 100, 32))
    on, off = backend.parse_options({"clc": True}), backend.parse_options({})
    assert off.clc is False and on.hash() != off.hash()


def test_a_kernel_metadata_pickled_without_clc_still_loads():
    fields = [f for f in KernelMetadata._fields if f != "clc"]
    older = KernelMetadata(*range(len(fields)))
    assert pickle.loads(pickle.dumps(older)).clc is False


# --- tl.range(..., disable_licm=) -------------------------------------------------------------

@kiln.jit
def _sum_loop(x_ptr, out_ptr, n, LICM_OFF: tl.constexpr):
    acc = 0.0
    for i in tl.range(0, n, disable_licm=LICM_OFF):
        acc += tl.load(x_ptr + i)
    tl.store(out_ptr, acc)


def _for_line(kernel) -> str:
    return next(line for line in kernel.asm["kir"].splitlines() if " = for " in line)


def test_disable_licm_is_an_attribute_of_the_for_op_and_of_tritons_loop():
    x, out = np.arange(8, dtype=np.float32), np.zeros(1, np.float32)
    kernel = _sum_loop[(1,)](x, out, 8, LICM_OFF=True)
    assert out[0] == 28
    assert "disable_licm = true" in _for_line(kernel)
    assert ("} {llvm.loop_annotation = #llvm.loop_annotation<licm = <disable = true, versioningDisable = true>>}"
            in kernel.asm["ttir"])


@pytest.mark.parametrize("value, set_", [(True, True), (1, True), ("yes", True), (False, False), (0, False),
                                         (None, False)])
def test_disable_licm_takes_any_compile_time_value_by_its_truth_as_triton(value, set_):
    kernel = _sum_loop.warmup(np.zeros(8, np.float32), np.zeros(1, np.float32), 8, value)
    assert ("disable_licm" in _for_line(kernel)) is set_


@kiln.jit
def _licm_from_a_tensor(x_ptr, n):
    for i in tl.range(0, n, disable_licm=n > 0):
        tl.store(x_ptr + i, 1.0)


def test_disable_licm_from_a_runtime_value_is_a_compile_error():
    with pytest.raises(CompilationError, match="disable_licm is a hint to the compiler: it must be known at compile"):
        _licm_from_a_tensor.warmup(np.zeros(8, np.float32), 8)


def test_disable_licm_reaches_the_llvm_loop(monkeypatch):
    # as Triton's loop annotation: LLVM's LICM (and its loop versioning) leaves the hinted loop alone
    monkeypatch.setenv("KILN_INTERPRET", "0")
    args = (np.zeros(8, np.float32), np.zeros(1, np.float32), 8)
    on, off = (_sum_loop.warmup(*args, flag, grid=(1,), target="sm_90a") for flag in (True, False))
    assert print_function(on.binary_inputs()[0]) != print_function(off.binary_inputs()[0])  # compile keys differ
    loop_ids = re.findall(r"^(!\d+) = distinct !\{\1, (.*)\}$", on.asm["llir"], re.M)  # LLVM's optimized module
    assert loop_ids and "!llvm.loop " + loop_ids[0][0] in on.asm["llir"]
    assert '!{!"llvm.licm.disable"}' in on.asm["llir"] and "llvm.licm.disable" not in off.asm["llir"]


@kiln.jit
def _countdown(out_ptr, n, LICM_OFF: tl.constexpr):
    i = n
    while tl.condition(i > 0, disable_licm=LICM_OFF):
        tl.store(out_ptr + i - 1, i * 2)
        i -= 1


@pytest.mark.parametrize("flag", [True, False])
def test_a_while_loop_takes_disable_licm_from_tl_condition(flag, monkeypatch):
    out = np.zeros(4, np.int32)
    kernel = _countdown[(1,)](out, 4, flag)
    assert out.tolist() == [2, 4, 6, 8]
    while_line = next(line for line in kernel.asm["kir"].splitlines() if " while " in line or "= while" in line)
    assert ("disable_licm = true" in while_line) is flag
    monkeypatch.setenv("KILN_INTERPRET", "0")
    built = _countdown.warmup(out, 4, flag, grid=(1,), target="sm_90a")
    assert ("llvm.licm.disable" in built.asm["llir"]) is flag


def test_tl_range_has_tritons_signature():
    assert list(inspect.signature(tl.range).parameters) == [
        "arg1", "arg2", "step", "num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten",
        "warp_specialize", "disable_licm"]


@kiln.jit
def _step_by_keyword(out_ptr):
    count = 0
    for i in tl.range(0, 10, step=3):    # 0 3 6 9
        count += 1
    for i in tl.range(10, step=4):       # 0 4 8
        count += 100
    tl.store(out_ptr, count)


def test_a_step_given_by_keyword_is_the_step():
    out = np.zeros(1, np.int32)
    _step_by_keyword[(1,)](out)
    assert out[0] == 304


@kiln.jit
def _fractional_stages(x_ptr, n):
    for i in tl.range(0, n, num_stages=2.5):
        tl.store(x_ptr + i, 1.0)


def test_an_int_hint_must_be_an_int():
    with pytest.raises(CompilationError, match="tl.range's num_stages must be an int, not 2.5"):
        _fractional_stages.warmup(np.zeros(8, np.float32), 8)


# --- do_bench_proton, do_bench_cudagraph_proton ------------------------------------------------

def test_the_proton_benchmarks_have_triton_3_9s_signatures():
    assert str(inspect.signature(testing.do_bench_proton)) == \
        "(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode='mean')"
    assert str(inspect.signature(testing.do_bench_cudagraph_proton)) == \
        "(fn, rep=20, grad_to_none=None, quantiles=None, return_mode='mean')"
    assert str(inspect.signature(testing.cublas)) == "()"


@pytest.fixture
def no_gpu(monkeypatch):
    """A launch on the GPU, on a machine without one."""
    if cuda_driver.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("KILN_INTERPRET", "0")


@pytest.mark.parametrize("bench", [testing.do_bench, testing.do_bench_proton, testing.do_bench_cudagraph_proton])
def test_without_a_gpu_the_benchmarks_fail_as_do_bench_does(no_gpu, bench):
    with pytest.raises(NoGPUError, match="no GPU to launch on"):
        bench(lambda: _iota[(2,)](_out(), 64, BLOCK=32), rep=5)
    assert not proton._active and not proton._sessions  # the benchmark's session is ended


@pytest.fixture
def kernel_clock(monkeypatch):
    """Interpreted launches in a profiler session timed by a clock the test drives, in turn 1 ms
    and 0.5 ms; the host's own time is not seen by it."""
    durations = itertools.cycle([1_000_000, 500_000])

    class Timing:
        def stop(self):
            self.ns = next(durations)

        def discard(self):
            pass

        def result(self):
            return "CPU", 0, self.ns

    monkeypatch.setattr(proton, "_HostTiming", Timing)


def _two_launches_and_host_work():
    out = _out()
    _iota[(2,)](out, 64, BLOCK=32)
    _iota[(2,)](out, 64, BLOCK=32)
    time.sleep(0.01)  # the host's time between launches: do_bench counts it, the profiler does not


@pytest.mark.parametrize("bench", [testing.do_bench_proton, testing.do_bench_cudagraph_proton])
def test_a_call_takes_the_time_of_its_kernels_as_the_profiler_measures_them(kernel_clock, bench):
    times = bench(_two_launches_and_host_work, rep=30, return_mode="all")
    assert times and all(t == 1.5 for t in times)  # ms: one call's two launches, no host time
    assert bench(_two_launches_and_host_work, rep=30, quantiles=[0.5]) == 1.5
    assert testing.do_bench(_two_launches_and_host_work, warmup=1, rep=30) >= 10
    assert not proton._active and not proton._sessions


def test_the_proton_benchmark_runs_calls_for_about_rep_ms_after_warmup(kernel_clock):
    calls = []
    testing.do_bench_proton(lambda: (calls.append(1), time.sleep(0.005)), warmup=20, rep=50)
    assert 6 + 1 + 4 <= len(calls) <= 6 + 5 + 11  # the estimate (6 calls), ~4 to warm up, ~10 timed


def test_profiler_data_reads_a_session_without_writing_it(tmp_path, kernel_clock):
    session = proton.start(str(tmp_path / "run"))
    with proton.scope("step"):
        _iota[(2,)](_out(), 64, BLOCK=32)
    proton.deactivate(session, flushing=True)
    tree, devices = proton.data.get(session)
    step = next(c for c in tree["children"] if c["frame"]["name"] == "step")
    assert [c["frame"]["name"] for c in step["children"]] == ["_iota"]
    assert step["children"][0]["metrics"]["time (ns)"] in (1_000_000, 500_000)
    assert proton.data.get(None) is None and not (tmp_path / "run.hatchet").exists()
    proton.finalize(session)


# --- TensorDescriptor(round_f32_to_tf32=) ------------------------------------------------------

@kiln.jit
def _copy_through(desc, out_ptr, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(out_ptr + offs, desc.load([0, 0]))


def _tf32(x: np.ndarray) -> np.ndarray:
    """fp32 rounded to 10 mantissa bits, to nearest, ties to even; Inf and NaN as they are."""
    bits = x.view(np.uint32).astype(np.uint64)
    half_ulp = 0xFFF + ((bits >> 13) & 1)
    rounded = ((bits + half_ulp) & 0xFFFFE000).astype(np.uint32)
    special = (bits & 0x7F800000) == 0x7F800000
    return np.where(special, x.view(np.uint32), rounded).view(np.float32)


def _fp32_block():
    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    x.flat[:6] = [np.inf, -np.nan, np.finfo(np.float32).max, 1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11)]
    return x


def test_round_f32_to_tf32_rounds_what_the_descriptor_loads():
    x = _fp32_block()
    for rounds, expect in ((False, x), (True, _tf32(x))):  # one kernel, two specializations
        out = np.zeros_like(x)
        _copy_through[(1,)](TensorDescriptor.from_tensor(x, [16, 16], round_f32_to_tf32=rounds), out, 16, 16)
        np.testing.assert_array_equal(out.view(np.uint32), expect.view(np.uint32))
    assert _tf32(x).flat[2] == np.inf and _tf32(x).flat[3] == 1.0 and _tf32(x).flat[4] == 1 + 2**-9


def test_round_f32_to_tf32_takes_fp32_only():
    with pytest.raises(ValueError, match="round_f32_to_tf32 needs a float32 tensor, not fp16"):
        TensorDescriptor.from_tensor(np.zeros((16, 16), np.float16), [16, 16], round_f32_to_tf32=True)
    assert "round_f32_to_tf32" in inspect.signature(TensorDescriptor).parameters


# --- knobs -------------------------------------------------------------------------------------

def test_force_disable_fp_fusion_wins_over_what_a_launch_asks():
    from kiln.compiler import codegen_options
    with knobs.language.scope():
        assert knobs.language.fp_fusion_enabled(None) is True and knobs.language.fp_fusion_enabled(False) is False
        knobs.language.force_disable_fp_fusion = True
        assert os.environ["TRITON_FORCE_DISABLE_FP_FUSION"] == "1"
        assert knobs.language.fp_fusion_enabled(True) is False
        assert codegen_options({"enable_fp_fusion": True})["enable_fp_fusion"] == 0
        assert backends.make_backend("sm_90a").parse_options({"enable_fp_fusion": True}).enable_fp_fusion is False
    assert "enable_fp_fusion" not in codegen_options({"enable_fp_fusion": True})


def test_triton_3_9s_other_knobs_are_there():
    assert isinstance(knobs.runtime.kernel_unload_hook, knobs.HookChain)
    with knobs.compilation.scope():
        assert knobs.compilation.fpsan_homomorphic_casts is False
        knobs.compilation.fpsan_homomorphic_casts = True
        assert knobs.compilation.fpsan_homomorphic_casts is True


# --- module names, under the drop-in ------------------------------------------------------------

def test_triton_errors_and_the_runtime_submodules_are_kilns():
    from kiln.dropin import doctor, hook
    if doctor.installed_hook() is None:
        pytest.skip("kiln's drop-in hook (kiln-dropin.pth) is not installed here")
    code = textwrap.dedent("""
        import triton, triton.errors, triton.runtime, triton.testing, triton.profiler
        import kiln.errors, kiln.runtime.build
        assert triton.errors is kiln.errors and triton.errors.TritonError is kiln.errors.KilnError
        assert triton.runtime.autotuner.Config is triton.Config and triton.runtime.build is kiln.runtime.build
        assert callable(triton.testing.do_bench_proton) and callable(triton.testing.do_bench_cudagraph_proton)
        assert callable(triton.testing.cublas) and callable(triton.profiler.data.get)
        print("ok")
    """)
    env = {**os.environ, hook.ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


# --- on a GPU -----------------------------------------------------------------------------------

@pytest.mark.gpu
def test_clc_on_this_gpu_is_what_triton_does_there(cuda_torch):
    out = cuda_torch.zeros(64, dtype=cuda_torch.int32, device="cuda")
    if cuda_torch.cuda.get_device_capability()[0] < 10:
        with pytest.raises(ValueError, match="clc=True requires NVIDIA SM100"):
            _iota[(2,)](out, 64, BLOCK=32, clc=True)
    else:
        _iota[(2,)](out, 64, BLOCK=32, clc=True)
        assert out.tolist() == list(range(64))
    _iota[(2,)](out, 64, BLOCK=32, clc=False)
    assert out.tolist() == list(range(64))


@kiln.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@pytest.mark.gpu
@pytest.mark.parametrize("proton_bench, events_bench", [("do_bench_proton", "do_bench"),
                                                        ("do_bench_cudagraph_proton", "do_bench_cudagraph")])
def test_on_a_gpu_the_proton_benchmarks_time_the_kernels(cuda_torch, proton_bench, events_bench):
    n = 1 << 26  # 256 MiB each way: the launch overhead is small beside the copy
    x = cuda_torch.ones(n, device="cuda")
    y = cuda_torch.empty_like(x)

    def fn():
        _scale[(n // 1024,)](x, y, n, BLOCK=1024)

    # what the times are is measured in bench/, not asserted here (no timing thresholds in tests): the
    # CPU test above checks that a call's time is its kernels' with a driven clock
    kernel_ms = getattr(testing, proton_bench)(fn, rep=50)
    events_ms = getattr(testing, events_bench)(fn, rep=50)
    assert kernel_ms > 0 and events_ms > 0, (kernel_ms, events_ms)
    assert y[-1].item() == 2.0
    calls = getattr(testing, proton_bench)(fn, rep=50, return_mode="all")
    assert len(calls) >= 2 and min(calls) > 0


@pytest.mark.gpu
def test_round_f32_to_tf32_on_the_gpu(cuda_torch):
    x = cuda_torch.from_numpy(_fp32_block()).cuda()
    out = cuda_torch.zeros_like(x)
    _copy_through[(1,)](TensorDescriptor.from_tensor(x, [16, 16], round_f32_to_tf32=True), out, 16, 16)
    expect = _tf32(_fp32_block())
    np.testing.assert_array_equal(out.cpu().numpy().view(np.uint32), expect.view(np.uint32))
    handle = testing.cublas()
    assert handle is testing.cublas() and hasattr(handle, "matmul")


@pytest.mark.parametrize("target, refused", [("sm_80", True), ("sm_89", True), ("sm_90a", False)])
def test_num_ctas_above_one_needs_hopper_as_in_tritons(target, refused):
    """Triton's CUDA backend refuses clusters of CTAs below sm_90; kiln takes num_ctas there and runs each program
    on one CTA (kiln.target_options)."""
    if refused:
        with pytest.raises(ValueError, match=r"^num_ctas > 1 requires NVIDIA SM90\+ \(Hopper\)\. Current target is "
                                             rf"{target}\."):
            _iota.warmup(_out(), 64, BLOCK=32, num_ctas=2, grid=(1,), target=target)
    else:
        assert _iota.warmup(_out(), 64, BLOCK=32, num_ctas=2, grid=(1,), target=target).asm["ptx"]
    _iota.warmup(_out(), 64, BLOCK=32, num_ctas=1, grid=(1,), target=target)
