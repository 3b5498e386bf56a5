"""sm_90a: a loop whose every block walks one axis 16 or 32 wide a step takes 64 / B steps as one.

Tutorial 06's backward steps 32 query rows a dK/dV iteration (16 on its masked diagonal) and 32
key rows a dQ iteration, so its S = K Q^T and dP = V dO^T are wgmmas 32 (or 16) wide in N, and
each step pays a barrier, its softmax's loads and the loop's bookkeeping for little tensor work.
At 64 rows a step (its constexprs changed by hand) its D128 backward ran 0.83-0.85 of SDPA
against 0.67-0.73 (H200, bench/results/2026-12-02-NVIDIA_H200-session61-tutorial06-bwd-configs.md).

What is proved, with the index forms of kiln.codegen.passes.affine (`iter` = the iteration count):
  walking   a value "walks" dim d when its block at step i + 1 is its block at step i moved one
            block (B = its size along d) along d, so that F = 64 / B steps side by side along d are
            the value of one step 64 wide. A load walks d where its address form Q satisfies
            Q(iter + 1, idx) = Q(iter, idx_d + B) (an arange's walk, or a carried pointer block
            advanced by B rows each step); an int block (an index, a mask's operand) walks d, or is
            the same at every step and along d, by the same identity of its form;
  ops       elementwise ops, broadcasts, expand_dims and permutes walk with their operands; an
            operand that does not walk is the same every step and constant along d (a splat, a
            constant, a broadcast of a size-1 dim); a dot walks N where B walks dim 1 and A is the
            same every step (S^T = K Q^T), or sums over the walking dim (A's dim 1, B's dim 0) into
            an accumulator the loop carries and yields and nothing else reads (dV += P^T dO): the
            fp32 sum regrouped, as a larger BLOCK_K would;
  carried   int32 counters advanced by a loop-invariant step (`curr_m += BLOCK_M1`), pointer blocks
            advanced by a loop-invariant offset, those accumulators; nothing else;
  refused   stores, reductions, nested regions, anything else; a loop without a dot walking N
            (a GEMM's K loop, attention's forward with its row maxima) is left as written.
The coarse loop runs the first trip // F * F steps F at a time, its body built 64 wide along each
value's walking dim (aranges 64 long, index blocks from before the loop rebuilt 64 wide, carried
pointer blocks started 64 wide and advanced F times as far, counters likewise); the loop as written
then runs the rest, its start a `max` / `div` form `pointer_tma` proves non-negative so that those
steps keep their TMA copies. Only where the coarse loop's accumulators and dot results fit the warps the kernel
will run on (`_Plan.held`): tutorial 06's D128 backward, built on 8 warps with its loops coarse or as written, ran
1.05-1.24x; its D64 dK/dV loops, coarse on 8 warps against 4 as written, level or 0.94x, are left alone.
The kernel is marked `coarsen = 1`; the compile builds it again with `coarsen = 0` (the loops as written) where
the coarse build still spills after widening (kiln.codegen.compiler).
"""
from __future__ import annotations

import math

from kiln.ir.core import Block, Operation
from kiln.ir.ops import ELEMENTWISE_OPS
from kiln.ir.types import block_type, int32, pointer_type

from . import affine, dce
from .pointer_tma import ITER, _address, _advanced, _inside, _invariant, _iteration, base_and_offset, emit_poly, \
    in_iterations
from .rewrite import append_op, clone_op, const_int, has_side_effects, in_loop, insert_ops, trip_count

name = "coarsen"
WIDE = 64  # rows a coarse step takes: wgmma's N of 64 and more runs at full rate
STEPS = (16, 32)  # the blocks a step may walk (a block of 64 already takes a whole step)
# fp32 elements a thread may hold in a loop's accumulators and its N-walking dots' results and still not spill
# (sm_90a, tutorial 06's backward: 192 at 241-254 registers, 256 spilled), see `_Plan.held`
HELD = 192
VARY = "vary"  # a value that differs between steps without walking a dim (a counter, an index's part)
SHAPE_OPS = {"broadcast", "expand_dims", "permute"}
FORM_OPS = ELEMENTWISE_OPS - {"constant"}  # built again wide from their operands


class _Refused(Exception):
    """The loop does not fit: left as written."""


def apply(fn, ctx) -> None:
    if ctx.target.name != "sm_90a" or ctx.num_warps % 4 or fn.attrs.get("coarsen", 1) == 0:
        return
    plans = []
    for loop in [op for op in fn.walk() if op.name == "for" and not _nested(op)]:
        try:
            plans.append(_Plan(loop))
        except _Refused:
            continue
    # the warps the kernel runs on: 8 where a loop as written holds more than 4 can (kiln.codegen.compiler widens
    # a 4-warp build that spills), so each loop is weighed on the warps it will have
    warps = ctx.num_warps
    if warps == 4 and any(plan.held(1, 4) > HELD for plan in plans):
        warps = 8
        # the compile then goes straight to the 8-warp build (kiln.codegen.compiler), not through a 4-warp
        # one that would spill: tutorial 06's D128 backward compiled in 1.6-2.6 s instead of 5.4-10.1 (2-core CPU)
        fn.attrs["wants_warps"] = warps
    coarsened = False
    for plan in plans:
        if plan.held(plan.factor, warps) <= HELD:
            plan.rewrite()
            coarsened = True
    if coarsened:
        fn.attrs["coarsen"] = 1
        dce.apply(fn, ctx)  # the narrow copies the coarse body did not need, the yield's own advances


def _nested(loop) -> bool:
    """Is `loop` inside another loop, or does its body hold regions?"""
    return any(op.regions for op in loop.regions[0].ops) or in_loop(loop)


def _widened(t, d, factor):
    shape = list(t.shape)
    shape[d] *= factor
    return block_type(t.element_ty, shape)


def _operand_dim(op, d):
    """The operand dim that result dim `d` of a shape op (or an elementwise op) reads, or None
    (a dim expand_dims made)."""
    if op.name == "expand_dims":
        a = op.attrs["axis"]
        return None if d == a else d if d < a else d - 1
    if op.name == "permute":
        return list(op.attrs["order"])[d]
    return d


def _result_dim(op, k):
    """The result dim operand dim `k` of a shape op (or an elementwise op) becomes."""
    if op.name == "expand_dims":
        return k if k < op.attrs["axis"] else k + 1
    if op.name == "permute":
        return list(op.attrs["order"]).index(k)
    return k


class _Plan:
    """What one loop's steps walk, proved (or _Refused), and the coarse loop built from it."""

    def __init__(self, loop):
        self.loop, self.body = loop, loop.regions[0]
        self.forms = affine.Forms()
        self.iteration = _iteration(loop, self.forms)
        if self.iteration is None:
            raise _Refused
        self.walk: dict = {}  # body value -> dim it walks, None (the same every step) or VARY
        self.step = None  # B: the size of every walking dim
        self.demanded: dict = {}
        self.n_walks = 0
        self.walking_elements = 0  # of the N-walking dots' results, at one step
        self.uses = {}
        for op in self.body.ops:
            for v in op.operands:
                self.uses.setdefault(v, []).append(op)
        self._seed_carried()
        for op in self.body.ops[:-1]:
            self._classify(op)
        self._check_yield()
        if not self.n_walks:
            raise _Refused
        self.factor = WIDE // self.step

    # --- what walks -------------------------------------------------------------------------------

    def kind(self, v):
        if v in self.walk:
            return self.walk[v]
        if _inside(v, self.loop):
            raise _Refused  # (a value of a nested region)
        return None

    def _seed_carried(self):
        """The iv and counters vary; pointer blocks walk the dim their address proves; the rest
        are accumulators (checked at the yield)."""
        args = self.body.args
        self.walk[args[0]] = VARY
        self.accumulators = set()
        for j, arg in enumerate(args[1:]):
            if arg.type == int32:
                if _advanced(self.loop, j, self.forms) is None:
                    raise _Refused
                self.walk[arg] = VARY
            elif isinstance(arg.type, block_type) and isinstance(arg.type.element_ty, pointer_type):
                found = _address(arg, self.loop, self.forms, self.iteration)
                if found is None or _inside(found[0], self.loop):
                    raise _Refused
                self.walk[arg] = self._walking_dim(found[1], arg.type.shape)
            elif isinstance(arg.type, block_type):
                self.walk[arg] = "acc"
                self.accumulators.add(arg)
            else:
                raise _Refused

    def _walking_dim(self, q, shape):
        """The one dim along which form `q` (in `iter`) walks, B wide; _Refused where none does."""
        if q is None or not _invariant(self.forms, q, self.loop) or ITER not in affine.atoms_of(q):
            raise _Refused
        dims = [d for d in range(len(shape)) if shape[d] in STEPS and self._shifts(q, d, shape[d])]
        if len(dims) != 1:
            raise _Refused
        self._step(shape[dims[0]])
        return dims[0]

    def _shifts(self, q, d, size) -> bool:
        """Is q(iter + 1, idx) = q(iter, idx_d + size)?"""
        idx = ("idx", d)
        later = affine.substitute(q, ITER, {(ITER,): 1, (): 1})
        along = affine.substitute(q, idx, {(idx,): 1, (): size})
        return later is not None and along is not None and later == along

    def _step(self, size):
        if self.step not in (None, size):
            raise _Refused
        self.step = size

    def _form(self, v):
        """The index form of an int or pointer block in `iter` (None where it has none)."""
        if isinstance(v.type.element_ty, pointer_type):
            if v in self.body.args:
                found = _address(v, self.loop, self.forms, self.iteration)
            else:
                found = _base_and_offset(v, self.forms)
                if found is not None:
                    found = (found[0], in_iterations(found[1], self.loop, self.forms, self.iteration))
            if found is None or _inside(found[0], self.loop):
                return None
            poly = found[1]
        else:
            poly = self.forms.of(v)
            poly = None if poly is None else in_iterations(poly, self.loop, self.forms, self.iteration)
        if poly is None or any(a[0] == "wrap" for a in affine.atoms_of(poly)):
            return None  # (a wrapped index repeats along its dim: not a shift)
        return poly

    def demand(self, v, d) -> bool:
        """Can `v` be had 64 wide along d, as the F steps' blocks side by side (or, for a value the
        same every step and constant along d, as itself repeated)?"""
        if not isinstance(v.type, block_type):
            return self.kind(v) is None
        key = (v, d)
        if key not in self.demanded:
            self.demanded[key] = False
            self.demanded[key] = self._demand(v, d)
        return self.demanded[key]

    def _demand(self, v, d) -> bool:
        kind, shape = self.kind(v), v.type.shape
        if kind == d:
            return True
        if kind == "acc" or isinstance(kind, int):
            return False
        if shape[d] == 1:
            return kind is None
        scalar = v.type.element_ty
        if isinstance(scalar, pointer_type) or (scalar.is_int() and not scalar.is_bool()):
            q = self._form(v)
            if q is not None and _invariant(self.forms, q, self.loop) and self._shifts(q, d, shape[d]):
                if ITER in affine.atoms_of(q):
                    self._step(shape[d])
                return True
        op = v.defining_op
        if op is None:
            return False
        if op.name in ("constant", "splat"):
            return op.name == "constant" or self.kind(op.operands[0]) is None
        if op.name in FORM_OPS | SHAPE_OPS:
            k = _operand_dim(op, d)
            return all(not isinstance(o.type, block_type) and self.kind(o) is None
                       or isinstance(o.type, block_type) and (k is None and self.kind(o) is None or
                                                             k is not None and self.demand(o, k))
                       for o in op.operands)
        return False

    def _classify(self, op):
        if op.regions or has_side_effects(op) or op.attrs.get("volatile") or len(op.results) != 1:
            raise _Refused
        v = op.results[0]
        kinds = [self.kind(o) for o in op.operands]
        if "acc" in kinds and op.name != "dot":
            raise _Refused
        if not isinstance(v.type, block_type):  # scalars: counters' arithmetic, loop-invariant values
            if any(isinstance(k, int) for k in kinds):
                raise _Refused
            self.walk[v] = VARY if VARY in kinds else None
            return
        if all(k is None for k in kinds):
            self.walk[v] = None  # the same every step (a load of it too: nothing in the loop stores)
            return
        if op.name == "load":
            self.walk[v] = d = self._walking_dim(self._form(op.operands[0]), v.type.shape)
            if not all(self.demand(o, d) for o in op.operands[1:]):
                raise _Refused
        elif op.name == "dot":
            self._classify_dot(op)
        elif op.name == "splat":  # of a counter: an index's part, had wide by its index form where needed
            self.walk[v] = VARY
        elif op.name in FORM_OPS | SHAPE_OPS:
            dims = {_result_dim(op, k) for o, k in zip(op.operands, kinds) if isinstance(k, int)}
            if len(dims) > 1:
                raise _Refused
            if not dims:
                self.walk[v] = VARY
                return
            d = dims.pop()
            k = _operand_dim(op, d)
            if k is None or not all(self.demand(o, k) if isinstance(o.type, block_type) else self.kind(o) is None
                                    for o in op.operands):
                raise _Refused
            self.walk[v] = d
        else:
            raise _Refused

    def _classify_dot(self, op):
        a, b, c = op.operands
        v = op.results[0]
        if len(v.type.shape) != 2:
            raise _Refused
        if self.kind(a) is None and self.demand(b, 1) and self.demand(c, 1):
            self.walk[v] = 1
            self.n_walks += 1
            self.walking_elements += math.prod(v.type.shape)
        elif c in self.accumulators and self.demand(a, 1) and self.demand(b, 0) \
                and self.uses.get(c) == [op] and self.uses.get(v) == [self.body.terminator] \
                and self.body.terminator.operands.index(v) == c.index - 1 \
                and self.body.terminator.operands.count(v) == 1:
            self.walk[v] = "sum"
        else:
            raise _Refused

    def _check_yield(self):
        """Every accumulator yielded from the dot that sums into it (checked there)."""
        for arg in self.accumulators:
            out = self.body.terminator.operands[arg.index - 1]
            if self.walk.get(out) != "sum" or out.defining_op.operands[2] is not arg:
                raise _Refused

    def held(self, factor, warps) -> float:
        """The fp32 elements a thread holds in the loop's accumulators and its N-walking dots' results (S^T and
        dP^T) with `factor` steps taken as one: at most HELD where the loop pays. Tutorial 06's D64 backward at
        its own config holds 192 (dK/dV) written and 256 coarse, which spilled and was widened to 8 warps, there
        level with and 0.94x of the 4-warp build as written; at D128 the loops as written hold 320 on 4 warps
        and are built on 8, where coarse ones hold 192 and ran 1.05-1.24x (H200)."""
        accumulators = sum(math.prod(a.type.shape) for a in self.accumulators)
        return (accumulators + factor * self.walking_elements) / (32 * warps)

    # --- the coarse loop --------------------------------------------------------------------------

    def rewrite(self):
        loop, body, f = self.loop, self.body, self.factor
        loc = loop.loc
        before: list = []
        lb, ub, step = loop.operands[:3]
        s = const_int(step)

        def emit(out):
            return lambda name, operands, t, **attrs: append_op(out, name, operands, [t], loc, **attrs)

        out = emit(before)
        trips = trip_count(before, loop)
        done = out("mul", [out("div", [trips, out("constant", [], int32, value=f)], int32),
                           out("constant", [], int32, value=f)], int32)
        coarse_ub = out("add", [lb, out("mul", [done, step], int32)], int32)
        coarse_step = out("constant", [], int32, value=s * f)

        self.before, self.ops, self.wide, self.map = before, [], {}, {}
        inits, types = [], []
        for j, arg in enumerate(body.args[1:]):
            init = loop.operands[3 + j]
            if isinstance(self.walk[arg], int):
                init = self._wide(init, self.walk[arg], before)
            inits.append(init)
            types.append(init.type)
        coarse_body = Block([int32] + types)
        for old, new in zip(body.args, coarse_body.args):
            self.map[old] = new
            if isinstance(self.walk[old], int):
                self.wide[(old, self.walk[old])] = new
        for op in body.ops[:-1]:
            self._build(op)
        self.ops.append(Operation("yield", self._yields(coarse_body, emit(self.ops)), [], loc=loc))
        for op in self.ops:
            coarse_body.append(op)
        coarse = Operation("for", [lb, coarse_ub, coarse_step] + inits, types, dict(loop.attrs), [coarse_body], loc)

        # the loop as written takes the steps left, from where the coarse loop stopped
        for j, arg in enumerate(body.args[1:]):
            if arg in self.accumulators:
                loop.operands[3 + j] = coarse.results[j]
            elif arg.type == int32:
                loop.operands[3 + j] = emit_poly(_advanced(loop, j, self.forms), done, self.forms, out)
            else:
                moved = affine.mul(self._advance(j), {(ITER,): 1})
                offset = emit_poly(moved, done, self.forms, out)
                shape = arg.type.shape
                loop.operands[3 + j] = out("addptr", [loop.operands[3 + j],
                                                      out("splat", [offset], block_type(int32, shape))], arg.type)
        loop.operands[0] = coarse_ub
        block = loop.parent
        insert_ops(block, block.ops.index(loop), before + [coarse])

    def _advance(self, j):
        """The loop-invariant step carried value j (an int32 counter or a pointer block) moves by, as a form:
        the yield's add or addptr of it (`_advanced` and `_address` proved them)."""
        arg, nxt = self.body.args[1 + j], self.body.terminator.operands[j].defining_op
        return self.forms.of(next(v for v in nxt.operands if v is not arg))

    def _yields(self, coarse_body, emit):
        out = []
        for j, (arg, value) in enumerate(zip(self.body.args[1:], self.body.terminator.operands)):
            new_arg = coarse_body.args[1 + j]
            if arg in self.accumulators:
                out.append(self.map[value])
            else:
                offset = emit_poly(affine.mul(self._advance(j), affine.constant(self.factor)), None, self.forms, emit)
                if arg.type == int32:
                    out.append(emit("add", [new_arg, offset], int32))
                else:
                    out.append(emit("addptr", [new_arg, emit("splat", [offset], block_type(int32, new_arg.type.shape))],
                                    new_arg.type))
        return out

    def _build(self, op):
        kind = self.walk[op.results[0]]
        if isinstance(kind, int):
            self.wide[(op.results[0], kind)] = self._wide_op(op, kind, self.ops)
            return
        new = clone_op(op, self.map)
        if kind == "sum":
            a, b, _ = op.operands
            new.operands[:2] = [self._wide(a, 1, self.ops), self._wide(b, 0, self.ops)]
        self.ops.append(new)

    def _wide(self, v, d, out):
        """`v` 64 wide along d (the demand proved it can be): built into `out`, or before the loop
        for a value from there."""
        if not isinstance(v.type, block_type):
            return self.map.get(v, v)
        if v.type.shape[d] == 1:
            return self.map.get(v, v)
        key = (v, d)
        if key not in self.wide:
            if not _inside(v, self.loop):
                out = self.before
            op = v.defining_op
            if op is None:
                raise AssertionError(f"coarsen: no wide form of {v}")
            self.wide[key] = self._wide_op(op, d, out)
        return self.wide[key]

    def _wide_op(self, op, d, out):
        v = op.results[0]
        t = _widened(v.type, d, self.factor)
        if op.name == "constant":
            return append_op(out, "constant", [], [t], op.loc, **op.attrs)
        if op.name == "arange":
            start = op.attrs["start"]
            return append_op(out, "arange", [], [t], op.loc, start=start, end=start + t.shape[0])
        if op.name == "splat":
            return append_op(out, "splat", [self.map.get(op.operands[0], op.operands[0])], [t], op.loc)
        if op.name == "dot":
            a, b, c = op.operands
            operands = [self.map.get(a, a), self._wide(b, 1, out), self._wide(c, 1, out)]
        else:  # loads (pointer, mask and other all walk d), elementwise and shape ops
            k = d if op.name == "load" else _operand_dim(op, d)
            operands = [self._wide(o, k, out) if isinstance(o.type, block_type) and k is not None
                        else self.map.get(o, o) for o in op.operands]
        return append_op(out, op.name, operands, [t], op.loc, **op.attrs)


def _base_and_offset(p, forms):
    """pointer_tma.base_and_offset, its base followed through scalar addptrs (bench's `M + start_m + offs_m`:
    a base moved each step)."""
    found = base_and_offset(p, forms)
    if found is None:
        return None
    base, poly = found
    while base.defining_op is not None and base.defining_op.name in ("addptr",) + affine.HINTS:
        op = base.defining_op
        if op.name == "addptr":
            offset = forms.of(op.operands[1])
            if offset is None:
                return None
            poly = affine.add(poly, offset)
        base = op.operands[0]
    return base, poly
