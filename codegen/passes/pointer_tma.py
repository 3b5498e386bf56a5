"""sm_90a: pointer loads of a dot's operands that read a box of a matrix become TMA copies,
on a map the launcher encodes from the kernel's own arguments, or, where the matrix's base,
extents or stride are values the kernel computes or reads (tutorial 08's descriptors), on a
map the kernel writes itself (`tensormap_create`, before the loop).

Tutorial 03's matmul reads A and B through pointer blocks; through host TensorDescriptors
(TMA) the same loop runs 4-6% faster (bench/tma.py): one thread issues a box copy instead
of every thread computing addresses and masks for a dozen cp.async. This pass proves that
a load in a pipelined loop reads what a TMA box of a 2-D tensor reads, and puts a
`descriptor_load` on a new kernel argument (a `tensormap`, attribute
`tma_of = [base, inner extent, outer extent, outer stride]`: the indices of the kernel
arguments the launcher encodes it from) beside it, with the pointer load as its fallback:
`smem_pipeline` fills a ring by TMA from it where it can, `descriptor_loads` puts the
pointer load back everywhere else and drops the argument.

What is proved, with the index forms of kiln.codegen.passes.affine (`iter` = the loop's
iteration count, `idx_d` = the element's index along dim d):
  address   base + X_1 + s * X_0: base a 16-byte aligned pointer, s an int32 or int64 (a host
            TensorDescriptor's strides are int64 arguments) whose byte
            stride is a multiple of 16 (an argument's specialization says so, or, for
            values that are no arguments, a `multiple_of` hint: what a descriptor
            promises), both loop-invariant, X_1 the contiguous dim;
  coords    X_d = a_d + delta_d * iter + idx_d (a_d and delta_d loop-invariant: the
            pointer advances by as many rows or columns every iteration, or the rows are an
            int32 the loop carries and advances so: tutorial 06's `offsetk_y += BLOCK_N`), or
            X_d = (a_d + idx_d) % E_d ("wraps", tutorial 03's `% M`); the contiguous
            dim's a_1 + delta_1 * iter a 16-byte multiple (TMA faults on a box that starts
            between: an illegal instruction);
  extents   every other dim has a mask term `X_d < E_d` (tutorial 03's K edge), E_d an
            int32 loop-invariant; terms `X_d >= 0` are allowed (TMA reads those as zeros too);
            `other` is absent or zero, so that masked-off elements read zero as out-of-box ones do.
A plain dim's start must be proved non-negative (or masked by `X_d >= 0`): TMA reads
nothing before the base. A wrapped dim reads row (a + i) % E where TMA reads zeros past E;
for a >= 0 the rows before E are the same (a negative `a` would read before the base,
out of the tensor the map describes). The load must then only
feed dots, along their M (A's rows) or N (B's columns), whose accumulators are carried by
the loop and after it only go through elementwise ops into stores masked by
`a + idx < E` on that dim: the rows that differ are never stored. Such a load's
`descriptor_load` carries E after its offsets (attr `wrap_dim`): its copies may then start
a box past E at its row mod E (smem_plan.copy_box), since a box that reaches past the
tensor is slow to copy and what lands in rows past E is never seen. A wrapped contiguous
dim (B's columns) takes that only where E is a 16-byte multiple too: a column mod E
must be one to start a box.

A map the kernel writes costs every CTA its build before the first copy (the fields written in
shared memory, copied to global scratch, fenced for the tensormap proxy): a loop known to run fewer
than KERNEL_MAP_MIN_TRIPS times keeps its pointer loads on cp.async, as Triton does. fla's
chunk_fwd_kernel_o (a K loop of 2 steps, three such maps) ran in 100.5 us on them and in 83.3 on
cp.async (H100, 2026-12-05); its recurrence fwd_h (a loop over the sequence's chunks, a count the
kernel reads) in 90.0 on them and 98.3 without.
"""
from __future__ import annotations

import math

from kiln.ir.core import Block, Function, Operation
from kiln.ir.types import block_type, int8, int32, int64, pointer_type, tensormap

from ..analysis.axis_info import AxisAnalysis
from . import affine
from .rewrite import const_int, insert_ops, is_transpose, loop_trips, replace_uses
from .smem_plan import enabled as pipelines

name = "pointer_tma"
ITER = ("iter",)  # the iteration-count atom
KERNEL_MAP_MIN_TRIPS = 8  # a loop's known trip count from which maps the kernel writes pay (module docstring)

# ops that map each element to the element at the same index (the accumulator's rows stay its rows)
ELEMENTWISE = {"cast", "add", "sub", "mul", "div", "rem", "neg", "max", "min", "maximum", "minimum", "fma", "exp",
               "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sigmoid", "tanh", "erf", "sin", "cos", "floor", "ceil",
               "cvt_r", "precise_div", "precise_sqrt", "clamp", "umulhi", "and", "or", "xor", "not", "cmp",
               "select", "fp_to_fp", "cluster_sum"}


def apply(fn, ctx) -> None:
    if not pipelines(ctx) or fn.attrs.get("derived_args", 1) == 0:  # 0: the launcher's fallback build
        return
    divisors, made_before = hinted_divisors(fn), {}
    for loop in [op for op in fn.walk() if op.name == "for"]:
        if int(loop.attrs.get("num_stages", ctx.num_stages)) < 2:
            continue
        forms = affine.Forms()
        trips = loop_trips(loop)
        short = trips is not None and trips < KERNEL_MAP_MIN_TRIPS
        for load in [op for op in loop.regions[0].ops if op.name == "load"]:
            box = _Box.prove(load, loop, fn, forms, divisors)
            if box is not None and not (short and not from_arguments(fn, box.base, box.stride, box.extents)):
                box.rewrite(fn, made_before)


class _Box:
    """What a proved load reads: base argument, per-dim coordinate forms and extents."""

    def __init__(self, load, loop, forms, base, stride, coords, extents, wrapped=None, transposed=False):
        self.load, self.loop, self.forms, self.base, self.stride = load, loop, forms, base, stride
        self.coords, self.extents = coords, extents  # per block dim: poly in `iter` and invariants; an argument
        self.wrapped = wrapped  # the dim whose index wraps at its extent, or None
        self.transposed = transposed  # the load is the box's transpose (the dims above are the box's)

    @classmethod
    def prove(cls, load, loop, fn, forms, divisors):
        t = load.results[0].type
        if not isinstance(t, block_type) or len(t.shape) != 2 or load.attrs.get("volatile"):
            return None  # a volatile or atomic load reads memory where and when the kernel says
        ptr, mask, other = (load.operands + [None, None])[:3]
        if other is not None and not _zero(other):
            return None
        iteration = _iteration(loop, forms)
        if iteration is None:
            return None
        found = _address(ptr, loop, forms, iteration)
        if found is None:
            return None
        base, poly = found
        transposed = _contiguous_rows(poly)  # a block read down its columns (tl.load of K^T's pointers)
        if transposed:
            poly = swap_dims(poly)
        split = split_strided(poly, fn, base, forms, divisors)
        if split is None or _inside(base, loop) or _inside(split[0], loop):
            return None
        stride, coords, wraps = split
        extents = [forms.wraps[wraps[d]][1] if d in wraps else None for d in range(2)]
        terms = [] if mask is None else mask_terms(mask, forms)
        terms = None if terms is None else [in_iterations(term, loop, forms, iteration) for term in terms]
        if terms is None or None in terms:
            return None
        if transposed:
            terms = [swap_dims(term) for term in terms]
        floored = set()  # dims with a mask term X_d >= 0
        if not bound_dims(terms, coords, wraps, extents, forms, loop, floored):
            named = None if wraps else floored_starts(terms, stride, coords, forms)
            if named is None:
                return None
            coords, extents, floored = named, [None, None], set()
            if not bound_dims(terms, coords, wraps, extents, forms, loop, floored):
                return None
        starts = {d: forms.wraps[wraps[d]][0] if d in wraps else coords[d] for d in range(2)}
        if base not in fn.args:  # a map the kernel makes: an unmasked dim reads where its pointers do
            extents = [UNBOUNDED if e is None else e for e in extents]
        if any(e is None or any(_inside(f, loop) for f in _factors(e)) for e in extents) \
                or not all(_invariant(forms, c, loop) for c in starts.values()):
            return None
        # TMA reads nothing before the base: an unmasked plain dim must start at 0 or after
        # (the launcher checks that the map's extents and stride are at least 1)
        known = {*extents, stride} if from_arguments(fn, base, stride, extents) else set()
        if not all(d in floored or nonnegative(coords[d], forms, known) for d in coords):
            return None
        if any(a[0] == "v" and forms.values[a[1]].type != int32 for c in starts.values() for a in affine.atoms_of(c)):
            return None
        # a wrap is proved on the load's dims, which the dot and the stores see: not on a transposed box's
        if wraps and (transposed or not _wrapped_rows_unseen(fn, load, loop, wraps, forms)):
            return None
        itemsize = base.type.element_ty.itemsize
        if not inner_start_aligned(starts[1], itemsize, fn, forms, divisors):
            return None
        wrapped = next(iter(wraps), None)
        if wrapped == 1 and _divisor(extents[1], fn, divisors) * itemsize % 16:  # (a wrap's E is a value)
            wrapped = None  # a column mod E is no 16-byte multiple: its boxes start unwrapped (zeros past E)
        return cls(load, loop, forms, base, stride, starts, extents, wrapped, transposed)

    def tile_shape(self) -> tuple:
        """The shape of the box the load reads (its own, or its transpose's)."""
        shape = tuple(self.load.results[0].type.shape)
        return shape[::-1] if self.transposed else shape

    def rewrite(self, fn, made_before) -> None:
        body = self.loop.regions[0]
        at = body.ops.index(self.load) + 1
        emitted: list[Operation] = []

        def emit(op_name, operands, t, **attrs):
            op = Operation(op_name, operands, [t], attrs, loc=self.load.loc)
            op.parent = body
            emitted.append(op)
            return op.results[0]

        iteration = _emit_iteration(self.loop, emit)
        offsets = [emit_poly(self.coords[d], iteration, self.forms, emit) for d in range(2)]
        if from_arguments(fn, self.base, self.stride, self.extents):
            index = lambda v: fn.args.index(v)  # noqa: E731
            tmap = fn.body.add_arg(tensormap)
            fn.arg_names.append(f"{fn.arg_names[index(self.base)]}.tma")
            fn.arg_attrs.append({"tma_of": [index(self.base), index(self.extents[1]), index(self.extents[0]),
                                            index(self.stride)]})
        else:
            tmap = create_map(fn, self.loop, self.base, self.extents, self.stride, self.load.loc,
                              made_before=made_before, tile=self.tile_shape())
            if self.stride in fn.args:  # TMA takes no negative row stride, which pointers do: the launch checks
                fn.arg_attrs[fn.args.index(self.stride)]["tma_stride"] = True
        value = self.load.results[0]
        uses = [op for op in fn.walk() if value in op.operands]
        t, fallback = value.type, value
        if self.transposed:  # the box is the load's transpose: its fallback and its result are permuted
            t = block_type(t.element_ty, list(reversed(t.shape)))
            fallback = emit("permute", [value], t, order=[1, 0])
        if self.wrapped is None:
            got = emit("descriptor_load", [tmap, *offsets, fallback], t)
        else:  # the boxes that start past the extent may start at their index mod it (smem_pipeline)
            extent = _materialized(self.extents[self.wrapped], self.loop, self.load.loc)
            got = emit("descriptor_load", [tmap, *offsets, extent, fallback], t, wrap_dim=self.wrapped)
        loaded = emit("permute", [got], value.type, order=[1, 0]) if self.transposed else got
        for op in uses:
            if self.transposed and is_transpose(op):  # tl.trans of the load is the box itself
                replace_uses(fn, {op.results[0]: got})
                op.parent.ops.remove(op)
            else:
                op.operands = [loaded if v is value else v for v in op.operands]
        body.ops[at:at] = emitted


def create_map(fn, at, base, extents, stride, loc, box=None, made_before=None, tile=None):
    """A `tensormap_create` of the matrix (base, extents [outer, inner], stride), as early as
    its operands allow: before op `at`, and out of every enclosing region whose ops do not
    define them. `made_before` (a dict) remembers the maps made: a second load of the same
    matrix and `tile` shape whose map lands in the same block takes the first one's (causal
    attention's two loops over K; a map's box is its tile's, so tiles of another shape, as
    tutorial 06's backward reads Q in 16 rows on the diagonal and 32 off it, need their own)."""
    values = [base, *_factors(extents[0]), *_factors(extents[1])] + ([] if isinstance(stride, Constant) else [stride])
    while isinstance(at.parent.parent, Operation) and not any(_inside(v, at.parent.parent) for v in values):
        at = at.parent.parent
    block = at.parent
    key = (id(block), box and tuple(box), tile, *(_key(v) for v in (base, stride, *extents)))
    if made_before is not None and key in made_before:
        return made_before[key]
    made = []
    inner, outer = _extent_value(extents[1], made, loc), _extent_value(extents[0], made, loc)
    if isinstance(stride, Constant):
        made.append(Operation("constant", [], [int32], {"value": int(stride)}, loc=loc))
        stride = made[-1].results[0]
    made.append(Operation("tensormap_create", [global_scratch(fn), base, inner, outer, stride], [tensormap],
                          {} if box is None else {"box": list(box)}, loc=loc))
    where = block.ops.index(at)
    for op in made:
        op.parent = block
    block.ops[where:where] = made
    if made_before is not None:
        made_before[key] = made[-1].results[0]
    return made[-1].results[0]


def _extent_value(e, made: list, loc):
    """Extent `e` (a value, a Constant or a Product of values) as a value: the ops that compute it
    where it is not one already are appended to `made`."""
    if isinstance(e, Constant):
        made.append(Operation("constant", [], [int32], {"value": int(e)}, loc=loc))
        return made[-1].results[0]
    if not isinstance(e, Product):
        return e
    total = e[0]
    for f in e[1:]:
        made.append(Operation("mul", [total, f], [int32], loc=loc))
        total = made[-1].results[0]
    return total


def _materialized(e, at, loc):
    """Extent `e` as a value, its ops (if any) just before op `at`."""
    made = []
    value = _extent_value(e, made, loc)
    insert_ops(at.parent, at.parent.ops.index(at), made)
    return value


def _key(v):
    """What identifies a map's operand: a value itself, a constant's number, a product's factors."""
    if isinstance(v, Constant):
        return ("constant", int(v))
    if isinstance(v, Product):
        return ("product", *map(id, v))
    return id(v)


def global_scratch(fn):
    """The kernel's global scratch argument (int8 pointer; the launcher passes each CTA
    `bytes` of it, attribute `global_scratch` set by lowering), added on first use."""
    for arg, attrs in zip(fn.args, fn.arg_attrs):
        if "global_scratch" in attrs:
            return arg
    arg = fn.body.add_arg(pointer_type(int8))
    fn.arg_names.append("global_scratch")
    fn.arg_attrs.append({"global_scratch": 0})
    return arg


def from_arguments(fn, base, stride, extents) -> bool:
    """Can the launcher encode the map (base, stride and extents all kernel arguments)?"""
    return all(not isinstance(v, (Product, Constant)) and v in fn.args for v in (base, stride, *extents))


def hinted_divisors(fn) -> dict:
    """value -> the largest divisor a `multiple_of` hint gives it (through widening int
    casts and other hints: the same integer): how the alignment of a base or stride that
    is no argument is known (tl.make_tensor_descriptor hints its base and strides). Scalar
    integers also take what the axis analysis proves of them (a host descriptor's column
    start `(pid * 128).to(tl.int32)`)."""
    axis = AxisAnalysis(fn)
    found: dict = {r: axis.get(r).divisibility[0] for op in fn.walk() for r in op.results
                   if not _shaped(r) and getattr(r.type, "is_int", lambda: False)() and axis.get(r).divisibility[0] > 1}
    for op in fn.walk():
        if op.name != "multiple_of" or op.operands[0].type != op.results[0].type or _shaped(op.results[0]):
            continue
        v = op.operands[0]
        while v.defining_op is not None and (v.defining_op.name in affine.HINTS or _widening(v.defining_op)):
            v = v.defining_op.operands[0]
        found[v] = max(found.get(v, 1), int(op.attrs["values"][0]))
    return found


def _shaped(v) -> bool:
    return isinstance(v.type, block_type)


def _widening(op) -> bool:
    if op.name != "cast":
        return False
    src, dst = op.operands[0].type, op.results[0].type
    return all(getattr(t, "is_int", lambda: False)() for t in (src, dst)) \
        and dst.primitive_bitwidth >= src.primitive_bitwidth and dst.signed == src.signed


def _divisor(v, fn, divisors) -> int:
    """A known divisor of scalar `v`: an argument's specialization (what the launcher's map
    is encoded from), else a hint."""
    if v in fn.args:
        return fn.arg_attrs[fn.args.index(v)].get("divisibility", 1)
    return divisors.get(v, 1)


def pointer_divisor(p, fn, divisors, forms) -> int:
    """A known divisor of scalar pointer `p`'s address in bytes: an argument's specialization or a
    hint, through `addptr`s of offsets whose terms have known divisors (a head's K, `K + batch *
    stride_kz + head * stride_kh`, is 16-byte aligned where K is and both strides are multiples of 8)."""
    op = p.defining_op
    known = _divisor(p, fn, divisors)
    if known > 1 or op is None or op.name != "addptr" or _shaped(p):
        return known
    offset = forms.of(op.operands[1])
    if offset is None:
        return 1
    terms = [abs(c) * math.prod(_atom_divisor(a, fn, forms, divisors) for a in m) for m, c in offset.items()]
    step = math.gcd(*terms) * p.type.element_ty.itemsize if terms else 0
    return math.gcd(pointer_divisor(op.operands[0], fn, divisors, forms), step)


def _atom_divisor(atom, fn, forms, divisors) -> int:
    return _divisor(forms.values[atom[1]], fn, divisors) if atom[0] == "v" else 1


def inner_start_aligned(poly, itemsize, fn, forms, divisors) -> bool:
    """Is the contiguous dim's start `poly` (in `iter` and scalar atoms) a 16-byte multiple? TMA
    faults (an illegal instruction) on a box that starts between, where the pointers read from
    any element. Each term's known divisor must make it one."""
    return all(abs(c) * math.prod(1 if a == ITER else _divisor(forms.values[a[1]], fn, divisors) for a in m)
               * itemsize % 16 == 0 for m, c in poly.items())


def _zero(v) -> bool:
    op = v.defining_op
    return op is not None and op.name == "constant" and op.attrs.get("value") in (0, 0.0) \
        and not isinstance(op.attrs.get("value"), bool)


def _iteration(loop, forms):
    """The induction variable as a polynomial in the iteration count: lb + step * iter
    (a constant step, lb loop-invariant)."""
    lb, _, step = loop.operands[:3]
    s = const_int(step)
    start = forms.of(lb)
    if not s or s <= 0 or start is None or lb.type != int32:
        return None
    return affine.add(start, {(ITER,): s})


def _address(ptr, loop, forms, iteration):
    """(base argument, offset polynomial in `iter`) of a block of pointers read in `loop`'s
    body: computed there from the induction variable, or carried and advanced by a
    loop-invariant scalar each iteration."""
    body = loop.regions[0]
    if ptr.owner is body and ptr is not body.args[0]:
        j = ptr.index - 1
        found = base_and_offset(loop.operands[3 + j], forms)
        step = body.terminator.operands[j].defining_op
        if found is None or step is None or step.name != "addptr" or step.operands[0] is not ptr:
            return None
        advance = forms.of(step.operands[1])
        if advance is None or any(a[0] in ("idx", "wrap") for a in affine.atoms_of(advance)) \
                or not _invariant(forms, advance, loop):
            return None
        moved = affine.mul(advance, {(ITER,): 1})
        base, poly = found
        return None if moved is None else (base, affine.add(poly, moved))
    found = base_and_offset(ptr, forms)
    if found is None:
        return None
    base, poly = found
    poly = in_iterations(poly, loop, forms, iteration)
    return None if poly is None else (base, poly)


def in_iterations(poly, loop, forms, iteration):
    """`poly` of values the loop's body sees, as a polynomial in the iteration count: the induction
    variable is `iteration`, and an int32 the loop carries and advances by a loop-invariant step
    (tutorial 06's `offsetk_y += BLOCK_N`) is its initial value + step * iter. None where that
    does not fit a polynomial."""
    body = loop.regions[0]
    poly = affine.substitute(poly, forms.atom(body.args[0]), iteration)
    for j, arg in enumerate(body.args[1:]):
        if poly is None or forms.atom(arg) not in affine.atoms_of(poly):
            continue
        advanced = _advanced(loop, j, forms)
        poly = None if advanced is None else affine.substitute(poly, forms.atom(arg), advanced)
    return poly


def _advanced(loop, j, forms):
    """init + step * iter for carried value j (after the iv) where each iteration yields it plus a
    loop-invariant int32 step, else None."""
    body = loop.regions[0]
    arg, nxt = body.args[1 + j], body.terminator.operands[j].defining_op
    if arg.type != int32 or nxt is None or nxt.name != "add" or nxt.parent is not body \
            or sorted(v is arg for v in nxt.operands) != [False, True]:
        return None
    step = forms.of(next(v for v in nxt.operands if v is not arg))
    init = forms.of(loop.operands[3 + j])
    if step is None or init is None or not _invariant(forms, step, loop) or not _invariant(forms, init, loop):
        return None
    moved = affine.mul(step, {(ITER,): 1})
    return None if moved is None else affine.add(init, moved)


def base_and_offset(p, forms):
    """(base argument, offset polynomial) of a block of pointers: a splat argument moved
    by addptr, broadcast and expand_dims."""
    op = p.defining_op
    if op is None:
        return None
    if op.name == "splat":
        base = op.operands[0]
        while base.defining_op is not None and base.defining_op.name in affine.HINTS:
            base = base.defining_op.operands[0]  # tl.make_tensor_descriptor's multiple_of on its base
        return (base, {}) if isinstance(base.type, pointer_type) and not _shaped(base) else None
    if op.name == "broadcast":
        return base_and_offset(op.operands[0], forms)
    if op.name == "expand_dims":
        got = base_and_offset(op.operands[0], forms)
        return None if got is None else (got[0], affine.shift(got[1], op.attrs["axis"]))
    if op.name == "addptr":
        got, offset = base_and_offset(op.operands[0], forms), forms.of(op.operands[1])
        if got is None or offset is None:
            return None
        return got[0], affine.add(got[1], offset)
    return None


def split_strided(poly, fn, base, forms, divisors):
    """Read `poly` as X_1 + s * X_0: (s, {dim: coordinate poly for plain dims}, {dim: wrap
    index for wrapped dims}), or None."""
    if pointer_divisor(base, fn, divisors, forms) % 16:
        return None
    outer = [m for m in poly if any(a[0] in ("idx", "wrap") and a[1] == 0 for a in m)]
    inner = [m for m in poly if any(a[0] in ("idx", "wrap") and a[1] == 1 for a in m)]
    if len(outer) != 1 or len(inner) != 1 or outer == inner or poly[inner[0]] != 1:
        return None
    (m_out,), (m_in,) = outer, inner
    if len(m_in) != 1:  # the contiguous dim moves by one element
        return None
    dim_atom = [a for a in m_out if a[0] in ("idx", "wrap")][0]
    rest = [a for a in m_out if a is not dim_atom]
    itemsize = base.type.element_ty.itemsize
    if not rest:  # a constant stride (a head dim: rows HEAD_DIM apart), folded into the coefficients
        stride = poly[m_out]
        if stride <= 1 or (stride * itemsize) % 16:
            return None
        # the terms whose coefficient the stride divides are rows (divided by it), the others
        # columns (a column offset that is a multiple of the stride would count as rows: its
        # mask then matches no dim)
        starts = _offsets(poly, (m_out, m_in), lambda m, c: (0, m, c // stride) if c % stride == 0 else (1, m, c))
        return None if starts is None else _coords(starts, dim_atom, m_in, Constant(stride))
    if len(rest) != 1 or rest[0][0] != "v" or poly[m_out] != 1:
        return None
    stride = forms.values[rest[0][1]]
    if stride.type not in (int32, int64) or (_divisor(stride, fn, divisors) * itemsize) % 16:
        return None
    s = rest[0]

    def dim_of(m, c):  # rows carry the stride atom once, columns not at all
        if m.count(s) == 1:
            return 0, tuple(a for a in m if a != s), c
        return (1, m, c) if s not in m else None
    starts = _offsets(poly, (m_out, m_in), dim_of)
    return None if starts is None else _coords(starts, dim_atom, m_in, stride)


def _offsets(poly, index_terms, dim_of):
    """{dim: offset poly}: every term of `poly` but the index terms, placed by `dim_of(m, c)`
    -> (dim, monomial, coefficient), or None where a term is neither."""
    starts = {0: {}, 1: {}}
    for m, c in poly.items():
        if m in index_terms:
            continue
        placed = None if any(a[0] in ("idx", "wrap") for a in m) else dim_of(m, c)
        if placed is None:
            return None
        d, monomial, coefficient = placed
        starts[d] = affine.add(starts[d], {monomial: coefficient})
    return starts


class Constant(int):
    """A row stride known at compile time; `create_map` makes it a constant op."""

    type = int32


# The extent of a dim the pointers read unmasked, in a map the kernel makes: no coordinate reaches it
# (TMA's extents go to 2^32), so the box reads where the pointers would, as far as they would.
UNBOUNDED = Constant(2**31 - 1)


def _contiguous_rows(poly) -> bool:
    """Is dim 0 the block's contiguous dim (the element after idx_0 the next one in memory) and dim 1
    strided: a tile read transposed through its pointers, as K^T's are in attention's loops?"""
    return poly.get((("idx", 0),)) == 1 and poly.get((("idx", 1),)) != 1


def swap_dims(poly) -> dict:
    """`poly` with block dims 0 and 1 exchanged (their indices and wraps)."""
    def swapped(atom):
        return (atom[0], 1 - atom[1], *atom[2:]) if atom[0] in ("idx", "wrap") else atom
    return {tuple(sorted(swapped(a) for a in m)): c for m, c in poly.items()}


def _coords(starts, dim_atom, m_in, stride):
    """(stride, plain dims' start polys, wrapped dims' wrap indices) from the dims' offsets."""
    coords, wraps = {}, {}
    for d, atom in ((0, dim_atom), (1, m_in[0])):
        if atom[0] == "wrap":
            if starts[d]:
                return None
            wraps[d] = atom[2]
        else:
            coords[d] = affine.add(starts[d], {(("idx", d),): 1})
    return stride, {d: affine.add(c, {(("idx", d),): 1}, -1) for d, c in coords.items()}, wraps


def mask_terms(mask, forms, strict=True):
    """The and-ed comparisons of a mask as polynomials L (term true <=> L < 0, in the
    mask's dims). Strict: None where the mask is anything else; else other and-ed terms
    are skipped (they only clear more elements)."""
    op = mask.defining_op
    skip = None if strict else []
    if op is None:
        return skip
    if op.name == "and":
        a, b = (mask_terms(x, forms, strict) for x in op.operands)
        return None if a is None or b is None else a + b
    if op.name == "broadcast":
        return mask_terms(op.operands[0], forms, strict)
    if op.name == "expand_dims":
        got = mask_terms(op.operands[0], forms, strict)
        return None if got is None else [affine.shift(t, op.attrs["axis"]) for t in got]
    if op.name == "cmp":
        x, y = (forms.of(v) for v in op.operands)
        if x is None or y is None:
            return None
        pred = op.attrs["pred"]
        if pred == "lt":
            return [affine.add(x, y, -1)]
        if pred == "le":
            return [affine.add(affine.add(x, y, -1), affine.constant(-1))]
        if pred == "gt":
            return [affine.add(y, x, -1)]
        if pred == "ge":
            return [affine.add(affine.add(y, x, -1), affine.constant(-1))]
    return skip


def bound_dims(terms, coords, wraps, extents, forms, loop, floored) -> bool:
    """Is every mask term a bound of one dim (`bound_dim`, recording extents and floors)?"""
    return all(bound_dim(term, coords, wraps, extents, forms, loop, floored) is not None for term in terms)


def floored_starts(terms, stride, coords, forms):
    """The dims' starts as the mask's `X_d >= 0` terms name them, where they make the same address
    as `coords` split it (stride * start_0 + start_1), else None. The split puts every offset that
    carries the stride once in the rows; tutorial 06's fp8 V^T is read at a column offset of
    head * HEAD_DIM * N_CTX with N_CTX the row stride, which only the mask places."""
    named = {}
    for term in terms:
        x = affine.add(affine.constant(-1), term, -1)  # the term -X_d - 1 < 0, as X_d
        index = [m for m in x if any(a[0] == "idx" for a in m)]
        if len(index) == 1 and len(index[0]) == 1 and x[index[0]] == 1:
            named.setdefault(index[0][0][1], affine.add(x, {index[0]: 1}, -1))
    if set(named) != {0, 1}:
        return None
    s = affine.constant(int(stride)) if isinstance(stride, Constant) else forms.scalar(stride)
    address = [affine.mul(s, starts[0]) for starts in (coords, named)]
    if None in address or affine.add(address[0], coords[1]) != affine.add(address[1], named[1]):
        return None
    return named


def bound_dim(term, coords, wraps, extents, forms, loop, floored):
    """The dim whose bound `term` is (`X_d < E` records E, `X_d >= 0` the dim in `floored`), or None."""
    for d, start in coords.items():
        x = affine.add(start, {(("idx", d),): 1})
        if affine.add(term, x, 1) == affine.constant(-1):  # -X_d - 1 < 0
            floored.add(d)
            return d
        rest = affine.add(term, x, -1)  # -E
        if len(rest) == 1:
            (m, c), = rest.items()
            if not m and c < 0 and extents[d] in (None, -c):  # a constant extent (a head dim)
                extents[d] = Constant(-c)
                return d
            if c == -1 and m and all(a[0] == "v" for a in m):
                # E one value, or a product of values (tutorial 06's Z * H * N_CTX rows): a Product
                factors = [forms.values[a[1]] for a in m]
                e = factors[0] if len(factors) == 1 else Product(factors)
                if all(f.type == int32 and not _inside(f, loop) for f in factors) and extents[d] in (None, e):
                    extents[d] = e
                    return d
    return None


class Product(tuple):
    """An extent that is a product of int32 values; `create_map` multiplies them out."""

    def __new__(cls, factors):
        return super().__new__(cls, factors)

    @property
    def type(self):
        return int32


def _factors(e) -> list:
    """The values an extent is made of (none for a constant)."""
    return list(e) if isinstance(e, Product) else [] if isinstance(e, Constant) else [e]


def nonnegative(poly, forms, known) -> bool:
    """Is `poly` (in `iter` >= 0 and scalar atoms) at least 0: every coefficient positive
    and every atom at least 0? `known`: arguments the launcher checks are at least 1."""
    memo: dict = {}
    return all(c > 0 and all(a == ITER or _lowest(forms.values[a[1]], known, memo) >= 0 for a in m)
               for m, c in poly.items())


def _lowest(v, known, memo, depth=0) -> float:
    """A lower bound of int scalar `v` (-inf where none is known): program ids and
    non-negative constants are at least 0, `known` arguments at least 1, a loop's induction
    variable its start when its step is at least 0, and bounds go through add, sub of a
    constant, mul, div, rem, min and max."""
    if v in memo:
        return memo[v]
    low = float("-inf")
    op = v.defining_op
    owner = v.owner
    if v in known:
        low = 1
    elif op is None and isinstance(owner, Block) and v.index == 0 and isinstance(owner.parent, Operation) \
            and owner.parent.name == "for" and depth < 64:  # an induction variable: from lb, by a step >= 0
        lb, _, step = owner.parent.operands[:3]
        if _lowest(step, known, memo, depth + 1) >= 0:
            low = _lowest(lb, known, memo, depth + 1)
    elif op is not None and depth < 64:
        args = [_lowest(x, known, memo, depth + 1) for x in op.operands]
        if op.name in ("program_id", "num_programs"):
            low = 0
        elif op.name == "constant" and isinstance(op.attrs.get("value"), int):
            low = op.attrs["value"]
        elif op.name == "add":
            low = args[0] + args[1]
        elif op.name == "sub" and const_int(op.operands[1]) is not None:
            low = args[0] - const_int(op.operands[1])
        elif op.name == "mul" and min(args) >= 0:
            low = args[0] * args[1]
        elif op.name == "div" and args[0] >= 0 and args[1] >= 1:
            low = 0
        elif op.name == "rem" and args[0] >= 0:  # the remainder takes the dividend's sign
            low = 0
        elif op.name in ("min", "max"):
            low = min(args) if op.name == "min" else max(args)
    memo[v] = low
    return low


def _invariant(forms, poly, loop) -> bool:
    """Are all of `poly`'s scalar atoms defined outside `loop`?"""
    for a in affine.atoms_of(poly):
        if a[0] == "v" and _inside(forms.values[a[1]], loop):
            return False
    return True


def _inside(v, loop) -> bool:
    node = getattr(v, "owner", None)  # a Constant stride is nowhere
    while node is not None and not isinstance(node, Function):
        if node is loop:
            return True
        node = node.parent
    return False


def _wrapped_rows_unseen(fn, load, loop, wraps, forms) -> bool:
    """Is the wrapped dim of this load one whose rows past E are never stored: the load
    is A (rows wrapped) or B (columns wrapped) of dots whose accumulators the loop carries
    (one, or several sharing it: a fused gate and up projection), and after the loop only
    elementwise ops take them to stores masked on that dim?"""
    body = loop.regions[0]
    value = load.results[0]
    uses = _uses(fn)
    users = uses.get(value, [])
    if not users or any(u.name != "dot" or u.parent is not body or len(u.operands) != 3 for u in users):
        return False
    side = 0 if all(u.operands[0] is value and u.operands[1] is not value for u in users) \
        else 1 if all(u.operands[1] is value and u.operands[0] is not value for u in users) else None
    if side is None or set(wraps) != {side}:
        return False
    start, extent = forms.wraps[wraps[side]]
    for dot in users:
        acc, result = dot.operands[2], dot.results[0]
        if acc.owner is not body or acc is body.args[0]:
            return False
        j = acc.index - 1
        if uses.get(acc) != [dot] or uses.get(result) != [body.terminator] \
                or body.terminator.operands.count(result) != 1 or body.terminator.operands[j] is not result:
            return False
        if not _stored_masked(uses, loop.results[j], side, start, extent, forms):
            return False
    return True


def _uses(fn) -> dict:
    """value -> the ops of `fn` that read it, in program order."""
    uses: dict = {}
    for op in fn.walk():
        for v in dict.fromkeys(op.operands):
            uses.setdefault(v, []).append(op)
    return uses


def _stored_masked(uses, v, dim, start, extent, forms) -> bool:
    """Does every path from `v` go through elementwise ops into the value of a store whose
    mask has the term `start + idx_dim < extent`?"""
    row = affine.add(start, {(("idx", dim),): 1})
    want = affine.add(row, forms.scalar(extent), -1)
    frontier, seen = [v], set()
    while frontier:
        x = frontier.pop()
        if x in seen:
            continue
        seen.add(x)
        for op in uses.get(x, []):
            if op.name == "store":
                if len(op.operands) < 3 or op.operands[1] is not x or x in (op.operands[0], op.operands[2]):
                    return False
                terms = mask_terms(op.operands[2], forms, strict=False)
                if not terms or want not in terms:
                    return False
            elif op.name in ELEMENTWISE and not op.regions and len(op.results) == 1 \
                    and getattr(op.results[0].type, "shape", None) == x.type.shape:
                frontier.append(op.results[0])
            else:
                return False
    return True


def _emit_iteration(loop, emit):
    """The iteration count (iv - lb) / step as an int32 value in the body."""
    iv = loop.regions[0].args[0]
    lb, _, step = loop.operands[:3]
    s = const_int(step)
    x = iv if const_int(lb) == 0 else emit("sub", [iv, lb], int32)
    return x if s == 1 else emit("div", [x, emit("constant", [], int32, value=s)], int32)


def emit_poly(poly, iteration, forms, emit):
    """`poly` (int32 atoms and `iter`) as ops."""
    total = None
    for m, c in sorted(poly.items()):
        term = None
        for a in m:
            factor = iteration if a == ITER else forms.values[a[1]]
            term = factor if term is None else emit("mul", [term, factor], int32)
        if term is None:
            term = emit("constant", [], int32, value=c)
        elif c != 1:
            term = emit("mul", [term, emit("constant", [], int32, value=c)], int32)
        total = term if total is None else emit("add", [total, term], int32)
    return total if total is not None else emit("constant", [], int32, value=0)
