"""`print` and `assert`, in the shape of Triton's device_print and device_assert:

    pid (0, 0, 0) idx (3, 1) x: 7
    pid (0, 0, 0) idx (3) both: (operand 1) 0x0000002a
"""
from __future__ import annotations

import sys

import numpy as np

from .errors import OpFault


def triton_prefix(prefix: str, has_values: bool) -> str:
    """Triton's rule: a prefix before values ends in ": " and starts with a space."""
    if has_values:
        if not prefix.endswith(" "):
            prefix += " "
        if not prefix.endswith(": "):
            prefix = prefix[:-1] + ": "
    if len(prefix) > 2 and not prefix.startswith(" "):
        prefix = " " + prefix
    return prefix


def _format(value: np.ndarray, hex_: bool) -> str:
    if hex_:
        unsigned = value.astype(np.uint8) if value.dtype == np.bool_ else value.view(f"u{value.dtype.itemsize}")
        return f"0x{int(unsigned):0{2 * value.dtype.itemsize}x}"
    if value.dtype.kind in "iub":
        return str(int(value))
    return str(value)  # shortest round-trip form of the float in its own type


def _pid(ctx) -> str:
    return "pid ({}, {}, {})".format(*ctx.pid)


def print_values(ctx, op, *values):
    prefix = triton_prefix(str(op.attrs.get("prefix", "")), bool(values))
    hex_ = bool(op.attrs.get("hex", False))
    lines = [] if values else [prefix]
    for k, value in enumerate(values):
        tag = f"(operand {k}) " if len(values) > 1 else ""
        for idx in np.ndindex(value.shape):
            where = ", ".join(map(str, idx))
            lines.append(f"{_pid(ctx)} idx ({where}){prefix}{tag}{_format(value[idx], hex_)}")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def assert_true(ctx, op, cond):
    if np.all(cond):
        return
    first = np.unravel_index(int(np.argmin(np.reshape(cond, -1))), np.shape(cond))
    where = ", ".join(map(str, first))
    # (the words CUDA's error has for a failed device assert, which callers match)
    raise OpFault(f"device-side assert triggered: Assertion `{op.attrs.get('message', '')}` failed at {_pid(ctx)} "
                  f"idx ({where})")
