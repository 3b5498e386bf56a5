"""A compiled kernel: what codegen makes, and what each tier hands back for a compile key (the node
cache, the shared tier, the daemon, a compile in this process: `kiln.daemon.tiers`), one record for
all of them. It imports nothing heavy, so a process that only reads binaries never loads LLVM.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CompiledKernel:
    name: str
    target: str
    kir: str
    llir: str
    ptx: str
    cubin: bytes
    metadata: dict = field(default_factory=dict)
    key: str = ""  # its compile key, where a tier found or made it under one
    source: str = ""  # the tier it came from: cache, shared, daemon or local

    @property
    def asm(self) -> dict:
        """Triton's `kernel.asm`: the text (and binary) of every stage."""
        return {"kir": self.kir, "llir": self.llir, "ptx": self.ptx, "cubin": self.cubin}

    @property
    def n_regs(self):
        return self.metadata["n_regs"]

    @property
    def n_spills(self):
        return self.metadata["n_spills"]

    @property
    def shared(self):
        return self.metadata["shared"]

    def to_dict(self) -> dict:
        """The compile's outputs (not where it was found): what a worker process ships back."""
        return {"name": self.name, "target": self.target, "kir": self.kir, "llir": self.llir,
                "ptx": self.ptx, "cubin": self.cubin, "metadata": dict(self.metadata)}
