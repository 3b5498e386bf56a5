"""The compile options, in one record: each option's default and the values it may take.

Codegen (its check of a compile's options), the daemon (its check of a request off the wire), the
node cache (what a kernel's metadata must say) and the frontend (a launch's defaults, the options
it hands codegen) all read them here, at the bottom of the package layers, so no two disagree.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Option:
    name: str
    default: int | None  # None: absent unless asked for, so no default value enters the compile key
    low: int
    high: int
    codegen: bool = True  # read by codegen; the others ride along on the wire (num_ctas, Triton's)
    power_of_two: bool = False


OPTIONS = (
    Option("num_warps", 4, 1, 32, power_of_two=True),
    Option("num_stages", 3, 0, 16),
    Option("maxnreg", None, 16, 255),  # registers per thread (Triton's Config(maxnreg=...))
    Option("enable_fp_fusion", None, 0, 1),  # 0: a*b+c stays two roundings
    Option("enable_reflect_ftz", None, 0, 1),  # 0: libdevice and the approximate roots keep fp32 subnormals
    Option("line_info", None, 0, 1),  # 0: no source lines in the PTX (Triton's TRITON_DISABLE_LINE_INFO=1)
    Option("num_ctas", None, 1, 16, codegen=False),
)
BY_NAME = {o.name: o for o in OPTIONS}
DEFAULT_NUM_WARPS = BY_NAME["num_warps"].default
DEFAULT_NUM_STAGES = BY_NAME["num_stages"].default
CODEGEN_OPTIONS = tuple(o.name for o in OPTIONS if o.codegen)
DEFAULTS = {o.name: o.default for o in OPTIONS if o.codegen and o.default is not None}
OPTIONAL = tuple(o.name for o in OPTIONS if o.codegen and o.default is None)
RANGES = {o.name: (o.low, o.high) for o in OPTIONS}


def in_range(name: str, value: int) -> bool:
    option = BY_NAME[name]
    return option.low <= value <= option.high and not (option.power_of_two and value & (value - 1))
