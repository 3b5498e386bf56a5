"""Programs of unequal work go out longest first: which program id each CTA plays.

A causal attention program loops up to its diagonal, so along the row-block axis its work
grows with its program id. The GPU hands CTAs out in the order of their linear index (x
fastest), so every (batch, head) sends its longest programs last, and the launch's last CTAs
are long ones that run on while the other SMs idle. Greedy scheduling of 128 heads x 32 row
blocks, one CTA per SM on 132 SMs, keeps the SMs busy 96% of the time; at 8 row blocks (N 1024)
87%; longest first 97-100% (bench/launch_order_sim.py: list scheduling, work = keys to the diagonal).

This pass finds kernels whose work grows (or shrinks) along one program-id axis `a`: every
`for` loop whose bounds depend on a program id sits at the kernel's top level with a constant
positive step, and its span ub - lb moves one way along `a`: affine in the program id (c + s *
program_id(a)), or monotone through a min, a max or a division by a constant (`tl.minimum((i + 1)
* BLOCK, n)`, `(n - i * BLOCK) // BLOCK`); the slopes s of every such loop of one sign and at least
an iteration per EVEN_PROGRAMS programs (not a grid-stride loop), the other axes and anything else
per program (a loaded bound, a remainder, a `while`) absent. It marks the kernel
`launch_order = [a, reversed, budget]`, and lowering (`Lowering.program_id`, from
kiln.codegen.lower.program_ids) maps a CTA's linear index to its program ids: the programs go out
by work, longest first, a group of G slices of the other axes (heads) at a time, so that the K
and V a group reads fit the L2 cache together: G = budget // programs(a), at least 1, `budget`
the slices whose loops' loads fit L2_BYTES. Every program computes what it computed before, only later or
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
    memo, trends = {}, {}
    slopes = [0.0, 0.0, 0.0]
    unit_bytes = 0.0  # what the loops read per program along the axis (per slice of the others)
    for loop in [op for op in fn.walk() if op.name == "for"]:
        lb, ub, step = loop.operands[:3]
        if not any(per_program(v, memo) for v in (lb, ub, step)):
            continue
        stride = const_int(step)
        if loop.parent is not fn.body or stride is None or stride <= 0:
            return None
        span = _combine(_trend(ub, memo, trends), _negated(_trend(lb, memo, trends)))
        if span is None:
            return None  # a bound from a load, a remainder, a product of program ids, ...
        loop_slopes = span[1]
        if any(s * t < 0 for s, t in zip(slopes, loop_slopes)):
            return None  # one loop's work grows where another's shrinks
        if 0 < abs(sum(loop_slopes)) * EVEN_PROGRAMS < stride:
            return None  # a grid-stride loop (from the program id, step NUM_SMS): as much work everywhere
        slopes = [s + t for s, t in zip(slopes, loop_slopes)]
        unit_bytes += abs(sum(loop_slopes)) * _bytes_read(loop) / stride
    axes = [axis for axis in range(3) if slopes[axis]]
    if len(axes) != 1:
        return None
    axis = axes[0]
    return axis, int(slopes[axis] > 0), max(1, int(L2_BYTES // max(1.0, unit_bytes)))


# A scalar's trend along the program ids: (exact, slopes), slopes[a] what it gains per program along
# axis a: exact where it is affine in them, else (min, max, a division by a constant) only monotone
# along each axis, in the slope's direction, gaining at most about that much.
_EVEN = (True, (0.0, 0.0, 0.0))


def _trend(v, memo, trends):
    """`v`'s trend, or None where it has none this model follows."""
    if not per_program(v, memo):
        return _EVEN
    if v not in trends:
        trends[v] = None  # (a cycle through a loop's carried values: no trend)
        trends[v] = _trend_of(v.defining_op, memo, trends)
    return trends[v]


def _trend_of(op, memo, trends):
    if op is None:
        return None
    name, args = op.name, op.operands
    if name == "program_id":
        return True, tuple(1.0 if a == op.attrs["axis"] else 0.0 for a in range(3))
    if name in affine.HINTS or (name == "cast" and _widens(op)):
        return _trend(args[0], memo, trends)
    if name in ("add", "sub", "min", "max"):
        a, b = (_trend(x, memo, trends) for x in args)
        if name == "sub":
            b = _negated(b)
        return _combine(a, b) if name in ("add", "sub") else _bounded(a, b)
    constant = [const_int(x) for x in args]
    if name == "mul" and None in constant and constant != [None, None]:
        factor = constant[0] if constant[0] is not None else constant[1]
        moving = _trend(args[constant.index(None)], memo, trends)
        return None if moving is None else (moving[0], tuple(s * factor for s in moving[1]))
    if name == "div" and constant[1] is not None and constant[1] > 0:
        moving = _trend(args[0], memo, trends)
        return None if moving is None else (False, tuple(s / constant[1] for s in moving[1]))
    return None


def _negated(t):
    return None if t is None else (t[0], tuple(-s for s in t[1]))


def _combine(a, b):
    """The trend of a sum: exact where both are; else both must move one way along each axis."""
    if a is None or b is None:
        return None
    if not (a[0] and b[0]) and any(x * y < 0 for x, y in zip(a[1], b[1])):
        return None
    return a[0] and b[0], tuple(x + y for x, y in zip(a[1], b[1]))


def _bounded(a, b):
    """The trend of a min or max: monotone where both move one way along each axis (or one stays)."""
    if a is None or b is None or any(x * y < 0 for x, y in zip(a[1], b[1])):
        return None
    return False, tuple(x if abs(x) >= abs(y) else y for x, y in zip(a[1], b[1]))


def _widens(op) -> bool:
    src, dst = op.operands[0].type, op.results[0].type
    return src.is_int() and dst.is_int() and dst.primitive_bitwidth >= src.primitive_bitwidth and \
        dst.signed == src.signed


def _bytes_read(loop) -> int:
    """Bytes of the blocks an iteration of `loop` loads."""
    blocks = [op.results[0].type for op in loop.walk() if op.name in ("load", "descriptor_load")]
    return sum(t.numel * t.element_ty.primitive_bitwidth // 8 for t in blocks if t.is_block())
