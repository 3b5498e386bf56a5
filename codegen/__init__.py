"""kiln's code generator: block IR -> LLVM IR -> PTX -> cubin.

    ck = compile(fn, target="sm_90a", options={"num_warps": 4})
    ck.ptx, ck.cubin, ck.metadata["shared"]

The launch ABI: one parameter per argument of `fn` (pointers as `ptr addrspace(1)`,
scalars by value, int1 as one byte), grid = programs, block = 32 * num_warps threads,
`metadata["shared"]` bytes of dynamic shared memory.
"""
from __future__ import annotations

from .target import TargetError, known_targets, parse_target

__all__ = ["compile", "CompiledKernel", "CompileError", "TargetError", "known_targets", "parse_target"]
_FROM_COMPILER = ("compile", "CompiledKernel", "CompileError")


def __getattr__(name: str):
    # the compiler (llvmlite, LLVM, the passes) loads on first use: a rank of a training job that only
    # checks a target name (its compiles run in the node daemon) does not import it, on its compile
    # threads' critical path, behind Python's import lock
    if name in _FROM_COMPILER:
        from . import compiler
        return getattr(compiler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
