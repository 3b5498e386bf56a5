"""The cycle collector's full passes kept out of torch.compile's frame compiles.

A rank's heap holds PyTorch, CUDA's Python side and every graph compiled so far; a full pass of
the collector walks all of it (a tenth of a second and more at a time on a 2 GHz host), and
Dynamo, AOTAutograd and Inductor allocate enough to set one off several times per graph. While a
frame compiles, only the young generations are collected (most of a compile's cyclic garbage dies
young); the full pass is left until the last compile running ends, when it runs at the next
collection that falls due, as it would have. Memory the compile keeps is what it would have kept.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import threading

NEVER = 1 << 30  # collections of generation 1 between full passes: none while a compile runs

_lock = threading.Lock()
_compiling = 0
_saved_threshold = None


@contextlib.contextmanager
def without_full_collections():
    """No full pass of the collector while any thread is inside; the thresholds as they were after."""
    global _compiling, _saved_threshold
    with _lock:
        if _compiling == 0:
            _saved_threshold = gc.get_threshold()
            young, middle, _ = _saved_threshold
            gc.set_threshold(young, middle, NEVER)
        _compiling += 1
    try:
        yield
    finally:
        with _lock:
            _compiling -= 1
            if _compiling == 0:
                gc.set_threshold(*_saved_threshold)


def around(fn):
    """`fn` run `without_full_collections`."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with without_full_collections():
            return fn(*args, **kwargs)
    return call
