"""`dot`: matrix product of 2-D (or batched 3-D) blocks plus the accumulator.

Float inputs multiply in fp32 (fp64 for fp64) whatever `input_precision` asks (tf32 and
friends are a GPU speed trade, not a result the interpreter imitates); integer inputs
accumulate in int32 (int64 for 64-bit), wrapping like the tensor cores do.
"""
from __future__ import annotations

import numpy as np

from kiln.ir.types import scalar_of


def _compute_dtype(elem, acc_dtype: np.dtype) -> np.dtype:
    if elem.is_floating() or acc_dtype.kind not in "iu":
        return np.dtype(np.float64) if np.float64 in (elem.to_numpy(), acc_dtype) else np.dtype(np.float32)
    return np.dtype(np.int64) if elem.primitive_bitwidth == 64 or acc_dtype.itemsize == 8 else np.dtype(np.int32)


def dot(ctx, op, a, b, acc):
    ct = _compute_dtype(scalar_of(op.operands[0].type), acc.dtype)
    product = np.matmul(a.astype(ct), b.astype(ct))
    return (product + acc.astype(ct)).astype(acc.dtype)
