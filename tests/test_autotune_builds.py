"""An autotuner's first call compiles every config at once, then times them one by one.

The GPU is stood in for (driver queries, launches, timings) so that the order of builds and
timings can be seen on a CPU; the builds themselves go through the real `CompiledKernel.build`.
"""
import threading
import types

import numpy as np
import pytest

import kiln
import kiln.compiler as compiler
import kiln.language as tl
from kiln.autotuner import Autotuner
from kiln.codegen.nvjitlink import PTXAssembleError
from kiln.errors import CompilationError, PTXASError
from kiln.runtime import cuda_driver


TIMED_FOR_REAL = Autotuner._bench  # the stand-in below replaces it


@kiln.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@pytest.fixture
def gpu_stand_in(monkeypatch):
    """A GPU that is there, launches that are recorded, and timings that favour small blocks."""
    monkeypatch.delenv("KILN_INTERPRET", raising=False)
    copy_kernel.cache.clear()  # each test builds its kernels afresh
    copy_kernel._by_specialization.clear()
    monkeypatch.setattr(cuda_driver, "is_available", lambda: True)
    monkeypatch.setattr(cuda_driver, "device_and_stream", lambda: (0, 0))
    monkeypatch.setattr(cuda_driver, "target", lambda device: "sm_90a")
    launched, timed = [], []
    monkeypatch.setattr(compiler.CompiledKernel, "launch", lambda self, grid, args, stream=None: launched.append(self))

    def bench(self, *args, config, **meta):  # Triton's signature: meta holds the grid
        try:
            kernel = self.fn.run(*args, warmup=True, **meta, **config.all_kwargs())
        except CompilationError:
            return float("inf")
        timed.append((config.kwargs["BLOCK"], "sm_90a" in kernel.binaries))
        return float(config.kwargs["BLOCK"])
    monkeypatch.setattr(Autotuner, "_bench", bench)
    return types.SimpleNamespace(launched=launched, timed=timed)


def _binary_after(barrier, fail_for=()):
    """A stand-in for the compile tiers: each build waits until `barrier` has every build in it,
    which only happens if they all run at once."""
    def compile_binary(ir, target, options):
        barrier.wait()
        if any(f"arange {{end = {b}" in ir_text(ir) for b in fail_for):
            raise RuntimeError("this config's compile failed")
        return types.SimpleNamespace(llir="", ptx="", cubin=b"", metadata={"num_warps": options["num_warps"]})
    return compile_binary


def ir_text(ir):
    from kiln.ir import print_function
    return print_function(ir)


def test_configs_are_built_side_by_side_before_any_is_timed(gpu_stand_in, monkeypatch):
    blocks = (32, 64, 128, 256)
    monkeypatch.setattr(compiler, "compile_binary", _binary_after(threading.Barrier(len(blocks), timeout=60)))
    tuned = kiln.autotune([kiln.Config({"BLOCK": b}) for b in blocks], key=["n"])(copy_kernel)
    x = np.zeros(64, np.float32)
    tuned.run(x, x, 64, grid=(1,))
    assert gpu_stand_in.timed == [(b, True) for b in blocks]  # every one already built when timed
    assert tuned.best_config.kwargs == {"BLOCK": 32}
    assert gpu_stand_in.launched[-1].options["num_warps"] == 4


def test_a_config_that_fails_to_build_leaves_the_others_built(gpu_stand_in, monkeypatch):
    # BLOCK 3 is no power of two: its IR cannot be made, so only the other three build
    monkeypatch.setattr(compiler, "compile_binary", _binary_after(threading.Barrier(3, timeout=60), fail_for=(64,)))
    tuned = kiln.autotune([kiln.Config({"BLOCK": b}) for b in (3, 32, 64, 128)], key=["n"])(copy_kernel)
    x = np.zeros(64, np.float32)
    tuned.run(x, x, 64, grid=(1,))
    assert gpu_stand_in.timed == [(32, True), (64, False), (128, True)]
    assert tuned.best_config.kwargs == {"BLOCK": 32}


def test_a_config_the_assembler_refuses_is_never_chosen(gpu_stand_in, monkeypatch):
    # as Triton's ptxas failures: PTXASError at the build, and the config timed as infinitely slow
    def compile_binary(ir, target, options):
        if "arange {end = 32" in ir_text(ir):
            raise PTXAssembleError("nvJitLink failed: ERROR_PTX_COMPILE ptxas fatal: too many resources")
        return types.SimpleNamespace(llir="", ptx="", cubin=b"", metadata={"num_warps": options["num_warps"]})
    monkeypatch.setattr(compiler, "compile_binary", compile_binary)
    monkeypatch.setattr(Autotuner, "_bench", TIMED_FOR_REAL)
    monkeypatch.setattr(compiler.CompiledKernel, "launch", lambda self, grid, args, stream=None: self.build("sm_90a"))
    tuned = kiln.autotune([kiln.Config({"BLOCK": b}) for b in (32, 64)], key=["n"],
                          do_bench=lambda launch, quantiles: (launch(), 1.0)[1])(copy_kernel)
    x = np.zeros(64, np.float32)
    tuned.run(x, x, 64, grid=(1,))
    assert tuned.best_config.kwargs == {"BLOCK": 64}
    with pytest.raises(PTXASError, match="PTXAS error: nvJitLink failed"):
        copy_kernel.warmup(x, x, 64, BLOCK=32, grid=(1,), target="sm_90a")


def test_a_config_pre_hook_runs_before_its_build(gpu_stand_in, monkeypatch):
    monkeypatch.setattr(compiler, "compile_binary", _binary_after(threading.Barrier(2, timeout=60)))
    seen = []
    configs = [kiln.Config({"BLOCK": b}, pre_hook=lambda nargs: seen.append(nargs["BLOCK"])) for b in (32, 64)]
    tuned = kiln.autotune(configs, key=["n"])(copy_kernel)
    x = np.zeros(64, np.float32)
    tuned.run(x, x, 64, grid=(1,))
    assert seen[:2] == [32, 64]  # once each before the builds; the timings (stood in here) call them again


@pytest.mark.parametrize("programs, trips, split", [(8, None, True), (4096, None, False), (8, [-1, 64, 1, 0, 1], True),
                                                   (8, [-1, 63, 1, 0, 1], False), (8, [2, 0, 1, 0, 1], True),
                                                   (8, [2, 1, 1, 0, 1], True), (8, [2, -1, 1, 0, 1], False)])
def test_a_splittable_gemm_launched_with_few_programs_has_its_split_builds_made_beside_the_others(
        programs, trips, split, gpu_stand_in, monkeypatch):
    """The split-K variant that a launch of few programs takes (kiln.codegen.passes.split_k) is built
    with the configs, not at each config's first timed launch, one after another; a launch of many
    programs, or of a K loop too short to share (its trip count from the arguments: here n = 64),
    does not take it, and it is not built."""
    builds = []

    def compile_binary(ir, target, options):
        builds.append((options["num_warps"], ir.attrs.get("split_k") == 1))
        args = [{"name": name, "type": "int32", "llvm_type": "i32"} for name in ("x", "y", "n")]
        return types.SimpleNamespace(llir="", ptx="", cubin=b"", metadata={
            "num_warps": options["num_warps"], "n_regs": 168, "shared": 131072, "splittable": True, "args": args,
            **({"split_trips": trips} if trips else {})})
    monkeypatch.setattr(compiler, "compile_binary", compile_binary)
    monkeypatch.setattr(cuda_driver, "sm_count", lambda device: 132)  # one CTA an SM: 66 programs or fewer split
    monkeypatch.delenv("KILN_SPLIT_K", raising=False)
    tuned = kiln.autotune([kiln.Config({"BLOCK": 32}, num_warps=4), kiln.Config({"BLOCK": 64}, num_warps=8)],
                          key=["n"])(copy_kernel)
    x = np.zeros(64, np.float32)
    tuned.run(x, x, 64, grid=lambda meta: (programs,))
    assert sorted(b for b in builds if b[1]) == ([(4, True), (8, True)] if split else [])
    assert len(gpu_stand_in.timed) == 2  # both configs timed after their builds


def test_the_interpreter_builds_nothing(monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    monkeypatch.setattr(compiler, "compile_binary", lambda *a: pytest.fail("the interpreter compiled a binary"))
    tuned = kiln.autotune([kiln.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])(copy_kernel)
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    tuned.run(x, y, 64, grid=lambda meta: (64 // meta["BLOCK"],))
    assert (y == x).all()
