"""Ops that read a block by computed positions: gather and histogram; and inline asm,
which the interpreter cannot run."""
from __future__ import annotations

import numpy as np

from .errors import OpFault


def gather(ctx, op, src, index):
    axis = op.attrs["axis"]
    size = src.shape[axis]
    index = np.asarray(index).astype(np.int64)
    bad = (index < 0) | (index >= size)
    if bad.any():
        raise OpFault(f"gather index {int(index[bad].flat[0])} is out of range for axis {axis} of size {size}")
    return np.take_along_axis(src, index, axis=axis)


def histogram(ctx, op, values, mask=None):
    bins = op.attrs["num_bins"]
    values = np.asarray(values).astype(np.int64)
    counted = (values >= 0) & (values < bins)  # values outside the bins are not counted
    if mask is not None:
        counted &= np.asarray(mask, bool)
    return np.bincount(values[counted], minlength=bins).astype(np.int32)


def inline_asm(ctx, op, *args):
    raise OpFault("tl.inline_asm_elementwise runs PTX, which the interpreter cannot execute; "
                  "run this kernel on the GPU (KILN_INTERPRET=0)")
