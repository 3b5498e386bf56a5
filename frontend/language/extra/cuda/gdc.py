"""`tl.extra.cuda.gdc_wait` / `gdc_launch_dependents`: grid dependency control (PTX `griddepcontrol`,
sm_90 and newer), the device side of a programmatic dependent launch (`kernel[grid](..., launch_pdl=True)`).

Both are ordered side effects in the block IR (ops `gdc_wait`, `gdc_launch_dependents`), never merged,
dropped or moved; the interpreter runs them as no-ops, and compiling one for a GPU older than sm_90 is
an error, as ptxas makes it one in Triton.
"""
from __future__ import annotations

from ... import semantic
from ...core import builtin


@builtin
def gdc_wait():
    """Wait until every grid this kernel depends on has completed and its memory writes are visible.

    Loads of what the previous kernel wrote belong after it. Safe without a dependent launch too
    (then there is nothing to wait for)."""
    semantic.grid_dependency_control("wait")


@builtin
def gdc_launch_dependents():
    """Let the next kernel, launched with `launch_pdl=True`, start once every program of this one
    has called this or exited: a hint to the scheduler, with no memory ordering of its own
    (the dependent's `gdc_wait` gives that). Calls after a program's first have no effect."""
    semantic.grid_dependency_control("launch_dependents")
