"""Explicit layout conversions, and every block type given its layout: the second half of the
layouts pass.

After `layouts` chose a distribution for every block value, an op may still read an
operand in another one (an elementwise op of a loaded value and index math, a store of a
tensor-core accumulator, the carried value of a loop). For each such operand `convert` puts
a `convert_layout` right before the op (one per value, layout and block: the ops after it
in the block share it) and then writes each block value's layout into its type, so that
the IR text says where every element lives:

    %acc = warp_group_dot_wait %d {pending = 0} : <128x256xfp32:wgmma:warps8.1:n256>
    %out = cast %acc : <128x256xfp16:wgmma:warps8.1:n256>
    %c = convert_layout %out : <128x256xfp16:blocked:spt1.8:tpw1.32:wpc8.1:order1.0>
    store %ptrs, %c, %mask

The layout an op reads each operand in is `kiln.ir.layout_check.reads_in`, except the two
choices that need the axis analysis: the layout a store writes in (a coalesced one for a
value whose own layout would store in pieces narrower than 16 bytes) and the one an
`async_copy` reads its pointers in (`access.store_layout`, `access.copy_layout`).
Converting index math (kiln.ir.index_math) costs no shared memory: lowering recomputes it in
the new layout. A vector loaded from addresses that are index math is loaded again in the layout
asked, right after the first load, instead of converted (`_reload`), as Triton rematerializes it:
a conversion goes through shared memory behind a barrier, which waits for the load to arrive
before any later load is issued (fla's chunk_fwd_kernel_o: its gates, read along rows and
columns of the accumulator, held its V load back by a whole trip to memory).
"""
from __future__ import annotations

from kiln.ir.core import Block, Operation
from kiln.ir.index_math import INDEX_OPS, index_values
from kiln.ir.layout import Slice, same_distribution
from kiln.ir.layout_check import reads_in
from kiln.ir.types import block_type, scalar_of

from ..analysis.access import copy_layout, read_back_through_memory, store_layout


def _memory_bits(t) -> int:
    s = scalar_of(t)
    if s.is_ptr():
        return 64
    return 8 if s.is_bool() else s.primitive_bitwidth


def wanted(ctx, op, layout_of) -> list:
    """Per operand of `op`, the layout it is read in (None: its own)."""
    if op.name == "store" and isinstance(op.operands[1].type, block_type):
        if read_back_through_memory(op):  # stored and loaded again by the same threads
            chosen = layout_of(op.operands[0])
        else:
            chosen = store_layout(ctx, op, layout_of(op.operands[1]), _memory_bits(op.operands[1].type))
        return [chosen] * len(op.operands)
    if op.name == "async_copy":
        chosen = copy_layout(ctx, op, layout_of(op.operands[0]))
        return [chosen, None] + [chosen] * (len(op.operands) - 2)
    return reads_in(op, layout_of)


def convert(fn, ctx, layouts: dict) -> None:
    """The convert_layout ops that `layouts` (value -> layout, the layouts pass's choice) calls
    for, then every block value's layout into its type. `ctx`: options and axis (kiln.codegen.analysis)."""
    made: dict = {}  # (value, layout, block) -> the convert_layout's result
    _convert_block(fn.body, ctx, layouts, made, index_values(fn))
    _drop_unread([key[0] for key in made if key[2] in ("reloaded", "recomputed")], fn)
    for op in fn.walk():
        for v in op.defined_values():
            layout = layouts.get(v)
            if isinstance(v.type, block_type) and layout is not None:
                v.type = v.type.with_encoding(layout)


def _convert_block(block: Block, ctx, layouts: dict, made: dict, index: set) -> None:
    layout_of = layouts.get
    i = 0
    while i < len(block.ops):
        op = block.ops[i]
        made_before = len(made)  # (a reload inserts its ops before `op`, here or in a block enclosing this one)
        for region in op.regions:
            _convert_block(region, ctx, layouts, made, index)
        for k, (v, want) in enumerate(zip(op.operands, wanted(ctx, op, layout_of))):
            have = layout_of(v)
            if want is None or have is None or not isinstance(v.type, block_type) \
                    or same_distribution(have, want, tuple(v.type.shape), ctx.num_warps):
                continue
            reloaded = _reload(v, want, ctx, layouts, made, index) or \
                _recomputed(v, want, op, ctx, layouts, made, index)
            if reloaded is not None:
                op.operands[k] = reloaded
                continue
            key = (v, want, id(block))
            if key not in made:
                made[key] = _converted(v, want, block, block.ops.index(op), op.loc, ctx, layouts, index)
            op.operands[k] = made[key]
        i = block.ops.index(op) + 1 if len(made) != made_before else i + 1


def _converted(v, want, block, at, loc, ctx, layouts: dict, index: set):
    """`v` in layout `want`: a convert_layout inserted at `at` in `block` (index math where `v` is)."""
    conv = Operation("convert_layout", [v], [v.type], loc=loc)
    conv.parent = block
    block.ops.insert(at, conv)
    layouts[conv.results[0]] = want
    ctx.axis.info[conv.results[0]] = ctx.axis.get(v)  # the same values, elsewhere
    if v in index:
        index.add(conv.results[0])
    return conv.results[0]


RELOADED_MAX = 1024  # elements: a vector this long is read again from the L1 (a row statistic, a chunk's gates)


def _reload(v, want, ctx, layouts: dict, made: dict, index: set):
    """`v` loaded again in layout `want`, just after its load, or None: a vector `load` of at most
    RELOADED_MAX elements (neither volatile nor ordered by a `sem`, nor reading back a store) whose
    pointers, mask and `other` are index math or scalars (recomputed in `want` for nothing)."""
    load = v.defining_op
    if load is None or load.name != "load" or len(v.type.shape) != 1 or v.type.numel > RELOADED_MAX \
            or load.attrs.get("volatile") or load.attrs.get("sem") or read_back_through_memory(load):
        return None  # (a load of what this program stored is loaded by the threads that stored it)
    if any(isinstance(u.type, block_type) and u not in index for u in load.operands):
        return None
    key = (v, want, "reloaded")
    if key not in made:
        block = load.parent
        at = block.ops.index(load) + 1
        operands = []
        for u in load.operands:
            if isinstance(u.type, block_type) and not same_distribution(layouts.get(u), want, tuple(u.type.shape),
                                                                        ctx.num_warps):
                u = _converted(u, want, block, at, load.loc, ctx, layouts, index)
                at += 1
            operands.append(u)
        again = Operation("load", operands, [v.type], dict(load.attrs), loc=load.loc)
        again.parent = block
        block.ops.insert(at, again)
        layouts[again.results[0]] = want
        ctx.axis.info[again.results[0]] = ctx.axis.get(v)
        made[key] = again.results[0]
    return made[key]


RECOMPUTED_OPS = 16  # the most ops computed again in another layout in place of one conversion


def _recomputed(v, want, reader, ctx, layouts: dict, made: dict, index: set):
    """`v` computed again in layout `want` right before `reader`, or None. Where `v` is a tile of
    elementwise and shape ops (INDEX_OPS) over index math, scalars and small vectors (a row index
    gathered from memory, a row mask), those ops run again in `want` and only the vectors move (a
    reload, or a conversion of a few hundred bytes), as Triton's layout propagation rematerializes
    them: a conversion of `v` itself takes its whole size of shared memory (triton_kernels' scattered
    store of a 128x256 tile through pointers loaded per row: 256 KB, past the SM's 227 KB)."""
    if v in index or v.type.numel <= RELOADED_MAX:
        return None
    ops: list = []
    if not _recomputable(v, v.type.numel, index, ops) or len(ops) > RECOMPUTED_OPS:
        return None
    block = reader.parent
    cloned = {op.results[0] for op in ops}

    def build(u, layout):
        if not isinstance(u.type, block_type) or \
                same_distribution(layouts.get(u), layout, tuple(u.type.shape), ctx.num_warps):
            return u
        key = (u, layout, id(block))
        if key in made:
            return made[key]
        if u not in cloned:  # a leaf: index math, or a small vector read again or converted
            made[key] = _reload(u, layout, ctx, layouts, made, index) or \
                _converted(u, layout, block, block.ops.index(reader), reader.loc, ctx, layouts, index)
            return made[key]
        op = u.defining_op
        operands = [build(x, Slice(op.attrs["axis"], layout) if op.name == "expand_dims" else layout)
                    for x in op.operands]
        again = Operation(op.name, operands, [u.type], dict(op.attrs), loc=op.loc)
        again.parent = block
        block.ops.insert(block.ops.index(reader), again)
        layouts[again.results[0]] = layout
        ctx.axis.info[again.results[0]] = ctx.axis.get(u)
        if all(x in index or not isinstance(x.type, block_type) for x in operands):
            index.add(again.results[0])
        made[key] = again.results[0]
        made[(u, layout, "recomputed")] = u  # the original, dropped where nothing reads it any more
        return made[key]

    return build(v, want)


def _recomputable(u, numel: int, index: set, ops: list) -> bool:
    """Can `u` be computed again from index math, scalars and vectors of at most RELOADED_MAX
    elements and an eighth of `numel`? `ops`: the ops to run again, operands first."""
    if not isinstance(u.type, block_type) or u in index or \
            (u.type.numel <= RELOADED_MAX and u.type.numel * 8 <= numel):
        return True
    op = u.defining_op
    if op is None or op.name not in INDEX_OPS or len(op.results) != 1 or len(ops) > RECOMPUTED_OPS:
        return False
    if op not in ops:
        if not all(_recomputable(x, numel, index, ops) for x in op.operands):
            return False
        ops.append(op)
    return True


def _drop_unread(values, fn) -> None:
    """The ops of `values` (loads read again in another layout, ops computed again) that nothing reads
    any more, and then the ops of theirs nothing else reads: no pass after this one drops dead code."""
    pending = {v.defining_op for v in values}
    while pending:
        read = {v for op in fn.walk() for v in op.operands}
        dead = [op for op in pending if op.parent is not None and not any(r in read for r in op.results)]
        if not dead:
            return
        pending -= set(dead)
        for op in dead:
            op.parent.ops.remove(op)
            pending.update(v.defining_op for v in op.operands
                           if v.defining_op is not None and v.defining_op.name in INDEX_OPS | {"convert_layout"})
