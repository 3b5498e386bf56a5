"""Programs of unequal work go out longest first: which program id each CTA plays.

A causal attention program loops up to its diagonal, so along the row-block axis its work
grows with its program id. The GPU hands CTAs out in the order of their linear index (x
fastest), so every (batch, head) sends its longest programs last, and the launch's last CTAs
are long ones that run on while the other SMs idle. Greedy scheduling of 128 heads x 32 row
blocks, one CTA per SM on 132 SMs, keeps the SMs busy 96% of the time; at 8 row blocks (N 1024)
87%; longest first 97-100% (bench/launch_order_sim.py: list scheduling, work = keys to the diagonal).

This pass finds kernels whose work grows (or shrinks) along one program-id axis `a`: every
`for` loop whose bounds depend on a program id sits at the kernel's top level with a constant
positive step and spans ub - lb = c + s * program_id(a), the slopes s of every such loop of one
sign and at least an iteration per EVEN_PROGRAMS programs (not a grid-stride loop), the other
axes and anything else per program (a loaded bound, a `while`) absent. It marks the kernel
`launch_order = [a, reversed, budget]`, and lowering (`Lowering.program_id`, kiln.codegen.lower.
program_ids) maps a CTA's linear index to its program ids: the programs go out by work, longest
first, a group of G slices of the other axes (heads) at a time, so that the K and V a group
reads fit the L2 cache together: G = budget // programs(a), at least 1, `budget` the slices
whose loops' loads fit L2_BYTES. Every program computes what it computed before, only later or
earlier; kernels whose programs may wait on one another (atomics, volatile loads, inline asm)
keep the hardware's order.
"""
from __future__ import annotations

from kiln.ir.core import const_int

from . import affine
from .persistent import per_program

name = "launch_order"
L2_BYTES = 24 << 20  # about half of an H100's 50 MB of L2: what a group of slices may read
WAITS = {"atomic_rmw", "atomic_cas", "inline_asm", "while"}
EVEN_PROGRAMS = 8  # a loop gaining fewer iterations than one per this many programs leaves the order as it is


def apply(fn, ctx) -> None:
    fn.attrs.pop("launch_order", None)  # only this pass's finding counts, never an incoming attr
    order = work_axis(fn)
    if order is not None:
        fn.attrs["launch_order"] = list(order)


def work_axis(fn):
    """(axis, reversed, budget) where the kernel's work grows (reversed = 1) or shrinks along one
    program-id axis, else None."""
    if any(op.name in WAITS or op.attrs.get("volatile") for op in fn.walk()):
        return None
    forms, memo = affine.Forms(), {}
    slopes = [0, 0, 0]
    unit_bytes = 0  # what the loops read per program along the axis (per slice of the others)
    for loop in [op for op in fn.walk() if op.name == "for"]:
        lb, ub, step = loop.operands[:3]
        if not any(per_program(v, memo) for v in (lb, ub, step)):
            continue
        stride = const_int(step)
        if loop.parent is not fn.body or stride is None or stride <= 0:
            return None
        low, high = forms.of(lb), forms.of(ub)
        if low is None or high is None:
            return None
        loop_slopes = [0, 0, 0]
        for monomial, coefficient in affine.add(high, low, -1).items():
            ids = [atom for atom in monomial if _program_id(forms, atom) is not None]
            if not ids:
                if any(per_program(forms.values[atom[1]], memo) for atom in monomial if atom[0] == "v"):
                    return None  # a bound from a division, a load, ... of the program id
                continue
            if len(monomial) != 1:
                return None  # the program id times something not constant
            loop_slopes[_program_id(forms, ids[0])] += coefficient
        if any(s * t < 0 for s, t in zip(slopes, loop_slopes)):
            return None  # one loop's work grows where another's shrinks
        if 0 < abs(sum(loop_slopes)) * EVEN_PROGRAMS < stride:
            return None  # a grid-stride loop (from the program id, step NUM_SMS): as much work everywhere
        slopes = [s + t for s, t in zip(slopes, loop_slopes)]
        unit_bytes += abs(sum(loop_slopes)) * _bytes_read(loop) // stride
    axes = [axis for axis in range(3) if slopes[axis]]
    if len(axes) != 1:
        return None
    axis = axes[0]
    return axis, int(slopes[axis] > 0), max(1, L2_BYTES // max(1, unit_bytes))


def _bytes_read(loop) -> int:
    """Bytes of the blocks an iteration of `loop` loads."""
    blocks = [op.results[0].type for op in loop.walk() if op.name in ("load", "descriptor_load")]
    return sum(t.numel * t.element_ty.primitive_bitwidth // 8 for t in blocks if t.is_block())


def _program_id(forms, atom):
    """The axis of the program id that `atom` stands for, else None."""
    if atom[0] != "v":
        return None
    op = forms.values[atom[1]].defining_op
    return op.attrs["axis"] if op is not None and op.name == "program_id" else None
