"""A CTA cluster's partial sums added up in its rank 0 (split-K, kiln.codegen.passes.split_k).

`cluster_sum acc, ctas, rank`: every CTA of rank 1 and up writes its registers of `acc` to its
scratch area, 16 bytes per thread at a time (chunk c of thread t at (c * threads + t) * 16: a
warp's stores and loads touch consecutive bytes), and after a cluster barrier rank 0 reads the
same chunks of CTA 1, 2, ... in that order through distributed shared memory (`mapa`,
`ld.shared::cluster`) and adds them to its own, four chunks at a time: one asm statement per
peer issues the group's four loads, then their adds (as separate instructions LLVM moved every
add after the last load: 192 values live, 255 registers and spills at 128x128; one load and its
adds a statement waited out each round trip in turn). Rank 0 stores each group's sums back to its
own scratch (which no CTA reads) and fences the CTA: stores that need the loaded values keep ptxas
from hoisting every remote load ahead of the adds (no spills; without the fences 255 registers and
spills), and the second cluster barrier's release orders them, so no remote load is outstanding
when the other CTAs exit (a cluster-scope fence before it cost 1-3% more). Loads and adds are
predicated on the peer being in the cluster (not branched).

A CTA's shared addresses in a cluster launch carry its rank in bits 24-31: wgmma's descriptors
mask them off (kiln.codegen.lower.wgmma._descriptor), or a rank above 0 reads an M/N-major
operand's second 128-byte column group from the wrong place.
"""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.ops import CLUSTER_SUM_MAX

from .context import LoweringError
from .types import F32, I32
from .wgmma import _asm

_CLUSTER_BARRIER = "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
_VECTOR = 4  # 32-bit values per 16-byte chunk
_GROUP = 4  # chunks read from a peer at once: 16 more registers live
# per accumulator type: PTX type of the loads and adds, register constraint, zero (integer adds
# wrap as the tensor cores' int32 accumulation does, so an int32 sum is the kernel's as written)
_KINDS = {F32: ("f32", "f", ir.Constant(F32, 0.0)), I32: ("s32", "r", ir.Constant(I32, 0))}


def _cluster_sum(lw, op):
    if lw.ctx.portable or lw.ctx.target.capability < 90:
        raise LoweringError(f"cluster_sum needs thread block clusters (sm_90 or newer), not {lw.ctx.target.name}")
    acc, ctas, rank = op.operands
    regs = list(lw.regs(acc))
    if not regs or any(r.type != regs[0].type for r in regs) or regs[0].type not in _KINDS:
        raise LoweringError("cluster_sum adds fp32 or int32 registers")
    kind, reg, zero = _KINDS[regs[0].type]
    chunks = -(-len(regs) // _VECTOR)
    threads = lw.partition.threads
    base = lw.smem(chunks * threads * 16)
    b = lw.b
    own = b.add(b.ptrtoint(base, I32), b.mul(lw.thread, lw.i32(16)))  # this thread's first chunk
    count, me = lw.scalar(ctas), lw.scalar(rank)
    follower = b.icmp_unsigned("!=", me, lw.i32(0))
    padded = regs + [zero] * (chunks * _VECTOR - len(regs))
    for c in range(chunks):
        _store_chunk(lw, b.zext(follower, I32), b.add(own, lw.i32(c * threads * 16)),
                     padded[_VECTOR * c:_VECTOR * (c + 1)])
    _asm(lw, _CLUSTER_BARRIER, constraints="~{memory}")
    leader = b.icmp_unsigned("==", me, lw.i32(0))
    peers = []  # (predicate, rank of a CTA that exists)
    for peer in range(1, CLUSTER_SUM_MAX):
        reads = b.zext(b.and_(leader, b.icmp_unsigned("<", lw.i32(peer), count)), I32)
        peers.append((reads, b.select(b.icmp_unsigned("<", lw.i32(peer), count), lw.i32(peer), lw.i32(0))))
    total = []
    for first in range(0, chunks, _GROUP):  # a group of chunks at a time: its loads from a peer in flight together
        group = range(first, min(first + _GROUP, chunks))
        parts = padded[_VECTOR * group[0]:_VECTOR * (group[-1] + 1)]
        for reads, target in peers:
            parts = _add_peer_chunks(lw, reads, target, [b.add(own, lw.i32(c * threads * 16)) for c in group], parts)
        # the sums back into this CTA's own chunks (which no other CTA reads): stores that need the
        # loaded values, so every remote load has returned before the barrier that lets the peers exit
        for i, c in enumerate(group):
            _store_chunk(lw, b.zext(leader, I32), b.add(own, lw.i32(c * threads * 16)),
                         parts[_VECTOR * i:_VECTOR * (i + 1)])
        total += parts
        _asm(lw, "fence.acq_rel.cta;", constraints="~{memory}")  # fewer loads hoisted ahead (no spills)
    _asm(lw, _CLUSTER_BARRIER, constraints="~{memory}")
    lw.bind(op.results[0], total[:len(regs)], lw.layout(acc))


def _add_peer_chunks(lw, reads, peer, addresses, values):
    """`values` plus the same chunks of CTA `peer` (at this CTA's shared `addresses`, mapped into the
    peer's), where `reads` (i32) is not 0: every load issued before the first add, so a group's
    round trips through the cluster overlap (one load and its adds a statement waited out each
    load in turn: 16 in a row for a 128x64 tile's partial)."""
    n, (kind, reg, _) = len(values), _KINDS[values[0].type]
    loads = "".join(f"mapa.shared::cluster.u32 a, ${n + 2 + i}, ${n + 1};\n\t"
                    f"@p ld.shared::cluster.v4.{kind} {{t{4 * i}, t{4 * i + 1}, t{4 * i + 2}, t{4 * i + 3}}}, [a];\n\t"
                    for i in range(len(addresses)))
    adds = " ".join(f"@p add.{kind} ${j}, ${j}, t{j};" for j in range(n))
    text = f"{{ .reg .pred p; .reg .{kind} t<{n}>; .reg .b32 a; setp.ne.b32 p, ${n}, 0;\n\t{loads}{adds} }}"
    got = _asm(lw, text, ret=ir.LiteralStructType([values[0].type] * n), args=[reads, peer, *addresses, *values],
               constraints=",".join([f"={reg}"] * n + ["r"] * (2 + len(addresses)) + [str(j) for j in range(n)])
               + ",~{memory}")
    return [lw.b.extract_value(got, j) for j in range(n)]


def _store_chunk(lw, flag, address, values) -> None:
    """Four fp32s or int32s stored at shared `address` by the threads whose `flag` (i32) is not 0."""
    kind, reg, _ = _KINDS[values[0].type]
    _asm(lw, f"{{ .reg .pred p; setp.ne.b32 p, $0, 0;\n\t@p st.shared.v4.{kind} [$1], {{$2, $3, $4, $5}}; }}",
         args=[flag, address, *values], constraints=f"r,r,{reg},{reg},{reg},{reg},~{{memory}}")


RULES = {"cluster_sum": _cluster_sum}
