"""Where LLVM's NVPTX code generation spends a kernel's PTX emission, pass by pass (CPU, no GPU).

For each kernel of bench/compile_speed.py: the module kiln's O3 leaves, emitted to PTX with LLVM's
pass timers on (`llvm.set_time_passes`), the slowest passes printed; and the emission of the module
as kiln emits it (`backend.for_emission`: InstCombine's `or disjoint`s written as `add nuw nsw`,
whose poison checks made straight-line strength reduction 83 of the 130 ms of the 128x256 matmul's
emission, 2026-11-29): what that saves per kernel, and whether the PTX changes.

    KILN_DROPIN=1 KILN_DAEMON=off python bench/codegen_pass_times.py [--kernels a,b] [--top 6]
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile_speed  # noqa: E402  (bench/'s own: the kernels and how to compile one)


def optimized_ir(kernel: str) -> str:
    """The LLVM IR of `kernel` as O3 leaves it, before code generation (compiled in this process)."""
    from kiln.codegen import backend
    file, function, params, options = compile_speed.KERNELS[kernel]
    captured, optimize = [], backend.optimize

    def keep(llir, target, name, **options):
        module = optimize(llir, target, name, **options)
        captured.append(str(module))
        return module
    backend.optimize = keep
    try:
        compile_speed.compile_one("kiln", file, function, params, options)
    finally:
        backend.optimize = optimize
    return captured[-1]


def emit(ir_text: str, timed: bool = False):
    """(CPU ms of the emission, PTX, LLVM's pass timing report or "")."""
    import llvmlite.binding as llvm
    from kiln.codegen import backend
    from kiln.codegen.target import parse_target
    module = llvm.parse_assembly(ir_text)
    llvm.set_time_passes(timed)
    start = time.process_time()
    ptx = backend.emit_ptx(module, parse_target("sm_90a"))
    ms = (time.process_time() - start) * 1e3
    report = llvm.report_and_reset_timings() if timed else ""
    llvm.set_time_passes(False)
    return ms, ptx, report


def as_kiln_emits(ir_text: str) -> str:
    import llvmlite.binding as llvm
    from kiln.codegen import backend
    return backend.for_emission(llvm.parse_assembly(ir_text))[1]


def slowest_passes(report: str, top: int) -> list[str]:
    """The `top` passes of a timing report by their share of the wall time."""
    shares: dict[str, float] = {}
    for line in report.splitlines():
        found = re.match(r"\s*[\d.]+ \(\s*[\d.]+%\).*\(\s*([\d.]+)%\)\s+(.+)$", line)
        if found and found.group(2).strip() != "Total":
            name = re.sub(r" #\d+$", "", found.group(2).strip())  # a pass's instances, one per function or run
            shares[name] = shares.get(name, 0.0) + float(found.group(1))
    return [f"{share:5.1f}%  {name}" for name, share in sorted(shares.items(), key=lambda kv: -kv[1])[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default=",".join(compile_speed.KERNELS))
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args()
    os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-pass-times-"))  # compiled, not found
    for kernel in args.kernels.split(","):
        text = optimized_ir(kernel)
        best = min((emit(text) for _ in range(3)), key=lambda r: r[0])
        _, _, report = emit(text, timed=True)
        kiln = min((emit(as_kiln_emits(text)) for _ in range(3)), key=lambda r: r[0])
        print(f"{kernel}: PTX emission of O3's module {best[0]:.0f} ms; as kiln emits it {kiln[0]:.0f} ms "
              f"({text.count(' disjoint ')} `or disjoint`), PTX {'the same' if kiln[1] == best[1] else 'changed'}")
        for row in slowest_passes(report, args.top):
            print("    " + row)


if __name__ == "__main__":
    main()
