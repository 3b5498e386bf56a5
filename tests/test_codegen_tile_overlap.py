"""kiln.codegen.passes.tile_overlap: a persistent GEMM's next tile's first TMA copies issued
before this tile's epilogue, on a CPU (IR text, and which builds keep it), and on the GPU
(more tiles than CTAs, so that every CTA carries ring slots and parities across tiles)."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.codegen import occupancy, pipeline
from kiln.codegen.passes import smem_plan, tile_overlap
from kiln.codegen.target import parse_target
from kiln.ir import parse_function, print_function, verify


@kiln.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ B in BM x BN tiles, rows of tiles first; A, B and C row-major."""
    tiles_n = tl.cdiv(N, BN)
    pid = tl.program_id(0)
    rows = (pid // tiles_n) * BM + tl.arange(0, BM)
    cols = (pid % tiles_n) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    a_ptrs = a_ptr + (rows % M)[:, None] * stride_am + ks[None, :]
    b_ptrs = b_ptr + ks[:, None] * stride_bk + (cols % N)[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=ks[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :]
    tl.store(c_ptrs, acc.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


# (BM, BN, BK, warps, stages): the ring and the epilogue's scratch fit side by side at two CTAs
# per SM; the 128x256 fp16 tile's 192 KB ring and 66 KB conversion do not fit at all; the 128x64x64
# tile's tight ring (four 24 KB slots) fits two CTAs only where its scratch takes the ring's bytes
FITS, TOO_BIG, COSTS_A_CTA = (128, 32, 64, 4, 4), (128, 256, 64, 8, 3), (128, 64, 64, 4, 4)
GIVES_UP_A_STAGE = (128, 128, 64, 4, 4)  # 32 KB stages: 3 of them, tight, hold two CTAs


def _source(cfg):
    bm, bn, bk, warps, stages = cfg
    x = np.zeros((64, 64), np.float16)
    ir = _gemm.warmup(x, x, x, 4096, 4096, 4096, 4096, 4096, 4096, BM=bm, BN=bn, BK=bk, num_warps=warps,
                      num_stages=stages, grid=(1,)).ir
    return parse_function(ir if isinstance(ir, str) else print_function(ir))


def _before_the_pass(cfg):
    """The IR as tile_overlap receives it (the passes before it, run on `_gemm`)."""
    fn, (_, _, _, warps, stages) = _source(cfg), cfg
    ctx = pipeline.PassContext(parse_target("sm_90a"), warps, stages)
    for p in pipeline.PASSES[:pipeline.PASSES.index(tile_overlap)]:
        p.apply(fn, ctx)
    return parse_function(print_function(fn)), ctx


def _names(block):
    return [op.name for op in block.ops]


def test_the_rings_live_across_the_tile_loop_and_the_next_tiles_copies_precede_the_epilogue():
    fn, ctx = _before_the_pass(FITS)
    tiles = next(op for op in fn.body.ops if op.name == "for")
    body = _names(tiles.regions[0])
    assert "mbarrier_init" in body and "mbarrier_inval" in body and not tiles.results
    copies = [op.name for op in tiles.regions[0].ops if op.name == "tma_copy"]

    tile_overlap.apply(fn, ctx)
    verify(fn)
    assert tile_overlap.overlapped(fn)
    top = _names(fn.body)
    at = top.index("for")
    assert top[at:] == ["for", "mbarrier_inval", "return"]
    assert "mbarrier_init" in top[:at] and top[:at].count("tma_copy") == len(copies)  # tile lb's first copies
    body = tiles.regions[0]
    names = _names(body)
    assert "mbarrier_init" not in names and "mbarrier_inval" not in names
    k_loop = next(op for op in body.ops if op.name == "for")
    wait = names.index("warp_group_dot_wait")
    assert names[wait - 1] == "for" and names[wait + 1] == "barrier"
    assert names[wait:].count("tma_copy") == len(copies)  # the next tile's, after this tile's dots
    assert names.index("store") > max(i for i, n in enumerate(names) if n == "tma_copy")
    # the K loop starts at the slot and parity the tile loop carries, and hands back its own
    base, parity = body.args[1:]
    assert k_loop.operands[-3] is base and k_loop.operands[-1] is parity
    assert body.ops[-1].operands == [k_loop.results[-3], k_loop.results[-1]]
    assert len(tiles.results) == 2
    # every copy of the next tile is predicated on the tile being one of this CTA's
    after = body.ops[wait + 1:]
    exists = next(op for op in after if op.name == "cmp").results[0]
    preds = [op.operands[3] for op in after if op.name == "tma_copy"]
    assert all(exists in p.defining_op.operands for p in preds)


@kiln.jit
def _a_once(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Each tile's A block, loaded once before the loop, times every BK rows of B."""
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    ks = tl.arange(0, BK)
    a = tl.load(a_ptr + rows[:, None] * BK + ks[None, :])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        b = tl.load(b_ptr + (k + ks)[:, None] * BN + tl.arange(0, BN)[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * BN + tl.arange(0, BN)[None, :], acc.to(tl.float16))


def test_kernels_not_of_that_form_are_left_alone():
    fn, ctx = _before_the_pass(FITS)
    fn.attrs["tile_overlap"] = 0  # compile's second build
    text = print_function(fn)
    tile_overlap.apply(fn, ctx)
    assert print_function(fn) == text and not tile_overlap.overlapped(fn)
    # a tile stored once before the K loop (its local_store would race the next tile's)
    x = np.zeros((64, 64), np.float16)
    ir = _a_once.warmup(x, x, x, 4096, BM=128, BN=64, BK=64, num_warps=4, num_stages=3, grid=(1,)).ir
    once = parse_function(ir if isinstance(ir, str) else print_function(ir))
    ctx = pipeline.PassContext(parse_target("sm_90a"), 4, 3)
    for p in pipeline.PASSES[:pipeline.PASSES.index(tile_overlap)]:
        p.apply(once, ctx)
    assert any(a.get("launch_grid") is not None for a in once.arg_attrs)  # persistent, ...
    assert "local_store" in print_function(once)  # ... A stored once per tile
    text = print_function(once)
    tile_overlap.apply(once, ctx)
    assert print_function(once) == text and not tile_overlap.overlapped(once)


def _tile_loop_allocates(kir: str) -> bool:
    fn = parse_function(kir)
    tiles = next(op for op in fn.body.ops if op.name == "for")
    return any(op.name == "mbarrier_init" for op in tiles.regions[0].ops)


def test_compile_keeps_the_overlap_only_where_the_epilogue_fits_beside_the_rings():
    fits = compile_ir(_source(FITS), "sm_90a", {"num_warps": 4, "num_stages": 4}, link=False)
    assert not _tile_loop_allocates(fits.kir)
    big = compile_ir(_source(TOO_BIG), "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False)
    assert _tile_loop_allocates(big.kir)  # built again without the pass: the scratch takes the rings' bytes
    assert big.metadata["shared"] <= 232448 and "smem<4x" in big.kir  # and the ring keeps its S + 1 tiles
    pair = compile_ir(_source(COSTS_A_CTA), "sm_90a", {"num_warps": 4, "num_stages": 4}, link=False)
    assert _tile_loop_allocates(pair.kir) and "smem<4x128x64xfp16" in pair.kir  # S tiles, no overlap
    assert occupancy.ctas_by_shared(pair.metadata["shared"], 90) == 2


def test_a_lone_cta_of_one_warpgroup_gives_up_the_spare_slot_for_company():
    kb = 1024
    assert smem_plan.tight_for_company(2 * kb, 4, 24 * kb, False, 4, 90)  # 4 slots: 2 CTAs; 5: one alone
    assert not smem_plan.tight_for_company(2 * kb, 4, 24 * kb, False, 8, 90)  # two warpgroups keep the spare
    assert not smem_plan.tight_for_company(2 * kb, 4, 16 * kb, False, 4, 90)  # 5 slots hold 2 CTAs already
    assert smem_plan.tight_for_company(2 * kb, 4, 16 * kb, True, 4, 90)  # a staged operand: 3 CTAs for 2


def test_a_lone_cta_of_one_warpgroup_gives_up_stages_for_company():
    kb = 1024
    assert smem_plan.stages_for_company(2 * kb, 4, 32 * kb, 4, 90) == 3  # 4 or 5 slots: one CTA; 3: two
    assert smem_plan.stages_for_company(2 * kb, 5, 32 * kb, 4, 90) == 3  # as few as it takes
    assert smem_plan.stages_for_company(2 * kb, 4, 32 * kb, 8, 90) == 0  # two warpgroups keep their stages
    assert smem_plan.stages_for_company(2 * kb, 4, 48 * kb, 4, 90) == 0  # 3 slots of 48 KB: one CTA still
    assert smem_plan.stages_for_company(2 * kb, 3, 32 * kb, 4, 90) == 0  # never below 3 stages
    assert smem_plan.stages_for_company(2 * kb, 4, 24 * kb, 4, 90) == 0  # 4 slots hold two (tight_for_company's)


def test_a_4_stage_128x128x64_tile_runs_3_stages_two_ctas_to_an_sm():
    """Its 32 KB stages: 4 stages and the spare slot, or 4 tight, leave one CTA alone on the SM."""
    tile = compile_ir(_source(GIVES_UP_A_STAGE), "sm_90a", {"num_warps": 4, "num_stages": 4}, link=False)
    assert "smem<3x128x64xfp16" in tile.kir and "smem<3x64x128xfp16" in tile.kir
    assert occupancy.ctas_by_shared(tile.metadata["shared"], 90) == 2


def _k_loop_ops(kir: str) -> list:
    """The names of the ops in the body of the loop that waits on a TMA mbarrier, in order."""
    lines = [line.strip() for line in kir.splitlines()]
    wait = next(i for i, line in enumerate(lines) if line.startswith("mbarrier_wait"))
    start = max(i for i in range(wait) if lines[i].startswith("^("))  # the loop's block arguments
    end = next(i for i in range(wait, len(lines)) if lines[i].startswith("yield"))
    return [(line.split("= ", 1)[1] if line.startswith("%") else line).split()[0] for line in lines[start + 1:end + 1]]


def test_a_tight_tma_ring_orders_its_slots_by_the_barrier_before_the_copies_alone():
    """Each thread waits on the slot's mbarrier, which makes TMA's bytes visible to its wgmma: the
    tight ring's one barrier is the one before the copies (after the wait that retires the dots of
    the slot they overwrite). A ring with a spare slot keeps the barrier at the top of the body."""
    tight = _k_loop_ops(compile_ir(_source(COSTS_A_CTA), "sm_90a", {"num_warps": 4, "num_stages": 4}, link=False).kir)
    assert tight.count("barrier") == 1 and "fence_async_shared" not in tight
    assert tight.index("warp_group_dot_wait") < tight.index("barrier") < tight.index("tma_expect")
    spare = _k_loop_ops(compile_ir(_source(FITS), "sm_90a", {"num_warps": 4, "num_stages": 4}, link=False).kir)
    assert spare[spare.index("mbarrier_wait") + 1] == "barrier" and "fence_async_shared" not in spare


SHAPES = [(2000, 3000, 136), (4096, 4096, 200), (1000, 1000, 1000), (1024, 2048, 0)]


def _gemm_on_the_gpu(cfg, shape, torch):
    """Run `_gemm` at `cfg` on `shape` on the GPU (`torch`: the hopper_torch fixture's), check C
    against torch; the kernel."""
    bm, bn, bk, warps, stages = cfg
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", generator=gen).half()
    b = torch.randn(K, N, device="cuda", generator=gen).half()
    c = torch.full((M, N), 7.0, device="cuda", dtype=torch.float16)
    grid = (-(-M // bm) * -(-N // bn),)
    kernel = _gemm[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=bm, BN=bn, BK=bk,
                         num_warps=warps, num_stages=stages)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.5, rtol=3e-2)
    return kernel


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [FITS, (128, 64, 64, 8, 4), (128, 128, 64, 8, 3)])
@pytest.mark.parametrize("shape", SHAPES)
def test_overlapped_tiles_match_torch(cfg, shape, hopper_torch):
    kernel = _gemm_on_the_gpu(cfg, shape, hopper_torch)
    assert not _tile_loop_allocates(kernel.build("sm_90a").kir)  # it ran overlapped (asm["kir"]: the frontend's IR)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [COSTS_A_CTA, (64, 128, 64, 4, 4), GIVES_UP_A_STAGE])
@pytest.mark.parametrize("shape", SHAPES)
def test_tight_tma_rings_match_torch(cfg, shape, hopper_torch):
    kernel = _gemm_on_the_gpu(cfg, shape, hopper_torch)
    if shape[2]:  # at K = 0 torch gives A a row stride of 1, which no TMA descriptor takes: no ring
        assert _k_loop_ops(kernel.build("sm_90a").kir).count("barrier") == 1  # the tight ring's one barrier
