"""`TRITON_KERNEL_OVERRIDE=1` (`knobs.compilation.override`): a kernel this process builds takes the text of
a stage from `knobs.cache.override_dir/<hash>/` (TRITON_OVERRIDE_DIR; by default `override/` in the
cache) where a file of its name is there, and builds the later stages from it, as Triton's compile
does. The folder is the one TRITON_KERNEL_DUMP writes (kiln.ir_dump), so a dump copied there and edited
is what the next run launches. The stages kiln reads:

    <name>.kir    kiln's block IR: compiled as the kernel's (it must keep the kernel's arguments)
    <name>.llir   LLVM IR (the dump's is optimized already): PTX emitted from it, then linked
    <name>.ptx    linked by nvJitLink
    <name>.cubin  loaded as it is

The latest stage present wins (a .ptx over a .llir). `.ttir` and `.ttgir` are Triton's texts, which
kiln does not parse: such a file is named in a warning and left out. A .kir compiles as any kernel does
(cached under its own IR's key); a binary from a later stage keeps the build's metadata (its
arguments, shared memory) but for the registers and spills of its link, and is stored in no cache.
"""
from __future__ import annotations

import dataclasses
import os
import warnings

from .ir_dump import compilation_knob

STAGES = ("kir", "llir", "ptx", "cubin")  # in compile order: the last one present wins
UNREAD = ("ttir", "ttgir")


def wanted() -> bool:
    return compilation_knob("override", "TRITON_KERNEL_OVERRIDE")


def overridden(kernel, binary, compile_ir):
    """`binary` with the stages the override folder has for `kernel`, or `binary` itself where it has
    none. `compile_ir(fn)` builds block IR for the binary's target, as `kernel.build` would."""
    from .dropin.knobs import cache
    folder = os.path.join(cache.override_dir, kernel.hash)
    name = kernel.name[:150]
    found = {ext: os.path.join(folder, f"{name}.{ext}") for ext in STAGES + UNREAD}
    found = {ext: path for ext, path in found.items() if os.path.isfile(path)}
    for ext in UNREAD:
        if ext in found:
            warnings.warn(f"kiln: {found[ext]}: kiln does not read Triton's .{ext}; override the .kir, .llir, "
                          f".ptx or .cubin instead", RuntimeWarning, stacklevel=3)
    latest = next((ext for ext in reversed(STAGES) if ext in found), None)
    if latest is None:
        return binary
    path = found[latest]
    print(f"\nOverriding kernel with file {path}")  # Triton's words
    if latest == "kir":
        from kiln.ir import parse_function
        with open(path) as f:
            return compile_ir(parse_function(f.read()))
    if latest == "cubin":
        with open(path, "rb") as f:
            return dataclasses.replace(binary, cubin=f.read(), source="override")
    from kiln.codegen import backend, nvjitlink
    from kiln.codegen.target import parse_target
    target = parse_target(binary.target)
    with open(path) as f:
        text = f.read()
    llir = binary.llir
    if latest == "llir":
        llir, ptx = text, backend.emit_ptx(backend.optimize(text, target, binary.name), target)
    else:
        ptx = text
    cubin, info = nvjitlink.link_cubin(ptx, target)
    n_regs, n_spills = nvjitlink.resource_usage(info)
    return dataclasses.replace(binary, llir=llir, ptx=ptx, cubin=cubin, source="override",
                               metadata={**binary.metadata, "n_regs": n_regs, "n_spills": n_spills})
