"""The compile worker: a process of its own that loads the compile function once and then
compiles one request at a time, so that a compile that aborts the interpreter (LLVM can)
or hangs costs only this process.

Protocol over a multiprocessing pipe, parent and worker being the same kiln:
    worker -> ("ready", pid) once warm, or ("failed", message) and exit
    parent -> (job_id, ir_bytes, target, options); None to stop
    worker -> (job_id, "ok", Compiled) or (job_id, "error", (type_name, message, traceback))
"""
from __future__ import annotations

import importlib
import json
import os
import time
import traceback
from dataclasses import dataclass, field

from kiln.codegen.artifact import CompiledKernel


@dataclass
class Compiled:
    """The daemon's answer for a compile key: the kernel (codegen's record, which the tiers hand
    out too) and what its compile cost, for the stats and the log (0 for a node-cache hit)."""
    kernel: CompiledKernel
    compile_ms: float = 0.0
    # the worker's CPU (its threads' too) and each stage's wall time; a compile much slower
    # than its CPU says the worker waited for a core
    cpu_ms: float = 0.0
    stage_ms: dict = field(default_factory=dict)


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


def _result(kernel, name: str, target: str, started: float, cpu_started: float, stage_ms: dict) -> Compiled:
    """The compile function's kernel as the record (a compile function of a test may give fewer fields)."""
    text = lambda field_name: getattr(kernel, field_name, "") or ""  # noqa: E731
    record = CompiledKernel(
        text("name") or name, text("target") or target, text("kir"), text("llir"), text("ptx"),
        bytes(getattr(kernel, "cubin", b"") or b""),
        json.loads(json.dumps(dict(getattr(kernel, "metadata", {}) or {}), default=_plain)))
    return Compiled(record, (time.perf_counter() - started) * 1e3, (time.process_time() - cpu_started) * 1e3,
                    stage_ms)


def _stage_ms_of(compile_fn):
    """A function giving the stage times of the last compile, where the compile function keeps them
    (kiln's codegen does); else one giving none."""
    module = importlib.import_module(compile_fn.__module__) if getattr(compile_fn, "__module__", None) else None
    return getattr(module, "last_stage_ms", None) or dict


# Kernels compiled once at start, so that LLVM's targets, the NVPTX backend and nvJitLink are
# loaded before the first real request (its first compile costs three times the next), and so is
# what an Inductor kernel exercises: masked loads, a branch, libdevice's pow and tanh, sqrt and
# division. Without the second, a worker's first foreach AdamW step (19 parameters) took 1.14-1.37 s
# where the next took 1.07-1.22 s (this 2-core CPU machine); each worker pays it once, at start.
_WARM_UP_IR = """
kernel @kiln_warm_up(%x: ptr<fp32>) {
  %v = load %x : fp32
  %w = mul %v, %v : fp32
  store %x, %w
  return
}
"""
_WARM_UP_POINTWISE_IR = """
kernel @kiln_warm_up_pointwise(%0: ptr<fp32> {divisibility = 16, name = "x_ptr"}, %1: ptr<fp32> {divisibility = 16, name = "y_ptr"}, %2: ptr<fp32> {divisibility = 16, name = "s_ptr"}, %3: int32 {name = "n"}) {
  %4 = program_id {axis = 0} : int32
  %5 = constant {value = 1024} : int32
  %6 = mul %4, %5 : int32
  %7 = arange {end = 1024, start = 0} : <1024xint32>
  %8 = splat %6 : <1024xint32>
  %9 = add %8, %7 : <1024xint32>
  %10 = splat %3 : <1024xint32>
  %11 = cmp %9, %10 {pred = "lt"} : <1024xint1>
  %12 = splat %0 : <1024xptr<fp32>>
  %13 = addptr %12, %9 : <1024xptr<fp32>>
  %14 = load %13, %11 : <1024xfp32>
  %15 = load %2 : fp32
  %16 = splat %15 : <1024xfp32>
  %18 = constant {value = 0.0} : <1024xfp32>
  %19 = select %11, %16, %18 : <1024xfp32>
  %20 = constant {value = 4} : int32
  %21 = cmp %4, %20 {pred = "lt"} : int1
  %22 = if %21 : <1024xfp32> {
  ^():
    %24 = constant {value = 0.9990000128746033} : <1024xfp32>
    %25 = pow %24, %19 : <1024xfp32>
    %27 = constant {value = 1.0} : <1024xfp32>
    %28 = sub %27, %25 : <1024xfp32>
    %29 = sqrt_rn %28 : <1024xfp32>
    %30 = div %14, %29 : <1024xfp32>
    %31 = exp %14 : <1024xfp32>
    %32 = add %30, %31 : <1024xfp32>
    yield %32
  } {
  ^():
    %34 = constant {value = 0.8999999761581421} : <1024xfp32>
    %35 = pow %34, %19 : <1024xfp32>
    %36 = mul %14, %35 : <1024xfp32>
    %37 = tanh %14 : <1024xfp32>
    %38 = sub %36, %37 : <1024xfp32>
    yield %38
  }
  %39 = splat %1 : <1024xptr<fp32>>
  %40 = addptr %39, %9 : <1024xptr<fp32>>
  store %40, %22, %11
  return
}
"""


def _warm_up(compile_fn) -> None:
    from kiln.ir import parse_function
    for text, target in ((_WARM_UP_IR, "sm_80"), (_WARM_UP_POINTWISE_IR, "sm_90a")):
        try:
            compile_fn(parse_function(text), target, {})
        except Exception:  # noqa: BLE001 - a compile function that cannot do this one still serves others
            pass


def worker_main(conn, compile_fn_path: str) -> None:
    """The entry point of a worker process (started with the spawn method)."""
    try:
        compile_fn = load_function(compile_fn_path)
        from kiln.proto.convert import function_from_bytes
        from .tiers import keep_libdevice_subsets
        keep_libdevice_subsets()  # before the warm-up compile, which may make one
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which keeps serving
        conn.send(("failed", f"cannot load compile function {compile_fn_path}: {type(e).__name__}: {e}"))
        return
    _warm_up(compile_fn)
    stage_ms = _stage_ms_of(compile_fn)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if job is None:
            return
        job_id, ir_bytes, target, options = job
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            fn = function_from_bytes(ir_bytes)
            decode_ms = (time.perf_counter() - started) * 1e3
            kernel = compile_fn(fn, target, options)
            reply = (job_id, "ok", _result(kernel, fn.name, target, started, cpu_started,
                                           {"decode": decode_ms, **stage_ms()}))
        except Exception as e:  # noqa: BLE001 - a failed compile is an answer, not a crash
            reply = (job_id, "error", (type(e).__name__, str(e), traceback.format_exc()))
        conn.send(reply)
