"""The GPU stage of block IR on a CPU: shared buffers in the text form, the smem_pipeline
and smem_alloc passes as IR text in -> IR text out, the wgmma accumulator layout, and the
PTX of a pipelined dot for sm_90a (wgmma, cp.async, no local memory, no serialization)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir, nvjitlink
from kiln.ir.layout import Wgmma, thread_elements, wgmma_layout
from kiln.codegen.analysis.shared_buffers import allocated_bytes
from kiln.codegen.passes import canonicalize, cse, dce, descriptor_loads, dot_accumulate, smem_alloc, smem_pipeline, smem_plan
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify
from kiln.ir.types import float16, parse_type, shared_type
from kiln.ir.verifier import VerificationError

from bench_support import bench_forward, bench_kernels
from sass_tools import innermost_loop, opcode, sass

# C[64x64] = A[64 x 32n] B[32n x 64], fp16 in, fp32 out: A row-major (K inner), B
# row-major (N inner), one 32-wide k-step per iteration.
MATMUL = """
kernel @mm(%a: ptr<fp16> {divisibility = 16, name = "a"}, %b: ptr<fp16> {divisibility = 16, name = "b"}, %c: ptr<fp32> {divisibility = 16, name = "c"}, %n: int32 {name = "n"}, %lda: int32 {divisibility = 16, name = "lda"}) {
  %ra = arange {end = 64, start = 0} : <64xint32>
  %rk = arange {end = 32, start = 0} : <32xint32>
  %rows = expand_dims %ra {axis = 1} : <64x1xint32>
  %ldas = splat %lda : <64x1xint32>
  %roff = mul %rows, %ldas : <64x1xint32>
  %roffb = broadcast %roff : <64x32xint32>
  %kc = expand_dims %rk {axis = 0} : <1x32xint32>
  %kcb = broadcast %kc : <64x32xint32>
  %aoff = add %roffb, %kcb : <64x32xint32>
  %as = splat %a : <64x32xptr<fp16>>
  %ap = addptr %as, %aoff : <64x32xptr<fp16>>
  %kr = expand_dims %rk {axis = 1} : <32x1xint32>
  %c64 = constant {value = 64} : <32x1xint32>
  %krow = mul %kr, %c64 : <32x1xint32>
  %krowb = broadcast %krow : <32x64xint32>
  %nc = expand_dims %ra {axis = 0} : <1x64xint32>
  %ncb = broadcast %nc : <32x64xint32>
  %boff = add %krowb, %ncb : <32x64xint32>
  %bs = splat %b : <32x64xptr<fp16>>
  %bp = addptr %bs, %boff : <32x64xptr<fp16>>
  %acc0 = constant {value = 0.0} : <64x64xfp32>
  %lb = constant {value = 0} : int32
  %st = constant {value = 1} : int32
  %pa, %pb, %acc = for %lb, %n, %st, %ap, %bp, %acc0 : <64x32xptr<fp16>>, <32x64xptr<fp16>>, <64x64xfp32> {
  ^(%i: int32, %qa: <64x32xptr<fp16>>, %qb: <32x64xptr<fp16>>, %s: <64x64xfp32>):
    %x = load %qa : <64x32xfp16>
    %y = load %qb : <32x64xfp16>
    %d = dot %x, %y, %s {input_precision = "ieee"} : <64x64xfp32>
    %sa = constant {value = 32} : <64x32xint32>
    %qa2 = addptr %qa, %sa : <64x32xptr<fp16>>
    %sb = constant {value = 2048} : <32x64xint32>
    %qb2 = addptr %qb, %sb : <32x64xptr<fp16>>
    yield %qa2, %qb2, %d
  }
  %m = expand_dims %ra {axis = 1} : <64x1xint32>
  %m64 = constant {value = 64} : <64x1xint32>
  %mo = mul %m, %m64 : <64x1xint32>
  %mob = broadcast %mo : <64x64xint32>
  %nb = expand_dims %ra {axis = 0} : <1x64xint32>
  %nbb = broadcast %nb : <64x64xint32>
  %coff = add %mob, %nbb : <64x64xint32>
  %cs = splat %c : <64x64xptr<fp32>>
  %cp = addptr %cs, %coff : <64x64xptr<fp32>>
  store %cp, %acc
  return
}
"""


def pipelined(text=MATMUL, target="sm_90a", num_warps=4, num_stages=3):
    fn = parse_function(text)
    ctx = PassContext(parse_target(target), num_warps, num_stages)
    for p in (canonicalize, cse, dot_accumulate, dce, smem_pipeline, descriptor_loads, canonicalize, cse, dce, smem_alloc):
        p.apply(fn, ctx)
        verify(fn)
    return fn, ctx


def names(fn):
    return [op.name for op in fn.walk()]


def test_shared_types_print_and_parse():
    t = shared_type(float16, (4, 64, 32), 64)
    assert str(t) == "smem<4x64x32xfp16:swizzle64:order1.0>"
    assert parse_type(str(t)) == t and t.tile() == shared_type(float16, (64, 32), 64)
    with pytest.raises(TypeError, match="swizzle"):
        shared_type(float16, (64, 32), 48)
    with pytest.raises(ValueError):
        parse_type("smem<64x32xfp16:swizzle64>")


def test_the_verifier_checks_gpu_stage_ops():
    bad = """kernel @k() {
  %r = local_alloc : smem<2x64x32xfp16:swizzle64:order1.0>
  %z = constant {value = 0} : int32
  %t = local_index %r, %z : smem<64x64xfp16:swizzle64:order1.0>
  return
}
"""
    with pytest.raises(VerificationError, match="local_index.*result must be smem<64x32xfp16"):
        verify(parse_function(bad))


def _scalar_read_back(tile: str, result: str) -> str:
    return f"""kernel @k() {{
  %r = local_alloc : smem<2x{tile}xfp32:swizzle0:order1.0>
  %z = constant {{value = 0}} : int32
  %t = local_index %r, %z : smem<{tile}xfp32:swizzle0:order1.0>
  %x = local_load %t : {result}
  return
}}
"""


def test_a_scalar_is_read_back_from_a_tile_of_one_only():
    """smem_pipeline copies a scalar (fla's last gate) into tiles of one and reads it back as a scalar."""
    verify(parse_function(_scalar_read_back("1x1", "fp32")))
    verify(parse_function(_scalar_read_back("1x1", "<1xfp32>")))  # or as a vector of one
    with pytest.raises(VerificationError, match="fp32 does not match the tile smem<1x2xfp32"):
        verify(parse_function(_scalar_read_back("1x2", "fp32")))
    with pytest.raises(VerificationError, match="int32 does not match the tile smem<1x1xfp32"):
        verify(parse_function(_scalar_read_back("1x1", "int32")))


def test_a_dot_fed_by_loads_becomes_a_ring_of_async_copies_and_wgmma():
    fn, ctx = pipelined()
    text = print_function(fn, locs=False)
    assert parse_function(text) is not None and print_function(parse_function(text), locs=False) == text
    # three stages: a ring of four tiles per operand; A's 64-byte rows swizzled by 64
    assert "local_alloc {offset = 0} : smem<4x64x32xfp16:swizzle64:order1.0>" in text
    assert "local_alloc {offset = 16384} : smem<4x32x64xfp16:swizzle128:order1.0>" in text
    loop = next(op for op in fn.walk() if op.name == "for")
    before = fn.body.ops[:fn.body.ops.index(loop)]
    assert [op.name for op in before].count("async_commit") == 2  # iterations 0 and 1 in flight
    body = [op.name for op in loop.regions[0].ops]
    assert body[:3] == ["async_wait", "fence_async_shared", "barrier"]
    assert loop.regions[0].ops[0].attrs == {"pending": 1}
    assert body.count("async_copy") == 2 and body.count("async_commit") == 1
    assert body.index("warp_group_dot") < body.index("warp_group_dot_wait") < body.index("async_copy")
    after = [op.name for op in fn.body.ops[fn.body.ops.index(loop) + 1:]]
    assert after[:2] == ["warp_group_dot_wait", "async_wait"]
    assert "load" not in names(fn) and "dot" not in names(fn)
    # the loop no longer carries the pointers it stopped loading through
    assert [str(t) for t in (r.type for r in loop.results)].count("<64x32xptr<fp16>>") == 1
    assert allocated_bytes(fn) == 16384 + 16384


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_loops_that_cannot_use_the_ring_are_left_alone(target):
    # masked-off elements would not be zero
    text = MATMUL.replace("%x = load %qa : <64x32xfp16>",
                          "%one = constant {value = 1.0} : <64x32xfp16>\n    %t = constant {value = 1} : <64x32xint1>\n"
                          "    %x = load %qa, %t, %one : <64x32xfp16>")
    fn, _ = pipelined(text, target)
    assert "warp_group_dot" not in names(fn) and "mma_dot" not in names(fn) and "dot" in names(fn)


@pytest.mark.parametrize("target,warps", [("sm_80", 4), ("sm_86", 4), ("sm_90a", 2)])  # no wgmma, or no warpgroup
def test_without_wgmma_the_ring_feeds_mma_sync_and_copies_ahead_first(target, warps):
    fn, ctx = pipelined(MATMUL, target, warps)
    assert "warp_group_dot" not in names(fn) and "fence_async_shared" not in names(fn)
    # three stages, three tiles: the dots of iteration i are done before the barrier of i + 1
    text = print_function(fn, locs=False)
    assert "local_alloc {offset = 0} : smem<3x64x32xfp16:swizzle64:order1.0>" in text
    assert "local_alloc {offset = 12288} : smem<3x32x64xfp16:swizzle128:order1.0>" in text
    assert print_function(parse_function(text), locs=False) == text
    loop = next(op for op in fn.walk() if op.name == "for")
    body = [op.name for op in loop.regions[0].ops]
    # iteration i + 2's copies go into the slot iteration i - 1 read, right after the barrier
    assert body[:2] == ["async_wait", "barrier"] and loop.regions[0].ops[0].attrs == {"pending": 1}
    assert body.index("async_commit") < body.index("mma_dot") and body.count("mma_dot") == 1
    assert "dot" not in body and "load" not in names(fn)


def test_smem_alloc_shares_bytes_between_buffers_that_do_not_live_together():
    text = """kernel @k() {
  %a = local_alloc : smem<2x64x64xfp16:swizzle128:order1.0>
  %z = constant {value = 0} : int32
  %ta = local_index %a, %z : smem<64x64xfp16:swizzle128:order1.0>
  async_commit
  %b = local_alloc : smem<2x64x64xfp16:swizzle128:order1.0>
  %tb = local_index %b, %z : smem<64x64xfp16:swizzle128:order1.0>
  %c = local_alloc : smem<1x32x32xfp16:swizzle64:order1.0>
  %tc = local_index %c, %z : smem<32x32xfp16:swizzle64:order1.0>
  %tb2 = local_index %b, %z : smem<64x64xfp16:swizzle128:order1.0>
  return
}
"""
    fn = parse_function(text)
    ctx = PassContext(parse_target("sm_90a"))
    smem_alloc.apply(fn, ctx)
    offsets = [op.attrs["offset"] for op in fn.walk() if op.name == "local_alloc"]
    assert offsets == [0, 0, 16384]  # a is dead before b; c lives while b does
    assert allocated_bytes(fn) == 16384 + 2048 and "offset = 16384" in print_function(fn)


@kiln.jit
def _persistent_matmul(A, B, C, tiles, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    for t in range(tl.program_id(0), tiles, 2):
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(A + t * BM * K + rm[:, None] * K + (k + rk)[None, :], mask=(k + rk)[None, :] < K, other=0.0)
            b = tl.load(B + (k + rk)[:, None] * BN + rn[None, :], mask=(k + rk)[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(C + t * BM * BN + rm[:, None] * BN + rn[None, :], acc)


def test_a_k_loop_inside_a_tile_loop_counts_its_prologue_from_an_opaque_start():
    # hoisted out of the tile loop, the prologue's copy masks would be predicates live across
    # the K loop (more than a thread has); a tile-independent K loop keeps its plain start
    x = np.zeros((64, 64), np.float16)
    k = _persistent_matmul.warmup(x, x, np.zeros((64, 64), np.float32), 4, 256, BM=64, BN=64, BK=32,
                                  num_warps=4, num_stages=3, grid=(1,), target="sm_90a")
    fn, _ = pipelined(k.asm["kir"], num_warps=4, num_stages=3)
    tile_loop = next(op for op in fn.body.ops if op.name == "for").regions[0].ops
    moves = [op for op in tile_loop if op.name == "inline_asm"]
    assert len(moves) == 1 and moves[0].attrs["volatile"] and moves[0].attrs["asm"] == "mov.b32 $0, $1;"
    first_copy = next(i for i, op in enumerate(tile_loop) if op.name == "async_copy")
    assert tile_loop.index(moves[0]) < first_copy and "warp_group_dot" in names(fn)
    assert "mov.b32" in k.asm["ptx"] and k.n_spills == 0
    plain, _ = pipelined(_wide_matmul_text(), num_warps=4, num_stages=3)
    assert "inline_asm" not in names(plain)


def _wide_matmul_text():
    x = np.zeros((64, 64), np.float16)
    return _wide_matmul.warmup(x, x, np.zeros((64, 64), np.float32), 256, BM=64, BN=64, BK=32, num_warps=4,
                               num_stages=3, grid=(1,), target="sm_90a").asm["kir"]


def test_a_buffer_allocated_in_a_loop_dies_within_each_iteration():
    # a persistent matmul's ring lives in its tile loop: the buffer after the K loop (the
    # epilogue's) may take its bytes, and only a buffer allocated before the tile loop
    # stays alive across it
    text = """kernel @k(%n: int32) {
  %z = constant {value = 0} : int32
  %one = constant {value = 1} : int32
  %kept = local_alloc : smem<1x64x64xfp16:swizzle128:order1.0>
  for %z, %n, %one {
  ^(%t: int32):
    %ring = local_alloc : smem<2x64x64xfp16:swizzle128:order1.0>
    for %z, %n, %one {
    ^(%k: int32):
      %slot = local_index %ring, %k : smem<64x64xfp16:swizzle128:order1.0>
      yield
    }
    %epi = local_alloc : smem<1x64x64xfp16:swizzle128:order1.0>
    %e = local_index %epi, %z : smem<64x64xfp16:swizzle128:order1.0>
    %kv = local_index %kept, %z : smem<64x64xfp16:swizzle128:order1.0>
    yield
  }
  return
}
"""
    fn = parse_function(text)
    ctx = PassContext(parse_target("sm_90a"))
    smem_alloc.apply(fn, ctx)
    offsets = {op.results[0]: op.attrs["offset"] for op in fn.walk() if op.name == "local_alloc"}
    kept, ring, epi = offsets.values()
    assert kept == 0 and ring == 8192 and epi == 8192  # the ring is dead once its K loop ended
    assert allocated_bytes(fn) == 8192 + 16384
    tile_loop = next(op for op in fn.body.ops if op.name == "for").regions[0].ops
    order = [op.name for op in tile_loop]
    assert order[0] == "barrier" and order[order.index("for") + 1] == "barrier"  # both allocations reuse bytes
    verify(fn)


def test_smem_alloc_puts_a_barrier_where_bytes_change_owner():
    # b reuses a's bytes: a warp done with a must not copy into b while another reads a
    text = """kernel @k() {
  %a = local_alloc : smem<2x64x64xfp16:swizzle128:order1.0>
  %z = constant {value = 0} : int32
  %ta = local_index %a, %z : smem<64x64xfp16:swizzle128:order1.0>
  %b = local_alloc : smem<2x64x64xfp16:swizzle128:order1.0>
  %c = local_alloc : smem<1x32x32xfp16:swizzle64:order1.0>
  %tb = local_index %b, %z : smem<64x64xfp16:swizzle128:order1.0>
  %tc = local_index %c, %z : smem<32x32xfp16:swizzle64:order1.0>
  return
}
"""
    fn = parse_function(text)
    smem_alloc.apply(fn, PassContext(parse_target("sm_90a")))
    order = [op.name for op in fn.body.ops]
    # one barrier before b (c's bytes are new); none before a, the first owner of its bytes
    assert order[:5] == ["local_alloc", "constant", "local_index", "barrier", "local_alloc"]
    assert order.count("barrier") == 1
    verify(fn)


def test_pipelined_loops_one_after_the_other_are_separated_by_a_barrier():
    # a second K loop after the first (causal attention runs two): its rings take the
    # first loop's bytes, so its first copies must wait until every warp left the first
    loop = MATMUL[MATMUL.index("  %pa, %pb, %acc = for"):MATMUL.index("  %m = expand_dims")]
    inner = r"%(i|qa|qb|s|x|y|d|sa|qa2|sb|qb2)\b"  # the body's own names, renamed in the copy
    second = re.sub(inner, r"%\1_2", loop).replace("%pa, %pb, %acc = for %lb, %n, %st, %ap, %bp, %acc0",
                                                    "%pa2, %pb2, %acc2 = for %lb, %n, %st, %pa, %pb, %acc")
    text = MATMUL.replace("  %m = expand_dims", second + "  %m = expand_dims", 1).replace("store %cp, %acc", "store %cp, %acc2")
    fn, _ = pipelined(text)
    top = fn.body.ops
    loops = [i for i, op in enumerate(top) if op.name == "for"]
    rings = [op for op in top if op.name == "local_alloc"]
    assert len(loops) == 2 and len(rings) == 4
    assert [r.attrs["offset"] for r in rings[:2]] == [r.attrs["offset"] for r in rings[2:]]  # the same bytes
    between = [op.name for op in top[loops[0] + 1:loops[1]]]
    assert "barrier" in between
    assert between.index("barrier") < between.index("async_copy")
    assert between.index("async_wait") < between.index("barrier")  # the first loop's copies drained first


@kiln.jit
def _wide_matmul(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(tl.load(A + rm[:, None] * K + (k + rk)[None, :]), tl.load(B + (k + rk)[:, None] * BN + rn[None, :]), acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


@pytest.mark.parametrize("num_warps", [4, 8])
def test_a_ring_of_s_tiles_when_s_plus_one_do_not_fit(num_warps):
    # 128x128 + 128x256 fp16 tiles are 96 KB a stage: three do not fit in 227 KB, two do.
    # Each copy then waits until the dot that read its tile retired in every warp (each
    # warp waits for its own part of a wgmma only): the waits, then a barrier
    x = np.zeros((64, 64), np.float16)
    k = _wide_matmul.warmup(x, x, np.zeros((64, 64), np.float32), 1024, BM=128, BN=256, BK=128,
                            num_warps=num_warps, num_stages=3, grid=(1,), target="sm_90a")
    fn, _ = pipelined(k.asm["kir"], num_warps=num_warps, num_stages=3)
    rings = [op.results[0].type for op in fn.walk() if op.name == "local_alloc"]
    assert [t.shape[0] for t in rings] == [2, 2]
    body = next(op for op in fn.walk() if op.name == "for").regions[0].ops
    order = [op.name for op in body]
    last_wait = len(order) - 1 - order[::-1].index("warp_group_dot_wait")
    first_copy = order.index("async_copy")
    assert last_wait < first_copy
    assert "barrier" in order[last_wait:first_copy]
    if num_warps == 8:
        assert "wgmma.mma_async" in k.asm["ptx"] and k.n_spills == 0


@pytest.mark.gpu
def test_a_ring_of_s_tiles_on_the_gpu_matches_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = torch.randn(128, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 256, device="cuda", dtype=torch.float16)
    for warps, stages in ((8, 2), (8, 3), (4, 3)):
        c = torch.empty(128, 256, device="cuda")
        _wide_matmul[(1,)](a, b, c, 1024, BM=128, BN=256, BK=128, num_warps=warps, num_stages=stages)
        torch.testing.assert_close(c, a.float() @ b.float(), atol=0.05, rtol=1e-3)


@kiln.jit
def _matmul_plus_equals(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(A + rm[:, None] * K + (k + rk)[None, :]), tl.load(B + (k + rk)[:, None] * BN + rn[None, :]))
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def test_acc_plus_equals_dot_pipelines_like_a_dot_on_acc():
    # `acc += tl.dot(a, b)` (tutorial 06's backward) accumulates in place: one carried
    # accumulator left in flight, as `acc = tl.dot(a, b, acc)`, not a second block + a wait
    x, c = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float32)
    args = dict(BM=128, BN=128, BK=64, num_warps=4, num_stages=3, grid=(1,), target="sm_90a")
    plus = _matmul_plus_equals.warmup(x, x, c, 1024, **args)
    inplace = _wide_matmul.warmup(x, x, c, 1024, **args)
    fn, _ = pipelined(plus.asm["kir"], num_warps=4, num_stages=3)
    loop = next(op for op in fn.walk() if op.name == "for")
    body = loop.regions[0]
    dot = next(op for op in body.ops if op.name == "warp_group_dot")
    wait = next(op for op in body.ops if op.name == "warp_group_dot_wait")
    assert dot.operands[2] is body.args[1] and wait.attrs == {"pending": 1}
    assert "add" not in [op.name for op in body.ops if op.results and op.results[0].type == dot.results[0].type]
    assert (plus.n_regs, plus.n_spills) == (inplace.n_regs, inplace.n_spills)


def test_the_wgmma_layout_is_the_instructions_fragment():
    layout = wgmma_layout((128, 64), 8)
    assert layout == Wgmma((8, 1), 64)
    threads = thread_elements(layout, (128, 64), 8)
    assert sorted(e for t in threads for e in t) == [(m, n) for m in range(128) for n in range(64)]
    for tid in (0, 5, 37, 100, 200):
        warp, lane = tid // 32, tid % 32
        g, t = lane // 4, lane % 4
        row = 64 * (warp // 4) + 16 * (warp % 4) + g
        # d[4j + r]: chunk j, row g + 8(r/2), column 2t + r%2
        assert threads[tid][:8] == [(row, 2 * t), (row, 2 * t + 1), (row + 8, 2 * t), (row + 8, 2 * t + 1),
                                    (row, 8 + 2 * t), (row, 9 + 2 * t), (row + 8, 8 + 2 * t), (row + 8, 9 + 2 * t)]
    assert wgmma_layout((64, 256), 8) == Wgmma((4, 2), 128)  # a second warpgroup splits N
    assert wgmma_layout((32, 64), 4) is None and wgmma_layout((64, 64), 2) is None


def test_the_pipelined_dot_runs_on_wgmma_without_local_memory_or_serialization():
    fn = parse_function(MATMUL)
    k = compile_ir(fn, "sm_90a", {"num_warps": 4, "num_stages": 3}, check=True)
    ptx = k.ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in ptx
    assert ptx.count("wgmma.mma_async") == 2  # two k16 steps of the 32-wide tile
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
    assert "fence.proxy.async.shared::cta" in ptx and "wgmma.wait_group.sync.aligned 1" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx and k.n_spills == 0
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert "C751" not in info  # ptxas neither serializes the wgmmas nor injects waits
    # the same kernel for sm_80 keeps mma.sync
    old = compile_ir(fn, "sm_80", {"num_warps": 4, "num_stages": 3})
    assert "mma.sync.aligned.m16n8k16" in old.ptx and "wgmma" not in old.ptx


@kiln.jit
def _attention(Q, K, V, Out, n_ctx, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               V_TRANSPOSED: tl.constexpr = False):
    """Attention forward; V_TRANSPOSED: V given as VT[d, n] (fp8: wgmma reads 8-bit tiles
    K-major only; P, 8-bit, goes to the second dot from registers, its bytes exchanged
    within each quad of lanes)."""
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for start in range(0, n_ctx, BN):
        k = tl.load(K + (start + offs_n)[None, :] * D + offs_d[:, None])
        qk = tl.dot(q, k)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        if V_TRANSPOSED:
            v = tl.load(V + offs_d[None, :] * n_ctx + (start + offs_n)[:, None])
        else:
            v = tl.load(V + (start + offs_n)[:, None] * D + offs_d[None, :])
        acc = tl.dot(p.to(Q.dtype.element_ty), v, acc * alpha[:, None])
        m_i = m_ij
    tl.store(Out + offs_m[:, None] * D + offs_d[None, :], acc / l_i[:, None])


def _attention_ir():
    x = np.zeros((16, 16), np.float16)
    k = _attention.warmup(x, x, x, np.zeros((16, 16), np.float32), 256, D=32, BM=64, BN=64,
                          num_warps=4, num_stages=3, target="sm_90a")
    return k.asm["kir"]


def test_attention_keeps_p_in_registers_and_q_in_shared_memory():
    fn, ctx = pipelined(_attention_ir())
    text = print_function(fn, locs=False)
    assert print_function(parse_function(text), locs=False) == text
    loop = next(op for op in fn.walk() if op.name == "for")
    before = fn.body.ops[:fn.body.ops.index(loop)]
    # Q: stored once, K-major; K and V: rings of four tiles
    stores = [op for op in before if op.name == "local_store"]
    assert len(stores) == 1 and str(stores[0].operands[1].type) == "smem<64x32xfp16:swizzle64:order1.0>"
    rings = [str(op.results[0].type) for op in before if op.name == "local_alloc"][1:]
    assert rings == ["smem<4x32x64xfp16:swizzle64:order0.1>", "smem<4x64x32xfp16:swizzle64:order1.0>"]
    body = loop.regions[0].ops
    dots = [op for op in body if op.name == "warp_group_dot"]
    waits = [op for op in body if op.name == "warp_group_dot_wait"]
    assert len(dots) == 2 and dots[0].operands[0] is stores[0].operands[1]
    assert dots[1].operands[0].defining_op.name == "cast"  # P from registers
    # the QK^T result is awaited at once, and the same wait covers the carried
    # accumulator that the last iteration's PV left in flight (read by acc * alpha)
    assert waits[0].attrs == {"pending": 0} and waits[0].operands[1] is loop.regions[0].args[1]
    assert waits[1].attrs == {"pending": 1} and waits[1].operands[0] is dots[1].results[0]
    names_in_body = [op.name for op in body]
    assert names_in_body.index("async_copy") > names_in_body.index("warp_group_dot", names_in_body.index("cast"))
    after = [op.name for op in fn.body.ops[fn.body.ops.index(loop) + 1:]]
    assert after[:2] == ["warp_group_dot_wait", "async_wait"]
    assert "load" in names(fn) and "dot" not in names(fn)  # Q's load stays; K's and V's became copies


def test_attention_lowers_to_wgmma_with_a_from_registers():
    k = compile_ir(parse_function(_attention_ir()), "sm_90a", {"num_warps": 4, "num_stages": 3}, check=True)
    ptx = k.ptx
    # QK^T: both operands from descriptors; PV: A as four 32-bit registers
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16") == 2
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16") == 4
    assert re.search(r"m64n32k16\.f32\.f16\.f16 \{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+", ptx)
    assert "st.shared" in ptx and "ld.local" not in ptx and "st.local" not in ptx and k.n_spills == 0
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert "C751" not in info


def _attention_fp8_ir(dtype=tl.float8e4nv, d=64, bm=64, warps=4):
    x = kiln.reinterpret(np.zeros(16 * d, np.uint8), dtype)
    k = _attention.warmup(x, x, x, np.zeros((16, 16), np.float32), 256, D=d, BM=bm, BN=64, V_TRANSPOSED=True,
                          num_warps=warps, num_stages=3, target="sm_90a")
    return k.asm["kir"]


def test_fp8_attention_reads_p_from_registers():
    """As Triton does: P, cast to fp8 in the accumulator's layout, reaches wgmma in registers
    (no shared tile, store, fence and barrier per iteration); lowering exchanges its bytes
    within each quad of lanes (the 8-bit fragment's columns are 4t .. 4t + 3, the
    accumulator's 2t, 2t + 1 of each 8): two shuffles per word pair, four per 32 k. Each word it
    sends is two conversions' 16-bit results side by side, not four bytes inserted one by one."""
    fn, ctx = pipelined(_attention_fp8_ir())
    text = print_function(fn, locs=False)
    assert print_function(parse_function(text), locs=False) == text
    loop = next(op for op in fn.walk() if op.name == "for")
    before = fn.body.ops[:fn.body.ops.index(loop)]
    allocs = [str(op.results[0].type) for op in before if op.name == "local_alloc"]
    # K's and V's rings (4 tiles now: no P slots take their room), and Q's tile
    assert allocs == ["smem<64x64xfp8e4nv:swizzle64:order1.0>"] + ["smem<4x64x64xfp8e4nv:swizzle64:order0.1>"] * 2
    body = loop.regions[0].ops
    dots = [op for op in body if op.name == "warp_group_dot"]
    assert len(dots) == 2 and dots[1].operands[0].defining_op.name == "cast"
    assert "local_store" not in [op.name for op in body]
    k = compile_ir(parse_function(_attention_fp8_ir()), "sm_90a", {"num_warps": 4, "num_stages": 3}, check=True)
    ptx = k.ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3") == 4
    assert len(re.findall(r"m64n64k32\.f32\.e4m3\.e4m3 \{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p, 1, 1;",
                          ptx)) == 2
    assert len(re.findall(r"shfl\.sync\.idx\.b32[^;]*, %r\d+, 31, -1;", ptx)) == 8 and "st.shared.b8" not in ptx
    pairs = re.findall(r"cvt\.rn\.satfinite\.e4m3x2\.f32 (%rs\d+),", ptx)
    words = re.findall(r"mov\.b32\s+%r\d+, \{(%rs\d+), (%rs\d+)\};", ptx)
    assert len(pairs) == 16 and sorted(r for word in words for r in word) == sorted(pairs) and "bfi.b32" not in ptx
    assert "ld.local" not in ptx and k.n_spills == 0


def test_fp8_attentions_loop_packs_p_without_moving_bytes():
    """What ptxas makes of it: each conversion pair lands in its word's half (F2FP, merged), and the
    only byte permutes left are the exchange's, one per row of each received word pair; no mask or
    shift after the conversions (bench's fp8 forward at D64 had 66 such in a loop of 347)."""
    k = compile_ir(parse_function(_attention_fp8_ir()), "sm_90a", {"num_warps": 4, "num_stages": 3})
    loop = innermost_loop(sass(k.cubin))
    ops = [opcode(text) for text in loop]
    assert ops.count("F2FP") == 16 and ops.count("PRMT") == 8
    assert not [text for text in loop if re.search(r"\b0xffff(0000)?\b|\bBFI\b", text)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d, bm, warps", [("float8_e4m3fn", 64, 64, 4), ("float8_e5m2", 128, 128, 8),
                                                ("float8_e5m2", 64, 128, 4)])
def test_fp8_attention_on_the_gpu_matches_torch(dtype, d, bm, warps):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("needs a GPU with fp8 (sm_89+)")
    n = 512
    torch.manual_seed(0)  # fp8 rounding of P can put a rare element of a peaked row past the tolerance
    q, k, v = (torch.randn(n, d, device="cuda").to(getattr(torch, dtype)) for _ in range(3))
    vt = v.t().contiguous()
    out = torch.empty(n, d, device="cuda")
    _attention[(n // bm,)](q, k, vt, out, n, D=d, BM=bm, BN=64, V_TRANSPOSED=True, num_warps=warps, num_stages=3)
    s = q.float() @ k.float().t()
    p = torch.exp2(s - s.max(1, keepdim=True).values)
    want = (p @ v.float()) / p.sum(1, keepdim=True)
    # P is rounded to fp8 per block against that block's running max (up to 2^-4 relative
    # each in e4m3, 2^-3 in e5m2): the average over 512 keys keeps the error far below a wrong
    # layout's O(1) (H200: 0.6-1.4% of the norm, at most 0.108 in one element of e5m2's)
    assert (out - want).norm() < 0.03 * want.norm()
    tolerance = 5e-2 if dtype == "float8_e4m3fn" else 0.15
    torch.testing.assert_close(out, want, atol=tolerance, rtol=tolerance)


@kiln.jit
def _fp32_matmul(A, B, C, K, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(B + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


@pytest.mark.parametrize("b_k_major,precision,wgmma", [(True, "tf32", True), (False, "tf32", True),
                                                       (True, "ieee", False), (True, "tf32x3", True)])
def test_fp32_dots_run_on_wgmma_as_tf32_when_asked(b_k_major, precision, wgmma):
    """tl.dot's default for fp32 is one tf32 product; the exact precision (ieee) keeps the
    FMA path; tf32x3 is three tf32 products of split operands (f32_dot_split). wgmma's .tf32
    reads K-major tiles only (no transpose flags): an N-major B is copied as stored, 16 bytes
    at a time, and read into registers as the A of C^T = B^T A^T (its N is BM: m64n64)."""
    x = np.zeros((64, 64), np.float32)
    strides = (1, 256) if b_k_major else (128, 1)
    ptx = _fp32_matmul.warmup(x, x, x, 256, *strides, BM=64, BN=128, BK=32, PRECISION=precision, num_warps=4,
                              num_stages=3, grid=(1,), target="sm_90a").asm["ptx"]
    shape = "m64n128k8" if b_k_major else "m64n64k8"
    assert (f"wgmma.mma_async.sync.aligned.{shape}.f32.tf32.tf32" in ptx) == wgmma
    if wgmma:
        a_operand = r"%rd\d+" if b_k_major else r"\{[^}]*\}"
        assert re.search(shape + r"\.f32\.tf32\.tf32 \{[^}]*\}, " + a_operand + r", %rd\d+, p, 1, 1;", ptx)
        assert "cp.async.cg.shared.global" in ptx and "ld.local" not in ptx
        assert "cp.async.ca.shared.global" not in ptx


def test_wgmma_descriptors_are_one_base_per_tile_plus_constant_k_steps():
    """A descriptor is the tile's address >> 4 with constant fields, made once per tile: each
    k-step adds a constant to it (one 64-bit add, ptxas's UIADD3.64; no mask and shift per
    instruction)."""
    k = compile_ir(parse_function(MATMUL), "sm_90a", {"num_warps": 4, "num_stages": 3})
    loop = k.ptx[k.ptx.index("wgmma.fence.sync.aligned"):k.ptx.index("wgmma.commit_group")]
    assert "shr.u64" not in loop and "and.b64" not in loop
    assert loop.count("cvt.u64.u32") == 2  # A's and B's base
    assert re.search(r"add\.s64\s+%rd\d+, %rd\d+, \d+;", loop)  # the second k16 step's


def test_async_copies_of_one_thread_share_one_swizzled_base():
    """Copies whole 8-row swizzle periods apart repeat the XOR pattern: one base per tile
    plus immediates (each copy computing its own swizzled offset cost ~2 instructions)."""
    from kiln.codegen.lower.wgmma import constant_step
    tile = shared_type(float16, (128, 64), 128, (1, 0))
    assert constant_step(tile, (0, 0), (32, 0)) == 32 * 128  # 4 swizzle periods down
    assert constant_step(tile, (0, 0), (4, 0)) is None  # half a period: XOR differs
    assert constant_step(tile, (0, 0), (0, 8)) is None  # within a row: XOR differs
    k = compile_ir(parse_function(MATMUL), "sm_90a", {"num_warps": 4, "num_stages": 3})
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[(%r\d+)\+\d+\]", k.ptx)
    # 3 copy sets (2 prologue stages, the loop), each copying a tile with 2 copies from one base
    assert len(copies) == 12 and len(set(copies)) == 6


def test_layout_conversions_pad_rows_that_would_conflict_in_shared_memory():
    """The wgmma accumulator writes 8 rows at once: with 512-byte rows they all start in
    bank 0 (8-way conflicts); 16 bytes of padding per row makes the writes conflict-free
    and keeps the reads 16-byte vectors."""
    from kiln.ir.layout import blocked_for
    from kiln.codegen.scratch_bytes import row_pad, wavefronts
    shape = (128, 256)
    acc, coalesced = wgmma_layout(shape, 8), blocked_for(shape, (1, 0), 8, 8)
    assert row_pad(acc, coalesced, shape, 2, 8) == 8
    assert wavefronts(acc, coalesced, shape, 2, 8, 8) < wavefronts(acc, coalesced, shape, 2, 0, 8) // 2
    assert row_pad(acc, coalesced, (128, 48), 2, 8) == 0  # 96-byte rows: banks already rotate
    row_copy = blocked_for(shape, (1, 0), 4, 8)  # already conflict-free both ways: no padding
    assert row_pad(row_copy, coalesced, shape, 2, 8) == 0


def _wavefronts_one_by_one(src, dst, shape, es, pad, num_warps):
    """The count as its definition says it, one register and one thread at a time."""
    from kiln.ir.layout import thread_elements
    total = 0
    for layout in (src, dst):
        per_thread = thread_elements(layout, shape, num_warps, threads=32)
        for r in range(len(per_thread[0])):
            banks = {}
            for regs in per_thread:
                *outer, inner = regs[r]
                flat = 0
                for d, i in enumerate(outer):
                    flat = flat * shape[d] + i
                word = (flat * (shape[-1] + pad) + inner) * es // 4
                banks.setdefault(word % 32, set()).add(word)
            total += max(len(words) for words in banks.values())
    return total


@pytest.mark.parametrize("shape", [(64, 64), (128, 64), (64, 256), (128, 256)])
def test_the_bank_conflict_count_matches_its_definition(shape):
    from kiln.ir.layout import blocked_for
    from kiln.codegen.scratch_bytes import wavefronts
    for warps in (4, 8):
        acc = wgmma_layout(shape, warps)
        for order, vec in (((1, 0), 8), ((1, 0), 1), ((0, 1), 8)):
            other = blocked_for(shape, order, vec, warps)
            for es in (2, 4):
                for pad in (0, 16 // es):
                    assert wavefronts(acc, other, shape, es, pad, warps) == \
                        _wavefronts_one_by_one(acc, other, shape, es, pad, warps)


@kiln.jit
def _descriptor_scores(q_ptr, k_ptr, out_ptr, n_rows, n_ctx, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    keys = tl.make_tensor_descriptor(k_ptr, [n_rows, D], [D, 1], [BN, D])
    q = tl.load(q_ptr + tl.arange(0, BM)[:, None] * D + tl.arange(0, D)[None, :])
    acc = tl.zeros([BM, BN], tl.float32)
    for start in range(0, n_ctx, BN):
        acc += tl.dot(q, keys.load([start, 0]).T)
    tl.store(out_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc)


def test_descriptor_rows_in_a_pipelined_loop_share_one_widened_index():
    """A thread's rows of a descriptor block are `base + 8j`: widened to i64 as `ext(base) + 8j`
    and added to the block offset before the constant, they are one 64-bit value per
    iteration plus constants, not eight loop-invariant registers (this kernel at D=128 and
    4 warps spilled ~100 bytes more per thread before). On sm_80's cp.async rings: on sm_90a
    the kernel now writes the descriptor's TMA map itself (its rows D apart, a constant)."""
    x = np.zeros((64, 64), np.float16)
    k = _descriptor_scores.warmup(x, x, x, 4096, 4096, D=128, BM=128, BN=64, num_warps=4, num_stages=2,
                                  grid=(1,), target="sm_80")
    ptx = k.asm["ptx"]
    assert "cp.async.cg.shared.global" in ptx and "mma.sync" in ptx
    hopper = _descriptor_scores.warmup(x, x, x, 4096, 4096, D=128, BM=128, BN=64, num_warps=4, num_stages=2,
                                       grid=(1,), target="sm_90a").asm["ptx"]
    assert "cp.async.bulk.tensor.2d" in hopper and "tensormap.replace" in hopper
    steps = re.findall(r"(?:or\.b64|add\.s64)\s+%rd\d+, (%rd\d+), (8|16|24|32|40|48|56);", ptx)
    rows_of = {}
    for reg, c in steps:
        rows_of.setdefault(reg, set()).add(int(c))
    assert any(len(cs) == 7 for cs in rows_of.values())  # rows base + 8, ..., base + 56 of one value


def test_low_level_index_rewrites_are_exact():
    """`widen` and `_add_index_last` only regroup wrapping adds: check on the emulator-free
    IR text that the constant ends up outermost and the flags stay where they hold."""
    import llvmlite.ir as ir
    from kiln.codegen.lower.elementwise import _add_index_last, widen
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.IntType(64), [ir.IntType(32), ir.IntType(64)]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    base, offset = fn.args
    index = b.add(base, ir.Constant(ir.IntType(32), 24), flags=["nsw", "nuw"])
    wide = widen(b, index, ir.IntType(64), signed=True)
    total = _add_index_last(b, offset, wide)
    b.ret(total)
    text = str(fn)
    assert "sext i32" in text and "add nsw nuw i64" in text
    assert re.search(r"add i64 %\S+, 24", text)  # the constant last, no wrap flags on it
    plain = b.add(base, ir.Constant(ir.IntType(32), 24))  # no flags: may wrap, left alone
    assert "zext i32 %" in str(widen(b, plain, ir.IntType(64), signed=False))


@kiln.jit
def _masked_scores_inner(acc, q, k_ptr, lo, hi, offs_m: tl.constexpr, offs_n: tl.constexpr, D: tl.constexpr,
                         BN: tl.constexpr):
    for start in tl.range(lo, hi, BN):
        k = tl.load(k_ptr + (start + offs_n)[None, :] * D + tl.arange(0, D)[:, None])
        s = tl.dot(q, k)
        mask = offs_m[:, None] >= (start + offs_n[None, :])
        acc += s * 0.5 + tl.where(mask, 0, -1.0e6)
    return acc


@kiln.jit
def _masked_scores(q_ptr, k_ptr, out_ptr, row_ptr, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start_m = tl.program_id(0)
    offs_m = start_m * BM + tl.arange(0, BM)  # made before the loop, used inside it
    offs_n = tl.arange(0, BN)
    q = tl.load(q_ptr + offs_m[:, None] * D + tl.arange(0, D)[None, :])
    acc = tl.zeros([BM, BN], tl.float32)
    acc = _masked_scores_inner(acc, q, k_ptr, start_m * BM, (start_m + 1) * BM, offs_m, offs_n, D, BN)
    tl.store(out_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
    tl.store(row_ptr + offs_m, tl.sum(acc, 1))  # offs_m's own use: a 1-D coalesced layout


def test_index_vectors_expanded_in_a_loop_are_recomputed_in_the_accumulator_layout():
    """`offs_m[:, None]` inside the loop takes the slice of the wgmma layout by recomputing
    the arange there: no shared-memory exchange (and barriers) per iteration."""
    x = np.zeros((64, 64), np.float16)
    k = _masked_scores.warmup(x, x, x, x, D=64, BM=128, BN=64, num_warps=4, num_stages=2, grid=(1,),
                              target="sm_90a")
    ptx = k.asm["ptx"]
    loop = ptx[ptx.index("wgmma.fence.sync.aligned"):ptx.rindex("wgmma.wait_group.sync.aligned 0")]
    assert "wgmma.mma_async" in loop and "ld.shared" not in loop and "st.shared" not in loop


@kiln.jit
def _host_descriptor_scores(q_desc, k_desc, out_ptr, n_ctx, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    q = q_desc.load([tl.program_id(0) * BM, 0])
    acc = tl.zeros([BM, BN], tl.float32)
    for start in range(0, n_ctx, BN):
        acc += tl.dot(q, k_desc.load([start, 0]).T)
    tl.store(out_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc)


def test_host_tensor_descriptors_in_a_pipelined_loop_copy_with_tma():
    """A host TensorDescriptor's blocks that feed wgmma in a pipelined loop are TMA copies:
    thread 0 announces each ring slot's bytes on the slot's mbarrier and issues the box,
    every thread waits on the slot's phase parity. The kernel parameter is the 128-byte map,
    read in place (cvta.param); the metadata names the box the launcher encodes it with. Q,
    loaded before the loop, stays a pointer load stored to shared memory once."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    x = np.zeros((4096, 64), np.float16)
    q_desc, k_desc = TensorDescriptor(x, [4096, 64], [64, 1], [128, 64]), TensorDescriptor(x, [4096, 64], [64, 1], [64, 64])
    out = np.zeros((128, 64), np.float32)
    k = _host_descriptor_scores.warmup(q_desc, k_desc, out, 4096, BM=128, BN=64, D=64, num_warps=4, num_stages=3,
                                       grid=(1,), target="sm_90a")
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx and "cp.async.cg" not in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx and "mbarrier.try_wait.parity" in ptx
    assert ".param .align 64 .b8 _host_descriptor_scores_param_11[128]" in ptx and "cvta.param.u64" in ptx
    assert ".local" not in ptx  # the map is read where the driver put it, never copied
    boxes = {arg["name"]: arg.get("tma_box") for arg in k.metadata["args"]}
    assert boxes["k_desc.5"] == "64x64:swizzle128" and boxes["q_desc.5"] is None
    ragged = TensorDescriptor(x[:4095], [4095, 64], [64, 1], [64, 64])
    assert ragged.spec_key() != k_desc.spec_key()  # a size not a multiple of 16 compiles its own kernel


def _host_descriptor_ir(target):
    from kiln.tools.tensor_descriptor import TensorDescriptor
    x = np.zeros((4096, 64), np.float16)
    descs = TensorDescriptor(x, [4096, 64], [64, 1], [128, 64]), TensorDescriptor(x, [4096, 64], [64, 1], [64, 64])
    k = _host_descriptor_scores.warmup(*descs, np.zeros((128, 64), np.float32), 4096, BM=128, BN=64, D=64,
                                       num_warps=4, num_stages=3, grid=(1,), target=target)
    return k.ir if isinstance(k.ir, str) else print_function(k.ir)


def test_descriptor_loads_in_a_loop_become_tma_copies_completing_on_mbarriers():
    text = _host_descriptor_ir("sm_90a")
    assert text.count("descriptor_load") == 2 and ": tensormap" in text  # the frontend's: Q's and K's
    fn, ctx = pipelined(text)
    out = print_function(fn, locs=False)
    assert print_function(parse_function(out), locs=False) == out
    assert "descriptor_load" not in out and "async_copy" not in out  # K by TMA, Q through its pointers
    loop = next(op for op in fn.walk() if op.name == "for")
    before = [op.name for op in fn.body.ops[:fn.body.ops.index(loop)]]
    assert before.count("mbarrier_init") == 1 and before.count("tma_expect") == before.count("tma_copy") == 2
    body = [op.name for op in loop.regions[0].ops]
    assert body[:3] == ["local_index", "mbarrier_wait", "barrier"] and "fence_async_shared" not in body
    assert body.count("tma_expect") == body.count("tma_copy") == 1 and "async_wait" not in body
    assert body.index("warp_group_dot") < body.index("tma_copy")
    after = [op.name for op in fn.body.ops[fn.body.ops.index(loop) + 1:]]
    assert "mbarrier_inval" in after and "async_wait" not in after
    assert "local_alloc {offset = 49152} : smem<4x1x1xint64:swizzle0:order1.0>" in out  # an mbarrier per slot
    assert smem_plan.tma_boxes(fn) == {11: (64, 64, 128)}  # an attribute of the argument: in the IR
    # elsewhere the descriptor loads are their pointer loads
    fn, _ = pipelined(_host_descriptor_ir("sm_80"), target="sm_80")
    assert "descriptor_load" not in names(fn) and "tma_copy" not in names(fn)


def test_two_warpgroups_hand_tma_ring_slots_back_through_mbarriers():
    """At 8 warps the loop body has no barrier: a second mbarrier per slot counts one arrival per
    warpgroup, made after the wait that retired the dots of the iteration before (but in the first
    iteration), and every thread waits for the write slot's release before its copies are issued.
    A barrier after the loop comes before the mbarriers are invalidated. At 4 warps the barrier per
    iteration stays."""
    fn, _ = pipelined(_host_descriptor_ir("sm_90a"), num_warps=8)
    loop = next(op for op in fn.walk() if op.name == "for")
    before = [op for op in fn.body.ops[:fn.body.ops.index(loop)] if op.name == "mbarrier_init"]
    assert [op.attrs["count"] for op in before] == [1, 2]
    full, empty = (op.operands[0] for op in before)
    body = loop.regions[0].ops
    kinds = [op.name for op in body]
    assert "barrier" not in kinds and "fence_async_shared" not in kinds and kinds[:2] == ["local_index", "mbarrier_wait"]
    arrive = next(op for op in body if op.name == "mbarrier_arrive")
    assert arrive.operands[0].defining_op.operands[0] is empty
    first_wait = kinds.index("warp_group_dot_wait")
    assert body[first_wait].attrs["pending"] == 1 and first_wait < kinds.index("mbarrier_arrive")
    later = arrive.operands[1].defining_op  # not in the first iteration: no slot was read before it
    assert later.attrs["pred"] == "gt" and later.operands == [loop.regions[0].args[0], loop.operands[0]]
    waits = [op for op in body if op.name == "mbarrier_wait"]
    assert [w.operands[0].defining_op.operands[0] for w in waits] == [full, empty]
    assert body.index(waits[1]) < kinds.index("tma_expect")
    after = [op.name for op in fn.body.ops[fn.body.ops.index(loop) + 1:]]
    assert after[after.index("barrier") + 1:][:2] == ["mbarrier_inval", "mbarrier_inval"]
    fn, _ = pipelined(_host_descriptor_ir("sm_90a"), num_warps=4)
    loop = next(op for op in fn.walk() if op.name == "for")
    assert "barrier" in names(loop) and "mbarrier_arrive" not in names(fn)


def test_released_rings_keep_attentions_wgmmas_asynchronous():
    """Tutorial 06's forward through descriptors at 8 warps, causal (two loops, each with its own
    rings and mbarriers): each warpgroup's first thread arrives, predicated, and ptxas keeps every
    wgmma asynchronous."""
    from test_attention_backward import kernels
    h, f = np.zeros((1, 2, 512, 64), np.float16), np.zeros(64, np.float32)
    k = kernels.attention_descriptor_fwd_kernel.warmup(h, h, h, h, f, 0.125, 1, 2, 512, HEAD_DIM=64, BLOCK_M=128,
                                                       BLOCK_N=64, CAUSAL=True, num_warps=8, num_stages=3, grid=(1,),
                                                       target="sm_90a")
    ptx = k.asm["ptx"]
    assert ptx.count("@p mbarrier.arrive.shared::cta.b64") == 2  # one per loop
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info) and k.metadata["n_spills"] == 0



@pytest.mark.parametrize("block_n,slots", [(64, 4), (128, 3)])
def test_a_released_ring_without_room_for_its_spare_slot_copies_as_far_ahead(block_n, slots):
    """Tutorial 06's forward at D128, 3 stages, 8 warps: in 64-key blocks the ring has the stages
    and the spare slot (4 x 32 KB); in 128-key blocks four 64 KB slots do not fit beside Q, three
    do, and they keep the stages' look-ahead (two copies before the loop, as with the spare slot)
    rather than two stages and the spare (one): the copy of each iteration waits for the release
    of the slot the iteration before read, which this iteration's first wait retired."""
    from test_attention_backward import kernels
    x, f = np.zeros((1, 2, 1024, 128), np.float16), np.zeros(1024, np.float32)
    k = kernels.attention_descriptor_fwd_kernel.warmup(x, x, x, x, f, 0.125, 1, 2, 1024, HEAD_DIM=128, BLOCK_M=128,
                                                       BLOCK_N=block_n, CAUSAL=False, num_warps=8, num_stages=3,
                                                       grid=(1,), target="sm_90a")
    options = {"num_warps": 8, "num_stages": 3}
    fn = parse_function(compile_ir(parse_function(k.asm["kir"]), "sm_90a", options, link=False).kir)
    loop = next(op for op in fn.walk() if op.name == "for")
    before = fn.body.ops[:fn.body.ops.index(loop)]
    rings = [str(op.results[0].type) for op in before if op.name == "local_alloc"][1:]
    assert rings == [f"smem<{slots}x{block_n}x128xfp16:swizzle128:order1.0>"] * 2 + \
        [f"smem<{slots}x1x1xint64:swizzle0:order1.0>"] * 2
    assert sum(op.name == "tma_expect" for op in before) == 2
    body = [op.name for op in loop.regions[0].ops]
    assert "barrier" not in body
    assert body.index("mbarrier_arrive") < len(body) - body[::-1].index("mbarrier_wait") - 1 < body.index("tma_expect")
    _, info = nvjitlink.link_cubin(k.asm["ptx"], parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info) and k.metadata["n_spills"] == 0


def test_q_is_stored_after_the_first_copies_went_out():
    """Attention's forward on released TMA rings: Q's tile is stored after the ring's first K and V
    copies, so its loads and those copies are in flight together (stored first, each thread waited
    for its part of Q before the first copy went out). No barrier at the top of the loop orders those
    stores before the dots read Q: a fence and a barrier of their own follow them."""
    from test_attention_backward import kernels
    x, f = np.zeros((1, 2, 1024, 128), np.float16), np.zeros(1024, np.float32)
    k = kernels.attention_descriptor_fwd_kernel.warmup(x, x, x, x, f, 0.125, 1, 2, 1024, HEAD_DIM=128, BLOCK_M=128,
                                                       BLOCK_N=64, CAUSAL=False, num_warps=8, num_stages=3,
                                                       grid=(1,), target="sm_90a")
    fn = parse_function(compile_ir(parse_function(k.asm["kir"]), "sm_90a", {"num_warps": 8, "num_stages": 3},
                                   link=False).kir)
    loop = next(op for op in fn.walk() if op.name == "for")
    before = [op.name for op in fn.body.ops[:fn.body.ops.index(loop)]]
    store = before.index("local_store")
    assert before.count("local_store") == 1 and before.count("tma_copy") == 4
    assert store > max(i for i, name in enumerate(before) if name == "tma_copy")
    assert before[store + 1:store + 3] == ["fence_async_shared", "barrier"]
    assert "barrier" not in [op.name for op in loop.regions[0].ops]
    listing = [line.split("\t", 1)[1].split()[0] for line in sass(k.asm["cubin"]).splitlines() if "\t" in line]
    assert listing.index("UTMALDG.2D") < listing.index("STS.128")  # ptxas kept the order
    _, info = nvjitlink.link_cubin(k.asm["ptx"], parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info) and k.metadata["n_spills"] == 0


@kiln.jit
def _hinted_scores(Q, K, V, Out, N, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, WS: tl.constexpr):
    """Attention's two dots in a loop that asks for warp specialization, as tutorial 06's forward does on Hopper."""
    q_desc = tl.make_tensor_descriptor(Q, shape=[N, D], strides=[D, 1], block_shape=[BM, D])
    k_desc = tl.make_tensor_descriptor(K, shape=[N, D], strides=[D, 1], block_shape=[BN, D])
    v_desc = tl.make_tensor_descriptor(V, shape=[N, D], strides=[D, 1], block_shape=[BN, D])
    q = q_desc.load([tl.program_id(0) * BM, 0])
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for start in tl.range(0, N, BN, warp_specialize=WS):
        s = tl.dot(q, k_desc.load([start, 0]).T)
        p = tl.math.exp2(s - tl.max(s, 1)[:, None])
        acc = tl.dot(p.to(tl.float16), v_desc.load([start, 0]), acc)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    tl.store(Out + rows[:, None] * D + tl.arange(0, D)[None, :], acc)


def test_a_hint_no_pass_takes_reserves_no_shared_memory():
    """warp_specialize takes a persistent GEMM's K loop only: an attention loop that asks for it runs
    as written, so its rings are planned as if it had not asked (three 64 KB slots at D128 in 128-key
    blocks, not two beside 32 KB kept for a specialized epilogue)."""
    x, out = np.zeros((1024, 128), np.float16), np.zeros((1024, 128), np.float32)
    plans = []
    for ws in (False, True):
        k = _hinted_scores.warmup(x, x, x, out, 1024, D=128, BM=128, BN=128, WS=ws, num_warps=8, num_stages=3, grid=(1,),
                                  target="sm_90a")
        kir = compile_ir(parse_function(k.asm["kir"]), "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False).kir
        assert "warp_specialize {" not in kir
        plans.append(([line.split(" : ")[-1].split(" loc(")[0] for line in kir.splitlines() if "local_alloc" in line],
                      k.metadata["shared"]))
    assert plans[0] == plans[1] and plans[1][0].count("smem<3x128x128xfp16:swizzle128:order1.0>") == 2


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_the_d128_forward_in_128_key_blocks_on_the_gpu(causal, hopper_torch):
    """bench's pointer forward (its K and V by TMA: pointer_tma) on the ring of three slots
    (test_a_released_ring_without_room_for_its_spare_slot_copies_as_far_ahead), against SDPA."""
    kernel, o, want = bench_forward(hopper_torch, (2, 4, 2048, 128), 128, 128, causal, num_warps=8, num_stages=3)
    assert "smem<3x128x128xfp16" in compile_ir(kernel.ir, "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False).kir
    hopper_torch.testing.assert_close(o, want, rtol=2e-3, atol=2e-3)


@kiln.jit
def _masked_k_matmul(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(A + rm[:, None] * K + (k * BK + rk)[None, :], mask=(k * BK + rk)[None, :] < K, other=0.0)
        b = tl.load(B + (k * BK + rk)[:, None] * BN + rn[None, :], mask=(k * BK + rk)[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


def test_masked_ring_copies_zero_fill_through_the_ignore_src_predicate():
    """A masked cp.async takes its mask as the ignore-src predicate (one compare per copy,
    folded by ptxas into the copy's predicate), not as a src-size of 0 or 16 picked by a
    select that ptxas compares back to a predicate."""
    x = np.zeros((64, 64), np.float16)
    ptx = _masked_k_matmul.warmup(x, x, x, 256, BM=64, BN=128, BK=32, num_warps=4, num_stages=3, grid=(1,),
                                  target="sm_90a").asm["ptx"]
    assert "wgmma.mma_async" in ptx
    masked = re.findall(r"cp\.async\.cg\.shared\.global \[%r\d+\+\d+\], \[%rd\d+\], 16, %p\d+;", ptx)
    assert masked and len(masked) == ptx.count("cp.async.cg.shared.global")
    assert not re.search(r"selp\.b32\s+%r\d+, 16, 0", ptx)


@kiln.jit
def _k_edge_from_memory(A, B, C, sizes, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    k_size = tl.load(sizes)  # nothing known of it: K's edge mask changes at any element
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(k_size, BK)):
        cols = k * BK + rk
        a = tl.load(A + rm[:, None] * 256 + cols[None, :], mask=cols[None, :] < k_size, other=0.0)
        b = tl.load(B + cols[:, None] * BN + rn[None, :], mask=cols[:, None] < k_size, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


SRC_SIZE = r"cp\.async\.(cg|ca)\.shared\.global \[%r\d+(\+\d+)?\], \[%rd\d+\], (\d+), %r\d+;"
IGNORE_SRC = r"cp\.async\.(cg|ca)\.shared\.global \[%r\d+(\+\d+)?\], \[%rd\d+\], (\d+), %p\d+;"


@pytest.mark.parametrize("BM, BN, BK, num_warps, width", [(64, 128, 32, 4, 16), (128, 128, 64, 4, 16),
                                                           (64, 64, 16, 8, 8)])
def test_a_k_edge_read_from_memory_keeps_wide_copies_with_a_src_size(BM, BN, BK, num_warps, width):
    """Aligned pointers with a mask that may change at any element along A's rows, but only
    from true to false (`cols < k_size`, a prefix of each run: mask_prefix): A's copies keep
    their width, the src-size the bytes of the run inside K, the rest zero-filled; B's mask
    is constant along B's rows: the ignore-src predicate. Before, a copy took one mask bit,
    so the loop fell off the rings onto mma.sync. At 8 warps a thread's 64x16 share is 4
    elements: 8-byte copies, their counts clamped to 4."""
    x, i = np.zeros((64, 64), np.float16), np.zeros(1, np.int32)
    k = _k_edge_from_memory.warmup(x, x, x, i, BM=BM, BN=BN, BK=BK, num_warps=num_warps, num_stages=3, grid=(1,),
                                   target="sm_90a")
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx
    a_copies, b_copies = re.findall(SRC_SIZE, ptx), re.findall(IGNORE_SRC, ptx)
    assert a_copies and b_copies and len(a_copies) + len(b_copies) == len(re.findall(r"cp\.async\.c[ag]\.shared", ptx))
    assert {int(c[2]) for c in a_copies} == {width}
    assert ".local" not in ptx and k.metadata["n_spills"] == 0


def test_tutorial_08s_device_descriptors_with_sizes_from_memory_run_on_wgmma():
    """Triton's tutorial 08 TMA kernel, its shape: descriptors made in the kernel, sizes and
    leading dims read from memory, `b.T`. The kernel writes their TMA maps itself
    (`tensormap_create`: base, sizes and stride known only in the kernel; C's too, for its
    TMA store), copies by TMA and runs wgmma, no spills. (Their stand-in pointer loads, masked `(i >= 0) & (i < size)`,
    would take 16-byte cp.async copies with a src-size: test_a_k_edge_read_from_memory_...)"""
    from test_lang_tensor_descriptor import _grouped_matmul_device_descriptors, grouped_problems
    pool, offsets, sizes, _ = grouped_problems([(200, 136, 100)], np.random.default_rng(0))
    for num_warps in (4, 8):
        k = _grouped_matmul_device_descriptors.warmup(pool, offsets, sizes, 1, NUM_PROGRAMS=4, BM=128, BN=128, BK=64,
                                                      num_warps=num_warps, num_stages=3, grid=(4,), target="sm_90a")
        ptx = k.asm["ptx"]
        assert "wgmma.mma_async" in ptx and "mma.sync" not in ptx
        assert "cp.async.bulk.tensor.2d" in ptx and ptx.count("tensormap.replace.tile.global_address") == 3
        assert not re.findall(r"cp\.async\.c[ag]\.shared", ptx)
        assert ".local" not in ptx and k.metadata["n_spills"] == 0


@kiln.jit
def _descriptor_of_loaded_pointer(q_ptr, k_ptrs, k_strides, out_ptr, n_rows, n_ctx, D: tl.constexpr,
                                  BM: tl.constexpr, BN: tl.constexpr):
    # base and row stride read from memory: only the descriptor's own promise says they are aligned
    keys = tl.make_tensor_descriptor(tl.load(k_ptrs).to(tl.pointer_type(tl.float16)), [n_rows, D],
                                     [tl.load(k_strides), 1], [BN, D])
    q = tl.load(q_ptr + tl.arange(0, BM)[:, None] * D + tl.arange(0, D)[None, :])
    acc = tl.zeros([BM, BN], tl.float32)
    for start in range(0, n_ctx, BN):
        acc += tl.dot(q, keys.load([start, 0]).T)
    tl.store(out_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc)


def test_a_device_descriptor_promises_an_aligned_base_and_strides():
    """TMA needs a 16-byte aligned base and strides of 16-byte multiples (Triton documents it):
    the descriptor's promise lets its loop run on a TMA ring (a map the kernel makes, its int64
    row stride read from memory) and wgmma even where base and stride come from memory."""
    x, p = np.zeros((64, 64), np.float16), np.zeros(1, np.int64)
    k = _descriptor_of_loaded_pointer.warmup(x, p, p, x, 4096, 4096, D=64, BM=128, BN=64, num_warps=4,
                                             num_stages=3, grid=(1,), target="sm_90a")
    ptx = k.asm["ptx"]
    assert "tensormap.replace" in ptx and "cp.async.bulk.tensor.2d.shared::cluster.global" in ptx
    assert "wgmma.mma_async" in ptx and "ld.local" not in ptx


@pytest.mark.gpu
def test_a_device_descriptor_of_a_loaded_base_and_stride_matches_torch_on_the_gpu(hopper_torch):
    torch = hopper_torch
    n_ctx, BM, BN, D = 256, 128, 64, 64
    q = torch.randn(BM, D, device="cuda").half()
    rows = torch.randn(n_ctx, D + 8, device="cuda").half()  # rows 72 elements apart: 144 bytes
    keys = rows[:, :D]
    out = torch.zeros(BM, BN, device="cuda")
    k_ptrs = torch.tensor([keys.data_ptr()], device="cuda", dtype=torch.int64)
    k_strides = torch.tensor([keys.stride(0)], device="cuda", dtype=torch.int64)
    _descriptor_of_loaded_pointer[(1,)](q, k_ptrs, k_strides, out, n_ctx, n_ctx, D=D, BM=BM, BN=BN, num_warps=4,
                                        num_stages=3)
    want = sum(q.float() @ keys[s:s + BN].float().T for s in range(0, n_ctx, BN))
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)


def _passed(kernel_ir, warps=8):
    fn = parse_function(kernel_ir)
    run_passes(fn, PassContext(parse_target("sm_90a"), warps, 3))
    return fn


def test_a_wgmma_reading_a_from_registers_the_loop_computes_is_retired_in_its_iteration():
    """wgmma reads A's registers until a wait retires it: left in flight into the next iteration,
    its A was overwritten by that iteration's (NaNs on the H200, bench/dot_formats.py). Attention's
    P @ V may stay in flight: its P is computed from QK^T's result, after a wait that retires it."""
    k = bench_kernels()
    x = np.zeros((64, 64), np.float32)
    kernel = k.scaled_a_matmul_kernel.warmup(x, x.astype(np.float16), x, 4096, 4096, 4096, SCALE=0.5, BLOCK_M=128,
                                             BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, grid=(1,),
                                             target="sm_90a")
    waits = [op.attrs["pending"] for op in _passed(kernel.asm["kir"]).walk() if op.name == "warp_group_dot_wait"]
    assert waits and set(waits) == {0}
    half, f32 = np.zeros((64, 64), np.float16), np.zeros(64, np.float32)
    strides = (4 * 4096 * 64, 4096 * 64, 64, 1) * 4
    attention = k.attention_fwd_kernel.warmup(half, half, half, half, f32, 0.125, *strides, 4, 4096, HEAD_DIM=64,
                                              BLOCK_M=128, BLOCK_N=64, CAUSAL=False, num_warps=8, num_stages=3,
                                              grid=(1,), target="sm_90a")
    assert 1 in [op.attrs["pending"] for op in _passed(attention.asm["kir"]).walk() if op.name == "warp_group_dot_wait"]


@pytest.mark.parametrize("a", [np.float32, np.float16])
def test_a_wgmma_a_the_loop_computes_from_a_load_is_fetched_and_read_back_as_its_fragment(a):
    """`(a * s).to(fp16)` as wgmma's A: its load goes through a cp.async ring (swizzled) and is read
    back in A's fragment layout, as Triton does; before, it was loaded from global memory in the
    iteration and converted to the fragment through shared memory (0.65 -> 0.73 / 0.90 of Triton
    for fp32 / fp16 A, H200, bench/results/2026-11-30-NVIDIA_H200-dot-formats.md)."""
    x = np.zeros((64, 64), a)
    kernel = bench_kernels().scaled_a_matmul_kernel.warmup(
        x, x.astype(np.float16), x.astype(np.float32), 4096, 4096, 4096, SCALE=0.5, BLOCK_M=128, BLOCK_N=256,
        BLOCK_K=64, num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
    fn = _passed(kernel.asm["kir"])
    k_loop = [op for op in fn.walk() if op.name == "for" and any(o.name == "warp_group_dot" for o in op.walk())][-1]
    inside = list(k_loop.walk())
    assert not [op for op in inside if op.name == "load"]
    assert not [op for op in inside if op.name == "convert_layout" and op.results[0].type.element_ty.is_floating()]
    dot = next(op for op in inside if op.name == "warp_group_dot")
    read = next(op for op in inside if op.name == "local_load")
    assert read.results[0].type.encoding == dot.operands[0].type.encoding  # no conversion on the way to the dot
    tile = read.operands[0].type
    assert tile.element_ty.name == np.dtype(a).name.replace("float", "fp") and tile.swizzle == 128
    # the dot retires in its iteration (see the test above), so the rings need no spare slot
    rings = [op.results[0].type.shape for op in fn.walk()
             if op.name == "local_alloc" and len(op.results[0].type.shape) == 3]
    assert len(rings) == 2 and {shape[0] for shape in rings} == {3}


@pytest.mark.gpu
@pytest.mark.parametrize("a_dtype, bn", [("float32", 256), ("float16", 128)])
def test_a_matmul_of_an_a_the_loop_scales_on_the_gpu_matches_torch(a_dtype, bn):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gen = torch.Generator().manual_seed(12)
    M, N, K = 1024, 1024, 2048
    a = torch.randn(M, K, generator=gen).to(getattr(torch, a_dtype))
    b = torch.randn(K, N, generator=gen).half()
    c = torch.empty(M, N, device="cuda")
    bench_kernels().scaled_a_matmul_kernel[(M // 128, N // bn)](
        a.cuda(), b.cuda(), c, M, N, K, SCALE=0.5, BLOCK_M=128, BLOCK_N=bn, BLOCK_K=64, num_warps=8, num_stages=3)
    want = (a.float() * 0.5).half().float() @ b.float()
    assert not c.isnan().any()
    torch.testing.assert_close(c.cpu(), want, atol=2e-2, rtol=1e-3)
