"""`tl.flip`, `tl.sort` and `tl.topk`, built from shape ops: no IR op of their own.

The sorted dimension (a power of two, 2**m long) is moved last and viewed as m axes of
size 2. Pairing every element with its partner across one of those axes is then a
permute that makes that axis last plus a `split`; `join` and the inverse permute put the
pairs back. flip swaps every pair at every axis; sort runs the bitonic network
(compare-and-swap of the pairs, the direction alternating by block), and topk keeps the
first k of a descending sort by halving with the same split.
"""
from __future__ import annotations

from . import semantic
from .core import builtin, int1
from .semantic import unwrap


def _dim(x, dim, what, last_only=False):
    rank = len(x.type.shape)
    if rank == 0:
        raise ValueError(f"{what} needs a block, not a scalar")
    dim = rank - 1 if unwrap(dim) is None else int(unwrap(dim))
    if not -rank <= dim < rank:
        raise ValueError(f"{what}: dimension {dim} is out of range for shape {list(x.type.shape)}")
    dim %= rank
    if last_only and dim != rank - 1:
        raise ValueError(f"{what}: only the last dimension can be sorted (as in Triton), not {dim}")
    return dim


def _log2(n):
    return n.bit_length() - 1


class _PairView:
    """`x` with dimension `dim` moved last and split into axes of size 2 (the highest bit first)."""

    def __init__(self, x, dim):
        shape = list(x.type.shape)
        rank = len(shape)
        self.outer_order = [d for d in range(rank) if d != dim] + [dim]
        self.outer = [shape[d] for d in self.outer_order[:-1]]
        self.bits = _log2(shape[dim])
        self.value = semantic.reshape(semantic.permute(x, self.outer_order), self.outer + [2] * self.bits)

    def axis(self, bit):
        """The axis of the view that holds bit `bit` of the index along the dimension."""
        return len(self.outer) + self.bits - 1 - bit

    def pairs(self, value, bit):
        """(low, high): the elements whose index has bit `bit` clear, and their partners."""
        order = self._order(value, bit)
        return semantic.split(semantic.permute(value, order))

    def unpair(self, low, high, bit):
        order = self._order(low, bit, extra=1)
        inverse = [order.index(d) for d in range(len(order))]
        return semantic.permute(semantic.join(low, high), inverse)

    def _order(self, value, bit, extra=0):
        rank = len(value.type.shape) + extra
        a = self.axis(bit)
        return [d for d in range(rank) if d != a] + [a]

    def back(self, value, length):
        inverse = [self.outer_order.index(d) for d in range(len(self.outer_order))]
        return semantic.permute(semantic.reshape(value, self.outer + [length]), inverse)


@builtin
def flip(x, dim=None):
    """`x` reversed along `dim` (the last dimension by default)."""
    x = semantic.to_tensor(x)
    dim = _dim(x, dim, "flip")
    if x.type.shape[dim] == 1:
        return x
    view = _PairView(x, dim)
    y = view.value
    for bit in range(view.bits):
        low, high = view.pairs(y, bit)
        y = view.unpair(high, low, bit)
    return view.back(y, x.type.shape[dim])


def _block_bit(view, pair_shape, bit):
    """An int1 block of the pairs' shape: bit `bit` (above the pair's own bit) of each pair's index."""
    index = semantic.arange(0, 2)
    rank = len(pair_shape)
    axis = view.axis(bit)  # the pair's own (lower) bit sits on a later axis, so this one keeps its place
    index = semantic.expand_dims(index, [d for d in range(rank) if d != axis]) if rank > 1 else index
    return semantic.broadcast_to(semantic.cast(index, int1), pair_shape)


def _bitonic_sort(view, descending):
    y = view.value
    for stage in range(1, view.bits + 1):
        for bit in range(stage - 1, -1, -1):
            low, high = view.pairs(y, bit)
            # ascending blocks put the smaller value low; the last stage sorts the whole row
            swap = semantic.greater(low, high)
            if stage < view.bits:
                swap = semantic.xor_(swap, _block_bit(view, low.type.shape, stage))
            if descending:
                swap = semantic.logical_not(swap)
            y = view.unpair(semantic.where(swap, high, low), semantic.where(swap, low, high), bit)
    return y


@builtin
def sort(x, dim=None, descending=False):
    """`x` sorted along its last dimension (ascending unless `descending`)."""
    x = semantic.to_tensor(x)
    dim = _dim(x, dim, "sort", last_only=True)
    if x.type.shape[dim] == 1:
        return x
    view = _PairView(x, dim)
    return view.back(_bitonic_sort(view, bool(unwrap(descending))), x.type.shape[dim])


@builtin
def topk(x, k, dim=None):
    """The `k` largest elements along the last dimension, in descending order."""
    x = semantic.to_tensor(x)
    dim = _dim(x, dim, "topk", last_only=True)
    n, k = x.type.shape[dim], int(unwrap(k))
    if k < 1 or k > n or k & (k - 1):
        raise ValueError(f"topk: k must be a power of two in [1, {n}], not {k}")
    if n == 1:
        return x
    view = _PairView(x, dim)
    y = view.back(_bitonic_sort(view, True), n)
    outer = list(x.type.shape[:-1])
    keep_outer = list(range(len(outer)))
    while n > k:  # keep the first half: view the row as [2, n/2] and split off the first row
        n //= 2
        halves = semantic.reshape(y, outer + [2, n])
        y, _ = semantic.split(semantic.permute(halves, keep_outer + [len(outer) + 1, len(outer)]))
    return y
