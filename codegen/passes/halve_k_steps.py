"""sm_90a: a GEMM's K loop whose step leaves room for fewer than three ring slots runs two steps of half the K.

Tutorial 03's 128x256x64 tile at tf32 reads 96 KB a step, so its ring holds two slots (smem_plan: tight):
each step's copies go out one step ahead, once the dots of the step before retired, and the tensor cores
wait on them (260-266 TFLOP/s at 4096³ and 8192³). The same tile 32 deep, 48 KB a step, keeps three
slots and a spare and ran 335-343 (H200, bench/results/2026-12-04-NVIDIA_H200-matmul-waves-tf32-session72.md).
So such a loop runs twice as many steps, each loading and summing half of the K block: the wgmmas are the
loop's own, in the same order, and the sums are bit for bit those of the loop as written.

What is proved, with the index forms of kiln.codegen.passes.affine (`iter` = the iteration count):
  loop    pipelined (num_stages >= 2); not an fp8 dot with max_num_imprecise_acc (its partial sums run per dot).
  body    one dot, summing into an accumulator the loop carries and yields and nothing else reads, whose A
          and B are loads of the body; the loop's other carried values are pointer blocks unused after it
          (the half loop carries its own);
          no op with effects, no nested region.
  loads   2-D, the address form Q walking the dot's K dim (A's dim 1, B's dim 0): Q(iter + 1, idx) =
          Q(iter, idx_k + BK), linear in iter; each and-ed comparison of the mask likewise or free of both
          iter and idx_k (pointer_tma.mask_terms: nothing else); `other` absent or a constant. An operand
          may also be a host descriptor's block (`descriptor_load`, 2-D, its fallback such a load; the
          blocks of descriptors the kernel makes are pointer loads here, which pointer_tma maps later)
          whose K offset is BK * iter plus what the loop does not change and whose other offset the loop
          does not change; and either may be read transposed (`permute` [1, 0]: tutorial 09's `b.T`, B
          loaded N by K), the K dim then the load's other one.
The half loop's step j (of 2 * trips) reads on aranges BK / 2 long what each form gives with iter's
coefficient halved (the walk is what makes the second half of step i the block at j = 2i + 1): each pointer
block carried, started at the form's iteration 0 and advanced half as far a step, each mask rebuilt from its
terms; a descriptor's block at its K offset's form with iter's coefficient halved, over that half load (its
carried pointers dropped by dce once a TMA ring takes the block). Forms with a 64-bit atom (a host
descriptor's strides) are built in int64. The kernel is marked `half_steps = 1`; `half_steps = 0` keeps the
loops as written. It runs after split_k, whose trip spec (the launch's cluster size) counts the loop as
written and whose split build's loop, each CTA's share from its rank's first step on, is halved like any other.
"""
from __future__ import annotations

from dataclasses import dataclass

from kiln.ir.core import Block, Operation
from kiln.ir.types import block_type, int1, int32, int64, pointer_type, scalar_of

from ..occupancy import max_shared_per_cta
from . import affine, dce
from .pointer_tma import ITER, _address, _inside, _invariant, _iteration, _uses, emit_poly, in_iterations, \
    mask_terms
from .rewrite import append_op, has_side_effects, in_loop, insert_ops, replace_uses, trip_count

name = "halve_k_steps"
MIN_SLOTS = 3  # ring slots a step must leave room for: with two, copies run only one step ahead
MIN_HALF_ROW = 64  # bytes of K a half step keeps (wgmma's K of 8 fp32 / 16 fp16 / 32 fp8 is 32; 64-byte swizzle)


class _Refused(Exception):
    """The loop does not fit: left as written."""


@dataclass
class _Operand:
    """A dot operand the half loop reads anew: its pointer load (the fallback, for a descriptor's block),
    that load's base, address form and mask terms, the load's K dim, and what reads it on the way to the
    dot (a descriptor_load and its offsets' forms, a permute)."""
    load: Operation
    base: object
    address: dict
    terms: list
    k: int
    descriptor: Operation | None = None
    offsets: list | None = None
    permute: Operation | None = None


def apply(fn, ctx) -> None:
    if ctx.target.name != "sm_90a" or ctx.num_warps % 4 or fn.attrs.get("half_steps", 1) == 0:
        return
    halved = False
    for loop in [op for op in fn.walk() if op.name == "for"]:
        try:
            plan = _Plan(fn, loop, ctx)
        except _Refused:
            continue
        plan.rewrite(fn)
        halved = True
    if halved:
        fn.attrs["half_steps"] = 1
        dce.apply(fn, ctx)


def _halved(poly: dict) -> dict:
    """`poly` with iter's coefficient halved (linear in iter, even coefficients: `_walks` proved them)."""
    return {m: c // 2 if ITER in m else c for m, c in poly.items()}


class _Plan:
    def __init__(self, fn, loop, ctx):
        self.fn, self.loop, self.body = fn, loop, loop.regions[0]
        if in_loop(loop) or any(op.regions for op in self.body.ops):
            raise _Refused
        dots = [op for op in self.body.ops if op.name == "dot"]
        if len(dots) != 1:
            raise _Refused
        if any(has_side_effects(op) or op.attrs.get("volatile") for op in self.body.ops[:-1]):
            raise _Refused
        self.dot = dot = dots[0]
        if int(loop.attrs.get("num_stages", ctx.num_stages)) < 2 or dot.attrs.get("max_num_imprecise_acc"):
            raise _Refused  # no ring to make room in; an fp8 dot's partial sums run per dot, as long as its K
        a, b, acc = dot.operands
        if len(a.type.shape) != 2 or len(b.type.shape) != 2:
            raise _Refused
        self.bk = bk = a.type.shape[1]
        if b.type.shape[0] != bk or bk % 2:
            raise _Refused
        # the sizes first: most loops' steps fit three slots, and their forms need not be built
        step_bytes = sum(v.type.numel * scalar_of(v.type).itemsize for v in (a, b))
        cap = max_shared_per_cta(ctx.target.capability)
        half_rows = min(bk // 2 * scalar_of(v.type).itemsize for v in (a, b))
        if MIN_SLOTS * step_bytes <= cap or MIN_SLOTS * step_bytes // 2 > cap or half_rows < MIN_HALF_ROW:
            raise _Refused
        self._check_accumulator(acc)
        self.forms = affine.Forms()
        self.iteration = _iteration(loop, self.forms)
        if self.iteration is None:
            raise _Refused
        self.operands = [self._operand(a, 1), self._operand(b, 0)]

    def _check_accumulator(self, acc):
        """`acc` carried, read by the dot alone, the dot's result yielded in its place and read nowhere
        else; every other carried value a pointer block the loop's results leave unused."""
        body, term = self.body, self.body.terminator
        if acc.owner is not body or acc is body.args[0]:
            raise _Refused
        self.acc_index = acc.index - 1
        result = self.dot.results[0]
        reads = [op for op in body.walk() for v in op.operands if v is acc or v is result]
        if term.operands[self.acc_index] is not result or len(reads) != 2:
            raise _Refused
        users = _uses(self.fn)
        for j, arg in enumerate(body.args[1:]):
            if j == self.acc_index:
                continue
            if not isinstance(arg.type, block_type) or not isinstance(arg.type.element_ty, pointer_type) \
                    or users.get(self.loop.results[j]):
                raise _Refused

    def _operand(self, v, k):
        """The dot operand `v`, whose dim `k` is the dot's K: a load walking it BK a step, or a descriptor's
        block at a K offset moving BK a step over such a load, either maybe read transposed."""
        permute = self._defined_here(v, "permute")
        if permute is not None:
            if list(permute.attrs.get("order", ())) != [1, 0]:
                raise _Refused
            v, k = permute.operands[0], 1 - k
        descriptor = self._defined_here(v, "descriptor_load")
        offsets = None
        if descriptor is not None:
            if descriptor.attrs.get("wrap_dim") is not None or descriptor.attrs.get("lead_dims") \
                    or len(descriptor.operands) != 4:
                raise _Refused
            offsets = [self._offset(o, d == k) for d, o in enumerate(descriptor.operands[1:3])]
            v = descriptor.operands[3]
        load, base, address, terms = self._load(v, k)
        return _Operand(load, base, address, terms, k, descriptor, offsets, permute)

    def _defined_here(self, v, name):
        op = v.defining_op
        return op if op is not None and op.name == name and op.parent is self.body else None

    def _offset(self, v, walks):
        """A descriptor offset's form in iter: BK * iter plus loop-invariant terms where it `walks` the
        K dim, loop-invariant terms alone where not."""
        poly = self.forms.of(v)
        poly = None if poly is None else in_iterations(poly, self.loop, self.forms, self.iteration)
        if poly is None or not _invariant(self.forms, poly, self.loop):
            raise _Refused
        moving = {m: c for m, c in poly.items() if ITER in m}
        if moving != ({(ITER,): self.bk} if walks else {}):
            raise _Refused
        return poly

    def _load(self, v, k):
        """(the load, its base, its address form, its mask's terms) of a dot operand that walks dim `k`, BK
        a step."""
        op = self._defined_here(v, "load")
        if op is None:
            raise _Refused
        ptr, mask, other = (list(op.operands) + [None, None])[:3]
        found = _address(ptr, self.loop, self.forms, self.iteration)
        if found is None or _inside(found[0], self.loop):
            raise _Refused
        base, address = found
        self._walks(address, k)
        self._int_type(address)
        terms = []
        if mask is not None:
            got = mask_terms(mask, self.forms)
            if got is None:
                raise _Refused
            for term in got:
                term = in_iterations(term, self.loop, self.forms, self.iteration)
                if term is None:
                    raise _Refused
                self._walks(term, k)
                self._int_type(term)
                terms.append(term)
        if other is not None and (other.defining_op is None or other.defining_op.name != "constant"):
            raise _Refused
        return op, base, address, terms

    def _walks(self, poly, k):
        """Does `poly` move BK along dim k a step (or depend on neither), linearly in iter?"""
        if not _invariant(self.forms, poly, self.loop):
            raise _Refused
        for atom in affine.atoms_of(poly):
            if atom[0] == "wrap":
                start, extent = self.forms.wraps[atom[2]]
                if atom[1] == k or not _invariant(self.forms, start, self.loop) or _inside(extent, self.loop):
                    raise _Refused
        for m, c in poly.items():
            if ITER in m and (m.count(ITER) > 1 or c % 2):
                raise _Refused
        idx = ("idx", k)
        later = affine.substitute(poly, ITER, {(ITER,): 1, (): 1})
        along = affine.substitute(poly, idx, {(idx,): 1, (): self.bk})
        if later is None or along is None or later != along:
            raise _Refused

    # --- the half loop ----------------------------------------------------------------------------

    def rewrite(self, fn):
        loop, loc = self.loop, self.loop.loc
        before: list = []
        trips = trip_count(before, loop)
        half_ub = append_op(before, "mul", [trips, append_op(before, "constant", [], [int32], loc, value=2)],
                            [int32], loc)
        zero = append_op(before, "constant", [], [int32], loc, value=0)
        one = append_op(before, "constant", [], [int32], loc, value=1)
        acc_init = loop.operands[3 + self.acc_index]
        # each load's pointer block carried as the loop as written carries it, started half as wide and advanced
        # half as far (addresses from the step instead: the same K loop in SASS, but ptxas scheduled the wgmma
        # descriptors after the loop's barrier, 8-10% slower on the H200)
        starts, advances = [], []
        for operand in self.operands:
            load, base, address, k = operand.load, operand.base, operand.address, operand.k
            shape = _half_shape(load, k)
            start = {m: c for m, c in address.items() if ITER not in m}
            advance = {tuple(a for a in m if a != ITER): c // 2 for m, c in address.items() if ITER in m}
            t = block_type(base.type, shape)
            bases = append_op(before, "splat", [base], [t], load.loc)
            starts.append(append_op(before, "addptr", [bases, self._block(start, shape, None, before, load.loc)], [t],
                                    load.loc))
            emit = _emit_in(self._int_type(advance), _emitter(before, load.loc))
            advances.append(emit_poly(advance, None, self.forms, emit))
        body = Block([int32, acc_init.type] + [v.type for v in starts])
        j, acc, *ptrs = body.args
        ops: list = []
        a, b = (self._half_operand(operand, j, p, ops) for operand, p in zip(self.operands, ptrs))
        total = append_op(ops, "dot", [a, b, acc], [acc.type], self.dot.loc, **self.dot.attrs)
        moved = [append_op(ops, "addptr",
                           [p, append_op(ops, "splat", [adv], [block_type(adv.type, p.type.shape)], loc)],
                           [p.type], loc) for p, adv in zip(ptrs, advances)]
        ops.append(Operation("yield", [total] + moved, [], loc=loc))
        for op in ops:
            body.append(op)
        half = Operation("for", [zero, half_ub, one, acc_init] + starts, [acc.type] + [v.type for v in starts],
                         dict(loop.attrs), [body], loc)
        block = loop.parent
        at = block.ops.index(loop)
        block.ops.remove(loop)
        insert_ops(block, at, before + [half])
        replace_uses(fn, {loop.results[self.acc_index]: half.results[0]})

    def _half_operand(self, operand, j, ptrs, ops):
        """The half step's operand: its half load, read as the loop as written reads the whole one."""
        v = self._half_load(operand, j, ptrs, ops)
        if operand.descriptor is not None:
            desc = operand.descriptor
            offsets = [emit_poly(_halved(poly), j, self.forms, _emitter(ops, desc.loc)) for poly in operand.offsets]
            v = append_op(ops, "descriptor_load", [desc.operands[0], *offsets, v], [v.type], desc.loc, **desc.attrs)
        if operand.permute is not None:
            shape = list(reversed(v.type.shape))
            v = append_op(ops, "permute", [v], [block_type(scalar_of(v.type), shape)], operand.permute.loc,
                          **operand.permute.attrs)
        return v

    def _half_load(self, operand, j, ptrs, ops):
        load, terms, k = operand.load, operand.terms, operand.k
        shape = _half_shape(load, k)
        loc = load.loc
        operands = [ptrs]
        if terms:  # (a mask of no terms is true everywhere: so is the half step's, and `other` goes unread)
            mask = None
            for term in terms:
                lhs = self._block(_halved(term), shape, j, ops, loc)
                zeros = append_op(ops, "constant", [], [lhs.type], loc, value=0)
                bit = append_op(ops, "cmp", [lhs, zeros], [block_type(int1, shape)], loc, pred="lt")
                mask = bit if mask is None else append_op(ops, "and", [mask, bit], [block_type(int1, shape)], loc)
            operands.append(mask)
        if terms and len(load.operands) > 2:
            op = load.operands[2].defining_op
            operands.append(append_op(ops, "constant", [], [block_type(scalar_of(op.results[0].type), shape)],
                                      op.loc, **op.attrs))
        return append_op(ops, "load", operands, [block_type(scalar_of(load.results[0].type), shape)], loc,
                         **load.attrs)

    def _block(self, poly, shape, j, ops, loc):
        """`poly` (scalar atoms, iter = j, at most one index or wrap atom a term) as a block of `shape`, int32
        or, where an atom is 64-bit (a host descriptor's strides), int64."""
        emit = _emitter(ops, loc)
        itype = self._int_type(poly)

        groups: dict = {}
        for m, c in poly.items():
            index = [a for a in m if a[0] in ("idx", "wrap")]
            if len(index) > 1:
                raise AssertionError(f"halve_k_steps: a term of two indices {m}")
            key = index[0] if index else None
            groups.setdefault(key, {})[tuple(a for a in m if a[0] not in ("idx", "wrap"))] = c
        t = block_type(itype, shape)
        total = None
        for key, scalars in sorted(groups.items(), key=lambda kv: str(kv[0])):
            factor = emit_poly(scalars, j, self.forms, _emit_in(itype, emit))
            if key is None:
                part = emit("splat", [factor], t)
            else:
                part = self._index(key, shape, emit)
                if itype != int32:
                    part = emit("cast", [part], t)
                if scalars != {(): 1}:
                    part = emit("mul", [part, emit("splat", [factor], t)], t)
            total = part if total is None else emit("add", [total, part], t)
        return total if total is not None else emit("constant", [], t, value=0)

    def _int_type(self, poly):
        """int64 where an atom of `poly` is 64-bit, else int32 (a wrap's start and extent int32 alone)."""
        wide = False
        for atom in affine.atoms_of(poly):
            if atom[0] == "wrap":
                start, extent = self.forms.wraps[atom[2]]
                if self._int_type(start) != int32 or extent.type != int32:
                    raise _Refused
            elif atom[0] == "v":
                t = self.forms.values[atom[1]].type
                if t not in (int32, int64):
                    raise _Refused
                wide = wide or t == int64
        return int64 if wide else int32

    def _index(self, atom, shape, emit):
        """An index atom of dim d (its arange, or `(start + arange) % E` for a wrap) broadcast to `shape`."""
        d = atom[1]
        line = block_type(int32, [shape[d]])
        index = emit("arange", [], line, start=0, end=shape[d])
        if atom[0] == "wrap":
            start, extent = self.forms.wraps[atom[2]]
            index = emit("add", [index, emit("splat", [emit_poly(start, None, self.forms, emit)], line)], line)
            index = emit("rem", [index, emit("splat", [extent], line)], line)
        column = [shape[0], 1] if d == 0 else [1, shape[1]]
        index = emit("expand_dims", [index], block_type(int32, column), axis=1 - d)
        return emit("broadcast", [index], block_type(int32, shape))


def _emitter(ops, loc):
    """emit_poly's `emit`: each op appended to `ops` at `loc`."""
    def emit(op_name, operands, t, **attrs):
        return append_op(ops, op_name, operands, [t], loc, **attrs)
    return emit


def _emit_in(itype, emit):
    """`emit` for emit_poly, its int32 arithmetic done in `itype`, int32 operands widened first."""
    if itype == int32:
        return emit

    def wide(op_name, operands, t, **attrs):
        if t == int32:
            operands = [emit("cast", [v], itype) if v.type == int32 else v for v in operands]
            t = itype
        return emit(op_name, operands, t, **attrs)
    return wide


def _half_shape(load, k) -> list:
    shape = list(load.results[0].type.shape)
    shape[k] //= 2
    return shape
