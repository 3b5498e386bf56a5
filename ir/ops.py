"""The op set of block IR and each op's type rule.

`OPS[name]` gives an op's operand count, result count, regions, required attributes and
a `check(op)` that returns an error message (or None). The verifier applies it; the
interpreter and codegen each keep a table from these names to their own code.

Elementwise ops take operands of one type (scalar or block) and return that type,
except `cmp` (returns int1 of the same shape), `select` (int1 condition) and `cast`.
Integer signedness lives in the type (`int32` vs `uint32`): `div`, `rem`, `shr`, `cmp`,
`min` and `max` read it, so no op needs an `s`/`u` variant.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Callable

from .types import block_type, dtype, int1, int8, int32, int64, is_power_of_two, pointer_type, scalar_of, shared_type, tensormap

# name -> (kinds accepted)
BINARY_OPS = {
    "add": "num", "sub": "num", "mul": "num", "div": "num", "rem": "num",
    "min": "num", "max": "num",
    "and": "int", "or": "int", "xor": "int", "shl": "int", "shr": "int", "umulhi": "int",
    "div_rn": "float", "pow": "float", "atan2": "float", "copysign": "float",
    # libdevice's binary functions (fmod is `rem`, fmin/fmax are `min`/`max`)
    "hypot": "float", "remainder": "float", "fdim": "float", "nextafter": "float",
}
UNARY_OPS = {
    "neg": "num", "abs": "num", "not": "int",
    "exp": "float", "exp2": "float", "log": "float", "log2": "float", "log1p": "float",
    "sqrt": "float", "sqrt_rn": "float", "rsqrt": "float",
    "sin": "float", "cos": "float", "tan": "float", "tanh": "float", "erf": "float",
    "floor": "float", "ceil": "float", "round": "float", "trunc": "float",
    "isnan": "float", "isinf": "float",
    # libdevice's unary functions
    "expm1": "float", "exp10": "float", "log10": "float", "cbrt": "float", "rint": "float",
    "sinh": "float", "cosh": "float", "asin": "float", "acos": "float", "atan": "float",
    "asinh": "float", "acosh": "float", "atanh": "float",
    "erfc": "float", "erfinv": "float", "lgamma": "float", "tgamma": "float",
    "isfinite": "float", "signbit": "float",
    "popc": "int", "clz": "int", "brev": "int",
    "rsqrt_rn": "float", "rcbrt": "float", "rcp64h": "float", "erfcx": "float",
    "j0": "float", "j1": "float", "y0": "float", "y1": "float",
    "cyl_bessel_i0": "float", "cyl_bessel_i1": "float",
}
# unary tests on floats: their result is int1 of the operand's shape
PREDICATE_OPS = frozenset({"isnan", "isinf", "isfinite", "signbit"})
TERNARY_OPS = {"fma": "float", "norm3d": "float", "rnorm3d": "float"}
QUATERNARY_OPS = {"norm4d": "float", "rnorm4d": "float"}
# libdevice's arithmetic with an explicit IEEE rounding (attr rounding): operand count
ROUNDED_OPS = {"add_r": 2, "mul_r": 2, "div_r": 2, "fma_r": 3, "sqrt_r": 1}
ROUNDINGS = ("rn", "rz", "rd", "ru")
# Bessel functions of integer order n: (int32 n, float x) -> float
ORDER_OPS = frozenset({"jn", "yn"})
# Ops that compute each element from the same elements of their operands, in the thread that holds
# them: no element moves between threads, nothing goes through shared memory.
ELEMENTWISE_OPS = frozenset({*BINARY_OPS, *UNARY_OPS, *TERNARY_OPS, *QUATERNARY_OPS, *ROUNDED_OPS, *ORDER_OPS,
                             "addptr", "bitcast", "cast", "cvt_r", "cmp", "constant", "select", "multiple_of", "max_contiguous"})
CMP_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")
ATOMIC_KINDS = ("add", "max", "min", "and", "or", "xor", "xchg")
MEM_SEMANTICS = ("relaxed", "acquire", "release", "acq_rel")
MEM_SCOPES = ("gpu", "cta", "sys")


@dataclass(frozen=True)
class OpDef:
    operands: tuple[int, int]            # inclusive range of operand counts
    results: tuple[int, int] = (1, 1)
    regions: int = 0
    attrs: tuple[str, ...] = ()
    check: Callable | None = None
    terminator: bool = False
    side_effects: bool = False
    notes: str = field(default="", compare=False)


def _shape(t):
    return t.shape if isinstance(t, block_type) else ()


def _kind_ok(t, kind):
    s = scalar_of(t)
    if kind == "num":
        return s.is_int() or s.is_floating()
    if kind == "int":
        return s.is_int()
    return s.is_floating()


def _same_types(op):
    types = [v.type for v in op.operands] + [r.type for r in op.results]
    if any(t != types[0] for t in types):
        return "operand and result types differ: " + ", ".join(map(str, types))


def _elementwise(kind):
    def check(op):
        if op.name in PREDICATE_OPS:
            if op.results[0].type != _with_elem(op.operands[0].type, int1):
                return "result must be int1 of the operand's shape"
            return None if _kind_ok(op.operands[0].type, kind) else f"{op.name} needs a floating operand"
        err = _same_types(op)
        if err:
            return err
        if not _kind_ok(op.results[0].type, kind):
            return f"{op.name} does not take {op.results[0].type}"
    return check


def _with_elem(t, elem):
    return block_type(elem, t.shape) if isinstance(t, block_type) else elem


def _check_cmp(op):
    a, b = op.operands
    if a.type != b.type:
        return f"operands differ: {a.type} vs {b.type}"
    if op.attrs.get("pred") not in CMP_PREDICATES:
        return f"unknown predicate {op.attrs.get('pred')!r}"
    if op.results[0].type != _with_elem(a.type, int1):
        return f"result must be {_with_elem(a.type, int1)}"


def _check_select(op):
    c, a, b = op.operands
    if scalar_of(c.type) != int1:
        return "condition must be int1"
    if a.type != b.type or a.type != op.results[0].type:
        return "select's values and result must share a type"
    if _shape(c.type) != _shape(a.type):
        return "condition and values must share a shape"


def _check_cast(op):
    src, dst = op.operands[0].type, op.results[0].type
    if _shape(src) != _shape(dst):
        return f"cast cannot change the shape ({src} -> {dst})"
    s, d = scalar_of(src), scalar_of(dst)
    if (s.is_ptr() or d.is_ptr()) and not ((s.is_ptr() or s.is_int()) and (d.is_ptr() or d.is_int())):
        return f"a pointer converts only to and from a pointer or an integer ({s} -> {d})"
    if op.name == "bitcast":
        s, d = scalar_of(src), scalar_of(dst)
        if s.primitive_bitwidth != d.primitive_bitwidth:
            return f"bitcast between types of different widths ({s} -> {d})"


def _check_rounding(op):
    if op.attrs.get("rounding") not in ROUNDINGS:
        return f"rounding must be one of {', '.join(ROUNDINGS)}, not {op.attrs.get('rounding')!r}"


def _check_rounded(op):
    return _check_rounding(op) or _elementwise("float")(op)


def _check_cvt_r(op):
    src, dst = op.operands[0].type, op.results[0].type
    if _shape(src) != _shape(dst):
        return f"cvt_r cannot change the shape ({src} -> {dst})"
    if not scalar_of(dst).is_floating() or not (scalar_of(src).is_floating() or scalar_of(src).is_int()):
        return f"cvt_r converts numbers to a float, not {src} -> {dst}"
    return _check_rounding(op)


def _check_order_op(op):
    n, x = op.operands
    if scalar_of(n.type) != int32 or _shape(n.type) != _shape(x.type):
        return f"{op.name}'s order must be int32 of x's shape, not {n.type}"
    if not _kind_ok(x.type, "float") or op.results[0].type != x.type:
        return f"{op.name} takes and returns a float, not {x.type} -> {op.results[0].type}"


def _check_constant(op):
    if "value" not in op.attrs:
        return "constant needs a value"
    value = op.attrs["value"]
    if not isinstance(value, numbers.Real):  # a string or a list would reach codegen's arithmetic
        return f"a constant's value is a number, not {type(value).__name__} {value!r}"[:200]
    if scalar_of(op.results[0].type).is_int() and isinstance(value, float) and not math.isfinite(value):
        return f"an integer constant cannot be {value}"


def _check_arange(op):
    start, end = op.attrs.get("start"), op.attrs.get("end")
    t = op.results[0].type
    if not isinstance(start, int) or not isinstance(end, int) or end <= start:
        return "arange needs integer start < end"
    if t != block_type(int32, [end - start]):
        return f"arange result must be <{end - start}xint32>"


def _check_grid_query(op):
    if op.attrs.get("axis") not in (0, 1, 2):
        return "axis must be 0, 1 or 2"
    if op.results[0].type != int32:
        return "result must be int32"


def _check_splat(op):
    src, dst = op.operands[0].type, op.results[0].type
    if isinstance(src, block_type) or not isinstance(dst, block_type) or dst.scalar != src:
        return "splat takes a scalar to a block of it"


def _check_broadcast(op):
    src, dst = op.operands[0].type, op.results[0].type
    if not isinstance(src, block_type) or not isinstance(dst, block_type) or src.scalar != dst.scalar:
        return "broadcast takes a block to a block of the same element type"
    if len(src.shape) != len(dst.shape) or any(s not in (1, d) for s, d in zip(src.shape, dst.shape)):
        return f"cannot broadcast {src} to {dst}"


def _check_expand_dims(op):
    src, dst = op.operands[0].type, op.results[0].type
    axis = op.attrs.get("axis")
    shape = list(_shape(src))
    if not isinstance(axis, int) or not 0 <= axis <= len(shape):
        return "bad axis"
    shape.insert(axis, 1)
    if dst != block_type(scalar_of(src), shape):
        return f"expand_dims result must be {block_type(scalar_of(src), shape)}"


def _numel(t):
    n = 1
    for d in _shape(t):
        n *= d
    return n


def _check_reshape(op):
    src, dst = op.operands[0].type, op.results[0].type
    if scalar_of(src) != scalar_of(dst) or _numel(src) != _numel(dst):
        return f"cannot reshape {src} to {dst}"


def _check_permute(op):
    src, dst = op.operands[0].type, op.results[0].type
    order = op.attrs.get("order")
    shape = _shape(src)
    if sorted(order or []) != list(range(len(shape))):
        return f"order {order} is not a permutation of {len(shape)} dims"
    if dst != block_type(scalar_of(src), [shape[i] for i in order]):
        return "permute result shape does not follow the order"


def _check_join(op):
    a, b = op.operands
    if a.type != b.type:
        return "join needs two values of one type"
    want = block_type(scalar_of(a.type), list(_shape(a.type)) + [2])
    if op.results[0].type != want:
        return f"join result must be {want}"


def _check_split(op):
    t = op.operands[0].type
    if not _shape(t) or _shape(t)[-1] != 2:
        return "split needs a block whose last dim is 2"
    want = _with_shape(t, _shape(t)[:-1])
    if any(r.type != want for r in op.results):
        return f"split results must be {want}"


def _with_shape(t, shape):
    return block_type(scalar_of(t), shape) if shape else scalar_of(t)


def _check_cat(op):
    a, b = op.operands
    if a.type != b.type or not _shape(a.type):
        return "cat needs two blocks of one type"
    shape = list(_shape(a.type))
    shape[0] *= 2
    if op.results[0].type != block_type(scalar_of(a.type), shape):
        return "cat result must double dim 0"


def _check_addptr(op):
    p, off = op.operands
    if not scalar_of(p.type).is_ptr():
        return "addptr needs a pointer"
    if not scalar_of(off.type).is_int() or _shape(off.type) != _shape(p.type):
        return "addptr offset must be an integer of the pointer's shape"
    if op.results[0].type != p.type:
        return "addptr result must have the pointer's type"


def _check_mask(op, ptr, mask):
    if scalar_of(mask.type) != int1 or _shape(mask.type) != _shape(ptr.type):
        return "mask must be int1 of the pointer's shape"


def _check_load(op):
    ptr = op.operands[0]
    if not scalar_of(ptr.type).is_ptr():
        return "load needs a pointer"
    want = _with_elem(ptr.type, scalar_of(ptr.type).element_ty)
    if op.results[0].type != want:
        return f"load result must be {want}"
    if len(op.operands) >= 2:
        err = _check_mask(op, ptr, op.operands[1])
        if err:
            return err
    if len(op.operands) == 3 and op.operands[2].type != want:
        return f"load's other must be {want}"
    return _check_ordering(op, ("acquire", "relaxed"))


def _check_ordering(op, sems):
    """An atomic load's or store's `sem` and `scope` (both or neither)."""
    if "sem" not in op.attrs and "scope" not in op.attrs:
        return None
    if op.attrs.get("sem") not in sems or op.attrs.get("scope") not in MEM_SCOPES:
        return f"{op.name}: sem must be one of {sems} and scope one of {MEM_SCOPES}"


def _check_store(op):
    ptr, val = op.operands[:2]
    if not scalar_of(ptr.type).is_ptr():
        return "store needs a pointer"
    if val.type != _with_elem(ptr.type, scalar_of(ptr.type).element_ty):
        return f"stored value {val.type} does not match pointer {ptr.type}"
    if len(op.operands) == 3:
        err = _check_mask(op, ptr, op.operands[2])
        if err:
            return err
    return _check_ordering(op, ("release", "relaxed"))


def _check_atomic_rmw(op):
    ptr, val, mask = op.operands
    if op.attrs.get("kind") not in ATOMIC_KINDS:
        return f"unknown atomic kind {op.attrs.get('kind')!r}"
    if op.attrs.get("sem") not in MEM_SEMANTICS or op.attrs.get("scope") not in MEM_SCOPES:
        return "bad memory semantics or scope"
    if not scalar_of(ptr.type).is_ptr() or val.type != _with_elem(ptr.type, scalar_of(ptr.type).element_ty):
        return f"atomic value {val.type} does not match pointer {ptr.type}"
    if op.results[0].type != val.type:
        return "atomic result must have the value's type"
    return _check_mask(op, ptr, mask)


def _check_atomic_cas(op):
    ptr, cmp, val = op.operands
    if op.attrs.get("sem") not in MEM_SEMANTICS or op.attrs.get("scope") not in MEM_SCOPES:
        return f"sem must be one of {MEM_SEMANTICS} and scope one of {MEM_SCOPES}"
    want = _with_elem(ptr.type, scalar_of(ptr.type).element_ty) if scalar_of(ptr.type).is_ptr() else None
    if want is None or cmp.type != want or val.type != want or op.results[0].type != want:
        return f"atomic_cas operands must match pointer {ptr.type}"


def mixed_fp8(a, b) -> bool:
    """Dot operands of two fp8 formats, e4m3 and e5m2 (fp8e4nv, fp8e5): the tensor cores read each
    in its own format (Triton takes any pair of fp8 types)."""
    return {a.name, b.name} == {"fp8e4nv", "fp8e5"}


def _check_dot(op):
    a, b, acc = op.operands
    sa, sb, sc = _shape(a.type), _shape(b.type), _shape(acc.type)
    if len(sa) not in (2, 3) or len(sa) != len(sb) or len(sc) != len(sa):
        return "dot needs 2-D (or batched 3-D) blocks"
    if sa[-1] != sb[-2] or sc[-2:] != (sa[-2], sb[-1]) or sa[:-2] != sb[:-2] or sc[:-2] != sa[:-2]:
        return f"dot shapes do not agree: {a.type} x {b.type} -> {acc.type}"
    if op.results[0].type != acc.type:
        return "dot result must have the accumulator's type"
    if scalar_of(a.type) != scalar_of(b.type) and not mixed_fp8(scalar_of(a.type), scalar_of(b.type)):
        return "dot operands must share an element type (or be e4m3 and e5m2)"


def _check_reduce_like(op):
    axis = op.attrs.get("axis")
    n = len(op.operands)
    if not op.operands or n != len(op.results):
        return f"{op.name} needs as many results as operands"
    shape = _shape(op.operands[0].type)
    if any(_shape(v.type) != shape for v in op.operands):
        return "operands must share a shape"
    if not isinstance(axis, int) or not 0 <= axis < len(shape):
        return f"axis {axis} out of range for shape {shape}"
    out_shape = shape if op.name == "scan" else shape[:axis] + shape[axis + 1:]
    for v, r in zip(op.operands, op.results):
        if r.type != _with_shape(v.type, out_shape):
            return f"result {r.type} should be {_with_shape(v.type, out_shape)}"
    body = op.regions[0]
    want = [scalar_of(v.type) for v in op.operands] * 2
    if [a.type for a in body.args] != want:
        return "combine region must take (lhs..., rhs...) scalars"


def _check_for(op):
    lb, ub, step = op.operands[:3]
    if not (lb.type == ub.type == step.type) or not lb.type.is_int() or lb.type.is_block():
        return "for bounds must be integer scalars of one type"
    carried = [v.type for v in op.operands[3:]]
    body = op.regions[0]
    if [a.type for a in body.args] != [lb.type] + carried:
        return "for body must take (iv, carried...)"
    if [r.type for r in op.results] != carried:
        return "for results must match its carried values"


def _check_if(op):
    if op.operands[0].type != int1:
        return "if condition must be an int1 scalar"
    if any(r.args for r in op.regions):
        return "if regions take no arguments"


def _check_while(op):
    before, after = op.regions
    if [a.type for a in before.args] != [v.type for v in op.operands]:
        return "while's before region must take the initial values"
    if [a.type for a in after.args] != [r.type for r in op.results]:
        return "while's after region must take the loop's result types"


def _check_hint(op):
    values = op.attrs.get("values")
    err = _same_types(op)
    if err:
        return err
    if not isinstance(values, list) or len(values) != max(1, len(_shape(op.operands[0].type))):
        return "hint needs one value per dimension"


def _check_gather(op):
    src, index = (v.type for v in op.operands)
    axis, rank = op.attrs.get("axis"), len(_shape(src))
    if not rank or len(_shape(index)) != rank or not scalar_of(index).is_int():
        return "gather needs a source block and an integer index block of the same rank"
    if not isinstance(axis, int) or not 0 <= axis < rank:
        return f"axis {axis} out of range for rank {rank}"
    if any(s != i for d, (s, i) in enumerate(zip(_shape(src), _shape(index))) if d != axis):
        return "index and source must agree on every dimension but the axis"
    if op.results[0].type != block_type(scalar_of(src), _shape(index)):
        return f"gather result must be {block_type(scalar_of(src), _shape(index))}"


def _check_histogram(op):
    values = op.operands[0].type
    bins = op.attrs.get("num_bins")
    if len(_shape(values)) != 1 or not scalar_of(values).is_int():
        return "histogram needs a 1-D integer block"
    if len(op.operands) == 2 and op.operands[1].type != _with_elem(values, int1):
        return "histogram's mask must be int1 of the input's shape"
    if not isinstance(bins, int) or op.results[0].type != block_type(int32, [bins]):
        return "histogram result must be <num_bins x int32>"


def _check_assert(op):
    if scalar_of(op.operands[0].type) != int1:
        return f"the condition must be int1, not {op.operands[0].type}"


# An inline_asm constraint: an output (=r, =&r), an input (r, or 0: tied to output 0, of its element
# type) or a clobber (~{memory}); the registers are NVPTX's: b (pred), c and h (16 bits), r (32), l (64),
# f (f32), d (f64); spaces as Triton's own tests write them ("=r,r, r"). Anything else ('q', 'n', 'i',
# '{%r1}', a tie across types) LLVM refuses or aborts the whole process on.
_ASM_CONSTRAINT = re.compile(r"(?P<out>=&? *[bchrlfd][ bchrlfd]*)|(?P<in> *[bchrlfd][ bchrlfd]*)|(?P<tied> *\d+ *)"
                             r"|(?P<clobber>~\{[\w.%]+\})", re.ASCII)
# in the asm text: $$ (a dollar sign), $N or ${N} (operand N); LLVM aborts on any other $
_ASM_OPERAND = re.compile(r"\$(?:\$|(\d+)|\{(\d+)\})", re.ASCII)


def _asm_slots(t, pack: int) -> int:
    """How many asm operands carry `pack` elements of type `t`: codegen's rule (kiln.codegen.lower.asm._slots;
    tests/test_ir_fuzzed_requests.py holds them equal): narrow elements packed in 32-bit words, wide ones one each."""
    s = scalar_of(t)
    bits = 1 if s.is_bool() else s.primitive_bitwidth
    if pack == 1:
        return 1
    if bits < 32:
        return bits * pack // 32 if bits * pack % 32 == 0 else 1
    return pack


def _check_inline_asm(op):
    shapes = {_shape(v.type) for v in [*op.operands, *op.results]}
    if len(shapes) > 1:
        return "inline_asm operands and results must share one shape"
    if not isinstance(op.attrs.get("asm"), str) or not isinstance(op.attrs.get("constraints"), str):
        return "inline_asm needs string attrs asm and constraints"
    pack = op.attrs.get("pack")
    if not isinstance(pack, int) or not 1 <= pack <= 1 << 16:
        return "inline_asm needs a pack from 1 to 65536"
    err = _check_asm_constraints(op, pack)
    if err:
        return err
    slots = sum(_asm_slots(v.type, pack) for v in [*op.results, *op.operands])  # the constraints' outputs and inputs
    return _check_asm_text(op.attrs["asm"], slots)


def _check_asm_constraints(op, pack):
    outs, ins, clobbers, ties = 0, 0, 0, {}
    for entry in op.attrs["constraints"].split(","):
        m = _ASM_CONSTRAINT.fullmatch(entry)
        if m is None:
            return (f"constraint {entry[:40]!r} is none of =r (an output), r (an input), 0 (an input tied to "
                    "output 0), ~{memory} (a clobber); registers: b c h r l f d")
        if (m["out"] and (ins or clobbers)) or (m["clobber"] is None and clobbers):
            return "constraints go outputs, then inputs, then clobbers"
        if m["tied"] is not None:
            tied = int(m["tied"])
            if tied >= outs or tied in ties.values():
                return f"an input tied to output {m['tied'].strip()[:10]}: of {outs} outputs, each tied once at most"
            ties[ins] = tied
        outs, ins, clobbers = outs + bool(m["out"]), ins + bool(m["in"] or m["tied"]), clobbers + bool(m["clobber"])
    want_out = sum(_asm_slots(r.type, pack) for r in op.results)
    want_in = sum(_asm_slots(v.type, pack) for v in op.operands)
    if (outs, ins) != (want_out, want_in):
        return (f"the constraints name {outs} outputs and {ins} inputs, but {len(op.results)} results and "
                f"{len(op.operands)} operands, {pack} elements a call, are {want_out} and {want_in}")
    if ties:  # outs and ins are at most the constraints' length here
        out_types = [scalar_of(r.type) for r in op.results for _ in range(_asm_slots(r.type, pack))]
        in_types = [scalar_of(v.type) for v in op.operands for _ in range(_asm_slots(v.type, pack))]
        for i, o in ties.items():
            if in_types[i] != out_types[o]:
                return f"input {i} is tied to output {o}: a {in_types[i]} to a {out_types[o]}"


def _check_asm_text(asm, operands):
    at = 0
    while (at := asm.find("$", at)) >= 0:
        m = _ASM_OPERAND.match(asm, at)
        number = m and (m[1] or m[2])
        if m is None or (number is not None and int(number) >= operands):
            return f"{asm[at:at + 12]!r} in the asm: its operands are $0 to ${operands - 1} ($$ for a dollar sign)"
        at = m.end()


# --- the GPU stage: shared-memory buffers, async copies, warpgroup dots ---------------
# Codegen's passes create these after the target-independent passes; the frontend never
# does. Async ops are ordered by program order (they have side effects): a copy's data
# may be read after an `async_wait` that leaves fewer groups pending than were committed
# after it, and a barrier.

def _check_local_alloc(op):
    if not isinstance(op.results[0].type, shared_type):
        return "local_alloc makes a shared buffer (smem<...>)"
    offset = op.attrs.get("offset")
    if offset is not None and (not isinstance(offset, int) or offset < 0 or offset % 16):
        return "offset must be a non-negative multiple of 16 bytes"


def _check_local_index(op):
    buf, slot = op.operands
    if not isinstance(buf.type, shared_type) or len(buf.type.shape) < 3:
        return "local_index takes a ring of tiles or a batched tile (a 3- or 4-D shared buffer)"
    if slot.type != int32:
        return "the slot must be an int32 scalar"
    if op.results[0].type != buf.type.tile():
        return f"result must be {buf.type.tile()}"


def _check_convert_layout(op):
    src, out = op.operands[0].type, op.results[0].type
    if not isinstance(src, block_type) or out != src:
        return "convert_layout takes a block and gives the same block (its layout aside)"


def _check_local_trans(op):
    src, t = op.operands[0].type, op.results[0].type
    if not isinstance(src, shared_type) or len(src.shape) not in (2, 3):
        return "local_trans takes one tile of shared memory (or a batched tile: each batch's)"
    if t != src.transposed():
        return f"result must be {src.transposed()}"


def _fills_tile(shape, tile) -> bool:
    """Does a block of `shape` fill shared tile type `tile`: the same shape, or a vector filling
    a tile of one row (smem_pipeline copies row statistics ahead that way)?"""
    return tuple(shape) == tuple(tile.shape) or (len(shape) == 1 and tuple(tile.shape) == (1, shape[0]))


def _check_async_copy(op):
    ptr, dst = op.operands[:2]
    if not isinstance(dst.type, shared_type) or len(dst.type.shape) not in (2, 3):
        return "async_copy writes one tile of shared memory (or one batched tile)"
    if not isinstance(ptr.type, block_type) or not scalar_of(ptr.type).is_ptr():
        return "async_copy reads a block of pointers"
    if not _fills_tile(ptr.type.shape, dst.type) or scalar_of(ptr.type).element_ty != dst.type.element_ty:
        return f"{ptr.type} does not match the tile {dst.type}"
    run = op.attrs.get("prefix_run")
    if (run is not None) != (len(op.operands) == 4):
        return "a copy with a count (its fourth operand) has the attr prefix_run, and only then"
    if run is not None and (type(run) is not int or run < 1 or run & (run - 1)):
        return f"prefix_run must be a power of two, not {run!r}"
    if len(op.operands) == 4 and op.operands[3].type != _with_elem(ptr.type, int32):
        return f"the count must be {_with_elem(ptr.type, int32)}, not {op.operands[3].type}"
    if len(op.operands) >= 3:
        return _check_mask(op, ptr, op.operands[2])


LEAD_DIMS_MAX = 3  # a TMA map has at most 5 dims: a 2-D block of a 5-D host descriptor


def _lead_dims_error(op, rank: int):
    """`lead_dims`: the unit dims of a higher-rank descriptor before the 2-D block, whose offsets come first."""
    lead = op.attrs.get("lead_dims", 0)
    if not isinstance(lead, int) or isinstance(lead, bool) or not 0 <= lead <= LEAD_DIMS_MAX or \
            (lead and (rank != 2 or "wrap_dim" in op.attrs)):
        return f"lead_dims (0 to {LEAD_DIMS_MAX}) counts the unit dims before an unwrapped 2-D block"


def _check_descriptor_load(op):
    tmap, *offsets, fallback = op.operands
    if tmap.type != tensormap:
        return "descriptor_load's first operand is the tensormap"
    t = op.results[0].type
    if not isinstance(t, block_type) or fallback.type != t:
        return f"the fallback value must be the result's block type {t}"
    error = _lead_dims_error(op, len(t.shape))
    if error:
        return error
    lead = op.attrs.get("lead_dims", 0)
    wrap = op.attrs.get("wrap_dim")
    if wrap is not None:
        if not isinstance(wrap, int) or isinstance(wrap, bool) or not 0 <= wrap < len(t.shape):
            return "wrap_dim is one of the block's dims"
        *offsets, extent = offsets
        if extent.type != int32:
            return "a wrapped descriptor_load takes its dim's extent (int32) after the offsets"
    if len(offsets) != lead + len(t.shape) or any(o.type != int32 for o in offsets):
        return f"descriptor_load takes one int32 offset per dim ({lead + len(t.shape)})"


def _barrier_error(t):
    if not isinstance(t, shared_type) or t.element_ty != int64 or t.shape[-2:] != (1, 1):
        return "mbarriers are int64 words of shared memory (smem<Nx1x1xint64>, or one smem<1x1xint64>)"


def _check_barriers(op):
    return _barrier_error(op.operands[0].type)


def _check_mbarrier_wait(op):
    err = _check_barriers(op)
    if err or op.operands[1].type != int32:
        return err or "the phase parity is an int32 scalar"


def _check_mbarrier_arrive(op):
    err = _check_barriers(op)
    return err or (None if op.operands[1].type == int1 else "the predicate is an int1 scalar")


def _check_warp_specialize(op):
    if any(r.args for r in op.regions):
        return "warp_specialize's regions take no arguments"
    warps, regs = op.attrs.get("warps"), op.attrs.get("regs")
    if not isinstance(warps, int) or isinstance(warps, bool) or warps < 1 or warps % 4:
        return "warps (the producer partition's) must be a positive multiple of 4 (whole warpgroups)"
    if not (isinstance(regs, list) and len(regs) == 2
            and all(type(r) is int and 24 <= r <= 256 and r % 8 == 0 for r in regs)):
        return "regs are [the kernel's warps' registers, the partition's]: multiples of 8 from 24 to 256"
    replicas = op.attrs.get("replicas", 1)
    if type(replicas) is not int or not 1 <= replicas <= 4:
        return "replicas (of the first region, num_warps warps each) must be 1 to 4"


def _check_turn(op):
    if op.operands[0].type != int1:
        return "the predicate is an int1 scalar"
    owner = op.parent.parent if op.parent is not None else None
    while isinstance(getattr(owner, "name", None), str) and owner.name != "warp_specialize":
        owner = owner.parent.parent if owner.parent is not None else None
    if getattr(owner, "name", None) != "warp_specialize" or owner.attrs.get("replicas", 1) < 2:
        return f"{op.name} belongs in the first region of a warp_specialize with replicas"


def _check_tma_expect(op):
    err = _check_barriers(op)
    nbytes = op.attrs.get("bytes")
    if not err and (not isinstance(nbytes, int) or isinstance(nbytes, bool) or not 0 < nbytes < 1 << 20):
        err = "bytes must be a positive int below 2**20"
    return err or (None if op.operands[1].type == int1 else "the predicate is an int1 scalar")


def _check_tensormap_create(op):
    scratch, base, *sizes = op.operands
    if not isinstance(scratch.type, pointer_type) or scratch.type.element_ty != int8 or _shape(scratch.type):
        return "the first operand is the global scratch (a scalar int8 pointer)"
    if not isinstance(base.type, pointer_type) or _shape(base.type):
        return "the base is a scalar pointer"
    if len(sizes) != 3 or any(s.type != int32 for s in sizes[:2]) or sizes[2].type not in (int32, int64):
        return "tensormap_create takes the inner and outer extents as int32 scalars, the outer stride as an int32 or int64"
    if op.results[0].type != tensormap:
        return "tensormap_create makes a tensormap"
    box = op.attrs.get("box")
    if box is not None and (not isinstance(box, list) or len(box) != 3
                            or not all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 256 for b in box)):
        return "box is [inner elements, rows, swizzle bytes], each from 1 to 256"


def _check_tma_store(op):
    tmap, tile, *coords = op.operands
    if tmap.type != tensormap:
        return "tma_store writes through a tensormap"
    if not isinstance(tile.type, shared_type) or len(tile.type.shape) != 2:
        return "tma_store reads one tile of shared memory"
    if len(coords) != 2 or any(c.type != int32 for c in coords):
        return "tma_store takes two int32 coordinates (the tile's dims)"


def _check_tma_copy(op):
    tmap, tile, bar, pred, *coords = op.operands
    if tmap.type != tensormap:
        return "tma_copy reads through a tensormap"
    if not isinstance(tile.type, shared_type) or len(tile.type.shape) != 2:
        return "tma_copy writes one tile of shared memory"
    error = _lead_dims_error(op, 2)
    if error:
        return error
    lead = op.attrs.get("lead_dims", 0)
    coords = coords[lead:]  # (the leading dims' coordinates first)
    wrap, rows = op.attrs.get("wrap_dim"), op.attrs.get("box_rows")
    if wrap is not None:
        if not isinstance(wrap, int) or isinstance(wrap, bool) or wrap not in (0, 1) or len(coords) != 3:
            return "a wrapped tma_copy names its wrapped dim (0 or 1) and takes that dim's extent last"
        coords = coords[:2]
    if rows is not None:
        outer = tile.type.shape[tile.type.order[1]]
        if not isinstance(rows, int) or isinstance(rows, bool) or rows % 8 or not 0 < rows <= outer or outer % rows:
            return "box_rows is a multiple of 8 that divides the tile's rows"
    if pred.type != int1 or len(coords) != 2 or any(c.type != int32 for c in op.operands[4:]):
        return "tma_copy takes an int1 predicate and two int32 coordinates (the tile's dims), after lead_dims others"
    return _barrier_error(bar.type)


def _check_pending(op):
    pending = op.attrs.get("pending")
    if not isinstance(pending, int) or isinstance(pending, bool) or pending < 0:
        return "pending must be a non-negative int"


def _check_local_load(op):
    (tile,) = op.operands
    if not isinstance(tile.type, shared_type) or len(tile.type.shape) != 2:
        return "local_load reads one tile of shared memory"
    t = op.results[0].type
    if not isinstance(t, block_type):  # a scalar from a tile of one (smem_pipeline's copied scalars)
        if tuple(tile.type.shape) != (1, 1) or t != tile.type.element_ty:
            return f"{t} does not match the tile {tile.type}"
    elif not _fills_tile(t.shape, tile.type) or t.element_ty != tile.type.element_ty:
        return f"{t} does not match the tile {tile.type}"


def _check_local_store(op):
    value, dst = op.operands
    if not isinstance(dst.type, shared_type) or len(dst.type.shape) != 2:
        return "local_store writes one tile of shared memory"
    if not isinstance(value.type, block_type) or value.type.shape != dst.type.shape \
            or value.type.element_ty != dst.type.element_ty:
        return f"{value.type} does not match the tile {dst.type}"


def _batched_tile_dot(op) -> bool:
    """An mma_dot of 3-D shared tiles ([B, M, K] x [B, K, N], a batched dot's rings)?"""
    a, b = op.operands[:2]
    return op.name == "mma_dot" and all(isinstance(v.type, shared_type) and len(v.type.shape) == 3 for v in (a, b))


def _check_tile_dot(op):
    """warp_group_dot and mma_dot: B a shared tile, A one too or registers (16-bit types; fp8 too
    for warp_group_dot, fp32 (tf32) for mma_dot); mma_dot's fp32 B in registers too. A `transposed`
    warp_group_dot (C^T = B^T A^T: B read into registers) takes an N-major B of 8- or 32-bit elements."""
    a, b, acc = op.operands
    elem = a.type.element_ty
    in_registers = isinstance(a.type, block_type) and (
        elem.itemsize == 2 or (op.name == "warp_group_dot" and elem.is_fp8()) or
        (op.name == "mma_dot" and elem.name == "fp32"))
    b_in_registers = op.name == "mma_dot" and isinstance(b.type, block_type) and b.type.element_ty.name == "fp32"
    if not ((isinstance(a.type, shared_type) or in_registers) and (isinstance(b.type, shared_type) or b_in_registers)) \
            or len(a.type.shape) != 2 or len(b.type.shape) != 2:
        if not _batched_tile_dot(op):
            return (f"{op.name} reads b from a shared tile, a from a shared tile or registers (16-bit types, fp8 on "
                    "wgmma, fp32 on mma; b too: fp32 on mma), or both from batched tiles (mma_dot)")
    (M, K), (K2, N) = a.type.shape[-2:], b.type.shape[-2:]
    batch = tuple(a.type.shape[:-2])
    if K != K2 or _shape(acc.type) != (*batch, M, N) or op.results[0].type != acc.type \
            or tuple(b.type.shape[:-2]) != batch:
        return f"shapes do not agree: {a.type} x {b.type} -> {acc.type}"
    if a.type.element_ty != b.type.element_ty and not mixed_fp8(a.type.element_ty, b.type.element_ty):
        return "operands must share an element type (or be e4m3 and e5m2)"
    if op.attrs.get("transposed") and not (
            op.name == "warp_group_dot" and isinstance(a.type, shared_type) and isinstance(b.type, shared_type)
            and b.type.order[0] == 1
            and elem.itemsize in (1, 4)):
        return "a transposed warp_group_dot reads a shared A and an N-major B of 8- or 32-bit elements"


CLUSTER_SUM_MAX = 4  # CTAs of a cluster that cluster_sum adds up (kiln.codegen.passes.split_k)


def _check_cluster_sum(op):
    acc, ctas, rank = op.operands
    if not isinstance(acc.type, block_type) or scalar_of(acc.type).name not in ("fp32", "int32") or \
            op.results[0].type != acc.type:
        return "cluster_sum adds fp32 or int32 blocks and returns the block's type"
    if ctas.type != int32 or rank.type != int32:
        return "cluster_sum's CTA count and rank are int32 scalars"
    return None


def _check_dot_wait(op):
    if [r.type for r in op.results] != [v.type for v in op.operands]:
        return "warp_group_dot_wait returns its operands"
    return _check_pending(op)


def _check_shape_pow2(op):
    for r in op.results:
        if any(not is_power_of_two(d) for d in _shape(r.type)):
            return f"block shape {_shape(r.type)} is not made of powers of two"


# The type of each attribute, by name (every op that has one gives it the same type): a request's
# attribute of another type would reach codegen's string and list handling (found by fuzzing).
_STR, _INT, _FLAG, _INTS = "a string", "an integer", "a bool", "a list of integers"
ATTR_TYPES = {
    **dict.fromkeys(("asm", "cache", "constraints", "evict", "input_precision", "kind", "message", "pred", "prefix",
                     "rounding", "scope", "sem"), _STR),
    **dict.fromkeys(("axis", "bytes", "count", "end", "loop_unroll_factor", "num_bins", "num_stages", "pack",
                     "pending", "replicas", "start", "warps"), _INT),
    **dict.fromkeys(("can_reorder", "flatten", "hex", "propagate_nan", "reverse", "volatile"), _FLAG),
    **dict.fromkeys(("order", "regs", "values"), _INTS),
}


def attr_type_error(name: str, value) -> str | None:
    """Why attribute `name` cannot have `value` (ATTR_TYPES), or None."""
    want = ATTR_TYPES.get(name)
    if want is None:
        return None
    if want == _STR:
        ok = isinstance(value, str)
    elif want == _INT:
        ok = isinstance(value, int)
    elif want == _FLAG:
        ok = isinstance(value, bool) or value in (0, 1) and isinstance(value, int)
    else:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value)
    return None if ok else f"attribute '{name}' must be {want}, not {type(value).__name__}"


OPS: dict[str, OpDef] = {}
for _name, _kind in BINARY_OPS.items():
    OPS[_name] = OpDef((2, 2), attrs=(), check=_elementwise(_kind))
for _name, _kind in UNARY_OPS.items():
    OPS[_name] = OpDef((1, 1), check=_elementwise(_kind))
for _name, _kind in TERNARY_OPS.items():
    OPS[_name] = OpDef((3, 3), check=_elementwise(_kind))
for _name, _kind in QUATERNARY_OPS.items():
    OPS[_name] = OpDef((4, 4), check=_elementwise(_kind))
for _name, _arity in ROUNDED_OPS.items():
    OPS[_name] = OpDef((_arity, _arity), attrs=("rounding",), check=_check_rounded)
for _name in ORDER_OPS:
    OPS[_name] = OpDef((2, 2), check=_check_order_op)

OPS.update({
    "constant": OpDef((0, 0), attrs=("value",), check=_check_constant),
    "cmp": OpDef((2, 2), attrs=("pred",), check=_check_cmp),
    "select": OpDef((3, 3), check=_check_select),
    "cast": OpDef((1, 1), check=_check_cast, notes="value conversion; attr rounding=rtne|rtz for float narrowing"),
    "bitcast": OpDef((1, 1), check=_check_cast),
    "cvt_r": OpDef((1, 1), attrs=("rounding",), check=_check_cvt_r,
                   notes="number -> float with the IEEE rounding attr rounding=rn|rz|rd|ru"),
    "program_id": OpDef((0, 0), attrs=("axis",), check=_check_grid_query),
    "num_programs": OpDef((0, 0), attrs=("axis",), check=_check_grid_query),
    "arange": OpDef((0, 0), attrs=("start", "end"), check=_check_arange),
    "splat": OpDef((1, 1), check=_check_splat),
    "broadcast": OpDef((1, 1), check=_check_broadcast),
    "expand_dims": OpDef((1, 1), attrs=("axis",), check=_check_expand_dims),
    "reshape": OpDef((1, 1), check=_check_reshape, notes="row-major; attr can_reorder"),
    "permute": OpDef((1, 1), attrs=("order",), check=_check_permute),
    "join": OpDef((2, 2), check=_check_join),
    "split": OpDef((1, 1), results=(2, 2), check=_check_split),
    "cat": OpDef((2, 2), check=_check_cat),
    "addptr": OpDef((2, 2), check=_check_addptr),
    "load": OpDef((1, 3), check=_check_load, notes="ptr[, mask[, other]]; attrs cache, evict, volatile, sem+scope"),
    "descriptor_load": OpDef((3, 8), check=_check_descriptor_load,
                             notes="tensormap, offsets..., [extent,] fallback: a host TensorDescriptor's block at "
                                   "offsets, equal to `fallback` (the same block loaded through pointers); codegen "
                                   "may copy it with TMA instead. attr wrap_dim: that dim's index wraps at `extent` "
                                   "and its elements past it are never seen (pointer_tma); attr lead_dims: a 2-D "
                                   "block of a descriptor of that many more dims, each of block size 1, whose "
                                   "offsets come first"),
    "store": OpDef((2, 3), results=(0, 0), check=_check_store, side_effects=True, notes="ptr, value[, mask]"),
    "atomic_rmw": OpDef((3, 3), attrs=("kind", "sem", "scope"), check=_check_atomic_rmw, side_effects=True),
    "atomic_cas": OpDef((3, 3), attrs=("sem", "scope"), check=_check_atomic_cas, side_effects=True),
    "dot": OpDef((3, 3), check=_check_dot, notes="a, b, acc; attrs input_precision, max_num_imprecise_acc"),
    "reduce": OpDef((1, 16), results=(1, 16), regions=1, attrs=("axis",), check=_check_reduce_like),
    "scan": OpDef((1, 16), results=(1, 16), regions=1, attrs=("axis", "reverse"), check=_check_reduce_like),
    "for": OpDef((3, 1 << 16), results=(0, 1 << 16), regions=1, check=_check_for),
    "if": OpDef((1, 1), results=(0, 1 << 16), regions=2, check=_check_if),
    "while": OpDef((0, 1 << 16), results=(0, 1 << 16), regions=2, check=_check_while),
    "yield": OpDef((0, 1 << 16), results=(0, 0), terminator=True),
    "condition": OpDef((1, 1 << 16), results=(0, 0), terminator=True),
    "return": OpDef((0, 0), results=(0, 0), terminator=True),
    "print": OpDef((0, 1 << 16), results=(0, 0), attrs=("prefix",), side_effects=True),
    "assert": OpDef((1, 1), results=(0, 0), attrs=("message",), check=_check_assert, side_effects=True),
    "multiple_of": OpDef((1, 1), attrs=("values",), check=_check_hint),
    "max_contiguous": OpDef((1, 1), attrs=("values",), check=_check_hint),
    "barrier": OpDef((0, 0), results=(0, 0), side_effects=True),
    "assume": OpDef((1, 1), results=(0, 0), check=lambda op: None if op.operands[0].type == int1 else
                    "the condition is one int1",
                    notes="a promise that the condition holds (llvm.assume); no side effect, but dce keeps it"),
    "gdc_wait": OpDef((0, 0), results=(0, 0), side_effects=True,
                      notes="griddepcontrol.wait (sm_90+): wait until the grids this one depends on (a "
                            "programmatic dependent launch) have completed and their writes are visible"),
    "gdc_launch_dependents": OpDef((0, 0), results=(0, 0), side_effects=True,
                                   notes="griddepcontrol.launch_dependents (sm_90+): dependent grids may start "
                                         "once every CTA has issued it or exited"),
    "gather": OpDef((2, 2), attrs=("axis",), check=_check_gather, notes="src, index: src[.., index, ..] along axis"),
    "histogram": OpDef((1, 2), attrs=("num_bins",), check=_check_histogram,
                       notes="values[, mask]; values outside [0, num_bins) are not counted"),
    "inline_asm": OpDef((0, 1 << 16), results=(1, 1 << 16), attrs=("asm", "constraints", "pack"),
                        check=_check_inline_asm, notes="elementwise PTX; attr volatile when not pure"),
    "convert_layout": OpDef((1, 1), check=_check_convert_layout,
                            notes="the same block in the result type's layout (codegen's layout passes)"),
    "local_alloc": OpDef((0, 0), check=_check_local_alloc, side_effects=True,
                         notes="a shared buffer; attr offset (bytes) set by the allocation pass"),
    "local_index": OpDef((2, 2), check=_check_local_index, notes="buffer, slot: one tile of a ring"),
    "local_trans": OpDef((1, 1), check=_check_local_trans,
                         notes="the same bytes read as the transposed tile (for a dot's operand)"),
    "async_copy": OpDef((2, 4), results=(0, 0), check=_check_async_copy, side_effects=True,
                        notes="ptr, tile[, mask[, count]]: cp.async global -> shared; masked-off elements are zero; "
                              "with count (int32) and attr prefix_run = w, the mask is a prefix of every aligned "
                              "run of v <= w elements along the tile's inner dim, min(count, v) long at its start"),
    "local_store": OpDef((2, 2), results=(0, 0), check=_check_local_store, side_effects=True,
                         notes="value, tile: registers -> shared memory"),
    "local_load": OpDef((1, 1), check=_check_local_load, side_effects=True,
                        notes="tile: shared memory -> registers (a ring tile that cp.async filled)"),
    "async_commit": OpDef((0, 0), results=(0, 0), side_effects=True, notes="close a group of async copies"),
    "async_wait": OpDef((0, 0), results=(0, 0), attrs=("pending",), check=_check_pending, side_effects=True,
                        notes="wait until at most `pending` copy groups are in flight (this thread's)"),
    "fence_async_shared": OpDef((0, 0), results=(0, 0), side_effects=True,
                                notes="order generic-proxy shared writes before async-proxy reads (wgmma, TMA)"),
    "warp_group_dot": OpDef((3, 3), check=_check_tile_dot, side_effects=True,
                            notes="a (tile or registers), b tile, acc: wgmma, issued and committed as one group, not awaited"),
    "mma_dot": OpDef((3, 3), check=_check_tile_dot, side_effects=True,
                     notes="a (tile or registers), b tile, acc: mma.sync on fragments loaded from the tiles by ldmatrix"),
    "mbarrier_init": OpDef((1, 1), results=(0, 0), attrs=("count",), check=_check_barriers, side_effects=True,
                           notes="bars: thread 0 initializes every mbarrier of the buffer, arrival count `count`"),
    "mbarrier_inval": OpDef((1, 1), results=(0, 0), check=_check_barriers, side_effects=True,
                            notes="bars: thread 0 invalidates them (their bytes may then be reused)"),
    "mbarrier_wait": OpDef((2, 2), results=(0, 0), check=_check_mbarrier_wait, side_effects=True,
                           notes="bar, parity: every thread waits until the phase of that parity completed"),
    "mbarrier_arrive": OpDef((2, 2), results=(0, 0), check=_check_mbarrier_arrive, side_effects=True,
                             notes="bar, pred: the first thread of each warpgroup (where pred holds) arrives on bar"),
    "warp_specialize": OpDef((0, 0), results=(0, 0), regions=2, attrs=("warps", "regs"), check=_check_warp_specialize,
                             side_effects=True,
                             notes="region 0 runs on the kernel's num_warps warps (`replicas` times over, "
                                   "num_warps warps each, default 1), region 1 on `warps` more (a producer "
                                   "partition); attr regs = [registers per thread of the first, of the second] "
                                   "(setmaxnreg); barriers in a region sync that region's (replica's) warps only"),
    "partition_index": OpDef((0, 0), check=lambda op: None if op.results[0].type == int32 else "the index is an int32",
                             side_effects=True,  # not to be moved out of its region
                             notes="which replica of its warp_specialize region runs this (int32; 0 outside one)"),
    "turn_wait": OpDef((1, 1), results=(0, 0), check=_check_turn, side_effects=True,
                       notes="pred: in a replica, wait until the replica before it passed the turn (ping-pong)"),
    "turn_pass": OpDef((1, 1), results=(0, 0), check=_check_turn, side_effects=True,
                       notes="pred: in a replica, pass the turn to the next replica"),
    "tma_expect": OpDef((2, 2), results=(0, 0), attrs=("bytes",), check=_check_tma_expect, side_effects=True,
                        notes="bar, pred: thread 0 arrives, expecting `bytes` of bulk copies on bar"),
    "tma_store": OpDef((4, 4), results=(0, 0), check=_check_tma_store, side_effects=True,
                       notes="tensormap, tile, c0, c1: thread 0 copies the tile to the box at (c0, c1) by TMA "
                             "(past the extents nothing is written) and waits until the tile has been read"),
    "tensormap_create": OpDef((5, 5), check=_check_tensormap_create, side_effects=True,
                              notes="scratch, base, inner extent, outer extent, outer stride (elements): thread 0 "
                                    "writes a 2-D TMA map of `base` into this CTA's slot of the global scratch; "
                                    "attr box = [inner, rows, swizzle] (smem_pipeline)"),
    "tma_copy": OpDef((6, 9), results=(0, 0), check=_check_tma_copy, side_effects=True,
                      notes="tensormap, tile, bar, pred, [lead coordinates,] c0, c1[, extent]: thread 0's TMA copy "
                            "of the box at (c0, c1), completing on bar; out-of-bounds elements are zero. attr "
                            "wrap_dim: each box along that dim starts at its coordinate mod `extent`; attr "
                            "box_rows: the tile's rows are copied in boxes of that many; attr lead_dims: the map "
                            "has that many more dims, before the tile's, each a box of 1 at its coordinate"),
    "warp_group_dot_wait": OpDef((1, 1 << 16), results=(1, 1 << 16), attrs=("pending",), check=_check_dot_wait,
                                 side_effects=True, notes="wait until at most `pending` dot groups are in flight"),
    "cluster_sum": OpDef((3, 3), check=_check_cluster_sum, side_effects=True,
                         notes="acc, ctas, rank: in CTA `rank` of a cluster of `ctas` (int32s, at most "
                               f"{CLUSTER_SUM_MAX}) along x, rank 0's result is the sum of every CTA's `acc`, "
                               "added in rank order; the others' is their own `acc` (split-K)"),
})

SHAPE_CHECK = _check_shape_pow2
# made by codegen's passes, never by the frontend: the wire refuses them and the
# interpreter has no use for them
GPU_STAGE_OPS = frozenset({"convert_layout", "local_alloc", "local_index", "local_trans", "local_store", "local_load", "async_copy", "async_commit", "async_wait",
                           "fence_async_shared", "warp_group_dot", "warp_group_dot_wait", "mma_dot",
                           "mbarrier_init", "mbarrier_inval", "mbarrier_wait", "mbarrier_arrive", "tma_expect", "tma_copy",
                           "warp_specialize", "partition_index", "turn_wait", "turn_pass",
                           "tensormap_create", "tma_store", "cluster_sum"})
