"""Hopper's launch features from Triton 3.6 (its tutorial 11): grid dependency control in kernels
(`tl.extra.cuda.gdc_wait` / `gdc_launch_dependents` -> ops `gdc_wait` / `gdc_launch_dependents` ->
PTX `griddepcontrol`), programmatic dependent launches (`launch_pdl=True` -> cuLaunchKernelEx with
programmatic stream serialization) and `triton.testing.do_bench_cudagraph`.

The CPU tier checks the IR text, the passes, the PTX for sm_90a, the interpreter, the launch
configuration's bytes; the GPU tests (marked `gpu`) launch a dependent pair and time a graph."""
import contextlib
import ctypes
import re
import types

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.codegen.passes import cse, dce
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify
from kiln.ir.verifier import VerificationError
from kiln.runtime import launcher
from kiln.testing import do_bench_cudagraph


@kiln.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
    """Tutorial 11's kernel."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if USE_GDC:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(out_ptr + offs, x + y, mask=mask)


GDC = """
kernel @k(%p: ptr<fp32> {divisibility = 16, name = "p"}) {
  gdc_wait
  gdc_wait
  %r = arange {end = 128, start = 0} : <128xint32>
  %ps = splat %p : <128xptr<fp32>>
  %ptrs = addptr %ps, %r : <128xptr<fp32>>
  %x = load %ptrs : <128xfp32>
  gdc_launch_dependents
  gdc_launch_dependents
  %y = add %x, %x : <128xfp32>
  store %ptrs, %y
  return
}
"""


def _args(n=1000):
    x = np.arange(n, dtype=np.float32)
    return x, np.full(n, 0.5, np.float32), np.zeros(n, np.float32), n


def _ops(ir):
    return [op.name for op in ir.walk()]


# --- the ops in the IR ----------------------------------------------------------------------

def test_the_ops_print_parse_and_verify():
    fn = parse_function(GDC)
    verify(fn)
    assert print_function(parse_function(print_function(fn))) == print_function(fn)
    assert _ops(fn)[:2] == ["gdc_wait", "gdc_wait"] and _ops(fn).count("gdc_launch_dependents") == 2


@pytest.mark.parametrize("bad", ["  %v = gdc_wait : int32\n",
                                 "  %c = constant {value = 1} : int32\n  gdc_launch_dependents %c\n"])
def test_the_verifier_refuses_operands_and_results(bad):
    fn = parse_function(GDC.replace("  gdc_wait\n  gdc_wait\n", bad))
    with pytest.raises(VerificationError, match="gdc_"):
        verify(fn)


def test_cse_and_dce_keep_every_one_in_place():
    fn = parse_function(GDC)
    ctx = PassContext(parse_target("sm_90a"))
    for p in (cse, dce):
        p.apply(fn, ctx)
    verify(fn)
    names = _ops(fn)
    assert names[:2] == ["gdc_wait", "gdc_wait"]
    assert names.index("gdc_launch_dependents") == names.index("load") + 1
    assert names.count("gdc_launch_dependents") == 2


def test_the_whole_pipeline_keeps_them_in_order_in_the_ptx():
    ck = compile_ir(parse_function(GDC), "sm_90a")
    assert _ops(parse_function(ck.kir)).count("gdc_wait") == 2
    lines = [line.strip() for line in ck.ptx.splitlines()]
    waits = [i for i, line in enumerate(lines) if line == "griddepcontrol.wait;"]
    launches = [i for i, line in enumerate(lines) if line == "griddepcontrol.launch_dependents;"]
    loads = [i for i, line in enumerate(lines) if "ld.global" in line]
    stores = [i for i, line in enumerate(lines) if "st.global" in line]
    assert len(waits) == 2 and len(launches) == 2 and loads and stores
    assert max(waits) < min(loads) and max(loads) < min(launches) and max(launches) < min(stores)


# --- the kernel language --------------------------------------------------------------------

def test_reachable_as_triton_spells_them():
    from kiln.language.extra.cuda import gdc, gdc_launch_dependents, gdc_wait
    assert tl.extra.cuda.gdc_wait is gdc_wait is gdc.gdc_wait
    assert tl.extra.cuda.gdc_launch_dependents is gdc_launch_dependents is gdc.gdc_launch_dependents


def test_the_frontend_emits_them_where_the_source_has_them():
    k = add_kernel.warmup(*_args(), BLOCK=256, USE_GDC=True)
    names = _ops(k.ir)
    assert names.index("gdc_wait") < names.index("load")
    assert names.index("load") < names.index("gdc_launch_dependents") < names.index("store")
    assert "gdc_wait" not in _ops(add_kernel.warmup(*_args(), BLOCK=256, USE_GDC=False).ir)


def test_ptx_for_sm_90a_has_griddepcontrol_around_the_loads():
    k = add_kernel.warmup(*_args(), BLOCK=256, USE_GDC=True, grid=(1,), target="sm_90a")
    ptx = k.asm["ptx"]
    assert ptx.index("griddepcontrol.wait;") < ptx.index("ld.global")
    assert ptx.rindex("ld.global") < ptx.index("griddepcontrol.launch_dependents;") < ptx.index("st.global")
    plain = add_kernel.warmup(*_args(), BLOCK=256, USE_GDC=False, grid=(1,), target="sm_90a").asm["ptx"]
    assert "griddepcontrol" not in plain


def test_before_sm_90_it_is_a_compile_error():
    """As in Triton, whose ptxas refuses `griddepcontrol` before sm_90."""
    with pytest.raises(Exception, match=r"gdc_wait \(griddepcontrol.wait\) needs sm_90 or newer, not sm_80"):
        add_kernel.warmup(*_args(), BLOCK=256, USE_GDC=True, grid=(1,), target="sm_80")


def test_the_interpreter_runs_them_as_no_ops():
    x, y, out, n = _args()
    add_kernel[(kiln.cdiv(n, 256),)](x, y, out, n, BLOCK=256, USE_GDC=True, launch_pdl=True)
    np.testing.assert_array_equal(out, x + y)


# --- launch_pdl -----------------------------------------------------------------------------

def test_launch_pdl_is_a_launch_option_recorded_in_the_metadata():
    pdl = add_kernel.warmup(*_args(), BLOCK=256, USE_GDC=True, launch_pdl=True, grid=(1,), target="sm_90a")
    plain = add_kernel.warmup(*_args(), BLOCK=256, USE_GDC=True, grid=(1,), target="sm_90a")
    assert pdl is not plain and pdl.metadata["launch_pdl"] is True and plain.metadata["launch_pdl"] is False
    assert pdl.launch_pdl and not plain.launch_pdl
    assert pdl.asm["ptx"] == plain.asm["ptx"]  # one binary: only the launch differs
    assert pdl.binaries["sm_90a"].key == plain.binaries["sm_90a"].key


def test_triton_compile_takes_launch_pdl():
    from kiln.dropin.compile import ASTSource, compile
    from kiln.runtime import GPUTarget
    src = ASTSource(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                 "BLOCK": "constexpr", "USE_GDC": "constexpr"}, {"BLOCK": 256, "USE_GDC": True})
    kernel = compile(src, target=GPUTarget("cuda", 90, 32), options={"launch_pdl": True})
    assert kernel.metadata.launch_pdl is True and "griddepcontrol.wait;" in kernel.asm["ptx"]
    kernel._init_handles()
    assert kernel.module.launch_pdl
    plain = compile(src, target=GPUTarget("cuda", 90, 32))
    assert plain.metadata.launch_pdl is False


class _Loaded:
    handle = 0x1000


def test_a_pdl_launch_calls_cuLaunchKernelEx_with_programmatic_stream_serialization(monkeypatch):
    plain_calls, ex_calls = [], []
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: lambda *args: plain_calls.append(args) or 0)

    def launch_ex(config, function, params, extra):
        c = launcher.LaunchConfig.from_address(config)
        attr = c.attrs[0]
        ex_calls.append(((c.gridDimX, c.gridDimY, c.gridDimZ), (c.blockDimX, c.blockDimY, c.blockDimZ),
                         c.sharedMemBytes, c.hStream, c.numAttrs, attr.id,
                         attr.value.programmaticStreamSerializationAllowed, function, extra))
        return 0
    monkeypatch.setattr(launcher, "_cu_launch_kernel_ex", lambda: launch_ex)
    from kiln.ir.types import parse_type
    types = [parse_type("ptr<fp32>"), parse_type("int32")]
    run = launcher.make_launcher(_Loaded(), types, 8, 1024, "k", pdl=True)
    run((3, 2, 1), [0x2000, 5], 0x77)
    run((4, 1, 1), [0x2000, 5], 0)
    run((0, 1, 1), [0x2000, 5], 0)  # an empty grid launches nothing
    assert plain_calls == []
    assert ex_calls == [((3, 2, 1), (256, 1, 1), 1024, 0x77, 1, 6, 1, 0x1000, None),
                        ((4, 1, 1), (256, 1, 1), 1024, None, 1, 6, 1, 0x1000, None)]
    launcher.make_launcher(_Loaded(), types, 4, 0, "k")((2, 1, 1), [0x2000, 5], 0)
    assert len(ex_calls) == 2 and plain_calls[0][1:8] == (2, 1, 1, 128, 1, 1, 0)


def test_the_launch_config_is_laid_out_as_cuda_h():
    """Read back through kiln's ctypes structures, a config that cuda-python filled holds what it set."""
    driver = pytest.importorskip("cuda.bindings.driver")
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = 7, 8, 9
    config.blockDimX, config.blockDimY, config.blockDimZ = 256, 2, 3
    config.sharedMemBytes, config.hStream = 4096, driver.CUstream(0x1234)
    cooperative, pdl = driver.CUlaunchAttribute(), driver.CUlaunchAttribute()
    cooperative.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    cooperative.value.cooperative = 1
    pdl.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    pdl.value.programmaticStreamSerializationAllowed = 1
    config.attrs, config.numAttrs = [cooperative, pdl], 2
    mine = launcher.LaunchConfig.from_address(config.getPtr())
    assert (mine.gridDimX, mine.gridDimY, mine.gridDimZ, mine.blockDimX, mine.blockDimY, mine.blockDimZ) == \
        (7, 8, 9, 256, 2, 3)
    assert (mine.sharedMemBytes, mine.hStream, mine.numAttrs) == (4096, 0x1234, 2)
    assert mine.attrs[1].id == launcher.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION == int(pdl.id)
    assert mine.attrs[1].value.programmaticStreamSerializationAllowed == 1 and mine.attrs[0].id == int(cooperative.id)
    assert ctypes.sizeof(launcher.LaunchAttribute) == 72


# --- do_bench_cudagraph ---------------------------------------------------------------------

def test_do_bench_cudagraph_without_a_gpu_times_the_wall_clock():
    calls = []
    ms = do_bench_cudagraph(lambda: calls.append(1), rep=1)
    assert isinstance(ms, float) and ms >= 0 and calls
    low, mid, high = do_bench_cudagraph(lambda: None, rep=1, quantiles=[0.2, 0.5, 0.8])
    assert low <= mid <= high
    assert isinstance(do_bench_cudagraph(lambda: None, rep=1, return_mode="all"), list)
    with pytest.raises(ValueError, match="return_mode"):
        do_bench_cudagraph(lambda: None, return_mode="p99")


class _RecordingCuda:
    """torch.cuda as far as do_bench_cudagraph uses it, keeping the order of what happens on which stream."""

    def __init__(self):
        self.log, self.current = [], "caller"

    def Stream(self):
        cuda = self

        class Stream:
            def wait_stream(self, other):
                cuda.log.append(("wait", other))
        return Stream()

    def current_stream(self):
        return self.current

    @contextlib.contextmanager
    def stream(self, side):
        self.current, before = side, self.current
        yield
        self.current = before

    def graph(self, _graph):
        return contextlib.nullcontext()

    def CUDAGraph(self):
        return types.SimpleNamespace(replay=lambda: None)

    def Event(self, enable_timing):
        return types.SimpleNamespace(record=lambda: None, elapsed_time=lambda end: 1.0)

    def synchronize(self):
        pass


def test_do_bench_cudagraph_starts_after_the_work_the_callers_stream_holds(monkeypatch):
    # the caller's last writes (x = torch.zeros(...)) must land before the side stream's warm-up reads x
    cuda = _RecordingCuda()
    monkeypatch.setattr(kiln.testing, "_cuda_torch", lambda: types.SimpleNamespace(cuda=cuda))
    do_bench_cudagraph(lambda: cuda.log.append(("call", cuda.current)), rep=5)
    assert cuda.log[0] == ("wait", "caller")
    assert all(stream != "caller" for what, stream in cuda.log[1:])


# --- GPU tier -------------------------------------------------------------------------------

def _torch_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    return torch


@kiln.jit
def _slow_producer(out_ptr, n, SPIN: tl.constexpr, BLOCK: tl.constexpr):
    """Lets its dependent start at once, then spends a while before writing out = offs + 1."""
    tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = offs.to(tl.float32)
    for _ in range(SPIN):
        acc = acc * 0.5 + offs.to(tl.float32) * 0.5  # stays offs, after SPIN dependent steps
    tl.store(out_ptr + offs, acc + 1.0, mask=mask)


@kiln.jit
def _consumer(in_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.extra.cuda.gdc_wait()  # the producer's stores are visible after this
    tl.store(out_ptr + offs, tl.load(in_ptr + offs, mask=mask) * 2.0, mask=mask)


@pytest.mark.gpu
def test_a_dependent_pair_launched_with_pdl_sees_the_producers_writes(monkeypatch):
    torch = _torch_gpu()
    monkeypatch.setenv("KILN_INTERPRET", "0")
    made = []
    real = launcher._cu_launch_kernel_ex
    monkeypatch.setattr(launcher, "_cu_launch_kernel_ex", lambda: made.append(1) or real())
    n, block = 1 << 20, 1024
    grid = (kiln.cdiv(n, block),)
    expected = (torch.arange(n, device="cuda", dtype=torch.float32) + 1) * 2
    for _ in range(5):
        mid = torch.zeros(n, device="cuda")
        out = torch.full((n,), float("nan"), device="cuda")
        _slow_producer[grid](mid, n, SPIN=2000, BLOCK=block, launch_pdl=True)
        _consumer[grid](mid, out, n, BLOCK=block, launch_pdl=True)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert made  # the launches went through cuLaunchKernelEx


@pytest.mark.gpu
def test_tutorial_11_add_and_its_benchmark(monkeypatch):
    torch = _torch_gpu()
    monkeypatch.setenv("KILN_INTERPRET", "0")
    n = 1 << 20
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")

    def add(pdl):
        out = torch.empty_like(x)
        add_kernel[lambda meta: (kiln.cdiv(n, meta["BLOCK"]),)](x, y, out, n, BLOCK=1024, USE_GDC=pdl, launch_pdl=pdl)
        return out
    for pdl in (True, False):
        torch.testing.assert_close(add(pdl), x + y, rtol=0, atol=0)
        ms, low, high = do_bench_cudagraph(lambda: add(pdl), rep=20, quantiles=[0.5, 0.2, 0.8])
        assert 0 < low <= ms <= high < 10
    assert do_bench_cudagraph(lambda: add(True), rep=5) > 0


@pytest.mark.gpu
def test_do_bench_cudagraph_replays_a_graph(monkeypatch):
    torch = _torch_gpu()
    monkeypatch.setenv("KILN_INTERPRET", "0")  # the suite's default is the interpreter, which times by the wall clock
    x = torch.zeros(1, device="cuda")
    times = do_bench_cudagraph(lambda: x.add_(1), rep=5, return_mode="all")
    assert len(times) == 10 and all(t > 0 for t in times)
    # one warm-up, five for the estimate, then each of the 10 replays adds the captured calls
    calls = (int(x.item()) - 6) / 10
    assert calls >= 1 and calls == int(calls)
