"""Canonicalize and fold constants.

Folding runs in NumPy at the value's own type, so wraparound and float rounding are the
GPU's. Rules: an op whose operands are all constants becomes a constant (`add`, `sub`,
`mul`, bitwise ops, `min`/`max`, `cmp`, int→int `cast`, `splat`, `broadcast`);
`x + 0`, `x - 0`, `x * 1`, `select` on a constant condition and `broadcast`/`reshape`
to the same type return their operand, a permute of a permute that undoes it the first's operand,
and a reshape of a reshape reads the first's operand (row-major reshapes compose); an `if` on a
constant condition becomes the branch it takes (Inductor's templates test sizes they hold as
constants: `if M * N == 0: return`, and which index math carries `max_contiguous` hints, which the
axis analysis then sees unjoined); a `for` over constant bounds
that runs once becomes its body (fla's `for i_k in range(tl.cdiv(K, BK))` with K == BK: left a loop,
its loads took rings of num_stages slots, 78 KB on 2 warps where Triton's kernel asks 16 KB), and
one that never runs its initial values; a value a loop yields unchanged is its initial value. A
one-trip loop with a dot stays where pipelined dots run on wgmma (sm_90a, whole warpgroups): only a
loop's rings feed wgmma (an Inductor GEMM template at sizes where K is one block), and outside
loops a dot runs on mma.sync.
"""
from __future__ import annotations

import warnings

import numpy as np

from kiln.ir.core import Operation
from kiln.ir.types import scalar_of

from . import smem_plan
from .rewrite import constant_trips, replace_uses

name = "canonicalize"

_NUMPY_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "min": np.minimum, "max": np.maximum,
}
_NUMPY_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
              "gt": np.greater, "ge": np.greater_equal}
DOTS = ("dot", "dot_scaled", "warp_group_dot", "mma_dot")  # (the last two: after smem_pipeline)


def apply(fn, ctx=None) -> None:
    consts: dict = {}
    mapping: dict = {}
    for block in _blocks(fn.body):
        for op in list(block.ops):
            op.operands = [mapping.get(v, v) for v in op.operands]
            if op.name == "constant" and not isinstance(op.attrs["value"], (list, str)):
                consts[op.results[0]] = op.attrs["value"]
                continue
            replacement = _simplify(op, consts)
            if replacement is not None:
                mapping[op.results[0]] = replacement
                continue
            value = _fold(op, consts)
            if value is not None:
                const = Operation("constant", (), [op.results[0].type], {"value": value}, loc=op.loc)
                block.ops[block.ops.index(op)] = const
                const.parent = block
                mapping[op.results[0]] = const.results[0]
                consts[const.results[0]] = value
    replace_uses(fn, mapping)
    _forward_unchanged_carried(fn)
    _inline_constant_ifs(fn, consts)
    _inline_constant_loops(fn, consts, keep_dots=ctx is None or smem_plan.enabled(ctx))


def _forward_unchanged_carried(fn) -> None:
    """A value a `for` yields unchanged (its body's argument itself) is its initial value in the
    body and after the loop; dce then drops the carried copy. fla's `if USE_GK: o_k1 =
    tl.arange(0, 64)` in a loop carries o_k1 though USE_GK is False: as a block argument the
    axis analysis could not tell its arange apart, and the loads indexed by it took its layout."""
    mapping = {}
    for loop in fn.walk():
        if loop.name != "for":
            continue
        body = loop.regions[0]
        yielded = body.ops[-1].operands
        for arg, init, result, y in zip(body.args[1:], loop.operands[3:], loop.results, yielded):
            if y is arg:
                mapping[arg] = mapping[result] = init
    if mapping:
        replace_uses(fn, mapping)


def _inline_constant_ifs(fn, consts) -> None:
    """Each `if` whose condition is a constant -> the ops of the branch it takes, its results
    that branch's yielded values."""
    while True:
        branch = next((op for op in fn.walk() if op.name == "if" and op.operands[0] in consts), None)
        if branch is None:
            return
        taken = branch.regions[0 if consts[branch.operands[0]] else 1]
        block = branch.parent
        at = block.ops.index(branch)
        *ops, end = taken.ops
        block.ops[at:at + 1] = ops
        for op in ops:
            op.parent = block
        replace_uses(fn, dict(zip(branch.results, end.operands)))


def _inline_constant_loops(fn, consts, keep_dots: bool) -> None:
    """Each `for` whose constant bounds give it one trip -> its body with the induction variable
    its start and the carried values their initial ones (`keep_dots`: not where the body has a dot);
    one of no trips -> its initial values."""
    def foldable(op):
        trips = _trips(op, consts)
        return trips == 0 or (trips == 1 and not (keep_dots and any(o.name in DOTS for o in op.walk())))
    while True:
        loop = next((op for op in fn.walk() if op.name == "for" and foldable(op)), None)
        if loop is None:
            return
        block = loop.parent
        at = block.ops.index(loop)
        inits = loop.operands[3:]
        if _trips(loop, consts) == 0:
            block.ops[at:at + 1] = []
            replace_uses(fn, dict(zip(loop.results, inits)))
            continue
        body = loop.regions[0]
        *ops, end = body.ops
        block.ops[at:at + 1] = ops
        for op in ops:
            op.parent = block
        mapping = dict(zip(body.args, [loop.operands[0], *inits]))
        mapping.update(zip(loop.results, [mapping.get(v, v) for v in end.operands]))
        replace_uses(fn, mapping)


def _trips(loop, consts):
    """How many times a `for` over constant bounds runs, or None."""
    bounds = [consts.get(v) for v in loop.operands[:3]]
    if not all(isinstance(x, (int, np.integer)) for x in bounds):
        return None
    return constant_trips(*(int(x) for x in bounds))


def _blocks(root):
    yield root
    for op in root.walk():
        yield from op.regions


def _np_scalar(value, t):
    # a bf16 value is exact in fp32, where its comparisons and casts to integers are the same (its
    # arithmetic is not folded), and ml_dtypes' 0.5 s import stays out of the compile
    dt = np.dtype(np.float32) if scalar_of(t).is_bf16() else scalar_of(t).to_numpy()
    return np.array([value]).astype(dt) if scalar_of(t).is_int() else np.array([value], dtype=dt)


def _to_attr(arr, t):
    s = scalar_of(t)
    v = arr[0]
    if s.is_bool():
        return bool(v)
    if s.is_int():
        return int(v)
    return float(v)


def _fold(op, consts):
    if not op.results or any(v not in consts for v in op.operands) or not op.operands:
        return None
    t = op.results[0].type
    s = scalar_of(t)
    if s.is_ptr() or scalar_of(op.operands[0].type).is_ptr():
        return None
    args = [_np_scalar(consts[v], v.type) for v in op.operands]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if op.name in _NUMPY_BINARY and (s.is_int() or op.name in ("add", "sub", "mul", "min", "max")):
            if s.is_floating() and s.name not in ("fp16", "fp32", "fp64"):
                return None  # bf16/fp8 arithmetic rounds differently in NumPy
            return _to_attr(_NUMPY_BINARY[op.name](args[0], args[1]), t)
        if op.name == "cmp" and not scalar_of(op.operands[0].type).is_fp8():
            return _to_attr(_NUMPY_CMP[op.attrs["pred"]](args[0], args[1]), t)
        if op.name == "cast" and s.is_int() and not s.is_bool() and scalar_of(op.operands[0].type).is_int():
            return _to_attr(args[0].astype(s.to_numpy()), t)
        if op.name in ("splat", "broadcast"):
            return consts[op.operands[0]]
    return None


def _is_const(v, consts, want):
    return v in consts and consts[v] == want and not isinstance(consts[v], bool)


def _simplify(op, consts):
    if not op.results or len(op.results) != 1:
        return None
    if op.name == "reshape" and _of_a_reshape(op):  # row-major reshapes compose: read the first's operand
        op.operands[0] = op.operands[0].defining_op.operands[0]
    ops = op.operands
    if op.name in ("add", "sub") and _is_const(ops[1], consts, 0) and scalar_of(op.results[0].type).is_int():
        return ops[0]
    if op.name == "add" and _is_const(ops[0], consts, 0) and scalar_of(op.results[0].type).is_int():
        return ops[1]
    if op.name == "mul" and scalar_of(op.results[0].type).is_int():
        if _is_const(ops[1], consts, 1):
            return ops[0]
        if _is_const(ops[0], consts, 1):
            return ops[1]
    if op.name == "addptr" and _is_const(ops[1], consts, 0):
        return ops[0]
    if op.name == "select" and ops[0] in consts:
        return ops[1] if consts[ops[0]] else ops[2]
    if op.name in ("broadcast", "reshape", "cast") and ops[0].type == op.results[0].type:
        return ops[0]
    if op.name == "permute" and _undone(op):
        return ops[0].defining_op.operands[0]
    return None


def _of_a_reshape(op) -> bool:
    """Is `op` a row-major reshape of a row-major reshape (a batched descriptor's [1, 1, 1, BM, BK]
    block reshaped to [1, BM, BK], then to [BM, BK])?"""
    inner = op.operands[0].defining_op
    return inner is not None and inner.name == "reshape" and \
        not op.attrs.get("can_reorder") and not inner.attrs.get("can_reorder")


def _undone(op) -> bool:
    """Is `op` a permute of a permute whose orders compose to none (tl.trans(tl.trans(x)))?"""
    inner = op.operands[0].defining_op
    if inner is None or inner.name != "permute":
        return False
    order, first = list(op.attrs["order"]), list(inner.attrs["order"])
    return [first[i] for i in order] == list(range(len(order)))
