"""Triton 3.6's asynchronous compile mode (issue 31): inside `with AsyncCompileMode(executor):` a
specialization not compiled yet is compiled by a job of the executor, one per specialization; a
warmup returns a FutureKernel at once, a launch waits for its job; a kernel enters the cache when
its result is taken (a launch, `result()`, leaving the block); a job's error is raised there."""
import os
import subprocess
import sys
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import numpy as np
import pytest

import kiln
import kiln.compiler
import kiln.language as tl
from kiln.dropin import knobs
from kiln.runtime import _async_compile
from kiln.runtime._async_compile import AsyncCompileMode, FutureKernel


class HeldJobs(Executor):
    """Records each job and runs it only when asked (`step`, `drain`), or at once when `eager`."""

    def __init__(self, eager=False):
        self.eager = eager
        self.pending = []   # (job, future) not run yet
        self.submitted = 0

    def submit(self, fn, *args, **kwargs):
        future = Future()
        self.submitted += 1
        self.pending.append((lambda: fn(*args, **kwargs), future))
        if self.eager:
            self.drain()
        return future

    def step(self):
        job, future = self.pending.pop(0)
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(job())
            except Exception as error:  # the job's error is the future's
                future.set_exception(error)

    def drain(self):
        while self.pending:
            self.step()


def _store_kernel():
    @kiln.jit
    def store(Y, a: tl.constexpr):
        tl.store(Y, a)
    return store


@pytest.fixture
def compiles(monkeypatch):
    """The threads kiln builds block IR on, one entry per compile."""
    threads = []
    original = kiln.compiler.compile_kernel

    def recording(*args, **kwargs):
        threads.append(threading.current_thread())
        return original(*args, **kwargs)
    monkeypatch.setattr(kiln.compiler, "compile_kernel", recording)
    return threads


def test_the_names_are_tritons():
    assert kiln.AsyncCompileMode is AsyncCompileMode and kiln.FutureKernel is FutureKernel
    assert _async_compile.active_mode.get() is None


def test_warmups_are_submitted_once_each_and_compile_nothing_until_run(compiles):
    store = _store_kernel()
    a, b = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.int32)
    pool = HeldJobs()
    with AsyncCompileMode(pool) as mode:
        futures = [store.warmup(x, v, grid=(1,)) for x in (a, b) for v in (0, 1)]
        assert all(isinstance(f, FutureKernel) for f in futures)
        assert pool.submitted == 4 and len(store.device_caches[0][0]) == 0 and not compiles
        assert store.warmup(a, 0, grid=(1,)) is futures[0] and store.warmup(b, 1, grid=(1,)) is futures[3]
        assert pool.submitted == 4 and len(mode.future_kernels) == 4 and len(mode.raw_futures) == 4

        pool.step()  # the job of (a, 0) only
        assert len(compiles) == 1 and len(store.device_caches[0][0]) == 0  # compiled, not yet taken
        store[(1,)](a, 0)  # waits for a job already done: takes its kernel
        assert len(store.device_caches[0][0]) == 1 and a[0, 0] == 0 and pool.submitted == 4
        assert futures[0].kernel is not None and futures[1].kernel is None
        pool.drain()
    assert len(store.device_caches[0][0]) == 4 and len(compiles) == 4  # leaving the block took them all
    assert all(isinstance(f.result(), kiln.compiler.CompiledKernel) for f in futures)
    assert _async_compile.active_mode.get() is None


def test_launches_wait_for_a_thread_pools_compiles(compiles):
    store = _store_kernel()
    a, b = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.int32)
    with ThreadPoolExecutor(2) as pool, AsyncCompileMode(pool):
        for x in (a, b):
            for v in (0, 1):
                store.warmup(x, v, grid=(1,))
        store[(1,)](b, 1)
        assert b[0, 0] == 1
        store[(1,)](b, 0)
        assert b[0, 0] == 0
        store[(1,)](a, 1)
        assert a[0, 0] == 1
        store[(1,)](a, 2)  # not warmed up: submitted by the launch, which waits for it
        assert a[0, 0] == 2
    assert len(compiles) == 5 and threading.current_thread() not in compiles
    assert len(store.device_caches[0][0]) == 5


def test_a_launch_without_warmup_goes_through_the_executor_and_cached_kernels_do_not():
    store = _store_kernel()
    a = np.zeros(4, np.float32)
    store[(1,)](a, 3)  # compiled before the block
    pool = HeldJobs(eager=True)
    with AsyncCompileMode(pool):
        store[(1,)](a, 3)
        assert pool.submitted == 0
        kernel = store[(1,)](a, 5)
        assert pool.submitted == 1 and a[0] == 5 and isinstance(kernel, kiln.compiler.CompiledKernel)
        assert isinstance(store.warmup(a, 5, grid=(1,)), kiln.compiler.CompiledKernel)  # cached: no future
    assert pool.submitted == 1


def test_outside_the_block_and_on_other_threads_compiles_are_synchronous():
    store = _store_kernel()
    a = np.zeros(4, np.float32)
    pool = HeldJobs()
    with AsyncCompileMode(pool):
        seen = []
        thread = threading.Thread(target=lambda: seen.append(store.warmup(a, 1, grid=(1,))))
        thread.start()
        thread.join()
        assert isinstance(seen[0], kiln.compiler.CompiledKernel) and pool.submitted == 0
    assert isinstance(store.warmup(a, 2, grid=(1,)), kiln.compiler.CompiledKernel) and pool.submitted == 0


def test_one_mode_at_a_time():
    with AsyncCompileMode(HeldJobs()):
        with pytest.raises(RuntimeError, match="already active"):
            with AsyncCompileMode(HeldJobs()):
                pass
    with AsyncCompileMode(HeldJobs()):  # the first one ended
        pass


def _broken_kernel():
    @kiln.jit
    def broken(Y, a: tl.constexpr):
        tl.static_assert(a > 0, "a must be positive")
        tl.store(Y, a)
    return broken


def test_a_jobs_error_is_raised_by_the_launch_and_on_leaving():
    broken = _broken_kernel()
    y = np.zeros(4, np.float32)
    pool = HeldJobs()
    with pytest.raises(kiln.CompilationError, match="a must be positive"):
        with AsyncCompileMode(pool):
            future = broken.warmup(y, 0, grid=(1,))  # returns: the job has not run
            ok = broken.warmup(y, 2, grid=(1,))
            pool.drain()
    assert isinstance(ok.result(), kiln.compiler.CompiledKernel)
    assert _async_compile.active_mode.get() is None  # the mode ended all the same
    with pytest.raises(kiln.CompilationError):
        future.result()
    assert future.result(ignore_errors=True) is None
    with pytest.raises(kiln.CompilationError):  # leaving raises it again, as Triton's mode does
        with AsyncCompileMode(HeldJobs(eager=True)):
            with pytest.raises(kiln.CompilationError, match="a must be positive"):
                broken[(1,)](y, -1)


def test_ignore_errors_skips_them_on_leaving():
    broken = _broken_kernel()
    y = np.zeros(4, np.float32)
    pool = HeldJobs()
    with AsyncCompileMode(pool, ignore_errors=True):
        broken.warmup(y, 0, grid=(1,))
        broken.warmup(y, 3, grid=(1,))
        pool.drain()
    assert len(broken.device_caches[0][0]) == 1  # the kernel that compiled
    broken[(1,)](y, 3)
    assert y[0] == 3
    with pytest.raises(kiln.CompilationError):
        broken[(1,)](y, 0)  # outside the block: compiled again, and fails again


def test_the_post_compile_hook_hears_of_a_kernel_when_it_is_taken():
    store = _store_kernel()
    a = np.zeros(4, np.float32)
    heard = []
    pool = HeldJobs()
    with knobs.runtime.scope():
        knobs.runtime.jit_post_compile_hook = lambda **kw: heard.append(kw["compile"]["is_warmup"])
        with AsyncCompileMode(pool):
            future = store.warmup(a, 1, grid=(1,))
            pool.drain()
            assert heard == []
            future.result()
            assert heard == [True]
            store[(1,)](a, 1)  # cached now
        assert heard == [True]


def test_a_compile_only_warmup_builds_its_target_in_the_job(compiles):
    store = _store_kernel()
    a = np.zeros(4, np.float32)
    pool = HeldJobs()
    with AsyncCompileMode(pool):
        future = store.warmup(a, 1, grid=(1,), target="sm_90a")
        assert store.warmup(a, 1, grid=(1,), target="sm_90a") is future
        plain = store.warmup(a, 1, grid=(1,))  # no binary asked for: another job
        assert plain is not future and pool.submitted == 2 and not compiles
        pool.drain()
    kernel = future.result()
    assert "sm_90a" in kernel.binaries and ".target sm_90a" in kernel.asm["ptx"]
    assert len(compiles) == 1  # both jobs: one specialization, built once


def test_triton_names_in_the_drop_in():
    code = ("import triton, triton.runtime\n"
            "from triton.runtime._async_compile import AsyncCompileMode, FutureKernel, active_mode\n"
            "import kiln.runtime._async_compile as kiln_module\n"
            "assert triton.AsyncCompileMode is AsyncCompileMode is kiln_module.AsyncCompileMode\n"
            "assert triton.FutureKernel is FutureKernel and triton.runtime._async_compile is kiln_module\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KILN_DROPIN": "1"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok"]


@pytest.mark.gpu
def test_on_the_gpu_the_jobs_build_the_binary_and_the_launch_loads_it(monkeypatch, compiles):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("KILN_INTERPRET", "0")
    from kiln.runtime import cuda_driver
    target = cuda_driver.compile_target(torch.cuda.current_device())
    store = _store_kernel()
    a = torch.zeros(16, device="cuda")
    b = torch.zeros(16, device="cuda", dtype=torch.int32)
    with ThreadPoolExecutor(2) as pool, AsyncCompileMode(pool):
        futures = [store.warmup(x, v, grid=(1,)) for x in (a, b) for v in (1, 2)]
        kernels = [f.result() for f in futures]  # waits; nothing loaded yet
        assert all(target in k.binaries and not k.launchers for k in kernels)
        store[(1,)](a, 2)
        store[(1,)](b, 1)
        store[(1,)](a, 7)  # not warmed up: a job, waited for
    torch.cuda.synchronize()
    assert a[0].item() == 7 and b[0].item() == 1
    assert len(compiles) == 5 and threading.current_thread() not in compiles
