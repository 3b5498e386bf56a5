"""Which ops write the transient scratch area and how many bytes (a reduction or scan across warps,
a layout conversion through shared memory, an exchange of elements between threads, a histogram, a
tensor map the kernel builds),
which touch no shared memory at all, and the shared memory a function's plan adds up to: the model
scratch_barriers plans barriers by, and lowering keeps to (it ends with a barrier an op the model
took for one touching no shared memory that used the scratch area after all).
"""
from __future__ import annotations

from kiln.ir import layout as lay
from kiln.ir.layout_moves import RENAMING_OPS, moves_no_data
from kiln.ir.ops import ELEMENTWISE_OPS
from kiln.ir.types import block_type, tensormap

from ..scratch_bytes import conversion_bytes, reduce_scratch_bytes, scalar_bytes, scan_scratch_bytes
from .dots import fma_staging, mma_staging, staging_end
from .shared_buffers import buffers_live_at, reserved_bytes
from .warp_shuffles import shuffle_plan

# Ops whose lowering touches no shared memory (their operands arrive in the layouts they read).
_NO_SHARED = ELEMENTWISE_OPS | {
    "program_id", "num_programs", "arange", "splat", "broadcast", "expand_dims",
    "load", "store", "inline_asm", "print", "assert", "yield", "condition", "gdc_wait", "gdc_launch_dependents"}
# Ops that move every element through the scratch area, and the block whose elements it holds.
_EXCHANGED = {"reshape": lambda op: op.operands[0], "permute": lambda op: op.operands[0],
              "split": lambda op: op.operands[0], "gather": lambda op: op.operands[0],
              "join": lambda op: op.results[0], "cat": lambda op: op.results[0]}


def touches_no_shared(op, model) -> bool:
    """Does the model take `op` for one whose lowering touches no shared memory?"""
    return op.name in _NO_SHARED or (op.name in ("reduce", "scan", "convert_layout", *RENAMING_OPS)
                                     and not scratch_bytes(op, model)) \
        or (op.name in ("for", "if") and all(touches_no_shared(inner, model) for region in op.regions for inner in region.ops))


def scratch_bytes(op, model) -> int:
    """Bytes of the scratch area `op` writes: 0 for ops scratch_barriers does not plan."""
    if op.name == "reduce" and _encoded(op.operands[0]):
        return reduce_scratch_bytes(op)
    if op.name == "scan" and _encoded(op.operands[0]):
        return scan_scratch_bytes(op)
    if op.name in _EXCHANGED:  # every element once, at its flat position (kiln.codegen.lower.shared.exchange)
        if moves_no_data(op, model.num_warps):
            return 0  # its layouts keep every element in its thread: registers renamed
        return _EXCHANGED[op.name](op).type.numel * scalar_bytes(op.operands[0].type)
    if op.name == "cluster_sum":  # every element once, 16 bytes a thread at a time (kiln.codegen.lower.cluster)
        threads = 32 * model.num_warps
        return -(-op.operands[0].type.numel * 4 // (16 * threads)) * 16 * threads
    if op.name == "histogram":
        return 4 * op.attrs["num_bins"]  # an int32 counter per bin
    if op.name == "tensormap_create":  # the map built in shared memory, 128-byte aligned (kiln.codegen.lower.tma)
        return 2 * tensormap.NBYTES
    if op.name == "convert_layout" and _encoded(op.operands[0]) and _encoded(op.results[0]):
        src, dst = op.operands[0], op.results[0].type.encoding
        if src.type.encoding == dst or lay.same_distribution(src.type.encoding, dst, tuple(src.type.shape), model.num_warps):
            return 0
        if src in model.index:
            return 0  # index math recomputed in the new layout
        if shuffle_plan(src.type.encoding, dst, tuple(src.type.shape), model.num_warps) is not None:
            return 0  # within warps: shuffles
        return conversion_bytes(src.type, dst, model.num_warps)
    return 0


def _encoded(v) -> bool:
    return isinstance(v.type, block_type) and v.type.encoding is not None


def scratch_extent(fn) -> int:
    """How far past the scratch area's start lowering's transient uses reach: each planned one to
    the end of its plan (scratch_barriers' `scratch` attrs), and from the start, those it does not
    plan: dots staging their operands for one use (FMA dots, and mma.sync dots without buffers of
    their own: the dot_staging pass's `engine` and `staging` attrs), and atomics whose result is
    read (an element's owner passes it to the threads that share it: counted wherever it may)."""
    used = {v for op in fn.walk() for v in op.operands}
    extent = 0
    for op in fn.walk():
        plan = op.attrs.get("scratch")
        if plan:
            nbytes = plan[0] + plan[1]
        elif op.name == "dot" and op.attrs.get("engine") == "fma":
            nbytes = fma_staging(op)[-1]
        elif op.name == "dot" and op.attrs.get("engine") == "mma" and "staging" not in op.attrs:
            nbytes = mma_staging(op)[-1]
        elif op.name in ("atomic_rmw", "atomic_cas") and op.results[0] in used:
            out = op.results[0].type
            nbytes = (out.numel if isinstance(out, block_type) else 1) * scalar_bytes(out)
        else:
            continue
        extent = max(extent, -(-nbytes // 16) * 16)
    return extent


def planned_shared_bytes(fn) -> int:
    """A lower bound of the shared memory lowering will give the kernel: the buffers smem_alloc
    placed (from a 1024-aligned base, as lowering reserves them), the dots' staging buffers after them,
    and the scratch scratch_barriers planned beside them. Lowering may add more (unplanned uses), never less."""
    staged = staging_end(fn)
    reserved = staged or reserved_bytes(fn)
    most, buffers_live = reserved, buffers_live_at(fn)
    for op in fn.walk():
        plan = op.attrs.get("scratch")
        if plan:
            most = max(most, (reserved if staged or buffers_live(op) else 0) + plan[0] + plan[1])
    return most
