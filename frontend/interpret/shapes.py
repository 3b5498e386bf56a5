"""Ops that make values or move them around: constants, ranges, grid queries, shape
changes, casts and hints. Values are never mutated in place, so broadcasts can be views."""
from __future__ import annotations

import numpy as np

from kiln.ir.types import scalar_of

from .convert import cast as convert_cast, scalar_to


def constant(ctx, op):
    value = scalar_to(op.attrs["value"], scalar_of(op.results[0].type))
    shape = op.results[0].type.shape
    return np.broadcast_to(value, shape) if shape else value


def arange(ctx, op):
    return np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)


def program_id(ctx, op):
    return np.array(ctx.pid[op.attrs["axis"]], np.int32)


def num_programs(ctx, op):
    return np.array(ctx.grid[op.attrs["axis"]], np.int32)


def _lanes(op, x, operand: int = 0) -> tuple:
    """The leading dimensions of `x` beyond its type's: inside a combine region, the lanes that
    one run of the region evaluates at once (empty elsewhere, or for a value the same in every lane)."""
    return np.shape(x)[:np.ndim(x) - len(op.operands[operand].type.shape)]


def splat(ctx, op, x):
    shape, lanes = op.results[0].type.shape, _lanes(op, x)
    return np.broadcast_to(np.reshape(x, lanes + (1,) * len(shape)), lanes + shape)


def broadcast(ctx, op, x):
    shape, lanes = op.results[0].type.shape, _lanes(op, x)
    ones = (1,) * (len(shape) - len(op.operands[0].type.shape))  # a lower-rank operand's leading dims
    return np.broadcast_to(np.reshape(x, lanes + ones + np.shape(x)[len(lanes):]), lanes + shape)


def expand_dims(ctx, op, x):
    return np.expand_dims(x, op.attrs["axis"] - len(op.results[0].type.shape))  # counted from the end: past any lanes


def reshape(ctx, op, x):
    return np.reshape(x, _lanes(op, x) + op.results[0].type.shape)  # row-major


def permute(ctx, op, x):
    lanes = len(_lanes(op, x))
    return np.transpose(x, tuple(range(lanes)) + tuple(lanes + d for d in op.attrs["order"]))


def join(ctx, op, a, b):
    a, b = np.broadcast_arrays(a, b)
    return np.stack([a, b], axis=-1)


def split(ctx, op, x):
    return x[..., 0], x[..., 1]


def cat(ctx, op, a, b):
    rank = len(op.operands[0].type.shape)
    lanes = np.broadcast_shapes(_lanes(op, a), _lanes(op, b, 1))
    a, b = (np.broadcast_to(v, lanes + np.shape(v)[np.ndim(v) - rank:]) for v in (a, b))
    return np.concatenate([a, b], axis=len(lanes))


def cast(ctx, op, x):
    return convert_cast(x, op.operands[0].type, op.results[0].type, op.attrs.get("rounding", "rtne"))


def bitcast(ctx, op, x):
    return np.asarray(x).view(scalar_of(op.results[0].type).to_numpy())


def identity(ctx, op, x):
    return x
