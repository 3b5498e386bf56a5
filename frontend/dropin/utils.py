"""`triton._utils` under the drop-in: the helpers code outside Triton takes from it (PyTorch's
mutation analysis of a user's kernel walks a specialization's nested argument values with them)."""
from __future__ import annotations

import functools

from kiln.language import TRITON_MAX_TENSOR_NUMEL  # noqa: F401  (Triton's limit, under its name here too)

from .jit import canonicalize_dtype  # noqa: F401  (Triton keeps it here)


def _nested(value) -> bool:
    """A list, a tuple (tl.tuple is one) or a tuple's type: what a path indexes into."""
    from kiln.language.core import tuple_type
    return isinstance(value, (list, tuple, tuple_type))


def get_iterable_path(iterable, path: tuple):
    """The item at `path` (an index per level) of nested lists and tuples."""
    return functools.reduce(lambda item, index: item[index], path, iterable)


def find_paths_if(iterable, pred) -> list[tuple]:
    """The paths, in order, of the leaves of nested lists and tuples for which `pred(path, leaf)`
    holds; a value that is no list or tuple is the leaf at path ()."""
    found: dict = {}  # a dict keeps the order

    def visit(path: tuple, item) -> None:
        if _nested(item):
            for index, inner in enumerate(item):
                visit((*path, index), inner)
        elif pred(path, item):
            found[path] = None
    visit((), iterable)
    return list(found)
