"""The pool of compile worker processes.

One thread per slot owns one worker process (started with `spawn`, so it shares nothing
with the parent's gRPC threads) and feeds it jobs from a shared queue, one at a time. A
worker that dies mid-compile, or outlives `compile_timeout`, is killed and replaced, and
its job fails with a `JobFailed` whose code names the gRPC status to answer with, so
no request is ever lost silently. A job nobody waits for any more is `abandon`ed: never
started if it is still queued, its worker replaced if it is running.
"""
from __future__ import annotations

import itertools
import logging
import multiprocessing
import queue
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import wait

from .worker import worker_main

log = logging.getLogger("kiln.daemon")


class JobFailed(Exception):
    """A compile that produced no kernel. `code` is a grpc.StatusCode name."""

    def __init__(self, code: str, message: str, details: str = ""):
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


# exceptions of the compile function, by class name, that are not the compiler's fault
# (codegen's CompileError: options it refuses, or IR it cannot lower: the request's)
_ABANDON_POLL_S = 0.1  # how often a running compile looks whether it was abandoned
_STATUS_OF_ERROR = {"NotImplementedError": "UNIMPLEMENTED", "TargetError": "INVALID_ARGUMENT",
                    "CompileError": "INVALID_ARGUMENT"}


class Job(Future):
    """A compile's future; `abandon()` stops the compile (see the module's doc)."""

    def __init__(self, ir: bytes, target: str, options: dict):
        super().__init__()
        self.ir, self.target, self.options = ir, target, options
        self.abandoned = threading.Event()

    def abandon(self) -> None:
        self.abandoned.set()
        self.cancel()  # a job still queued is cancelled here; a running one by its slot


class WorkerPool:
    def __init__(self, compile_fn: str, size: int, compile_timeout: float = 300.0,
                 start_timeout: float = 120.0):
        self.compile_fn, self.size = compile_fn, size
        self.compile_timeout, self.start_timeout = compile_timeout, start_timeout
        self.restarts = 0
        self._ctx = multiprocessing.get_context("spawn")
        self.cancelled = 0  # jobs abandoned before or while they ran
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._closed = False
        self._ids = itertools.count()
        self._slots = [_Slot(self, i) for i in range(size)]
        for slot in self._slots:
            slot.thread.start()

    def submit(self, ir: bytes, target: str, options: dict) -> Job:
        """Queue a compile; the job's result is the worker's answer (a worker.Compiled)."""
        job = Job(ir, target, options)
        if self._closed:
            job.set_exception(JobFailed("UNAVAILABLE", "the compile service is shutting down"))
        else:
            self._queue.put(job)
        return job

    @property
    def busy(self) -> int:
        return sum(slot.job is not None for slot in self._slots)

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until every worker has started (or failed to); True if all are ready."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for slot in self._slots:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not slot.started.wait(remaining):
                return False
        return all(slot.proc is not None for slot in self._slots)

    def close(self, timeout: float = 10.0) -> None:
        """Finish the jobs already queued, then stop the workers."""
        self._closed = True
        for _ in self._slots:
            self._queue.put(None)
        for slot in self._slots:
            slot.thread.join(timeout)


class _Slot:
    def __init__(self, pool: WorkerPool, index: int):
        self.pool, self.index = pool, index
        self.proc = self.conn = None
        self.job: Job | None = None
        self.start_error = ""
        self.retry_at = 0.0
        self.failures = 0
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"kiln-worker-{index}", daemon=True)

    def _loop(self):
        while True:
            if self.proc is None and time.monotonic() >= self.retry_at:
                self._start()
            job = self.pool._queue.get()
            if job is None:
                self._stop()
                return
            if job.abandoned.is_set():
                self.pool.cancelled += 1
                continue
            if self.proc is not None and not self.proc.is_alive():
                self._replace(f"exited between jobs ({_exit_description(self.proc.exitcode)})")
            elif self.proc is None and time.monotonic() >= self.retry_at:
                self._start()
            if self.proc is None:
                if any(slot.proc is not None for slot in self.pool._slots if slot is not self):
                    self.pool._queue.put(job)  # a live worker takes it; this slot waits to restart
                    self._wait_for_retry()
                else:
                    job.set_exception(JobFailed("UNAVAILABLE", self.start_error))
                continue
            if not job.set_running_or_notify_cancel():  # abandoned just now
                self.pool.cancelled += 1
                continue
            self.job = job
            try:
                self._run(job)
            except Exception as e:  # noqa: BLE001 - a slot thread must outlive any one job
                log.exception("worker=%d event=slot_error", self.index)
                if not job.done():
                    job.set_exception(JobFailed("INTERNAL", f"compile pool error: {type(e).__name__}: {e}"))
            finally:
                self.job = None

    def _wait_for_retry(self):
        while not self.pool._closed and time.monotonic() < self.retry_at:
            time.sleep(min(0.2, self.retry_at - time.monotonic()))

    def _start(self):
        parent, child = self.pool._ctx.Pipe()
        proc = self.pool._ctx.Process(target=worker_main, args=(child, self.pool.compile_fn),
                                      name=f"kiln-compile-{self.index}", daemon=True)
        message = "worker did not start in time"
        try:
            proc.start()
            child.close()
            if parent.poll(self.pool.start_timeout):
                kind, payload = parent.recv()
                if kind == "ready":
                    self.proc, self.conn, self.failures, self.start_error = proc, parent, 0, ""
                    log.info("worker=%d pid=%d event=ready", self.index, proc.pid)
                    return
                message = payload
        except (EOFError, OSError):
            message = f"worker exited while starting (exit code {proc.exitcode})"
        except Exception as e:  # noqa: BLE001 - e.g. spawn refusing an unguarded __main__
            message = f"cannot start a worker process: {type(e).__name__}: {e}"
        finally:
            self.started.set()
        if proc.pid is not None:
            self._kill(proc)
        parent.close()
        child.close()
        self.failures += 1
        self.start_error = message
        self.retry_at = time.monotonic() + min(30.0, 0.5 * 2 ** self.failures)
        log.error("worker=%d event=start_failed error=%r", self.index, message)

    def _run(self, job: Job):
        job_id = next(self.pool._ids)
        try:
            self.conn.send((job_id, job.ir, job.target, job.options))
            ready = self._wait_for_reply(job)
            if self.conn in ready:
                _, kind, payload = self.conn.recv()
                if kind == "ok":
                    job.set_result(payload)
                else:
                    name, message, details = payload
                    code = _STATUS_OF_ERROR.get(name, "INTERNAL")
                    job.set_exception(JobFailed(code, f"{name}: {message}", details))
                return
            if job.abandoned.is_set():
                self._replace("abandoned: nobody waits for its compile")
                self.pool.cancelled += 1
                job.set_exception(JobFailed("CANCELLED", "every request for this compile has gone"))
                return
            if not ready:
                self._replace("timeout")
                job.set_exception(JobFailed(
                    "DEADLINE_EXCEEDED", f"compile ran past {self.pool.compile_timeout:g} s; its worker was replaced"))
                return
        except (EOFError, OSError):
            pass  # the worker died around the send or the reply
        self.proc.join(1.0)
        how = _exit_description(self.proc.exitcode)
        self._replace(how)
        job.set_exception(JobFailed("INTERNAL", f"the compile worker died ({how}); it was replaced"))

    def _wait_for_reply(self, job: Job) -> list:
        """The worker's pipe or sentinel once either is ready; [] after compile_timeout, or once
        the job is abandoned (looked at every _ABANDON_POLL_S)."""
        deadline = time.monotonic() + self.pool.compile_timeout
        while True:
            left = deadline - time.monotonic()
            ready = wait([self.conn, self.proc.sentinel], timeout=max(0.0, min(left, _ABANDON_POLL_S)))
            if ready or left <= _ABANDON_POLL_S or job.abandoned.is_set():
                return ready

    def _replace(self, why: str):
        log.warning("worker=%d pid=%s event=replaced why=%r", self.index, self.proc.pid, why)
        self._kill(self.proc)
        self.conn.close()
        self.proc = self.conn = None
        self.pool.restarts += 1
        self._start()

    def _stop(self):
        if self.proc is None:
            return
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(5.0)
        self._kill(self.proc)
        self.conn.close()
        self.proc = self.conn = None

    @staticmethod
    def _kill(proc):
        if proc.is_alive():
            proc.kill()
        proc.join(5.0)


def _exit_description(code) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"
