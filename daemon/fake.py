"""A stand-in for `kiln.codegen.compile`, for tests and service benchmarks.

Its output is deterministic in (IR, target, options), and options steer it:
`fake_sleep_s` (take that long), `fake_crash` ("abort" or "exit": kill the worker
process), `fake_error` (raise with that message).
"""
from __future__ import annotations

import hashlib
import os
import time
from types import SimpleNamespace


def compile(fn, target: str, options: dict):  # noqa: A001 - the same name as kiln.codegen.compile
    from kiln.ir import print_function
    from kiln.proto import canonical_bytes

    time.sleep(float(options.get("fake_sleep_s", 0)))
    crash = options.get("fake_crash")
    if crash == "abort":
        os.abort()
    if crash == "exit":
        os._exit(3)
    if options.get("fake_error"):
        raise RuntimeError(options["fake_error"])
    seed = hashlib.sha256(canonical_bytes(fn) + target.encode() + repr(sorted(options.items())).encode())
    return SimpleNamespace(
        cubin=b"\x7fELF fake cubin " + seed.digest() * 64,
        ptx=f"// fake PTX for {fn.name} on {target}\n.entry {fn.name}() {{ ret; }}\n",
        llir=f"; fake LLVM IR for {fn.name}\n",
        kir=print_function(fn),
        metadata={"name": fn.name, "target": target, "num_warps": options.get("num_warps", 4),
                  "n_regs": 32, "n_spills": 0, "shared": 0, "worker_pid": os.getpid()},
    )


