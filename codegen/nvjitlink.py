"""PTX -> cubin through nvJitLink, and the register/spill counts from its info log."""
from __future__ import annotations

import re

from .target import Target


class PTXAssembleError(RuntimeError):
    pass


def link_cubin(ptx: str, target: Target) -> tuple[bytes, str]:
    """The cubin for `ptx` and nvJitLink's info log (which holds `ptxas info` lines)."""
    from cuda.bindings import nvjitlink as nvj
    handle = nvj.create(3, [f"-arch={target.name}", "-O3", "-verbose"])
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


def _log(nvj, handle, kind: str) -> str:
    size = getattr(nvj, f"get_{kind}_log_size")(handle)
    buf = bytearray(size)
    getattr(nvj, f"get_{kind}_log")(handle, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


# ptxas words its report two ways, depending on the nvJitLink build:
#   "ptxas info    : Used 48 registers, used 1 barriers, 4 bytes spill stores, 4 bytes spill loads"
#   "info    : used 48 registers, used 1 barriers, 0 stack, 1024 bytes smem, ..., 0 bytes lmem"
# (the second reports local memory, where spills go, instead of the spills themselves).
_REGS = re.compile(r"\b[Uu]sed (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_LOCAL = re.compile(r"(\d+) bytes lmem")


def resource_usage(info_log: str) -> tuple[int, int]:
    """(registers, spilled bytes) as ptxas reports them in the info log; a report without
    its register count raises, since a kernel cannot use none."""
    regs = _REGS.search(info_log)
    if regs is None:
        raise PTXAssembleError(f"nvJitLink's info log has no register count:\n{info_log}")
    spills = _SPILLS.search(info_log)
    if spills:
        return int(regs.group(1)), int(spills.group(1)) + int(spills.group(2))
    local = _LOCAL.search(info_log)
    return int(regs.group(1)), int(local.group(1)) if local else 0
