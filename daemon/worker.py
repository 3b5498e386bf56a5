"""The compile worker: a process of its own that loads the compile function once and then
compiles one request at a time, so that a compile that aborts the interpreter (LLVM can)
or hangs costs only this process.

Protocol over a multiprocessing pipe, parent and worker being the same kiln:
    worker -> ("ready", pid) once warm, or ("failed", message) and exit
    parent -> (job_id, ir_bytes, target, options); None to stop
    worker -> (job_id, "ok", result_dict) or (job_id, "error", (type_name, message, traceback))
"""
from __future__ import annotations

import importlib
import json
import os
import time
import traceback


def load_function(path: str):
    """The callable named `path` ("package.module:function" or "package.module.function")."""
    module, sep, name = path.partition(":")
    if not sep:
        module, _, name = path.rpartition(".")
    fn = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    if not callable(fn):
        raise TypeError(f"{path} is not callable")
    return fn


def _plain(value):
    """JSON for metadata values codegen may hand back as NumPy scalars or tuples."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (tuple, set)):
        return list(value)
    return str(value)


def _result(kernel, started: float) -> dict:
    text = lambda name: getattr(kernel, name, "") or ""  # noqa: E731
    return {
        "cubin": bytes(getattr(kernel, "cubin", b"") or b""),
        "ptx": text("ptx"), "llir": text("llir"), "kir": text("kir"),
        "metadata": json.loads(json.dumps(dict(getattr(kernel, "metadata", {}) or {}), default=_plain)),
        "compile_ms": (time.perf_counter() - started) * 1e3,
    }


# A kernel compiled once at start, so that LLVM's targets, the NVPTX backend and nvJitLink
# are loaded before the first real request (its first compile costs three times the next).
_WARM_UP_IR = """
kernel @kiln_warm_up(%x: ptr<fp32>) {
  %v = load %x : fp32
  %w = mul %v, %v : fp32
  store %x, %w
  return
}
"""


def _warm_up(compile_fn) -> None:
    from kiln.ir import parse_function
    try:
        compile_fn(parse_function(_WARM_UP_IR), "sm_80", {})
    except Exception:  # noqa: BLE001 - a compile function that cannot do this one still serves others
        pass


def worker_main(conn, compile_fn_path: str) -> None:
    """The entry point of a worker process (started with the spawn method)."""
    try:
        compile_fn = load_function(compile_fn_path)
        from kiln.proto.convert import function_from_bytes
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which keeps serving
        conn.send(("failed", f"cannot load compile function {compile_fn_path}: {type(e).__name__}: {e}"))
        return
    _warm_up(compile_fn)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if job is None:
            return
        job_id, ir_bytes, target, options = job
        started = time.perf_counter()
        try:
            kernel = compile_fn(function_from_bytes(ir_bytes), target, options)
            reply = (job_id, "ok", _result(kernel, started))
        except Exception as e:  # noqa: BLE001 - a failed compile is an answer, not a crash
            reply = (job_id, "error", (type(e).__name__, str(e), traceback.format_exc()))
        conn.send(reply)
