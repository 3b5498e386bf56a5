"""`tl.flip`, `tl.sort`, `tl.topk` and `tl.bitonic_merge`, built from shape ops: no IR op of their own.

The sorted dimension (a power of two, 2**m long) is moved last and viewed as m axes of
size 2. Pairing every element with its partner across one of those axes is then a
permute that makes that axis last plus a `split`; `join` and the inverse permute put the
pairs back. flip swaps every pair at every axis; sort runs Triton's bitonic network
(compare-and-swap of the pairs, the direction alternating by block), and topk, as Triton's,
sorts blocks of k and then halves the row with the larger of two halves, merging again.
"""
from __future__ import annotations

from . import semantic
from .core import builtin, float32, int1, int32
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


def _compare_and_swap(view, y, bit, flip):
    """Triton's compare-and-swap across bit `bit`: each element takes its partner's value where
    (element > partner) differs from (flip xor element-is-the-right-one), else keeps its own. The
    two sides decide separately, so NaNs and signed zeros move exactly as in Triton (a NaN can be
    lost and its partner doubled). `flip` is a bool, or the stage whose index bit alternates it."""
    low, high = view.pairs(y, bit)
    low_gt, high_gt = semantic.greater(low, high), semantic.greater(high, low)
    if isinstance(flip, bool):
        take_low = semantic.logical_not(low_gt) if flip else low_gt
        take_high = high_gt if flip else semantic.logical_not(high_gt)
    else:
        f = _block_bit(view, low.type.shape, flip)
        take_low = semantic.xor_(low_gt, f)
        take_high = semantic.logical_not(semantic.xor_(high_gt, f))
    return view.unpair(semantic.where(take_low, high, low), semantic.where(take_high, low, high), bit)


def _merge(view, y, stage, flip):
    """One bitonic merge: `stage` rounds of compare-and-swap, from bit stage-1 down to bit 0."""
    for bit in range(stage - 1, -1, -1):
        y = _compare_and_swap(view, y, bit, flip)
    return y


def _sort_top(x, dim, k, descending):
    """Triton's sort_impl: the bitonic network on the first log2(k) stages, then each further stage
    keeps the larger (smaller) of two halves with tl.max (tl.min), which widens types narrower
    than 32 bits, and merges again; the first k along the last dimension."""
    view = _PairView(x, dim)
    log_n = view.bits
    log_k = log_n if k is None else _log2(k)
    y = view.value
    for stage in range(1, log_k + 1):
        y = _merge(view, y, stage, stage if stage < log_n else descending)
    for stage in range(log_k + 1, log_n + 1):
        low, high = view.pairs(y, log_k)
        pick = semantic.maximum if descending else semantic.minimum
        y = pick(_widen(low), _widen(high))
        view.bits -= 1
        y = _merge(view, y, log_k, log_k if stage < log_n else descending)
    return view.back(y, 1 << log_k)


def _widen(t):
    """Types narrower than 32 bits as tl.max and tl.min reduce them (bfloat16 included)."""
    if t.dtype.primitive_bitwidth < 32:
        return semantic.cast(t, float32 if t.dtype.is_floating() else int32)
    return t


def _sorted(what, x, k, dim, descending):
    """The first `k` (all with k None) of `x` sorted along its last dimension."""
    x = semantic.to_tensor(x)
    dim = _dim(x, dim, what, last_only=True)
    n, k = x.type.shape[dim], unwrap(k)
    if k is not None:
        k = int(k)
        if k < 1 or k > n or k & (k - 1):
            raise ValueError(f"{what}: k must be a power of two in [1, {n}], not {k}")
    if n == 1:
        return x
    return _sort_top(x, dim, k, bool(unwrap(descending)))


@builtin
def sort(x, dim=None, descending=False):
    """`x` sorted along its last dimension (ascending unless `descending`)."""
    return _sorted("sort", x, None, dim, descending)


@builtin
def topk(x, k, dim=None, descending=True):
    """The `k` largest elements along the last dimension, in descending order, or with Triton 3.9's
    descending=False the `k` smallest in ascending order (with k below the dimension's length,
    types narrower than 32 bits come back widened, as Triton's)."""
    return _sorted("topk", x, k, dim, descending)


@builtin
def sort_impl(x, k=None, dim=None, descending=0):
    """Triton's `tl.standard.sort_impl`, which its `sort` and `topk` call: with `k` None `x` sorted,
    else the first `k` of that order (ascending unless `descending`)."""
    return _sorted("sort_impl", x, k, dim, descending)


@builtin
def bitonic_merge(x, dim=None, descending=0):
    """One bitonic merge along the last dimension (Triton's `tl.bitonic_merge`): log2(n) rounds
    of compare-and-swap, all in one direction; a bitonic row comes out sorted."""
    x = semantic.to_tensor(x)
    dim = _dim(x, dim, "bitonic_merge", last_only=True)
    descending = unwrap(descending)
    if descending not in (0, 1, False, True):
        raise ValueError(f"bitonic_merge: descending must be 0 or 1, not {descending!r}")
    if x.type.shape[dim] == 1:
        return x
    view = _PairView(x, dim)
    return view.back(_merge(view, view.value, view.bits, bool(descending)), x.type.shape[dim])
