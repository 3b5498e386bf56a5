"""The codegen pipeline: one list of named passes over block IR, then lowering.

Each pass is a module with `name` and `apply(fn, ctx)` that rewrites `fn` in place; `ctx` holds
the compile's options only, and what a pass needs to know of the function besides (contiguity,
index math, live buffers) it reads from the IR (kiln.codegen.analysis). With `check=True`
(tests) the verifier runs after every pass; every compile runs it after the last.
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.ir import verify
from kiln.ir.layout_check import check_layouts

from .passes import (broadcast_mul_reduce, canonicalize, coarsen, cse, dce, descriptor_loads, dot_accumulate,
                     dot_staging, f32_dot_split, fp8_dot_upcast, halve_k_steps, launch_order, layouts, persistent,
                     pointer_tma, prefetch, reduce_after_loop, scratch_barriers, small_dot_tiles, smem_alloc,
                     shared_dot_operands, smem_pipeline, split_k, standalone_wgmma, tile_overlap, tma_store,
                     warp_specialize)

PASSES = [
    canonicalize,   # fold constants, drop x+0, x*1, same-type casts
    broadcast_mul_reduce,  # sum(a[:, :, None] * b[None, :, :], axis=1) -> dot(a, b) (Triton's combine pattern)
    f32_dot_split,  # fp32 dots at tf32x3 / bf16x3 / bf16x6 -> tensor-core dots on split operands (Triton's F32DotTC)
    cse,            # merge identical pure ops
    dot_accumulate, # acc + dot(a, b) -> dot(a, b, acc)
    dce,            # drop what nothing uses
    launch_order,   # programs whose work grows or shrinks along one grid axis -> launched longest first (lowering)
    reduce_after_loop,  # a loop folding each step's reduction into a carried value -> blocks folded, one reduction after
    coarsen,        # sm_90a: a loop whose blocks walk 16 or 32 rows a step, a dot walking them as N -> 64 a step
    split_k,        # sm_90a, the build asked for few-program launches: a GEMM tile's K loop split across a cluster
    halve_k_steps,  # sm_90a: a GEMM K loop whose step leaves room for < 3 ring slots -> 2 steps of half the K
    persistent,     # sm_90a: a tile kernel whose loop runs wgmma -> each CTA loops over the launch grid's programs
    pointer_tma,    # sm_90a: pointer loads of a dot's operands that read a TMA box -> descriptor_loads on derived maps
    smem_pipeline,  # sm_90a: dots fed by loads in loops -> async copies (cp.async, TMA) into rings of shared tiles, wgmma
    descriptor_loads,  # the descriptor loads no TMA ring took -> their pointer loads; unread derived maps dropped
    tma_store,      # sm_90a: descriptor stores of 2-D blocks -> shared tile + TMA store
    warp_specialize,  # sm_90a, persistent, where the K loop asks: the copies on a producer warpgroup of their own
    small_dot_tiles,  # dots of fewer than 16 rows or 8 columns -> a whole mma tile on repeated operands, one copy kept
    standalone_wgmma,  # sm_90a: fp8 dots no loop pipelined, 16-bit ones outside loops -> wgmma, operands via shared tiles
    fp8_dot_upcast,  # fp8 dots left to mma.sync where the target's PTX has no fp8 mma: fp16 operands (exact)
    shared_dot_operands,  # a value several mma.sync dots read (or their transposes) -> one shared tile, mma_dot
    prefetch,       # loads of iteration i+1 issued during iteration i (num_stages >= 2)
    canonicalize,   # tidy what prefetch cloned
    cse,
    dce,
    layouts,        # a thread distribution for every block value (by the pointers' contiguity), convert_layout
                    # ops where an op reads a value in another; the layouts into the types
    tile_overlap,   # sm_90a, persistent: the next tile's first copies issued before this tile's epilogue, where
                    # the rings then still leave the epilogue's scratch room (weighed on a trial copy)
    smem_alloc,     # byte offsets of the shared buffers, by liveness
    scratch_barriers,  # scratch bytes of reductions and conversions; barriers only where bytes may be in use
    dot_staging,    # which engine runs each dot (mma.sync or FMAs); staging buffers of their own for mma dots in loops
]
LAYOUTS_IN_TYPES = PASSES.index(layouts)  # from here on every block type has its layout


@dataclass
class PassContext:
    target: object
    num_warps: int = 4
    num_stages: int = 3
    maxnreg: int | None = None  # a register cap per thread (Triton's Config(maxnreg=...))
    fp_fusion: bool = True  # a*b+c may become one fma (Triton's enable_fp_fusion)
    reflect_ftz: bool = True  # libdevice and the approximate roots flush fp32 subnormals (Triton's enable_reflect_ftz)
    portable: bool = False  # no inline PTX: the LLVM IR can also run on a CPU (kiln.codegen.emulate)
    line_info: bool = True  # each instruction's source line in the PTX (.loc), for profilers (lower.line_info)
    check: bool = False  # tests: verify after every pass (every compile verifies after the last)


# The variants a compile tries are attributes of the kernel, in its IR (so its dump says which it is):
# `persistent = 0` (the tile kernel as written), `coarsen = 0` (the loops' steps as written), `tile_overlap = 0`
# (a persistent GEMM's rings not kept live through its epilogue), `company = 0` (loop-invariant A operands in shared
# memory and spare ring slots, where smem_plan would free `company = N` bytes for another CTA), `shared_reserve = N`
# (bytes smem_pipeline leaves free for the scratch a first lowering needed beyond the SM's shared memory). A pass may
# also say what the compile should try first: `wants_warps = 8` (coarsen: the loops hold more than 4 warps'
# registers; kiln.codegen.compiler).


def run_passes(fn, ctx: PassContext, check: bool = False, stop: int | None = None) -> None:
    """PASSES[:stop] over `fn` (all of them by default, once: a variant a pass weighs it tries on a
    copy). A run that reaches the end checks what lowering takes on trust: the IR verifies and every
    op reads its operands in the layouts it needs (lowering never moves data between layouts but
    for a `convert_layout`)."""
    ctx.check = check
    for i, p in enumerate(PASSES[:stop]):
        p.apply(fn, ctx)
        if check:
            verify(fn)
            if i >= LAYOUTS_IN_TYPES:
                check_layouts(fn, ctx.num_warps)
    if stop is None and not check:
        verify(fn)
        check_layouts(fn, ctx.num_warps)
