"""Test-wide setup: kernels in these tests run in kiln's NumPy interpreter.

Every kernel specialization that a conformance test (tests/test_lang_*.py) builds is
also compiled to PTX and linked into a cubin for sm_80 and sm_90a, so the CPU tier
checks codegen on the whole language, not only on the kernels written for codegen.
"""
import os
import tempfile

import pytest

# KILN_TEST_GPU_CONFORMANCE=1 (GPU machine): the conformance tests launch on the GPU instead;
# their NumPy arrays are copied to the device for each launch and back after it.
GPU_CONFORMANCE = os.environ.get("KILN_TEST_GPU_CONFORMANCE") == "1"
os.environ.setdefault("KILN_INTERPRET", "0" if GPU_CONFORMANCE else "1")
# Compiled kernels go to a cache of the test run's own, never the user's ~/.cache/kiln, and
# no test starts a node daemon unless it asks for one.
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-test-cache-")
os.environ["KILN_DAEMON"] = "off"
os.environ.pop("KILN_RUNTIME_DIR", None)  # the node daemon's directory follows the test cache's

CODEGEN_TARGETS = ("sm_80", "sm_90a")


def _forced_capability() -> int:
    """The capability KILN_TARGET forces the GPU's kernels to (sm_80 -> 80); past any GPU's when unset."""
    digits = "".join(c for c in os.environ.get("KILN_TARGET", "").split("_")[-1] if c.isdigit())
    return int(digits) if digits else 1 << 30


def _is_conformance(request) -> bool:
    return request.node.module.__name__.split(".")[-1].startswith("test_lang_")


@pytest.fixture(autouse=True)
def conformance_on_gpu(request, monkeypatch):
    """In GPU conformance mode, run the conformance tests' launches on the GPU."""
    if not (GPU_CONFORMANCE and _is_conformance(request)):
        yield
        return
    if request.node.get_closest_marker("interpreter_only"):
        pytest.skip("checks the interpreter's own behaviour")
    if request.node.get_closest_marker("fp8e4nv") and _forced_capability() < 89:
        pytest.skip("fp8e4nv: a build for a target below sm_89 refuses it, as Triton does (kiln.fp8_targets)")
    gap = request.node.get_closest_marker("codegen_gap")
    if gap:
        request.node.add_marker(pytest.mark.xfail(reason=f"known codegen gap: {gap.args[0]}", strict=True))
    import kiln.compiler
    from device_arrays import launch_with_device_copies
    monkeypatch.setenv("KILN_INTERPRET", "0")
    monkeypatch.setattr(kiln.compiler.CompiledKernel, "launch",
                        launch_with_device_copies(kiln.compiler.CompiledKernel.launch))
    yield


@pytest.fixture(autouse=True)
def compile_conformance_kernels(request, monkeypatch):
    """After a conformance test, build every kernel it specialized for both targets."""
    if GPU_CONFORMANCE or not _is_conformance(request):
        yield
        return
    import kiln.compiler
    built = []
    original = kiln.compiler.compile_kernel

    def recording(jitfn, params, options, **named):
        kernel = original(jitfn, params, options, **named)
        built.append(kernel)
        return kernel
    monkeypatch.setattr(kiln.compiler, "compile_kernel", recording)
    yield
    from kiln.compiler import codegen_options
    from kiln.codegen import compile as compile_ir
    gap = request.node.get_closest_marker("codegen_gap")
    failures = []
    for kernel in built:
        for target in CODEGEN_TARGETS:
            try:
                compiled = compile_ir(kernel.ir, target, codegen_options(kernel.options))
            except Exception as e:
                failures.append(f"kernel {kernel.name} did not compile for {target}: {type(e).__name__}: {e}")
                continue
            assert compiled.cubin and ".entry " + kernel.name in compiled.ptx
    if gap and failures:
        pytest.xfail(f"known codegen gap ({gap.args[0]}): {failures[0]}")
    if gap:
        pytest.fail("marked codegen_gap but every kernel compiled: remove the mark")
    if failures:
        pytest.fail("\n".join(failures))


@pytest.fixture
def cuda_torch(monkeypatch):
    """torch, with kiln launching on its CUDA GPU rather than in the interpreter; skips without one."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("KILN_INTERPRET", "0")
    return torch


@pytest.fixture
def hopper_torch(cuda_torch):
    """`cuda_torch` on a GPU kiln compiles sm_90a code for (wgmma, TMA); skips elsewhere."""
    from kiln.runtime.cuda_driver import compile_target
    if cuda_torch.cuda.get_device_capability()[0] != 9 or compile_target(cuda_torch.cuda.current_device()) != "sm_90a":
        pytest.skip("needs a Hopper GPU that kiln compiles sm_90a code for")
    return cuda_torch


@pytest.fixture
def no_profiler_session_left():
    """A test that fails inside a kiln.profiler session leaves no session or open scope to the next one."""
    yield
    import kiln.profiler as proton
    proton._sessions.clear()
    proton._active.clear()
    proton._scope_stack().clear()
    proton._scope_timers().clear()
