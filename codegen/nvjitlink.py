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


_REGS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def resource_usage(info_log: str) -> tuple[int, int]:
    """(registers, spilled bytes) as ptxas reports them in the info log."""
    regs = _REGS.search(info_log)
    spills = _SPILLS.search(info_log)
    n_spills = int(spills.group(1)) + int(spills.group(2)) if spills else 0
    return (int(regs.group(1)) if regs else 0), n_spills
