"""PTX -> cubin through nvJitLink, and the register/spill counts from its info log."""
from __future__ import annotations

import re

from . import toolchain
from .target import Target

toolchain.warn_if_too_old()  # before an old cuda-bindings fails nvJitLink on a host without a driver


class PTXAssembleError(RuntimeError):
    pass


def link_cubin(ptx: str, target: Target) -> tuple[bytes, str]:
    """The cubin for `ptx` and nvJitLink's info log (which holds `ptxas info` lines)."""
    from cuda.bindings import nvjitlink as nvj
    handle = _create(nvj, [f"-arch={target.name}", "-O3", "-verbose", "-lineinfo"])
    try:
        try:
            data = ptx.encode()
            nvj.add_data(handle, nvj.InputType.PTX, data, len(data), "kernel.ptx")
            nvj.complete(handle)
        except nvj.nvJitLinkError as e:
            raise PTXAssembleError(f"nvJitLink failed: {e}\n{_log(nvj, handle, 'error')}") from None
        cubin = bytearray(nvj.get_linked_cubin_size(handle))
        nvj.get_linked_cubin(handle, cubin)
        return bytes(cubin), _log(nvj, handle, "info")
    finally:
        nvj.destroy(handle)


# Not through CUDA's compute cache (~/.nv/ComputeCache, kept where a driver is installed): a link found
# there reports only nvJitLink's short lines ("used 255 registers, ... 792 stack"), not ptxas's spill
# stores and loads nor its advice (C7512: wgmmas serialized), which the register caps, the 8-warp build
# of a spilling kernel and the persistent form's fallback are decided by. Tutorial 06's D128 backward
# read 2472 bytes of spills on a fresh link, 792 of stack on a cached one, and stayed on 4 warps there,
# 2.6x slower (H200, nvJitLink 13.0, 2026-12-02). kiln caches the cubins itself.
_NO_CACHE = ["-no-cache"]


def _create(nvj, options: list[str]):
    """An nvJitLink handle for `options`, the compute cache off where this nvJitLink has the option."""
    global _NO_CACHE
    if _NO_CACHE:
        try:
            return nvj.create(len(options) + len(_NO_CACHE), options + _NO_CACHE)
        except nvj.nvJitLinkError:
            handle = nvj.create(len(options), options)  # raises where it refuses the others (a target)
            _NO_CACHE = []  # an nvJitLink without the option: its links report what its cache holds
            return handle
    return nvj.create(len(options), options)


def _log(nvj, handle, kind: str) -> str:
    size = getattr(nvj, f"get_{kind}_log_size")(handle)
    buf = bytearray(size)
    getattr(nvj, f"get_{kind}_log")(handle, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


# ptxas words its report two ways, depending on the nvJitLink build:
#   "ptxas info    : Used 48 registers, used 1 barriers, 4 bytes spill stores, 4 bytes spill loads"
#   "info    : used 48 registers, used 1 barriers, 0 stack, 1024 bytes smem, ..., 0 bytes lmem"
# The second reports no spills: a kernel squeezed under a register cap shows them only as a
# stack frame ("152 stack" beside "0 bytes lmem", seen on the H200). Reading that as no
# spilling chose a cap that ran softmax at half speed, so any stack frame counts as spilled.
_REGS = re.compile(r"\b[Uu]sed (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_LOCAL = re.compile(r"(\d+) bytes lmem")
_STACK = re.compile(r"(\d+) (?:bytes stack frame|stack)\b")


def resource_usage(info_log: str) -> tuple[int, int]:
    """(registers, spilled bytes) as ptxas reports them in the info log, in either wording:
    spill stores and loads, local memory, or a stack frame, whichever is largest. A report
    without its register count raises, since a kernel cannot use none."""
    regs = _REGS.search(info_log)
    if regs is None:
        raise PTXAssembleError(f"nvJitLink's info log has no register count:\n{info_log}")
    spills = _SPILLS.search(info_log)
    spilled = [int(spills.group(1)) + int(spills.group(2))] if spills else []
    spilled += [int(m.group(1)) for pattern in (_LOCAL, _STACK) for m in pattern.finditer(info_log)]
    return int(regs.group(1)), max(spilled, default=0)


def wgmma_serialized(info_log: str) -> bool:
    """Did ptxas serialize the kernel's wgmmas (each one then waits for the last)? Its
    C751x notes say why: C7514 an accumulator defined by other instructions, C7512 too few
    registers (a register cap)."""
    return "(C751" in info_log
