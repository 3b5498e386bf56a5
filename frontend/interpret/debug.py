"""`print` and `assert`, in the shape of Triton's device_print and device_assert."""
from __future__ import annotations

import sys

import numpy as np

from .errors import OpFault


def _format(value, hex_: bool) -> str:
    if not hex_:
        if value.dtype == np.bool_:
            return str(int(value))
        return str(value.item() if value.dtype.kind in "iub" else value)
    bits = np.asarray(value).view(f"u{value.dtype.itemsize}") if value.dtype != np.bool_ else value
    return f"{int(bits):#x}"


def _pid(ctx) -> str:
    return "pid ({}, {}, {})".format(*ctx.pid)


def print_values(ctx, op, *values):
    prefix = str(op.attrs.get("prefix", "")).strip()
    hex_ = bool(op.attrs.get("hex", False))
    lines = []
    for k, value in enumerate(values):
        tag = f"(operand {k})" if len(values) > 1 else ""
        for idx in np.ndindex(value.shape):
            parts = [_pid(ctx), f"idx ({', '.join(map(str, idx))})", prefix, tag, _format(value[idx], hex_)]
            lines.append(" ".join(p for p in parts if p))
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


def assert_true(ctx, op, cond):
    if np.all(cond):
        return
    first = np.unravel_index(int(np.argmin(np.reshape(cond, -1))), np.shape(cond))
    where = ", ".join(map(str, first))
    raise OpFault(f"Assertion `{op.attrs.get('message', '')}` failed at {_pid(ctx)} idx ({where})")
