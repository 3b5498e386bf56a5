"""mma_dot fragments loaded once: several dots reading one shared tile (shared_dot_operands'
tiles, a K step's operand tile read by every dot of that step) take the `ldmatrix` results
the first of them loaded, wherever those dominate and the tile has not been stored since.
Dots reading one B from registers likewise take the fragments the first one shuffled.

Only tiles that `local_store` alone writes take part (not rings that async copies or TMA
fill, whose slots change under one SSA value). A region's lowering (`lower_block`) keeps the
fragments loaded before it, less those of tiles the region stores anywhere (a loop's body
would otherwise read the last trip's), and drops on leaving what it loaded itself (they do
not dominate what follows).
"""
from __future__ import annotations

from contextlib import contextmanager


def tile_root(v):
    """The `local_alloc` result a tile view (`local_trans` of it, any depth) reads."""
    op = v.defining_op
    while op is not None and op.name == "local_trans":
        v = op.operands[0]
        op = v.defining_op
    return v


def stored_only_by_local_store(fn) -> set:
    """The 2-D `local_alloc` results of `fn` that nothing but `local_store` writes."""
    allocs = {op.results[0] for op in fn.walk() if op.name == "local_alloc" and len(op.results[0].type.shape) == 2}
    for op in fn.walk():
        if op.name in ("async_copy", "tma_copy", "local_index") or (op.name == "local_alloc" and op.operands):
            for v in op.operands:
                allocs.discard(tile_root(v))
    return allocs


def _stored_in(block) -> set:
    return {tile_root(op.operands[1]) for op in block.walk() if op.name == "local_store"}


class Fragments:
    """Loaded fragments by (tile value, role, what addresses them): see the module docstring."""

    def __init__(self, fn):
        self.tiles = stored_only_by_local_store(fn) if fn is not None else set()
        self.loaded: dict = {}

    def reusable(self, tile) -> bool:
        return tile is not None and tile_root(tile) in self.tiles

    def get(self, key, load):
        """The registers `key` names, `load()` run and kept the first time."""
        if key not in self.loaded:
            self.loaded[key] = load()
        return self.loaded[key]

    def stored(self, tile) -> None:
        if not self.loaded:
            return
        root = tile_root(tile)
        self.loaded = {k: v for k, v in self.loaded.items() if tile_root(k[0]) is not root}

    @contextmanager
    def region(self, block):
        stored = _stored_in(block) if self.tiles else set()  # (a kernel without such tiles: no walk of each region)
        outer = {k: v for k, v in self.loaded.items() if tile_root(k[0]) not in stored}
        self.loaded = dict(outer)
        try:
            yield
        finally:
            self.loaded = outer
