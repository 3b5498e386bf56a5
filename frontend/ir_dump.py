"""`TRITON_KERNEL_DUMP=1` (`knobs.compilation.dump_ir`): every kernel this process builds writes the text
of each stage to `knobs.cache.dump_dir/<hash>/` (TRITON_DUMP_DIR; by default `dump/` in the cache), as
Triton's compile does: `<name>.ttir`, `.ttgir`, `.llir`, `.ptx`, `.cubin`, `.sass` (where a cuobjdump
is found) and kiln's own block IR, `.kir` (kiln.ttir and kiln.ttgir say what the first two are).

Triton writes them when it compiles, so a kernel found in its cache writes nothing (hence its
TRITON_ALWAYS_COMPILE=1 beside the dump); kiln writes them when a kernel's binary is first built or
found in this process, so the dump is there whichever tier had it. `<hash>` is the kernel's
`CompiledKernel.hash`.
"""
from __future__ import annotations

import os
import sys

from kiln.cache import env


def wanted() -> bool:
    return compilation_knob("dump_ir", "TRITON_KERNEL_DUMP")


def compilation_knob(name: str, variable: str) -> bool:
    """Triton's `knobs.compilation.<name>` (environment `variable`), without importing the knobs where
    neither code (which sets it through them) nor the environment set it."""
    if "kiln.dropin.knobs" not in sys.modules and not env.triton_knob_set(variable):
        return False
    from .dropin.knobs import compilation
    return bool(getattr(compilation, name))


def dump(kernel, binary) -> str:
    """Write `kernel`'s stages (its `asm` once `binary` is its build) under the dump folder; the folder."""
    from .dropin.knobs import cache
    folder = os.path.join(cache.dump_dir, kernel.hash)
    os.makedirs(folder, exist_ok=True)
    name = kernel.name[:150]  # (Triton's cut: a name within the file system's 255 characters)
    asm = kernel.asm
    texts = {"kir": asm["kir"], "ttir": asm["ttir"], "ttgir": asm["ttgir"], "llir": binary.llir, "ptx": binary.ptx}
    for ext, text in texts.items():
        _write(os.path.join(folder, f"{name}.{ext}"), text.encode())
    _write(os.path.join(folder, f"{name}.cubin"), bytes(binary.cubin))
    try:
        sass = asm["sass"]
    except (RuntimeError, KeyError, OSError):  # no cuobjdump here: the rest is still written
        sass = None
    if sass:
        _write(os.path.join(folder, f"{name}.sass"), sass.encode())
    return folder


def _write(path: str, data: bytes) -> None:
    temporary = f"{path}.tmp.{os.getpid()}"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)  # a reader never sees half a file
