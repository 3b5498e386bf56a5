"""Warp specialization (kiln.codegen.passes.warp_specialize): a persistent GEMM whose K loop asks
for it runs its TMA copies on a producer warpgroup of its own, released slot by slot through
mbarriers by the warps running the dots; the rest of the compile and the launch count its warps."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.cache.metadata import MetadataError, checked
from kiln.codegen import compile as compile_ir
from kiln.codegen import nvjitlink
from kiln.codegen.lower import lower_function
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, verify
from kiln.ir.verifier import VerificationError


@kiln.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr):
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BN)
    pid_n = pid % tl.cdiv(N, BN)
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + stride_cm * cm[:, None] + cn[None, :], acc.to(tl.float16),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


def _built(ws=True, warps=8, tile=(128, 256, 64), stages=3):
    x = np.zeros((64, 64), np.float16)
    bm, bn, bk = tile
    return _matmul.warmup(x, x, x, 4096, 4096, 4096, 4096, 4096, 4096, BM=bm, BN=bn, BK=bk, WS=ws,
                          num_warps=warps, num_stages=stages, grid=(1,), target="sm_90a")


def _compiled(ws=True, warps=8, tile=(128, 256, 64), stages=3, link=False):
    built = _built(ws, warps, tile, stages)
    return compile_ir(parse_function(built.asm["kir"]), "sm_90a", {"num_warps": warps, "num_stages": stages},
                      link=link, check=True)


def test_the_hinted_gemm_runs_a_producer_warpgroup_of_its_own():
    k = _compiled()
    assert "warp_specialize {regs = [232, 40], warps = 4}" in k.kir
    assert k.metadata["num_warps"] == 8 and k.metadata["threads"] == 384
    ptx = k.ptx
    assert ".maxntid 384" in ptx and ".maxnreg 168" in ptx  # the entry cap setmaxnreg moves registers from
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in ptx and "setmaxnreg.dec.sync.aligned.u32 40;" in ptx
    # the dot warps' barriers (the epilogue's scratch) sync them alone; the CTA's only before the split
    assert re.findall(r"bar\.sync\s+(\d+)(?:,\s*(\d+))?;", ptx) and \
        set(re.findall(r"bar\.sync\s+(\d+)(?:,\s*(\d+))?;", ptx)) <= {("0", ""), ("1", "256")}
    assert "mbarrier.arrive.shared::cta.b64" in ptx and "mbarrier.arrive.expect_tx" in ptx


@pytest.mark.parametrize("warps, tile, stages", [(8, (128, 256, 64), 3), (4, (128, 128, 64), 4), (8, (128, 128, 64), 4)])
def test_the_rings_are_planned_beside_the_epilogues_scratch_in_one_run(warps, tile, stages):
    """smem_plan leaves room for what the specialized kernel keeps beside its rings (the epilogue's
    conversion, per replica): the pass list runs once and the kernel fits the SM."""
    k = _compiled(warps=warps, tile=tile, stages=stages)
    assert "warp_specialize {" in k.kir
    assert k.metadata["pass_runs"] == 1 and k.metadata["lowerings"] == 1
    assert k.metadata["shared"] <= 227 * 1024


def test_its_wgmmas_stay_asynchronous_and_it_fits_the_sm():
    k = _compiled(link=True)
    _, info = nvjitlink.link_cubin(k.ptx, parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info)
    assert k.n_spills == 0 and k.metadata["shared"] <= 227 * 1024
    assert "warp_specialize {" in k.kir  # not dropped for the plain tile kernel


def test_the_producer_issues_its_copies_from_its_first_thread():
    """TMA copies and expects are issued by one thread: in the producer partition, thread 256."""
    built = _built()
    fn = parse_function(built.asm["kir"])
    ctx = PassContext(parse_target("sm_90a"), 8, 3)
    run_passes(fn, ctx)
    llir, _, _ = lower_function(fn, ctx)
    tid = re.search(r"(%\S+) = call i32 @\"llvm.nvvm.read.ptx.sreg.tid.x\"", llir).group(1)
    elected = re.findall(rf"icmp eq i32 {re.escape(tid)}, (\d+)", llir)
    # thread 0 initializes the mbarriers (before the split); thread 256 issues every copy
    assert elected.count("0") == 2 and elected.count("256") >= 1 and set(elected) == {"0", "256"}


def test_without_the_hint_nothing_is_specialized():
    k = _compiled(ws=False, warps=8, tile=(128, 128, 64), stages=4)
    assert "warp_specialize {" not in k.kir and k.metadata["threads"] == 256


def test_one_warpgroup_of_dots_is_replicated_and_the_replicas_take_turns():
    """Ping-pong: two replicas of the 4 dot warps run alternate tiles, each with its own named
    barrier and scratch area, handing each other the turn around their K loops."""
    k = _compiled(ws=True, warps=4, tile=(128, 128, 64), stages=4, link=True)
    assert "warp_specialize {regs = [232, 40], replicas = 2, warps = 4}" in k.kir
    assert k.metadata["num_warps"] == 4 and k.metadata["threads"] == 384 and k.n_spills == 0
    assert k.kir.count("turn_wait") == 1 and k.kir.count("turn_pass") == 1 and "partition_index" in k.kir
    ptx = k.ptx
    assert re.search(r"@p bar\.sync %r\d+, 256;", ptx) and re.search(r"@p bar\.arrive %r\d+, 256;", ptx)
    assert re.search(r"bar\.sync %r\d+, 128;", ptx)  # a replica's own barrier (its epilogue's scratch)
    _, info = nvjitlink.link_cubin(ptx, parse_target("sm_90a"))
    assert not nvjitlink.wgmma_serialized(info)
    # the rings (4 x 32 KB and the mbarriers) and a conversion's scratch per replica fit beside each other
    assert 131072 + 2 * 32768 < k.metadata["shared"] <= 227 * 1024


def test_the_verifier_checks_the_new_ops():
    text = """kernel @k(%0: int32 {name = "x"}) {
  %1 = local_alloc : smem<2x1x1xint64:swizzle0:order1.0>
  %2 = constant {value = 1} : int32
  %3 = local_index %1, %2 : smem<1x1xint64:swizzle0:order1.0>
  %4 = constant {value = true} : int1
  warp_specialize {regs = [232, 40], warps = WARPS} {
  ^():
    mbarrier_arrive %3, PRED
    yield
  } {
  ^():
    yield
  }
  return
}"""
    verify(parse_function(text.replace("WARPS", "4").replace("PRED", "%4")))
    with pytest.raises(VerificationError, match="whole warpgroups"):
        verify(parse_function(text.replace("WARPS", "2").replace("PRED", "%4")))
    with pytest.raises(VerificationError, match="predicate"):
        verify(parse_function(text.replace("WARPS", "4").replace("PRED", "%2")))
    with pytest.raises(VerificationError, match="multiples of 8"):
        verify(parse_function(text.replace("WARPS", "4").replace("PRED", "%4").replace("232", "230")))


def test_metadata_takes_a_producers_warps_in_threads():
    base = {"name": "k", "num_warps": 8, "shared": 0}
    assert checked({**base, "threads": 384}, num_warps=8)["threads"] == 384
    for threads in (128, 300, 320):
        with pytest.raises(MetadataError, match="threads"):
            checked({**base, "threads": threads})


def test_the_launcher_launches_the_threads_the_binary_runs(monkeypatch):
    from kiln.ir.types import parse_type
    from kiln.runtime import launcher
    calls = []
    monkeypatch.setattr(launcher, "_cu_launch_kernel", lambda: lambda *args: calls.append(args) or 0)
    types = [parse_type("int32")]
    run = launcher.launcher_for(type("Loaded", (), {"handle": 0})(), types,
                                {"name": "k", "num_warps": 8, "threads": 384, "shared": 1024, "args": []}, "k", 0)
    run((3, 1, 1), [7], 0)
    assert calls[0][4:8] == (384, 1, 1, 1024)


@pytest.mark.gpu
@pytest.mark.parametrize("warps, tile", [(8, (128, 256, 64)), (4, (128, 128, 64))])
@pytest.mark.parametrize("shape", [(256, 512, 192), (200, 328, 100), (300, 700, 64), (130, 260, 40), (1000, 3000, 500)])
def test_the_specialized_gemm_on_the_gpu_matches_torch(shape, warps, tile):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU")
    M, N, K = shape
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), 7.0, device="cuda", dtype=torch.float16)
    bm, bn, bk = tile
    grid = (triton_cdiv(M, bm) * triton_cdiv(N, bn),)
    _matmul[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=bm, BN=bn, BK=bk, WS=True,
                  num_warps=warps, num_stages=3)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), atol=0.05 * K ** 0.5, rtol=0.01)


def triton_cdiv(a, b):
    return (a + b - 1) // b


@kiln.jit
def _scaled_a_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot((a * 0.5).to(tl.float16), b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


_SCALED_CONFIGS = [(8, (128, 256, 64)), (4, (128, 128, 64))]


@pytest.mark.parametrize("warps, tile", _SCALED_CONFIGS)
def test_a_specialized_loop_whose_a_it_computes_stays_on_wgmma(warps, tile):
    """An A the loop computes from a load has that load fetched through a ring of its own too
    (smem_plan), where the rings fit beside the specialized kernel's reserve; where they do not
    (128x256 over 8 warps) the load stays in the iteration, as before, and the dot on wgmma (it
    fell to mma.sync at first)."""
    x = np.zeros((64, 64), np.float32)
    bm, bn, bk = tile
    k = _scaled_a_matmul.warmup(x, x.astype(np.float16), x, 4096, 4096, 4096, BM=bm, BN=bn, BK=bk, num_warps=warps,
                                num_stages=3, grid=(1,), target="sm_90a")
    assert "wgmma.mma_async" in k.asm["ptx"] and "mma.sync" not in k.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("warps, tile", _SCALED_CONFIGS)
def test_a_specialized_loop_whose_a_it_computes_on_the_gpu_matches_torch(warps, tile):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU")
    M, N, K = 512, 512, 1024
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda")
    bm, bn, bk = tile
    _scaled_a_matmul[(M // bm, N // bn)](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=3)
    torch.testing.assert_close(c, (a * 0.5).half().float() @ b.float(), atol=2e-2, rtol=1e-3)



def test_a_k_loop_whose_trips_depend_on_the_tile_is_not_replicated():
    """Ping-pong's replicas count each other's k-steps from their own tile's trips, so a K loop
    whose trips vary with the tile keeps one group of dot warps (slots then agree tile by tile).
    The persistent pass makes no such tile loop from a kernel's source (programs of unequal work
    keep a CTA each), so the K loop's bound is made to depend on the tile here."""
    from kiln.codegen.passes import tile_overlap, warp_specialize
    from kiln.codegen.pipeline import PASSES
    from kiln.ir.core import Operation
    from kiln.ir.types import int32

    def planned(ragged):
        fn = parse_function(_built(warps=4, tile=(128, 128, 64), stages=4).asm["kir"])
        ctx = PassContext(parse_target("sm_90a"), 4, 4)
        run_passes(fn, ctx, stop=PASSES.index(warp_specialize))
        tiles = tile_overlap.tile_loop(fn)
        k_loop = tile_overlap.match_tile_gemm(tiles).k_loop
        if ragged:  # K steps less the tile's parity
            body = tiles.regions[0]
            two = Operation("constant", [], [int32], {"value": 2})
            parity = Operation("rem", [body.args[0], two.results[0]], [int32])
            fewer = Operation("sub", [k_loop.operands[1], parity.results[0]], [int32])
            at = body.ops.index(k_loop)
            for i, op in enumerate((two, parity, fewer)):
                op.parent = body
                body.ops.insert(at + i, op)
            k_loop.operands[1] = fewer.results[0]
        verify(fn)
        warp_specialize.apply(fn, ctx)
        verify(fn)
        return [op for op in fn.walk() if op.name == "warp_specialize"][0]

    assert planned(ragged=False).attrs.get("replicas") == 2
    assert planned(ragged=True).attrs.get("replicas", 1) == 1
