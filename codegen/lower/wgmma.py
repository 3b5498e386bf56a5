"""Lowering of the GPU stage: shared buffers, `cp.async` copies and Hopper's wgmma.

A shared buffer is one pointer into the kernel's shared memory: its `offset` from the kernel's
shared base, declared aligned to 1024 bytes (swizzles are computed from address bits, so tiles
must start on a swizzle period). `tile_offset` is the one place that knows how a tile is stored
(kiln.ir.types.shared_type); copies write through it and wgmma's matrix descriptors
describe the same thing to the tensor cores.

`warp_group_dot` issues, per 32 bytes of k, one `wgmma.mma_async.m64nNk*` per (M
repetition, N repetition) of its warpgroup, all in one committed group; the accumulator
registers are in the `Wgmma` layout's order, which is the instruction's own: fp32, or
int32 for int8 inputs (`.s32.s8.s8`, whose form has no negating scales and no transpose).
An fp8 dot with `max_num_imprecise_acc = n` (n <= its K) sums each run of n of k in an
accumulator of its own and adds it to the dot's in fp32, as Triton does on Hopper (the tensor
cores keep fewer bits of an fp8 sum than fp32 has).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from kiln.ir.core import Operation, is_zero_constant
from kiln.ir.types import ROW_XOR_32, block_type, shared_type

from kiln.ir import layout as lay
from ..analysis.access import access_width, copied_inner_dim, register_run
from ..analysis.shared_buffers import ALIGN  # the buffers' base: a 128-byte swizzle repeats every 1024 bytes
from . import fp8, stmatrix, tile_transpose, transposed_dot
from .context import LoweringError
from .memory import branchy_load, plain_store
from .reduce import shuffle
from .types import F32, I8, I32, I64, VOID, half_words, reg_type, word_halves

_PTX_TYPE = {"fp16": "f16", "bf16": "bf16", "fp8e4nv": "e4m3", "fp8e5": "e5m2", "fp32": "tf32", "int8": "s8"}
_SWIZZLE_MODE = {0: 0, 128: 1, 64: 2, 32: 3}


def shared_base(lw):
    """The kernel's shared memory, declared aligned to ALIGN where its buffers lie in it: the
    driver places dynamic shared memory on a 1024-byte boundary (every GPU test on the H200 found
    it so), so nothing is rounded at run time nor reserved for what rounding would skip. The first
    use checks the address at entry and traps where a driver placed it elsewhere (PTX only: the CPU
    emulator aligns its buffer as declared)."""
    smem = lw.smem_array()
    if smem.align < ALIGN:
        smem.align = ALIGN
        if not lw.ctx.portable:  # in PTX: LLVM would fold a check of the declared alignment away
            check = ir.InlineAsm(ir.FunctionType(VOID, []), "{ .reg .b32 a; .reg .pred p; mov.u32 a, kiln_smem; "
                                 f"and.b32 a, a, {ALIGN - 1}; setp.ne.b32 p, a, 0; @p trap; }}", "~{memory}",
                                 side_effect=True)
            lw.entry.call(check, [])
    return smem


def tile_geometry(t):
    """(row bytes W, elements per row C, rows per chunk O) of a shared tile type's 2-D tiles."""
    es = t.element_ty.itemsize
    inner, outer = t.order
    W = t.tile_shape[inner] * es if t.swizzle in (0, ROW_XOR_32) else t.swizzle
    return W, W // es, t.tile_shape[outer]


def tile_offset(lw, t, idx, b=None):
    """Byte offset (i32) of element `idx` (a logical index pair; a batched tile's a triple, whose
    batch's 2-D tile lies that many tiles in) in tile type `t`."""
    b = b or lw.b
    if len(idx) == 3:
        return b.add(b.mul(idx[0], lw.i32(t.tile_bytes)), tile_offset(lw, t, idx[1:], b))
    es = t.element_ty.itemsize
    inner, outer = t.order
    W, C, O = tile_geometry(t)
    i, o = idx[inner], idx[outer]
    off = b.add(b.mul(b.udiv(i, lw.i32(C)), lw.i32(O * W)), b.mul(o, lw.i32(W)))
    off = b.add(off, b.mul(b.urem(i, lw.i32(C)), lw.i32(es)))
    if t.swizzle == ROW_XOR_32:  # whole rows (one chunk): the 32-byte unit XOR the row mod 4
        return b.xor(off, b.shl(b.and_(o, lw.i32(3)), lw.i32(5)))
    if t.swizzle:
        rows = b.and_(b.lshr(off, lw.i32(7)), lw.i32(t.swizzle // 16 - 1))
        off = b.xor(off, b.shl(rows, lw.i32(4)))
    return off


def constant_step(t, frm, to):
    """Bytes from logical index `frm` to `to` of tile type `t` where that is the same for
    every thread: whole rows of chunks apart, by a multiple of the swizzle's 8-row period
    (whose XOR pattern then repeats). Else None. Copies then address one base plus
    immediates instead of each computing its swizzled offset."""
    if len(frm) == 3:  # a batched tile's: whole 2-D tiles apart, plus the step within one
        step = constant_step(t, frm[1:], to[1:])
        return None if step is None else (to[0] - frm[0]) * t.tile_bytes + step
    inner, outer = t.order
    W, C, O = tile_geometry(t)
    d_inner, d_outer = to[inner] - frm[inner], to[outer] - frm[outer]
    if t.swizzle == ROW_XOR_32:  # the same row mod 4, whole 128-byte groups of units apart
        es = t.element_ty.itemsize
        return d_outer * W + d_inner * es if d_outer % 4 == 0 and d_inner * es % 128 == 0 else None
    if d_inner % C:
        return None
    step = d_inner // C * O * W + d_outer * W
    if t.swizzle and step % (8 * t.swizzle):
        return None
    return step


def _local_alloc(lw, op):
    offset = op.attrs.get("offset")
    if offset is None:
        raise LoweringError("local_alloc has no offset: run the smem_alloc pass")
    lw.bind(op.results[0], [lw.b.gep(shared_base(lw), [lw.i32(offset)], source_etype=I8)])


def _local_index(lw, op):
    buf, slot = op.operands
    step = lw.b.mul(lw.scalar(slot), lw.i32(buf.type.tile().nbytes))
    lw.bind(op.results[0], [lw.b.gep(lw.scalar(buf), [step], source_etype=I8)])


def _local_trans(lw, op):
    lw.bind(op.results[0], [lw.scalar(op.operands[0])])  # the type says how to read it


def _async_copy(lw, op):
    ptr, tile = op.operands[:2]
    mask = op.operands[2] if len(op.operands) >= 3 else None
    count = op.operands[3] if len(op.operands) == 4 else None
    t, shape = tile.type, ptr.type.shape
    es, inner = t.element_ty.itemsize, copied_inner_dim(t, shape)
    layout = lw.layout(ptr)  # the convert_layouts pass chose it (passes.layouts.copy_layout)
    # a thread's run along another dim than the tile's inner one lands in as many tile rows: copied an element a copy,
    # each run's elements from one pointer and immediates where memory holds them in a row (ptxas keeps a 64-bit
    # pointer a copy live otherwise: in session 94 a 128x128x32 tf32 `x @ W` tile on 4 warps took 255 registers, 214 so)
    run_dim, run = register_run(layout)
    vec, pointer_run = access_width(lw.ctx, op, layout, shape, 8 * es), 1
    if run_dim not in (inner, -1):
        vec, pointer_run = 1, math.gcd(run, lw.ctx.axis.get(ptr).contiguity[run_dim])
    if vec * es < 4:
        raise LoweringError(f"async_copy needs runs of 4 bytes or more along the tile's inner dim, got {vec * es}")
    ptrs = lw.regs(ptr, layout)
    # a mask bit per copy where the mask is constant over it, else (a prefix of it, as
    # smem_pipeline proved) a src-size: the bytes of its true elements, the rest zero-filled
    if count is not None and vec <= op.attrs["prefix_run"] and lw.ctx.axis.get(mask).constancy[inner] % vec:
        counts, masks = lw.regs(count, layout), None
    else:
        counts, masks = None, lw.regs(mask, layout) if mask is not None else None
    offsets, indices = _in_tile(lw, layout.offsets(shape), lw.indices(layout, shape), shape)
    owner = lw.owner_mask(layout, shape)
    if owner is None:
        _issue_copies(lw, op, ptrs, masks, counts, offsets, indices, vec, (run_dim, pointer_run))
    else:  # threads share elements (a vector of fewer than them): one copies each, no two write a byte
        with lw.b.if_then(owner):
            _issue_copies(lw, op, ptrs, masks, counts, offsets, indices, vec, (run_dim, pointer_run))


def _issue_copies(lw, op, ptrs, masks, counts, offsets, indices, vec, pointer_runs=(0, 1)):
    """One thread's cp.async per run of `vec` elements of `async_copy` `op` (its pointers, masks or
    src-sizes in registers, the runs' logical offsets and tile indices). `pointer_runs` (dim, n):
    the elements of each run of n along dim are read through the run's first pointer and an immediate."""
    tile = op.operands[1]
    t = tile.type
    es, inner = t.element_ty.itemsize, copied_inner_dim(t, op.operands[0].type.shape)
    nbytes = vec * es
    base = lw.scalar(tile)
    first = None  # (logical offset, shared address) of the thread's first copy
    run_dim, run = pointer_runs
    register_at = {tuple(off): i for i, off in enumerate(offsets)} if run > 1 else {}
    for i, off in enumerate(offsets):
        if off[inner] % vec:
            continue  # inside a run that an earlier register starts
        if lw.ctx.portable:
            dst = lw.b.gep(base, [tile_offset(lw, t, indices[i])], source_etype=I8)
            _copy_now(lw, ptrs[i], dst, vec, es, masks[i] if masks is not None else None,
                      _src_bytes(lw, counts[i], vec, op, es) if counts is not None else None)
            continue
        step = None if first is None else constant_step(t, first[0], off)
        if step is None:
            address = lw.b.ptrtoint(lw.b.gep(base, [tile_offset(lw, t, indices[i])], source_etype=I8), I32)
            first = first or (off, address)
            step = 0
        else:
            address = first[1]
        # A masked-off copy fills zeros through the ignore-src predicate (a .pred operand,
        # "b"): ptxas folds the mask into the copy's own predicate, where a src-size of 0
        # or N cost a select and a compare back per copy. The step is an immediate of the address.
        into_run, source = off[run_dim] % run, i
        if into_run:  # the run's first element's pointer
            source = register_at[tuple(o - into_run if d == run_dim else o for d, o in enumerate(off))]
        src_at = f"$1+{into_run * es}" if into_run else "$1"
        copy = f"cp.async.{'cg' if nbytes == 16 else 'ca'}.shared.global [$0+{step}], [{src_at}], {nbytes}"
        src = lw.b.ptrtoint(ptrs[source], I64)
        if counts is not None:
            _asm(lw, f"{copy}, $2;", args=[address, src, _src_bytes(lw, counts[i], vec, op, es)], constraints="r,l,r")
        elif masks is None:
            _asm(lw, copy + ";", args=[address, src], constraints="r,l")
        elif lw.ctx.target.ptx_version < 75:  # no ignore-src operand before PTX 7.5: a src-size of 0 or all
            size = lw.b.select(masks[i], lw.i32(nbytes), lw.i32(0))
            _asm(lw, f"{copy}, $2;", args=[address, src, size], constraints="r,l,r")
        else:
            skip = lw.b.not_(masks[i])
            _asm(lw, f"{copy}, $2;", args=[address, src, skip], constraints="r,l,b")


def _copy_now(lw, src, dst, vec, es, mask, nbytes):
    """The portable form of one copy (the CPU emulator has no cp.async): element by
    element, each loaded under a branch where the mask or the src-size takes it, else 0."""
    elem = ir.IntType(8 * es)
    for e in range(vec):
        at = lw.b.gep(src, [lw.i32(e)], source_etype=elem)
        take = mask if nbytes is None else lw.b.icmp_unsigned(">", nbytes, lw.i32(e * es))
        if take is None:
            value = lw.b.load(at, typ=elem, align=es)
        else:
            (value,) = branchy_load(lw, at, take, [ir.Constant(elem, 0)], elem, 1, es)
        lw.b.store(value, lw.b.gep(dst, [lw.i32(e * es)], source_etype=I8), align=es)


def _src_bytes(lw, count, vec, op, es):
    """A copy's src-size: its run's count of true elements (a run of `prefix_run` holds
    `count` of them from its start, so one of `vec` <= that holds min(count, vec)) in bytes."""
    if vec < op.attrs["prefix_run"]:
        count = lw.b.select(lw.b.icmp_unsigned("<", count, lw.i32(vec)), count, lw.i32(vec))
    return lw.b.mul(count, lw.i32(es))


def _run_length(layout, inner, es) -> int:
    """How many consecutive registers of `layout` hold consecutive elements along
    `inner` (one vector store), capped at one 16-byte swizzle unit."""
    if isinstance(layout, lay.Blocked) and layout.order[0] == inner:
        run = layout.size_per_thread[inner]
    elif isinstance(layout, lay.Wgmma) and inner == 1:
        run = 2
    else:
        run = 1
    return max(1, min(run, 16 // es))


def _local_store(lw, op):
    value, tile = op.operands
    lw.fragments.stored(tile)
    read = value.defining_op
    if read is not None and lw.transposed_copies.get(id(read)) is op and tile_transpose.usable(lw, tile.type):
        tile_transpose.copy(lw, read.operands[0], tile, lambda t, idx: tile_offset(lw, t, idx))
        return
    store_tile(lw, lw.regs(value), lw.layout(value), value.type, lw.scalar(tile), tile.type)


def store_tile(lw, regs, layout, vt, base, t):
    """Registers `regs` of block type `vt` in `layout` into the tile of type `t` at `base`."""
    shape = vt.shape
    es, inner = t.element_ty.itemsize, t.order[0]
    run = min(_run_length(layout, inner, es), shape[inner])
    indices = lw.indices(layout, shape)
    elem_ty = reg_type(vt)
    # rows of a tile's chunks are 16-byte multiples, swizzled in 16-byte units: an accumulator's 8x8
    # matrices go by stmatrix wherever the tile's rows run along its columns
    groups = stmatrix.usable(lw, layout, shape, es) if len(shape) == 2 and inner == 1 else None
    if groups is not None and tile_geometry(t)[0] % 16 == 0:
        start = lw.b.ptrtoint(base, I32)
        stmatrix.store(lw, regs, indices, groups, elem_ty,
                       lambda row, col: lw.b.add(start, tile_offset(lw, t, (row, col))), layout, shape)
        return
    for i in range(0, len(regs), run):
        dst = lw.b.gep(base, [tile_offset(lw, t, indices[i])], source_etype=I8)
        plain_store(lw, dst, regs[i:i + run], elem_ty, es)


def _in_tile(lw, offsets, indices, shape):
    """A block's (offsets, indices) as tile coordinates: a vector fills a tile of one row
    (row 0), any other block its tile as it is."""
    if len(shape) != 1:
        return offsets, indices
    return [(0, *o) for o in offsets], [(lw.i32(0), *i) for i in indices]


def _local_load(lw, op):
    tile, out = op.operands[0], op.results[0]
    if id(op) in lw.transposed_copies and tile_transpose.usable(lw, tile.type):
        return  # its store copies the tile (tile_transpose)
    if not isinstance(out.type, block_type):  # a scalar from a tile of one: every thread reads it
        lw.bind(out, [lw.b.load(lw.scalar(tile), typ=reg_type(out.type), align=out.type.itemsize)])
        return
    layout = lw.layout(out)
    lw.bind(out, load_tile(lw, lw.scalar(tile), tile.type, layout, out.type), layout)


def load_tile(lw, base, t, layout, vt) -> list:
    """The registers of block type `vt` in `layout`, read from the tile of type `t` at `base`
    (a vector from a tile of one row)."""
    shape = vt.shape
    es, inner = t.element_ty.itemsize, t.order[0]
    run = 1 if len(shape) == 1 else min(_run_length(layout, inner, es), shape[inner])
    if run == 1 and es == 2 and len(shape) == 2 and tile_geometry(t)[0] % 16 == 0:
        groups = stmatrix.readable(lw, layout, shape, across_rows=inner == 0)
        if groups is not None:  # 8x8 fragments by ldmatrix (.trans down a tile's columns), not 16-bit loads
            return stmatrix.load(lw, lw.indices(layout, shape), groups, reg_type(vt),
                                 lambda row, col: lw.b.gep(base, [tile_offset(lw, t, (row, col))], source_etype=I8),
                                 layout, shape, across_rows=inner == 0)
    _, indices = _in_tile(lw, (), lw.indices(layout, shape), shape)
    elem_ty = reg_type(vt)
    regs = []
    for i in range(0, len(indices), run):
        src = lw.b.gep(base, [tile_offset(lw, t, indices[i])], source_etype=I8)
        vec = lw.b.load(src, typ=elem_ty if run == 1 else ir.VectorType(elem_ty, run), align=run * es)
        regs += [vec] if run == 1 else [lw.b.extract_element(vec, lw.i32(e)) for e in range(run)]
    return regs


def _async_commit(lw, op):
    if not lw.ctx.portable:  # portable copies are done when issued
        lw.b.call(lw.intrinsic("llvm.nvvm.cp.async.commit.group", VOID, []), [])


def _async_wait(lw, op):
    if not lw.ctx.portable:
        lw.b.call(lw.intrinsic("llvm.nvvm.cp.async.wait.group", VOID, [I32]), [lw.i32(op.attrs["pending"])])


def _asm(lw, text, ret=VOID, args=(), constraints=""):
    fty = ir.FunctionType(ret, [a.type for a in args])
    return lw.b.call(ir.InlineAsm(fty, text, constraints, side_effect=True), list(args))


def _fence_async_shared(lw, op):
    _asm(lw, "fence.proxy.async.shared::cta;")


def _descriptor(lw, tile, offset, const, k_major):
    """wgmma's 64-bit matrix descriptor of the sub-tile at byte `offset` (i32) + `const`
    (int) of `tile`: start address, leading and stride byte offsets, swizzle mode (PTX
    ISA, "matrix descriptor"). K-major: rows of W bytes, 8-row groups SBO = 8W apart, LBO
    unused. M/N-major: the next W-byte chunk along M/N is LBO = (k rows) * W away, the
    next 8 k-rows SBO = 8W. Shared addresses are 16-byte aligned and below 2^18, so the
    start field is the address >> 4 (no 64-bit shift or mask per instruction). In a ring slot
    a k-step's descriptor is the slot's plus a constant, one 64-bit add (ptxas's UIADD3.64, as
    in Triton's code; built as a 32-bit low word and the constant high word, each k-step cost a
    ULEA.HI and two UMOVs); a tile stored once keeps the 32-bit form (below). In a cluster
    launch the address also holds the CTA's rank (bits 24-31), masked off."""
    b = lw.b
    t = tile.type
    if t.swizzle == ROW_XOR_32:
        raise LoweringError(f"wgmma reads no row-XOR tile ({t})")
    W, _, O = tile_geometry(t)
    lbo = 16 if k_major else O * W
    start = b.lshr(b.add(b.ptrtoint(lw.scalar(tile), I32), offset), lw.i32(4))
    if lw.in_cluster:  # the rank bits would land in the LBO field: the start field is 14 bits
        start = b.and_(start, lw.i32(0x3FFF))
    high = (8 * W >> 4) | (_SWIZZLE_MODE[t.swizzle] << 30)
    if tile.defining_op is None or tile.defining_op.name != "local_index":
        # a tile stored once, live through the loop: its 32-bit start is all it keeps (a 64-bit
        # base per tile doubled those registers: bench's D128 dK/dV went 242 -> 255 and spilled)
        low = b.add(start, lw.i32((const >> 4) + ((lbo >> 4) << 16)))
        return b.or_(b.zext(low, I64), ir.Constant(I64, high << 32))
    base = b.or_(b.zext(b.or_(start, lw.i32((lbo >> 4) << 16)), I64), ir.Constant(I64, high << 32))
    return b.add(base, ir.Constant(I64, const >> 4)) if const else base


def _operand_offset(lw, tile, rows_dim, row0, k0):
    """Byte offset of the sub-tile whose `rows_dim` index starts at `row0` (i32) and
    whose k starts at `k0` (int), in a tile laid out as its type says: (the part that
    depends on row0, an i32; the constant part, an int)."""
    t = tile.type
    es = t.element_ty.itemsize
    W, C, O = tile_geometry(t)
    b = lw.b
    if t.order[0] != rows_dim:  # K-major: k is the inner dim
        return b.mul(row0, lw.i32(W)), k0 // C * O * W + k0 % C * es
    chunk = b.mul(b.udiv(row0, lw.i32(C)), lw.i32(O * W))
    return b.add(chunk, b.mul(b.urem(row0, lw.i32(C)), lw.i32(es))), k0 * W


def _a_fragments(lw, a, layout, K):
    """A in registers: per M repetition, per 32 bytes of k, the four 32-bit words of wgmma's A
    fragment. For 16-bit types that fragment holds the same elements as the accumulator
    layout with one instruction as wide as K (rows g and g + 8, columns 2t, 2t + 1 of each
    8-column chunk), so a value computed in that layout (attention's P) needs no data
    movement; for 8-bit types see `_fp8_fragment`."""
    regs = lw.regs(a, lay.Wgmma(layout.warps, K))
    per_word = 4 // a.type.element_ty.itemsize
    words = [_word(lw, regs[i:i + per_word]) for i in range(0, len(regs), per_word)]
    per_m = K * a.type.element_ty.itemsize // 8  # words per M repetition: two rows of K over four lanes
    fragments = [[words[m * per_m + k: m * per_m + k + 4] for k in range(0, per_m, 4)]
                 for m in range(len(words) // per_m)]
    if per_word == 4:
        lanes = _quad_sources(lw)
        fragments = [[_fp8_fragment(lw, chunk, lanes) for chunk in m] for m in fragments]
    return fragments


def _word(lw, elements):
    """A 32-bit word of `elements`, the first in its low bits; 8-bit codes converted in pairs go in
    as the 16 bits each conversion gave."""
    halves = [fp8.encoded_pair(*elements[i:i + 2]) for i in range(0, len(elements), 2)] \
        if len(elements) == 4 else [None]
    if all(half is not None for half in halves):
        elements = halves
    packed = ir.Constant(ir.VectorType(elements[0].type, len(elements)), ir.Undefined)
    for j, element in enumerate(elements):
        packed = lw.b.insert_element(packed, element, lw.i32(j))
    return lw.b.bitcast(packed, I32)


def _quad_sources(lw):
    """What `_fp8_fragment` asks of this lane, once per dot: (lane t even, the lane it reads in round
    one, in round two, the `prmt` selectors that put a received pair's row g and row g + 8 halves in
    this lane's order: round one's first where t < 2)."""
    b = lw.b
    t = b.and_(lw.lane, lw.i32(3))
    quad = b.sub(lw.lane, t)
    odd = b.and_(t, lw.i32(1))
    half = b.lshr(t, lw.i32(1))
    first_is_low = b.icmp_unsigned("<", t, lw.i32(2))
    return (b.icmp_unsigned("==", odd, lw.i32(0)),
            b.add(quad, b.add(b.shl(odd, lw.i32(1)), half)),
            b.add(quad, b.add(b.shl(odd, lw.i32(1)), b.sub(lw.i32(1), half))),
            b.select(first_is_low, lw.i32(0x5410), lw.i32(0x1054)),
            b.select(first_is_low, lw.i32(0x7632), lw.i32(0x3276)))


def _fp8_fragment(lw, words, lanes):
    """The fragment of one 32-column k-step of an 8-bit A from the four words the
    accumulator layout gives (word j: this lane's two bytes of rows g and g + 8 in 8-column
    chunk j, at columns 8j + 2t, 8j + 2t + 1). The instruction wants columns 4t .. 4t + 3 and
    16 + 4t .. 16 + 4t + 3: chunk t // 2 (and 2 + t // 2) of lanes 2(t % 2) and 2(t % 2) + 1 of
    the quad. Each lane sends one word a round and each receiver takes all of it (its two
    rows), so two shuffles give a word pair: in round one lane s sends chunk s % 2 and lane
    t reads lane 2(t % 2) + t // 2, in round two the other chunk and the other lane. One `prmt`
    per row puts the two received words' halves in order (a select of which came first, and
    the mask and shift after it, were three instructions)."""
    b = lw.b
    even, first_source, second_source, row_g_order, row_g8_order = lanes
    prmt = lw.intrinsic("llvm.nvvm.prmt", I32, [I32, I32, I32])
    out = []
    for chunk_a, chunk_b in ((words[0], words[1]), (words[2], words[3])):
        sent_first, sent_second = b.select(even, chunk_a, chunk_b), b.select(even, chunk_b, chunk_a)
        got_first = shuffle(lw, sent_first, "idx", first_source, 0x1f)
        got_second = shuffle(lw, sent_second, "idx", second_source, 0x1f)
        # row g: the low halves; row g + 8: the high halves
        out.append((b.call(prmt, [got_first, got_second, row_g_order]),
                    b.call(prmt, [got_first, got_second, row_g8_order])))
    (lo_g, lo_g8), (hi_g, hi_g8) = out
    return [lo_g, lo_g8, hi_g, hi_g8]


def _warp_group_dot(lw, op):
    a, b_op, acc = op.operands
    out = op.results[0]
    layout = lw.layout(out)
    (M, K), (_, N) = a.type.shape, b_op.type.shape
    elem = a.type.element_ty
    k_step = 32 // elem.itemsize
    integer = elem.name == "int8"  # int32 accumulators in "r" registers
    transposed = bool(op.attrs.get("transposed"))  # C^T = B^T A^T: B^T from registers (lower/transposed_dot)
    if transposed:
        if layout != lay.transposed_wgmma_layout(out.type.shape, lw.num_warps, integer):
            raise LoweringError(f"a transposed warp_group_dot needs its accumulator layout, not {layout}")
        (Wm, Wn), instr_n = (lw.num_warps, 1), lay.transposed_instr_n(M, integer)
        rows, cols, b_tile = N, M, a  # the instruction's M and N, its B's tile
    elif not isinstance(layout, lay.Wgmma):
        raise LoweringError(f"warp_group_dot needs the wgmma accumulator layout, not {layout}")
    else:
        (Wm, Wn), instr_n = layout.warps, layout.instr_n
        rows, cols, b_tile = M, N, b_op
    halves = out.type.scalar.name == "fp16"  # fp16 accumulators (out_dtype=float16): f16x2 words in "r"
    acc_ty, acc_ptx = (I32, "s32") if integer else (I32, "f16") if halves else (F32, "f32")
    values = list(lw.regs(acc, layout))
    n_m, n_n = max(1, rows // (16 * Wm)), max(1, cols // (instr_n * Wn))
    if transposed:  # the registers in the instructions' order
        native = transposed_dot.native_order(layout, out.type.shape, instr_n, n_m, n_n)
        values = [values[i] for i in native]
    if halves:  # the words hold the same elements as fp32's registers, two to a word
        values = half_words(lw, values)
    b = lw.b
    # a zero accumulator is not materialized: the first k-step runs with scale-d = 0
    fresh = is_zero_constant(acc)
    if fresh:
        values = [ir.Constant(acc_ty, ir.Undefined)] * len(values)
    group = b.udiv(lw.uniform_warp, lw.i32(4))
    row_base = b.mul(b.urem(group, lw.i32(Wm // 4)), lw.i32(64))
    col_base = b.mul(b.udiv(group, lw.i32(Wm // 4)), lw.i32(instr_n))
    a_in_regs = transposed or not isinstance(a.type, shared_type)
    a_k_major, b_k_major = a_in_regs or a.type.order[0] == 1, transposed or b_op.type.order[0] == 0
    per = instr_n // (4 if halves else 2)  # accumulator registers per instruction
    a_ty, b_ty = (_PTX_TYPE[v.type.element_ty.name] for v in ((b_op, a) if transposed else (a, b_op)))  # e4m3 x e5m2
    d = ", ".join(f"${i}" for i in range(per))
    shape = f"wgmma.mma_async.sync.aligned.m64n{instr_n}k{k_step}.{acc_ptx}.{a_ty}.{b_ty}"
    if a_in_regs:  # d, {a0..a3}, b-desc, scale-d, scale-a, scale-b, trans-b (16-bit types only)
        if transposed:
            fragments = transposed_dot.Fragments(lw, b_op, lambda t, idx: tile_offset(lw, t, idx), lw.num_warps)
            a_fragment = lambda mi, k0: fragments.get(mi, k0)  # noqa: E731
        else:
            fragments = _a_fragments(lw, a, layout, K)
            a_fragment = lambda mi, k0: fragments[mi][k0 // k_step]  # noqa: E731
        args = "{" + ", ".join(f"${per + i}" for i in range(4)) + "}"
        trans = f", {int(not b_k_major)}" if elem.itemsize == 2 else ""
        scales = "" if integer else ", 1, 1"
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${per + 5}, 0; "
                f"{shape} {{{d}}}, {args}, ${per + 4}, p{scales}{trans}; }}")
        inputs = ["r"] * 4 + ["l", "r"]
    else:
        # the transpose flags exist for 16-bit types only (fp8, tf32 and int8 read K-major
        # tiles); the negating scales for float types only
        trans = "" if elem.itemsize != 2 else f", {int(not a_k_major)}, {int(not b_k_major)}"
        scales = "" if integer else ", 1, 1"
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${per + 2}, 0; "
                f"{shape} {{{d}}}, ${per}, ${per + 1}, p{scales}{trans}; }}")
        inputs = ["l", "l", "r"]
    constraints = ",".join(["=f" if acc_ty == F32 else "=r"] * per + inputs + [str(i) for i in range(per)])
    ret = lw.registers_struct([acc_ty] * per)

    def issue(k_steps, into, zero_first):
        """The wgmmas of `k_steps` into the registers `into`, committed as one group."""
        _asm(lw, "wgmma.fence.sync.aligned;")
        for k0 in k_steps:
            for mi in range(n_m):
                if a_in_regs:
                    a_args = a_fragment(mi, k0)
                else:
                    row0 = b.add(row_base, lw.i32(mi * 16 * Wm))
                    a_args = [_descriptor(lw, a, *_operand_offset(lw, a, 0, row0, k0), a_k_major)]
                for ni in range(n_n):
                    col0 = b.add(col_base, lw.i32(ni * instr_n * Wn))
                    b_rows = _operand_offset(lw, b_tile, 0 if transposed else 1, col0, k0)
                    b_desc = _descriptor(lw, b_tile, *b_rows, b_k_major)
                    first = (mi * n_n + ni) * per
                    scale_d = lw.i32(0 if zero_first and k0 == k_steps[0] else 1)
                    got = _asm(lw, text, ret, a_args + [b_desc, scale_d] + into[first:first + per], constraints)
                    into[first:first + per] = [b.extract_value(got, i) for i in range(per)]
        _asm(lw, "wgmma.commit_group.sync.aligned;")

    def bind(regs):
        regs = word_halves(lw, regs) if halves else regs
        if transposed:
            in_layout = [None] * len(regs)
            for i, r in zip(native, regs):
                in_layout[i] = r
            regs = in_layout
        lw.bind(out, regs, layout)

    k_steps = list(range(0, K, k_step))
    run = None if halves else _imprecise_run(op, elem, K, k_step)  # Triton: fp32 accumulators only
    if run is None:
        issue(k_steps, values, fresh)
        bind(values)
        return
    # Triton's partial accumulator: each run of k-steps from zero, awaited, then added in fp32
    # (the incoming accumulator, which an earlier group may still be writing, awaited with the first)
    total = None if fresh else values
    for start in range(0, len(k_steps), run):
        partial = [ir.Constant(acc_ty, ir.Undefined)] * len(values)
        issue(k_steps[start:start + run], partial, True)
        waited, _ = tied_wait(lw, partial + (total if start == 0 and total is not None else []))
        partial = waited[:len(values)]
        if start == 0:
            total = partial if total is None else waited[len(values):]
            if fresh:
                continue
        flags = ("contract",) if lw.ctx.fp_fusion else ()  # as every fp32 add (PTX `add.f32`, as Triton's)
        total = [b.fadd(t, p, flags=flags) for t, p in zip(total, partial)]
    bind(total)


def _imprecise_run(op, elem, K: int, k_step: int) -> int | None:
    """k-steps per partial accumulator of an fp8 dot whose `max_num_imprecise_acc` is at most its
    K (Triton's rule; at least one k-step each), else None: the whole K in one accumulator."""
    n = op.attrs.get("max_num_imprecise_acc")
    if n is None or not elem.is_fp8() or n > K:
        return None
    return max(1, n // k_step)


def tied_wait(lw, regs: list, with_tid: bool = False):
    """`wgmma.wait_group 0` with `regs` (fp32 or int32) passed through it, so that nothing reads them
    before the wait: (the registers after it, and with `with_tid` %tid.x read in the same asm)."""
    text = "wgmma.wait_group.sync.aligned 0;" + (f" mov.u32 ${len(regs)}, %tid.x;" if with_tid else "")
    kinds = [("f" if r.type == F32 else "r") for r in regs]
    tid = ["=r"] if with_tid else []
    constraints = ",".join([f"={k}" for k in kinds] + tid + [str(i) for i in range(len(regs))])
    got = _asm(lw, text, lw.registers_struct([r.type for r in regs] + [I32] * len(tid)), regs, constraints)
    values = [lw.b.extract_value(got, i) for i in range(len(regs))]
    return values, (lw.b.extract_value(got, len(regs)) if with_tid else None)


def _warp_group_dot_wait(lw, op):
    """Wait for all but `pending` dot groups. With none pending the accumulators go
    through the wait (tied registers), so nothing reads them before it."""
    pending = op.attrs["pending"]
    if pending:
        _asm(lw, f"wgmma.wait_group.sync.aligned {pending};")
        for v, r in zip(op.operands, op.results):
            lw.bind(r, lw.regs(v), lw.layout(v))
        return
    regs, layouts, counts = [], [], []
    for v in op.operands:
        got = lw.regs(v)
        if v.type.scalar.name == "fp16":  # fp16 accumulators wait as the f16x2 words wgmma wrote
            got = half_words(lw, got)
        regs += got
        layouts.append(lw.layout(v))
        counts.append(len(got))
    if any(r.type not in (F32, I32) for r in regs):
        raise LoweringError("warp_group_dot_wait carries fp32, fp16 or int32 accumulators only")
    # After a loop nothing may run between the loop and this wait: ptxas serializes
    # every wgmma of the kernel (warning C7514) when instructions sit between the last
    # dot and its wait, and LLVM sinks index math to the top of the block that uses it.
    # So the code after such a wait starts a block of its own, behind a branch on a
    # value LLVM cannot see through (%tid.x < 1024, always true). Inside a loop body the
    # branch is not needed and would cost registers.
    fence = not _in_loop(op)
    waited, tid = tied_wait(lw, regs, with_tid=fence)
    at = 0
    for r, layout, n in zip(op.results, layouts, counts):
        got = waited[at:at + n]
        lw.bind(r, word_halves(lw, got) if r.type.scalar.name == "fp16" else got, layout)
        at += n
    if fence:
        _fence_block(lw, tid)


def _in_loop(op) -> bool:
    """Is `op` inside the body of a `for` or `while`?"""
    outer = op.parent.parent if op.parent is not None else None
    while isinstance(outer, Operation):
        if outer.name in ("for", "while"):
            return True
        outer = outer.parent.parent if outer.parent is not None else None
    return False


def _fence_block(lw, tid):
    """Continue in a new block reached only through `tid < 1024` (else a trap)."""
    after = lw.llfn.append_basic_block("after.wait")
    never = lw.llfn.append_basic_block("never")
    lw.b.cbranch(lw.b.icmp_unsigned("<", tid, lw.i32(1024)), after, never)
    lw.b.position_at_end(never)
    lw.b.call(lw.intrinsic("llvm.trap", VOID, []), [])
    lw.b.unreachable()
    lw.b.position_at_end(after)


RULES = {
    "local_alloc": _local_alloc,
    "local_index": _local_index,
    "local_trans": _local_trans,
    "async_copy": _async_copy,
    "local_store": _local_store,
    "local_load": _local_load,
    "async_commit": _async_commit,
    "async_wait": _async_wait,
    "fence_async_shared": _fence_async_shared,
    "warp_group_dot": _warp_group_dot,
    "warp_group_dot_wait": _warp_group_dot_wait,
}
