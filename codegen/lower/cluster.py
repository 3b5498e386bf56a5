"""A CTA cluster's partial sums added up in its rank 0 (split-K, kiln.codegen.passes.split_k).

`cluster_sum acc, ctas, rank`: every CTA of rank 1 and up writes its registers of `acc` to its
scratch area, 16 bytes per thread at a time (chunk c of thread t at (c * threads + t) * 16: a
warp's stores and loads touch consecutive bytes), and after a cluster barrier rank 0 reads the
same chunks of CTA 1, 2, ... in that order through distributed shared memory (`mapa`,
`ld.shared::cluster`) and adds them to its own, each load and its adds in one asm statement (as
separate instructions LLVM moved every add after the last load: 192 values live, 255 registers
and spills at 128x128). Rank 0 stores each chunk's sum back to its own scratch (which no CTA
reads) and fences: a store that needs the loaded values keeps ptxas from hoisting every remote
load ahead of the adds (the 128x128, 8-warp tile takes 120 registers, the tile kernel 92), and no
remote load is outstanding at the second cluster barrier, after which the other CTAs exit. Loads
and adds are predicated on the peer being in the cluster (not branched).

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
    vec = ir.LiteralStructType([regs[0].type] * _VECTOR)
    leader = b.icmp_unsigned("==", me, lw.i32(0))
    peers = []  # (predicate, rank of a CTA that exists)
    for peer in range(1, CLUSTER_SUM_MAX):
        reads = b.zext(b.and_(leader, b.icmp_unsigned("<", lw.i32(peer), count)), I32)
        peers.append((reads, b.select(b.icmp_unsigned("<", lw.i32(peer), count), lw.i32(peer), lw.i32(0))))
    total = []
    for c in range(chunks):  # chunk by chunk, each peer's four values added as they arrive
        part = padded[_VECTOR * c:_VECTOR * (c + 1)]
        for reads, target in peers:
            got = _asm(lw, f"{{ .reg .pred p; .reg .{kind} t<4>; .reg .b32 a; setp.ne.b32 p, $4, 0;\n\t"
                           "mapa.shared::cluster.u32 a, $5, $6;\n\t"
                           f"@p ld.shared::cluster.v4.{kind} {{t0, t1, t2, t3}}, [a];\n\t"
                           f"@p add.{kind} $0, $0, t0; @p add.{kind} $1, $1, t1; @p add.{kind} $2, $2, t2; "
                           f"@p add.{kind} $3, $3, t3; }}",
                       ret=vec, args=[reads, b.add(own, lw.i32(c * threads * 16)), target, *part],
                       constraints=f"={reg},={reg},={reg},={reg},r,r,r,0,1,2,3,~{{memory}}")
            part = [b.extract_value(got, i) for i in range(_VECTOR)]
        # the sums back into this CTA's own chunk (which no other CTA reads): a store that needs the
        # loaded values, so every remote load has returned before the barrier that lets the peers exit
        _store_chunk(lw, b.zext(leader, I32), b.add(own, lw.i32(c * threads * 16)), part)
        total += part
        _asm(lw, "fence.acq_rel.cta;", constraints="~{memory}")  # fewer loads hoisted ahead (no spills)
    _asm(lw, "fence.acq_rel.cluster;", constraints="~{memory}")
    _asm(lw, _CLUSTER_BARRIER, constraints="~{memory}")
    lw.bind(op.results[0], total[:len(regs)], lw.layout(acc))


def _store_chunk(lw, flag, address, values) -> None:
    """Four fp32s or int32s stored at shared `address` by the threads whose `flag` (i32) is not 0."""
    kind, reg, _ = _KINDS[values[0].type]
    _asm(lw, f"{{ .reg .pred p; setp.ne.b32 p, $0, 0;\n\t@p st.shared.v4.{kind} [$1], {{$2, $3, $4, $5}}; }}",
         args=[flag, address, *values], constraints=f"r,r,{reg},{reg},{reg},{reg},~{{memory}}")


RULES = {"cluster_sum": _cluster_sum}
