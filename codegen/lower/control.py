"""Structured control flow -> LLVM basic blocks and phis.

Conditions and loop bounds are scalars, uniform over the CTA, so every thread takes the
same path and barriers inside loops and branches are safe; `warp_specialize` alone splits
the CTA, each region's barriers syncing its own warps. Carried block values keep
the layout of their initial value; a yielded value in another layout is converted.
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir import layout as lay
from kiln.ir.types import scalar_of

from .context import LoweringError, Partition
from .types import I32, half_words, word_halves


def _as_words(v, layout) -> bool:
    """Is `v` carried as f16x2 words: fp16 wgmma accumulators (out_dtype=float16). Carried as
    halves, each iteration would unpack the words a wgmma still writes and pack them again for
    the next one, and ptxas then waits for every wgmma where the halves are read (C7517); as
    words the packing folds away and the wgmmas chain as fp32 ones do."""
    return isinstance(layout, lay.Wgmma) and scalar_of(v.type).name == "fp16"


def _carried(lw, values, layouts):
    regs = [lw.regs(v, l) for v, l in zip(values, layouts)]
    return [half_words(lw, r) if _as_words(v, l) else r for v, l, r in zip(values, layouts, regs)]


def _bind_carried(lw, v, regs, layout):
    lw.bind(v, word_halves(lw, regs) if _as_words(v, layout) else regs, layout)


def _phis(lw, regs_list):
    return [[lw.b.phi(r.type) for r in regs] for regs in regs_list]


def _add_incoming(phis, regs_list, block):
    for ps, regs in zip(phis, regs_list):
        for p, r in zip(ps, regs):
            p.add_incoming(r, block)


class _LoopID(ir.values.MDValue):
    """An LLVM loop ID: a distinct node whose first operand is itself (LLVM reads a loop's hints only
    from such a node on its latch's branch; llvmlite's `add_metadata` makes neither)."""

    def descr(self, buf):
        operands = [self.get_reference()] + [o.get_reference() for o in self.operands]
        buf += ("distinct !{{ {0} }}".format(", ".join(operands)), "\n")


def set_loop_hints(lw, latch_branch, *hints: str) -> None:
    """LLVM loop hints (flags such as "llvm.loop.unroll.disable") on the loop whose latch ends in
    `latch_branch`."""
    m = lw.module
    nodes = [m.add_metadata([ir.MetaDataString(m, h)]) for h in hints]
    latch_branch.set_metadata("llvm.loop", _LoopID(m, nodes, name=str(len(m.metadata))))


def _loop_hints(lw, op, latch_branch) -> None:
    """Triton's `disable_licm` (tl.range, tl.condition): LLVM's loop-invariant code motion, and its
    versioning of the loop for it, leave the loop's invariant code where the user wrote it (as Triton's
    loop annotation asks: register pressure the user chose over recomputation)."""
    if op.attrs.get("disable_licm"):
        set_loop_hints(lw, latch_branch, "llvm.licm.disable", "llvm.loop.licm_versioning.disable")


def _for(lw, op):
    from . import lower_block
    lb, ub, step = (lw.scalar(v) for v in op.operands[:3])
    body = op.regions[0]
    layouts = [lw.layout(a) for a in body.args[1:]]
    inits = _carried(lw, op.operands[3:], layouts)
    pre = lw.b.block
    header = lw.llfn.append_basic_block("for.header")
    loop = lw.llfn.append_basic_block("for.body")
    exit_ = lw.llfn.append_basic_block("for.exit")
    lw.b.branch(header)
    lw.b.position_at_end(header)
    iv = lw.b.phi(lb.type)
    iv.add_incoming(lb, pre)
    phis = _phis(lw, inits)
    _add_incoming(phis, inits, pre)
    signed = scalar_of(op.operands[0].type).signed
    cmp = lw.b.icmp_signed if signed else lw.b.icmp_unsigned
    going = cmp("<", iv, ub)
    if signed:  # a negative step counts down (folded away when the step is a constant)
        up = lw.b.icmp_signed(">", step, ir.Constant(step.type, 0))
        going = lw.b.select(up, going, lw.b.icmp_signed(">", iv, ub))
    lw.b.cbranch(going, loop, exit_)
    lw.b.position_at_end(loop)
    lw.bind(body.args[0], [iv])
    for a, ps, l in zip(body.args[1:], phis, layouts):
        _bind_carried(lw, a, ps, l)
    lower_block(lw, body)
    yielded = _carried(lw, body.ops[-1].operands, layouts)
    nxt = lw.b.add(iv, step)
    latch = lw.b.block
    _loop_hints(lw, op, lw.b.branch(header))
    iv.add_incoming(nxt, latch)
    _add_incoming(phis, yielded, latch)
    lw.b.position_at_end(exit_)
    for r, ps, l in zip(op.results, phis, layouts):
        _bind_carried(lw, r, ps, l)


def _while(lw, op):
    from . import lower_block
    before, after = op.regions
    layouts = [lw.layout(a) for a in before.args]
    inits = _carried(lw, op.operands, layouts)
    pre = lw.b.block
    header = lw.llfn.append_basic_block("while.before")
    body = lw.llfn.append_basic_block("while.after")
    exit_ = lw.llfn.append_basic_block("while.exit")
    lw.b.branch(header)
    lw.b.position_at_end(header)
    phis = _phis(lw, inits)
    _add_incoming(phis, inits, pre)
    for a, ps, l in zip(before.args, phis, layouts):
        _bind_carried(lw, a, ps, l)
    lower_block(lw, before)
    cond_op = before.ops[-1]
    out_layouts = [lw.layout(a) for a in after.args]
    passed = _carried(lw, cond_op.operands[1:], out_layouts)
    lw.b.cbranch(lw.scalar(cond_op.operands[0]), body, exit_)
    lw.b.position_at_end(body)
    for a, regs, l in zip(after.args, passed, out_layouts):
        _bind_carried(lw, a, regs, l)
    lower_block(lw, after)
    yielded = _carried(lw, after.ops[-1].operands, layouts)
    latch = lw.b.block
    _loop_hints(lw, op, lw.b.branch(header))
    _add_incoming(phis, yielded, latch)
    lw.b.position_at_end(exit_)
    for r, regs, l in zip(op.results, passed, out_layouts):
        _bind_carried(lw, r, regs, l)


def _if(lw, op):
    from . import lower_block
    cond = lw.scalar(op.operands[0])
    layouts = [lw.layout(r) for r in op.results]
    then_bb = lw.llfn.append_basic_block("if.then")
    else_bb = lw.llfn.append_basic_block("if.else")
    merge = lw.llfn.append_basic_block("if.end")
    lw.b.cbranch(cond, then_bb, else_bb)
    ends = []
    for region, bb in zip(op.regions, (then_bb, else_bb)):
        lw.b.position_at_end(bb)
        lower_block(lw, region)
        ends.append((_carried(lw, region.ops[-1].operands, layouts), lw.b.block))
        lw.b.branch(merge)
    lw.b.position_at_end(merge)
    for i, (r, l) in enumerate(zip(op.results, layouts)):
        regs = []
        for k in range(len(ends[0][0][i])):
            phi = lw.b.phi(ends[0][0][i][k].type)
            for vals, block in ends:
                phi.add_incoming(vals[i][k], block)
            regs.append(phi)
        lw.bind(r, regs, l)


def _warp_specialize(lw, op):
    """Warps 0 .. R*num_warps-1 run region 0 (R = `replicas`, each group of num_warps warps a
    replica of its own), the `warps` after them region 1: one branch each on the warp index
    (uniform in a warp), which takes its share of the registers first (`setmaxnreg`, the whole
    warpgroup at once) and syncs its barriers by a named barrier of its own."""
    from . import lower_block
    from .wgmma import _asm
    ours, replicas = 32 * lw.num_warps, op.attrs.get("replicas", 1)
    blocks = [lw.llfn.append_basic_block("ws.default"), lw.llfn.append_basic_block("ws.partition")]
    merge = lw.llfn.append_basic_block("ws.end")
    lw.b.cbranch(lw.b.icmp_unsigned("<", lw.cta_warp, lw.i32(replicas * lw.num_warps)), *blocks)
    outer = lw.partition
    for i, (region, block) in enumerate(zip(op.regions, blocks)):
        lw.b.position_at_end(block)
        _asm(lw, f"setmaxnreg.{'inc' if i == 0 else 'dec'}.sync.aligned.u32 {op.attrs['regs'][i]};")
        if i == 1:
            lw.partition = Partition(replicas * ours, 32 * op.attrs["warps"], 1 + replicas)
        elif replicas == 1:
            lw.partition = Partition(0, ours, 1)
        else:
            replica = lw.b.udiv(lw.cta_warp, lw.i32(lw.num_warps))
            lw.partition = Partition(lw.b.mul(replica, lw.i32(ours)), ours, lw.b.add(replica, lw.i32(1)), replica,
                                     replicas)
        lower_block(lw, region)
        lw.b.branch(merge)
    lw.partition = outer
    lw.b.position_at_end(merge)


def _partition_index(lw, op):
    replica = lw.partition.replica
    lw.bind(op.results[0], [replica if replica is not None else lw.i32(0)])


def _turn(passing: bool):
    """Replicas of a warp_specialize region take turns (ping-pong): `turn_wait` blocks until the
    replica before this one passed it the turn, `turn_pass` hands it to the next, each where its
    predicate holds. A named barrier per replica (after the regions' own), counted over the
    waiting replica's threads and the passing one's: `bar.arrive` passes without waiting."""
    def lower(lw, op):
        from .wgmma import _asm
        p = lw.partition
        if p.replica is None:
            raise LoweringError(f"{op.name} outside a replicated warp_specialize region")
        me = p.replica
        target = lw.b.urem(lw.b.add(me, lw.i32(1)), lw.i32(p.replicas)) if passing else me
        bar_id = lw.b.add(target, lw.i32(2 + p.replicas))
        verb = "bar.arrive" if passing else "bar.sync"
        _asm(lw, f"{{ .reg .pred p; setp.ne.b32 p, $1, 0; @p {verb} $0, {2 * p.threads}; }}",
             args=[bar_id, lw.b.zext(lw.scalar(op.operands[0]), I32)], constraints="r,r,~{memory}")
    return lower


RULES = {"for": _for, "while": _while, "if": _if, "warp_specialize": _warp_specialize,
         "partition_index": _partition_index, "turn_wait": _turn(False), "turn_pass": _turn(True)}
