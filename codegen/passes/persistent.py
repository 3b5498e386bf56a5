"""sm_90a: a tile kernel whose loop runs its dots on wgmma runs persistent: each CTA loops
over the programs of the launch grid.

A tile kernel (tutorial 03's matmul) pays per program a CTA's launch, its setup (mbarriers,
the ring's prologue) and its exit; the same kernel written persistent (tutorial 09's form)
ran 1-5% faster on the H200 (bench/persistent.py). This pass wraps the kernel's body in

    for %v = program_id(0) to gx * gy * gz step num_programs(0)   {num_stages = 1}
        %px = %v % gx ; %py = (%v / gx) % gy ; %pz = %v / (gx * gy)
        <the body, program_id(a) -> %pa, num_programs(a) -> ga>

with gx, gy, gz three new int32 arguments (attribute `launch_grid` = the axis) that the
launcher fills with the grid it was given, launching min(programs, CTAs that fit on the
device at once) CTAs instead. Each program computes exactly what it computed as a CTA;
programs still run in increasing order across the CTAs. Left alone: kernels that read
`num_programs` (they stride over work themselves), that use atomics or inline asm (programs
that wait on one another could wait on one queued behind them in the same CTA), and kernels
other than a GEMM's tiles: exactly one top-level loop, the kernel's only dot in it, bounds
the same in every program.
"""
from __future__ import annotations

from kiln.ir.core import Block, Operation
from kiln.ir.types import int32

from .rewrite import replace_uses
from .smem_plan import enabled as pipelines

name = "persistent"
UNSAFE = {"atomic_rmw", "atomic_cas", "inline_asm", "num_programs"}


def apply(fn, ctx) -> None:
    if not pipelines(ctx) or fn.attrs.get("derived_args", 1) == 0 or fn.attrs.get("persistent", 1) == 0 \
            or not _tile_kernel(fn):
        return
    body = fn.body
    grid = []
    for axis in range(3):
        grid.append(body.add_arg(int32))
        fn.arg_names.append(f"launch_grid.{axis}")
        fn.arg_attrs.append({"launch_grid": axis})
    gx, gy, gz = grid
    ops, ret = body.ops[:-1], body.ops[-1]
    loc = ret.loc
    outer: list[Operation] = []

    def emit(block_ops, op_name, operands=(), t=int32, **attrs):
        op = Operation(op_name, operands, [t], attrs, loc=loc)
        block_ops.append(op)
        return op.results[0]

    first = emit(outer, "program_id", axis=0)
    step = emit(outer, "num_programs", axis=0)
    total = emit(outer, "mul", [emit(outer, "mul", [gx, gy]), gz])
    loop_body = Block([int32])
    loop = Operation("for", [first, total, step], [], {"num_stages": 1}, regions=[loop_body], loc=loc)
    v = loop_body.args[0]
    inner: list[Operation] = []
    px = emit(inner, "rem", [v, gx])
    rest = emit(inner, "div", [v, gx])
    py = emit(inner, "rem", [rest, gy])
    pz = emit(inner, "div", [rest, gy])
    mapping = {}
    for op in fn.walk():
        if op.name == "program_id":
            mapping[op.results[0]] = (px, py, pz)[op.attrs["axis"]]
    for op in inner + ops:
        loop_body.append(op)
    loop_body.append(Operation("yield", [], [], loc=loc))
    body.ops = []
    for op in outer:
        body.append(op)
    body.append(loop)
    body.append(ret)
    replace_uses(fn, mapping)
    for op in [op for op in fn.walk() if op.name == "program_id" and op.results[0] in mapping]:
        op.parent.ops.remove(op)


def _tile_kernel(fn) -> bool:
    """A GEMM's tile kernel: a body ending in its one `return`, one top-level loop with as
    many iterations in every program, the kernel's one dot in it, and none of the ops that
    make programs depend on one another or on the grid's size. Programs of unequal work
    (causal attention: a loop up to the program's diagonal) stay CTAs, which the hardware
    hands out as SMs free up: a CTA looping over every 132nd program got the long ones
    together (the causal forward at 0.91 of Triton against 0.98, the backward's loops at
    0.85-0.91 against 0.94-1.03; H200). Attention's loops (two dots and more) stay CTAs too:
    persistent, the non-causal forward measured as before (0.97, 1.00 of Triton) and the D64
    backward lower (0.91 against 0.97, one run), where only GEMMs measured a gain."""
    if any(op.name in UNSAFE or op.attrs.get("volatile") for op in fn.walk()):
        return False
    if [op for op in fn.walk() if op.name == "return"] != fn.body.ops[-1:]:
        return False
    loops = [op for op in fn.body.ops if op.name in ("for", "while")]
    if len(loops) != 1 or loops[0].name != "for" or [op.name for op in fn.walk()].count("dot") != 1 \
            or not any(op.name == "dot" for op in loops[0].regions[0].ops):
        return False
    return not any(per_program(v, {}) for v in loops[0].operands[:3])


def per_program(v, memo) -> bool:
    """Does `v` depend on the program's id?"""
    if v not in memo:
        op = v.defining_op
        memo[v] = False
        memo[v] = op is not None and (op.name == "program_id" or any(per_program(x, memo) for x in op.operands))
    return memo[v]
