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


def splat(ctx, op, x):
    return np.broadcast_to(x, op.results[0].type.shape)


def broadcast(ctx, op, x):
    return np.broadcast_to(x, op.results[0].type.shape)


def expand_dims(ctx, op, x):
    return np.expand_dims(x, op.attrs["axis"])


def reshape(ctx, op, x):
    return np.reshape(x, op.results[0].type.shape)  # row-major


def permute(ctx, op, x):
    return np.transpose(x, op.attrs["order"])


def join(ctx, op, a, b):
    return np.stack([a, b], axis=-1)


def split(ctx, op, x):
    return x[..., 0], x[..., 1]


def cat(ctx, op, a, b):
    return np.concatenate([a, b], axis=0)


def cast(ctx, op, x):
    return convert_cast(x, op.operands[0].type, op.results[0].type, op.attrs.get("rounding", "rtne"))


def bitcast(ctx, op, x):
    return np.asarray(x).view(scalar_of(op.results[0].type).to_numpy())


def identity(ctx, op, x):
    return x
