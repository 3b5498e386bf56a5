"""`kiln prewarm MODULE_OR_FILE`: the declared signatures of a module's kernels, compiled on the pool."""
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from kiln.cache import Cache
from kiln.daemon import create_server, prewarm, tiers
from kiln.daemon.client import Client

KERNELS = '''
import kiln
import kiln.language as tl

SIGNATURES = [{"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32", "BLOCK": 256},
              {"x_ptr": "*fp16:16", "y_ptr": "*fp16:16", "n": "i32:16", "BLOCK": 128, "num_warps": 2}]


@kiln.jit(prewarm=SIGNATURES)
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


@kiln.autotune(configs=[kiln.Config({"BLOCK": 64}, num_warps=2), kiln.Config({"BLOCK": 128}, num_warps=4),
                        kiln.Config({"BLOCK": 256}, num_warps=8)], key=["n"])
@kiln.jit(prewarm=[{"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32"}])
def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@kiln.jit
def helper(x):  # a device function: declares nothing
    return x * 2
'''

BROKEN = KERNELS + '''

@kiln.jit(prewarm=[{"x_ptr": "*fp32", "n": "i32"}, {"x_ptr": "*fp32", "n": "i32", "BLOCK": 3}])
def broken(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)


@kiln.heuristics({"BLOCK": lambda args: args["x_ptr"].numel()})
@kiln.jit(prewarm=[{"x_ptr": "*fp32"}])
def needs_tensor(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)
'''


@pytest.fixture(scope="module")
def fake_daemon(tmp_path_factory):
    path = os.path.join(tempfile.mkdtemp(prefix="kpm-", dir="/tmp"), "d.sock")
    server, _ = create_server(f"unix:{path}", "kiln.daemon.fake:compile", workers=2,
                              cache=Cache(tmp_path_factory.mktemp("prewarm-module-cache")))
    server.start()
    yield f"unix:{path}", server
    server.stop(0)


@pytest.fixture
def kernels_file(tmp_path):
    def write(text, name="user_kernels"):
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(text))
        return path
    return write


def test_every_signature_and_config_for_every_target(fake_daemon, kernels_file):
    path = kernels_file(KERNELS, "prewarm_ok")
    seen = []
    report = prewarm.prewarm_module(str(path), ["sm_80", "sm_90a"], address=fake_daemon[0],
                                    progress=lambda done, total: seen.append((done, total)))
    # (2 signatures of double + 1 signature x 3 configs of tuned) x 2 targets
    assert report.ok and report.total == 10 and report.statuses["CACHE_MISS"] == 10
    assert seen[-1] == (10, 10)
    assert report.skipped == [("helper", "declares no signatures (jit(prewarm=[...]))")]
    again = prewarm.prewarm_module(str(path), ["sm_90a"], address=fake_daemon[0])
    assert again.statuses == {"CACHE_HIT": 5}


def test_by_dotted_name(fake_daemon, kernels_file, monkeypatch):
    monkeypatch.syspath_prepend(str(kernels_file(KERNELS, "prewarm_dotted").parent))
    declared = prewarm.from_module("prewarm_dotted", ["sm_100a"])
    assert len(declared.kernels) == 5 and {t for _, t, _ in declared.kernels} == {"sm_100a"}
    assert {o["num_warps"] for _, _, o in declared.kernels} == {2, 4, 8}


def test_errors_are_reported_per_kernel_and_the_rest_compiles(fake_daemon, kernels_file):
    report = prewarm.prewarm_module(str(kernels_file(BROKEN, "prewarm_broken")), ["sm_90a"],
                                    address=fake_daemon[0])
    assert not report.ok and report.total == 5 and report.statuses["ERROR"] == 0
    messages = {label: message for label, _, message in report.errors}
    assert "gives no BLOCK" in messages["broken(x_ptr=*fp32, n=i32)"]
    assert "CompilationError" in messages["broken(x_ptr=*fp32, n=i32, BLOCK=3)"]
    skipped = dict(report.skipped)
    assert "heuristic for BLOCK" in skipped["needs_tensor(x_ptr=*fp32)"]


def test_compile_errors_name_the_signature(fake_daemon):
    from kiln.ir import parse_function
    fn = parse_function("kernel @k(%x: ptr<fp16>) {\n  return\n}\n")
    with Client(fake_daemon[0]) as client:
        report = prewarm.prewarm([(fn, "sm_90a", {}), (fn, "sm_90a", {"fake_error": "nope"})], client,
                                 labels=["k(x=*fp16)", "k(x=*fp16, broken)"])
    assert report.errors == [("k(x=*fp16, broken)", "sm_90a", "RuntimeError: nope")]


def test_no_gpu_and_no_target_is_an_error(fake_daemon, kernels_file, monkeypatch):
    monkeypatch.setattr(prewarm, "local_target", lambda: None)
    with pytest.raises(ValueError, match="name the targets"):
        prewarm.prewarm_module(str(kernels_file(KERNELS, "prewarm_notarget")), address=fake_daemon[0])


def test_command_line(fake_daemon, kernels_file):
    path = kernels_file(BROKEN, "prewarm_cli")
    # sm_86: the module's kernels are test_every_signature_and_config_for_every_target's, whose sm_80 builds
    # the key finds whatever file they came from
    out = subprocess.run([sys.executable, "-m", "kiln.daemon", "prewarm", str(path), "--target", "sm_86",
                          "--address", fake_daemon[0]], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "prewarmed 5 kernels: compiled 5" in out.stdout
    assert "skipped needs_tensor(x_ptr=*fp32)" in out.stderr and "broken(x_ptr=*fp32, n=i32) for sm_86" in out.stderr
    missing = subprocess.run([sys.executable, "-m", "kiln.daemon", "prewarm", "no_such_module_here", "--target",
                              "sm_80", "--address", fake_daemon[0]], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "No module named 'no_such_module_here'" in missing.stderr


def test_real_codegen_fills_the_cache_a_launch_reads(kernels_file, monkeypatch, tmp_path):
    """Prewarmed for sm_80 and sm_90a by real workers; a launch's build is then a cache hit."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "node-cache"))
    monkeypatch.setattr(tiers, "_state", tiers._State())
    path = os.path.join(tempfile.mkdtemp(prefix="kpr-", dir="/tmp"), "d.sock")
    server, _ = create_server(f"unix:{path}", workers=2, cache=Cache())
    server.start()
    try:
        module = prewarm.load_module(str(kernels_file(KERNELS, "prewarm_real")))
        report = prewarm.prewarm_module(module, ["sm_80", "sm_90a"], address=f"unix:{path}")
        assert report.ok and report.statuses["CACHE_MISS"] == 10
    finally:
        server.stop(0)
    x, y = np.ones(1024, np.float32), np.zeros(1024, np.float32)  # KILN_DAEMON=off: only the cache can help
    for target in ("sm_80", "sm_90a"):  # n "i32": not a multiple of 8 (1000 would be "i32:8")
        assert module.double.warmup(x, y, 1001, BLOCK=256, target=target).binaries[target].source == "cache"
        for kernel in module.tuned.warmup(x, y, 1001, target=target):
            assert kernel.binaries[target].source == "cache" and "ld.global" in kernel.asm["ptx"]


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("name", ["vector_add", "fused_softmax", "matmul", "dropout", "layer_norm"])
def test_the_examples_declare_what_they_launch(name):
    """Every specialization an example's main() compiles is among those it declares for prewarming."""
    from kiln.proto import compile_key
    from kiln.signatures import innermost, is_kernel

    module = prewarm.load_module(os.path.join(EXAMPLES, f"{name}.py"))
    declared = prewarm.from_module(module, ["sm_90a"])
    assert not declared.errors and all("declares no signatures" in reason for _, reason in declared.skipped)
    module.main()
    launched = set()
    for kernel in filter(is_kernel, vars(module).values()):
        for compiled in innermost(kernel)._by_specialization.values():
            fn, options = compiled.binary_inputs()
            launched.add(compile_key(fn, "sm_90a", options))
    # (an autotuner that already chose a config for this key compiles only that one, hence <=)
    assert launched and launched <= {compile_key(fn, target, options) for fn, target, options in declared.kernels}
