"""Triton's asynchronous compile mode (`triton.AsyncCompileMode`, `triton.runtime._async_compile`).

Inside `with AsyncCompileMode(executor):` a kernel specialization that is not compiled yet is
compiled by a job handed to `executor` (one job per specialization, however many calls ask for
it): a warmup returns at once with a `FutureKernel`, a launch waits for its kernel's job. The
kernel enters the JIT's cache (and `knobs.runtime.jit_post_compile_hook` is told) when somebody
waits for it: a launch, `FutureKernel.result()`, or leaving the block, which waits for every job.
An error a job raised is raised there; with `ignore_errors=True` leaving the block skips it (a
launch of that kernel still raises it). The mode is the current thread's (a context variable):
other threads, and everything outside the block, compile as before.
"""
from __future__ import annotations

import contextvars
from concurrent.futures import Executor, Future, as_completed
from typing import Callable, Optional

active_mode: contextvars.ContextVar[Optional["AsyncCompileMode"]] = contextvars.ContextVar(
    "kiln_async_compile_mode", default=None)

# the target a `warmup(..., target=)` builds for, read where the warmup's compile is submitted
BUILD_TARGET: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("kiln_async_build_target", default=None)


class FutureKernel:
    """A compile in progress, as a warmup in `AsyncCompileMode` returns it: `result()` waits for the
    compiled kernel, puts it in its function's cache the first time and returns it."""

    def __init__(self, finalize_compile: Callable, future: Future):
        self.finalize_compile = finalize_compile
        self.future = future
        self.kernel = None  # the compiled kernel, once a result() has returned it

    def result(self, ignore_errors: bool = False):
        """The compiled kernel; the job's exception if it raised one (None instead with `ignore_errors`)."""
        if self.kernel is not None:
            return self.kernel
        try:
            kernel = self.future.result()
        except Exception:
            if ignore_errors:
                return None
            raise
        self.finalize_compile(kernel)
        self.kernel = kernel
        return kernel

    def __repr__(self):
        state = "done" if self.kernel is not None else ("compiled" if self.future.done() else "compiling")
        return f"<FutureKernel {state}>"


class AsyncCompileMode:
    """`with AsyncCompileMode(executor):` compiles kernels with `executor.submit` (a
    concurrent.futures executor). One at a time per thread: entering a second raises RuntimeError."""

    def __init__(self, executor: Executor, *, ignore_errors: bool = False):
        self.executor = executor
        self.ignore_errors = ignore_errors
        self.raw_futures: list = []   # every job's Future, in submission order
        self.future_kernels: dict = {}  # compile key -> FutureKernel
        self._keys: dict = {}  # Future -> its compile key

    def submit(self, key, compile_fn: Callable, finalize_fn: Callable) -> FutureKernel:
        """The FutureKernel of `key`: the one already submitted, else `compile_fn` handed to the
        executor now, with `finalize_fn(kernel)` to run when its result is first taken."""
        known = self.future_kernels.get(key)
        if known is not None:
            return known
        future = self.executor.submit(compile_fn)
        self.raw_futures.append(future)
        known = self.future_kernels[key] = FutureKernel(finalize_fn, future)
        self._keys[future] = key
        return known

    def __enter__(self):
        if active_mode.get() is not None:
            raise RuntimeError("Another AsyncCompileMode is already active")
        active_mode.set(self)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        """Waits for every job, as each finishes, and finishes its compile (its kernel cached); the
        first error of a job is raised (unless ignore_errors). The mode ends either way."""
        try:
            for future in as_completed(self.raw_futures):
                self.future_kernels[self._keys[future]].result(self.ignore_errors)
        finally:
            active_mode.set(None)
        return False


def compile_in(mode: AsyncCompileMode, jitfn, key, values, options: dict, warmup: bool):
    """What JITFunction's compile of launch key `key` gives in `mode`: a FutureKernel for a warmup,
    the compiled kernel (waited for) for a launch. The job compiles the block IR and, for a GPU
    (the current one, or a warmup's `target=`), the binary; loading it is left to the first launch.
    It runs in a copy of the caller's context (kiln's settings there), with no mode active."""
    target = BUILD_TARGET.get() or _current_target()
    context = contextvars.copy_context()

    def compile_now():
        active_mode.set(None)  # inside the copied context: a compile the job starts runs there and then
        kernel = jitfn._compile(values, options)
        if target is not None:
            kernel.build(target)
        return kernel

    def finalize(kernel):
        jitfn._compiled(key, values, options, warmup, kernel)

    compile_key = (jitfn, jitfn._dependency_key(), key, target)
    future = mode.submit(compile_key, lambda: context.run(compile_now), finalize)
    return future if warmup else future.result()


def _current_target() -> Optional[str]:
    """The target a launch here would build for: the current GPU's; None in the interpreter or without one."""
    from .. import config
    if config.interpret():
        return None
    from . import cuda_driver
    if not cuda_driver.is_available():
        return None
    return cuda_driver.current_compile_target()
