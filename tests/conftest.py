"""Test-wide setup: kernels in these tests run in kiln's NumPy interpreter.

Every kernel specialization that a conformance test (tests/test_lang_*.py) builds is
also compiled to PTX and linked into a cubin for sm_80 and sm_90a, so the CPU tier
checks codegen on the whole language, not only on the kernels written for codegen.
"""
import os
import tempfile

import pytest

os.environ.setdefault("KILN_INTERPRET", "1")
# Compiled kernels go to a cache of the test run's own, never the user's ~/.cache/kiln.
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-test-cache-")

CODEGEN_TARGETS = ("sm_80", "sm_90a")


@pytest.fixture(autouse=True)
def compile_conformance_kernels(request, monkeypatch):
    """After a conformance test, build every kernel it specialized for both targets."""
    if not request.node.module.__name__.split(".")[-1].startswith("test_lang_"):
        yield
        return
    import kiln.compiler
    built = []
    original = kiln.compiler.compile_kernel

    def recording(jitfn, params, options):
        kernel = original(jitfn, params, options)
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
