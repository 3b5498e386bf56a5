"""`triton.tools.ragged_tma`: a tensor descriptor over rows of unequal slices of one tensor.

A "ragged" descriptor reads and writes the rows `slice_off .. slice_off + slice_size` of a 2- or 3-D
tensor through bounds the descriptor itself enforces: rows past the slice load as zeros and are not
written. It needs no new hardware feature. The descriptor gets two leading dimensions, of strides
2**34 - s and s (s: the ragged dimension's stride), and the ragged dimension's extent becomes 2**30.
A block at row r of a slice then starts at coordinates (2**30, off + size, ..., 2**30 - size + r,
...): the two leading terms add up to (off + size) * s - 2**30 * s modulo 2**64 (addresses wrap), so
the element read is row off + r, and the ragged coordinate reaches the extent exactly where r
reaches the slice's end.
"""
from __future__ import annotations

import kiln
import kiln.language as tl
from kiln.tools.tensor_descriptor import TensorDescriptor, element_strides

_ROWS = tl.constexpr(1 << 30)  # the ragged dimension's extent: a slice's rows, and the tensor's, stay below it
_LEADING = 0x7FFF0000  # the two leading dimensions' extents: no coordinate the helpers give reaches them


def create_ragged_descriptor(T, block_shape, ragged_dim=0) -> TensorDescriptor:
    """A descriptor over `T` (2- or 3-D) whose `load_ragged` / `store_ragged` / `atomic_add_ragged`
    see one slice of dimension `ragged_dim` (not the last) at a time."""
    shape, block_shape = list(T.shape), list(block_shape)
    rank = len(shape)
    ragged_dim = ragged_dim + rank if ragged_dim < 0 else ragged_dim
    if not 2 <= rank <= 3:
        raise ValueError(f"a ragged descriptor covers a 2- or 3-D tensor, not {rank}-D")
    if not 0 <= ragged_dim < rank - 1:
        raise ValueError(f"ragged_dim {ragged_dim}: the ragged dimension cannot be the last one")
    if len(block_shape) != rank:
        raise ValueError(f"block_shape {block_shape} needs one size per dimension of the tensor's {shape}")
    if shape[ragged_dim] > _ROWS.value:
        raise ValueError(f"a ragged dimension of {shape[ragged_dim]} rows: at most 2**30")
    strides = element_strides(T)
    step = strides[ragged_dim]
    shape[ragged_dim] = _ROWS.value
    return TensorDescriptor(T, [_LEADING, _LEADING, *shape], [(1 << 34) - step, step, *strides],
                            [1, 1, *block_shape])


@kiln.jit
def to_ragged_indices(slice_off, slice_size, row):
    """The two leading coordinates and the ragged one of row `row` of the slice (see the module)."""
    return _ROWS, slice_off + slice_size, _ROWS - slice_size + row


@kiln.jit
def load_ragged(TMA, slice_off, slice_size, coords, ragged_dim: tl.constexpr = 0):
    """The block at `coords` (as `TMA.load` takes them) of rows slice_off .. slice_off + slice_size
    of the ragged dimension; rows past the slice are zeros."""
    tl.static_assert(len(TMA.shape) == len(coords) + 2, "load_ragged needs a ragged descriptor")
    lead, total, row = to_ragged_indices(slice_off, slice_size, coords[ragged_dim])
    block = TMA.load([lead, total] + coords[:ragged_dim] + [row] + coords[ragged_dim + 1:])
    return tl.reshape(block, block.shape[2:])


@kiln.jit
def store_ragged(TMA, slice_off, slice_size, coords, data, ragged_dim: tl.constexpr = 0):
    """Store `data` at `coords` of the slice; its rows past the slice's end are not written."""
    lead, total, row = to_ragged_indices(slice_off, slice_size, coords[ragged_dim])
    TMA.store([lead, total] + coords[:ragged_dim] + [row] + coords[ragged_dim + 1:],
              tl.reshape(data, [1, 1] + data.shape))


@kiln.jit
def atomic_add_ragged(TMA, slice_off, slice_size, coords, data, ragged_dim: tl.constexpr = 0):
    """Add `data` at `coords` of the slice, atomically; its rows past the slice's end add nothing."""
    lead, total, row = to_ragged_indices(slice_off, slice_size, coords[ragged_dim])
    TMA.atomic_add([lead, total] + coords[:ragged_dim] + [row] + coords[ragged_dim + 1:],
                   tl.reshape(data, [1, 1] + data.shape))
