"""Values made of several tensors (tuples, block pointers, tensor descriptors), as loops and branches carry them.

Block IR carries plain values through `yield` and block arguments. A structured value
is flattened to its tensors (`leaves`) and rebuilt from the matching block arguments or
results; its `signature` (the structure without the tensors) must be the same on every
path, as must the leaves' types.
"""
from __future__ import annotations

import numbers

import numpy as np

from kiln.language import semantic
from kiln.language.block_pointer import BlockPointer
from kiln.language.tensor_descriptor import TensorDescriptor

_STRUCTURED = (BlockPointer, TensorDescriptor)  # values with leaves(), signature() and rebuild()
from kiln.ir.types import scalar_of
from kiln.language.core import constexpr, is_aggregate, tensor


def is_carriable(value) -> bool:
    value = value.value if isinstance(value, constexpr) else value
    if isinstance(value, (tensor, *_STRUCTURED)):
        return True
    if isinstance(value, (bool, numbers.Number, np.generic)):
        return True
    if is_aggregate(value):
        return all(is_carriable(getattr(value, n)) for n in type(value).__kiln_aggregate_fields__)
    return isinstance(value, tuple) and bool(value) and all(is_carriable(v) for v in value)


def flatten(value):
    """(leaves, signature, rebuild): the tensors of `value`, its structure, and leaves -> value."""
    value = value.value if isinstance(value, constexpr) else value
    if isinstance(value, _STRUCTURED):
        return value.leaves(), value.signature(), value.rebuild
    if is_aggregate(value):  # a @tl.core._aggregate instance: its fields, in their order
        names = type(value).__kiln_aggregate_fields__
        leaves, signature, rebuild_fields = flatten(tuple(getattr(value, n) for n in names))

        def rebuild_aggregate(new_leaves):
            return value._rebuild(dict(zip(names, rebuild_fields(new_leaves))))
        return leaves, (type(value).__qualname__, signature), rebuild_aggregate
    if isinstance(value, tuple):
        parts = [flatten(v) for v in value]
        counts = [len(p[0]) for p in parts]

        def rebuild(leaves):
            out, start = [], 0
            for (_, _, sub), n in zip(parts, counts):
                out.append(sub(leaves[start:start + n]))
                start += n
            kind = type(value)
            return kind(*out) if hasattr(kind, "_fields") else tuple(out)  # a NamedTuple stays one
        return [leaf for p in parts for leaf in p[0]], ("tuple",) + tuple(p[1] for p in parts), rebuild
    if value is None:
        raise TypeError("None cannot be carried through a loop or a runtime if")
    t = semantic.to_tensor(value)
    return [t], "tensor", lambda leaves: leaves[0]


def describe(leaves) -> str:
    return ", ".join(str(t.type) + (" (const)" if getattr(scalar_of(t.type), "const", False) else "")
                     for t in leaves)
