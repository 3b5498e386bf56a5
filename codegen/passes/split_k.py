"""sm_90a: split-K across a cluster of CTAs, for launches of a tile GEMM with too few programs to
fill the GPU.

A tile kernel (tutorial 03's matmul) computes each output tile in one CTA over the whole K loop:
at M = 128, N = 8192 that is 64 CTAs of 128x128 for 132 SMs, half the GPU idle. The runtime asks
for this build (the kernel's attribute `split_k = 1`) for such launches. Each program then runs as
a cluster of `ctas` CTAs (a new int32 argument, attribute `split_k`, that the launcher fills: it
launches `ctas` times the programs along x, in clusters of that size), CTA `rank` of the cluster
runs its share of the K loop's iterations, and after the loop rank 0 adds the others' partial
accumulators to its own through distributed shared memory (`cluster_sum`, in rank order, so the
result does not depend on which CTA finished first) and runs the epilogue alone:

    %raw = program_id(0); %rank = %raw % ctas; %pid = %raw / ctas   (every program_id(0) -> %pid)
    trips = max(cdiv(ub - lb, step), 0); chunk = max(cdiv(trips, ctas), min(trips, MIN_SHARE))
    lb' = lb + rank * chunk * step; ub' = min(ub, lb' + chunk * step)
    (carried pointers start rank * chunk advances further on)
    %acc = for lb', ub' { ... dot ... }; %sum = cluster_sum %acc, ctas, rank
    if rank == 0 { <the epilogue, reading %sum> }

The build is not persistent (each program is one cluster). Other builds only note whether this
one applies (`splittable = 1`, which the binary's metadata carries). It applies to a GEMM's tiles
only: one top-level loop holding the kernel's only dot, whose fp32 or int32 accumulator starts at zero and is
carried by the loop and updated by the dot alone; the loop's other carried values pointers that
advance by the same amount each iteration; no side effects before or in the loop, no branches in
it (the epilogue, which rank 0 runs alone, may have any); no `num_programs`. The GEMM may follow an early exit on the
arguments (Inductor's mm template opens with `if M * N == 0: return`, built as `if c {} else {<the
rest>}`): every CTA of a cluster takes such an exit alike, so the split happens in the branch that
holds the rest; an exit that depends on the program or on memory keeps the kernel unsplit.
"""
from __future__ import annotations

from kiln.ir.core import Block, Operation
from kiln.ir.types import block_type, int1, int32, pointer_type, scalar_of

from .rewrite import append_op, clone_op, const_int, has_side_effects, is_pure, recomputable_cone, replace_uses
from .smem_plan import enabled as pipelines

name = "split_k"
MIN_SHARE = 16  # K-loop iterations a CTA takes at least (the rest of the cluster adds zeros)


def apply(fn, ctx) -> None:
    if not pipelines(ctx) or fn.attrs.get("derived_args", 1) == 0:
        return
    block = _gemm_block(fn)
    gemm = _match(fn, block) if block is not None else None
    if gemm is None:
        return
    if (trips := trip_spec(fn, gemm[0])) is not None:
        fn.attrs["split_trips"] = trips  # both builds: the launches choose by it (kiln.runtime.launcher)
    if fn.attrs.get("split_k") != 1:
        fn.attrs["splittable"] = 1
        return
    fn.attrs["persistent"] = 0  # one cluster per program
    _rewrite(fn, block, *gemm)


def _gemm_block(fn):
    """The block that holds the kernel's work: its body, or, where the body's loops all sit in the
    last branch of an early exit (the other branch empty), that branch where the exit depends on
    the arguments alone, else None."""
    ops = fn.body.ops
    branch = ops[-2] if len(ops) >= 2 else None
    if any(op.name == "for" for op in ops) or branch is None or branch.name != "if" or branch.results:
        return fn.body  # (a GEMM whose epilogue is a branch stays one to match)
    empty = [len(region.ops) == 1 for region in branch.regions]
    if empty not in ([True, False], [False, True]):
        return fn.body
    return branch.regions[empty.index(False)] if _on_arguments(branch.operands[0], fn) else None


def _on_arguments(value, fn) -> bool:
    """`value` is plain arithmetic on the kernel's arguments and constants: the same in every program."""
    pending, seen = [value], set()
    while pending:
        v = pending.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        op = v.defining_op
        if op is None:
            if v.owner is not fn.body:
                return False
            continue
        if op.parent is not fn.body or not is_pure(op) or "load" in op.name \
                or op.name in ("program_id", "num_programs"):
            return False
        pending.extend(op.operands)
    return True


def _match(fn, block):
    """(the K loop, the accumulator's index among its carried values, the pointer increments by
    carried index) of a GEMM's tile kernel whose work `block` holds, else None."""
    ops = block.ops
    loops = [op for op in ops if op.name == "for"]
    dots = [op for op in fn.walk() if op.name == "dot"]
    if len(loops) != 1 or len(dots) != 1 or dots[0].parent is not loops[0].regions[0]:
        return None
    loop, dot = loops[0], dots[0]
    step = const_int(loop.operands[2])
    if not step or step <= 0 or loop.operands[0].type != int32:
        return None
    at = ops.index(loop)
    if any(op.name == "num_programs" for op in fn.walk()):
        return None
    if block is not fn.body and any(has_side_effects(op) for op in fn.body.ops if op is not block.parent):
        return None
    # (before the loop a branch may pick index math: Inductor's mm template tests its strides so)
    if any(has_side_effects(op) for op in ops[:at]) or \
            any(has_side_effects(op) or op.regions for op in loop.regions[0].ops):
        return None
    body = loop.regions[0]
    carried, yielded = body.args[1:], body.terminator.operands
    acc = None
    increments = {}
    for j, (arg, out) in enumerate(zip(carried, yielded)):
        if out is dot.results[0] and dot.operands[2] is arg:
            acc = j
            continue
        step_op = out.defining_op
        if not isinstance(arg.type, (block_type, pointer_type)) or step_op is None or step_op.name != "addptr" \
                or step_op.operands[0] is not arg or step_op.parent is not body:
            return None
        increments[j] = step_op.operands[1]
    if acc is None or not _zero(loop.operands[3 + acc]) or scalar_of(carried[acc].type).name not in ("fp32", "int32"):
        # cluster_sum adds fp32 and int32 (an fp16 accumulator would round other sums than the
        # kernel as written: it keeps that)
        return None
    uses = [v for op in body.ops for v in op.operands]
    if uses.count(dot.results[0]) != 1 or uses.count(carried[acc]) != 1:
        return None  # the accumulator is read or written elsewhere in the loop
    for inc in increments.values():
        if scalar_of(inc.type) != int32:
            return None
        if inc.owner is body or recomputable_cone([inc], body.ops) is None:
            return None
    return loop, acc, increments


def trip_spec(fn, loop) -> list[int] | None:
    """[arg, add, div, lb, step] where the K loop runs max(cdiv((a + add) / div - lb, step), 0) times,
    `a` the value of the kernel's argument `arg` (-1: none, a = 0) and `/` C's division: what the
    launcher needs to size a split (kiln.runtime.launcher.cluster_ctas) from a launch's arguments,
    as `range(0, tl.cdiv(K, BLOCK_K))`, `range(0, K, BLOCK_K)` and constant bounds give; else None."""
    lb, step = const_int(loop.operands[0]), const_int(loop.operands[2])
    if lb is None or step is None:
        return None
    bound, add, div = loop.operands[1], 0, 1
    op = bound.defining_op
    if op is not None and op.name == "div" and (d := const_int(op.operands[1])) is not None and d > 0:
        bound, div = op.operands[0], d
    while (op := bound.defining_op) is not None and op.name in ("add", "sub") \
            and (c := const_int(op.operands[1])) is not None:
        add, bound = add + (c if op.name == "add" else -c), op.operands[0]
    if (c := const_int(bound)) is not None:
        return [-1, add + c, div, lb, step]
    if bound.owner is fn.body and bound.type == int32:
        return [fn.args.index(bound), add, div, lb, step]
    return None


def _zero(v) -> bool:
    op = v.defining_op
    return op is not None and op.name == "constant" and op.attrs.get("value") in (0, 0.0) \
        and not isinstance(op.attrs.get("value"), bool)


def _rewrite(fn, block, loop, acc, increments) -> None:
    loc = loop.loc
    ctas = fn.body.add_arg(int32)
    fn.arg_names.append("split_k.ctas")
    fn.arg_attrs.append({"split_k": 1})
    old_pids = [op for op in fn.walk() if op.name == "program_id" and op.attrs.get("axis") == 0]
    top: list[Operation] = []
    raw = append_op(top, "program_id", [], [int32], loc, axis=0)
    rank = append_op(top, "rem", [raw, ctas], [int32], loc)
    pid = append_op(top, "div", [raw, ctas], [int32], loc)
    replace_uses(fn, {op.results[0]: pid for op in old_pids})
    for op in old_pids:
        op.parent.ops.remove(op)
    fn.body.ops[0:0] = top
    for op in top:
        op.parent = fn.body
    ops = block.ops

    # this CTA's share of the iterations
    lb, ub, step = loop.operands[:3]
    s = const_int(step)
    share: list[Operation] = []
    one = append_op(share, "constant", [], [int32], loc, value=1)
    span = append_op(share, "sub", [ub, lb], [int32], loc)
    trips = append_op(share, "div", [append_op(share, "add", [span, append_op(share, "constant", [], [int32], loc,
                                                                               value=s - 1)], [int32], loc), step],
                      [int32], loc)
    none = append_op(share, "constant", [], [int32], loc, value=0)
    trips = append_op(share, "max", [trips, none], [int32], loc)
    chunk = append_op(share, "div", [append_op(share, "sub", [append_op(share, "add", [trips, ctas], [int32], loc), one],
                                               [int32], loc), ctas], [int32], loc)
    # at least MIN_SHARE iterations a CTA (fewer ranks work where the loop is short): int8 at
    # 128x4096x4096, 128x128x128 tiles, ran 0.84x the kernel as written with 8 a CTA (H200)
    floor = append_op(share, "min", [trips, append_op(share, "constant", [], [int32], loc, value=MIN_SHARE)],
                      [int32], loc)
    chunk = append_op(share, "max", [chunk, floor], [int32], loc)  # >= 0, as TMA proofs see
    skip = append_op(share, "mul", [rank, chunk], [int32], loc)
    first = append_op(share, "add", [lb, append_op(share, "mul", [skip, step], [int32], loc)], [int32], loc)
    end = append_op(share, "min", [ub, append_op(share, "add", [first, append_op(share, "mul", [chunk, step],
                                                                                  [int32], loc)], [int32], loc)],
                    [int32], loc)
    operands = [first, end, step, *loop.operands[3:]]
    body = loop.regions[0]
    for j, inc in increments.items():  # the pointers start `skip` advances on
        mapping: dict = {}
        for op in recomputable_cone([inc], body.ops):
            share.append(clone_op(op, mapping))
        inc = mapping.get(inc, inc)
        moved = skip if inc.type == int32 else append_op(share, "splat", [skip], [inc.type], loc)
        offset = append_op(share, "mul", [inc, moved], [inc.type], loc)
        operands[3 + j] = append_op(share, "addptr", [operands[3 + j], offset], [operands[3 + j].type], loc)
    loop.operands = operands
    at = ops.index(loop)
    ops[at:at] = share
    for op in share:
        op.parent = block

    # rank 0 adds the cluster's partial sums and runs the epilogue
    at = ops.index(loop) + 1
    partial = loop.results[acc]
    summed = Operation("cluster_sum", [partial, ctas, rank], [partial.type], loc=loc)
    epilogue = ops[at:-1]
    replace_uses(fn, {partial: summed.results[0]})
    summed.operands[0] = partial
    zero = Operation("constant", [], [int32], {"value": 0}, loc=loc)
    leader = Operation("cmp", [rank, zero.results[0]], [int1], {"pred": "eq"}, loc=loc)
    then, other = Block(), Block()
    for op in epilogue:
        then.append(op)
    then.append(Operation("yield", loc=loc))
    other.append(Operation("yield", loc=loc))
    branch = Operation("if", [leader.results[0]], [], regions=[then, other], loc=loc)
    ops[at:-1] = [summed, zero, leader, branch]
    for op in (summed, zero, leader, branch):
        op.parent = block
