"""Every `descriptor_load` that no TMA ring took becomes its fallback (the same block
loaded through pointers, which the frontend emitted beside it); the maps no ring reads
go with them (derived map arguments, `tensormap_create` ops and their global scratch).

`smem_pipeline` (sm_90a) copies a host TensorDescriptor's blocks with TMA where they feed
wgmma or mma.sync in a pipelined loop; everywhere else, and on every other target, the pointer
load is the load. Runs after `smem_pipeline`; passes after it never see the op.
"""
from __future__ import annotations

from .rewrite import replace_uses

name = "descriptor_loads"


def apply(fn, ctx=None) -> None:
    names = {op.name for op in fn.walk()}
    if not names & {"descriptor_load", "tensormap_create"} and \
            not any("tma_of" in attrs or "global_scratch" in attrs for attrs in fn.arg_attrs):
        return  # nothing of TMA here (most kernels): five walks of the function saved
    strip(fn, [op for op in fn.walk() if op.name == "descriptor_load"])
    drop_unread_derived_maps(fn)
    drop_unread_created_maps(fn)


def drop_unread_derived_maps(fn) -> None:
    """Remove the maps `pointer_tma` added (`tma_of`) that no TMA ring reads (their `tma_box`
    attributes go with them)."""
    read = {v for op in fn.walk() for v in op.operands}
    for i in reversed(range(len(fn.args))):
        if "tma_of" in fn.arg_attrs[i] and fn.args[i] not in read:
            del fn.body.args[i], fn.arg_names[i], fn.arg_attrs[i]
            for j, arg in enumerate(fn.body.args):
                arg.index = j


def drop_unread_created_maps(fn) -> None:
    """Remove the `tensormap_create` ops whose map no TMA copy reads, and the global
    scratch argument once no map is made in it."""
    read = {v for op in fn.walk() for v in op.operands}
    for op in [op for op in fn.walk() if op.name == "tensormap_create" and op.results[0] not in read]:
        op.parent.ops.remove(op)
    if any(op.name == "tensormap_create" for op in fn.walk()):
        return
    for attrs in fn.arg_attrs:  # no map left whose row stride a launch must check
        attrs.pop("tma_stride", None)
    for i in reversed(range(len(fn.args))):
        if "global_scratch" in fn.arg_attrs[i]:
            del fn.body.args[i], fn.arg_names[i], fn.arg_attrs[i]
            for j, arg in enumerate(fn.body.args):
                arg.index = j


def strip(fn, ops) -> None:
    """Replace each of `ops` (descriptor_loads) by its fallback value."""
    replace_uses(fn, {op.results[0]: op.operands[-1] for op in ops})
    for op in ops:
        op.parent.ops.remove(op)
