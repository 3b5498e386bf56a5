"""Compiling as plain data in, plain data out, in this process or a child process.

`compile_request` is what a compile worker runs: IR text, target and options in, a
dict of bytes and strings out, nothing that needs pickling of kiln objects. LLVM can
abort the whole process on some inputs, so `compile_in_subprocess` runs it in a fresh
child and turns a crash or a timeout into a `CompileError` instead of a dead caller.
"""
from __future__ import annotations

import multiprocessing as mp

from .compiler import CompileError


def compile_request(ir_text: str, target: str, options: dict | None = None) -> dict:
    from kiln.ir import parse_function
    from .compiler import compile
    return compile(parse_function(ir_text), target, options).to_dict()


def _child(conn, ir_text, target, options):
    try:
        conn.send(("ok", compile_request(ir_text, target, options)))
    except Exception as e:  # the parent re-raises it with the same message
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def compile_in_subprocess(ir_text: str, target: str, options: dict | None = None, timeout: float = 120.0) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, ir_text, target, options), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise CompileError(f"compile timed out after {timeout:.0f} s")
        status, payload = parent.recv()
    except EOFError:
        proc.join(5)
        raise CompileError(f"the compile process died (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if status != "ok":
        raise CompileError(payload)
    return payload
