"""GPU targets kiln compiles for, and the PTX ISA version each needs.

LLVM only warns on an unknown `-mcpu`, so a misspelt target would silently produce
PTX for a generic GPU; every name is checked against this table instead.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# target name -> the lowest PTX ISA version (x10) that has it; LLVM's NVPTX backend
# emits `.version` from the `+ptxNN` feature.
# sm_89 and sm_90 take PTX 8.4, the first with mma.sync on fp8 (CUDA 12.4 drivers).
_PTX_FOR_TARGET = {
    "sm_80": 70, "sm_86": 71, "sm_87": 74, "sm_89": 84,
    "sm_90": 84, "sm_90a": 80,
    "sm_100": 86, "sm_100a": 86, "sm_101": 86, "sm_101a": 86,
    "sm_103": 88, "sm_103a": 88,
    "sm_120": 87, "sm_120a": 87, "sm_121": 88, "sm_121a": 88,
}


class TargetError(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    name: str          # "sm_90a"
    capability: int    # 90
    ptx_version: int   # 80 means PTX ISA 8.0

    @property
    def llvm_features(self) -> str:
        return f"+ptx{self.ptx_version}"


def parse_target(name: str) -> Target:
    """The `Target` for `name` (`sm_80`, `sm_90a`, ...); unknown names raise `TargetError`."""
    if name not in _PTX_FOR_TARGET:
        known = ", ".join(_PTX_FOR_TARGET)
        raise TargetError(f"unknown GPU target {name!r}; kiln knows {known}")
    capability = int(name[3:].rstrip("a"))
    return Target(name, capability, _PTX_FOR_TARGET[name])


def target_name(capability: int) -> str:
    """The target kiln compiles for on a GPU of `capability` (90 for 9.0), as Triton names it: the
    architecture-specific sm_XYa from Hopper on (Hopper's wgmma and TMA need the `a`), sm_XY before."""
    return f"sm_{capability}" + ("a" if capability >= 90 else "")


def arch_target(arch) -> str:
    """The target of Triton's name for an architecture (`sm80`: TRITON_OVERRIDE_ARCH, a launch's `arch=`)."""
    m = re.fullmatch(r"sm(\d+)", str(arch))
    if not m:  # Triton's words, for the option too
        raise ValueError("TRITON_OVERRIDE_ARCH must have the form ^sm(\\d+)$")
    return target_name(int(m.group(1)))


def known_targets() -> list[str]:
    return list(_PTX_FOR_TARGET)
