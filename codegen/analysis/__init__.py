"""What a pass (or lowering) reads of one function besides the compile's options, read from the
IR when first asked and dropped with the pass: the pointers' contiguity (axis_info), its index
math and where shared buffers live. Nothing passes from one pass to the next but the IR, so a
function dumped between passes is all there is to know of it.
"""
from __future__ import annotations

import functools

from kiln.ir.index_math import index_values

from .axis_info import AxisAnalysis
from .shared_buffers import buffers_live_at


class Analysis:
    """The compile's options (a PassContext's fields, read through) and `fn`'s facts."""

    def __init__(self, fn, options):
        self.function, self.options = fn, options

    def __getattr__(self, name):  # num_warps, target, portable, ...: the options'
        if name in ("function", "options"):  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.options, name)

    @functools.cached_property
    def axis(self) -> AxisAnalysis:
        return AxisAnalysis(self.function)

    @functools.cached_property
    def index(self) -> set:
        return index_values(self.function)

    @functools.cached_property
    def buffers_live(self):
        return buffers_live_at(self.function)
