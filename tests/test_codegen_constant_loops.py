"""A loop over constant bounds that runs once is its body (canonicalize; golden
`canonicalize_constant_loops.kir`): no rings for its loads, the same result. fla's chunk_bwd_kernel_dv
at K == BK on 2 warps and 3 stages asked 78 KB of rings (Triton's build: 16 KB), now 11.5 KB. A loop
over constant bounds with fewer trips than stages issues every trip's copies before it, a slot each
(smem_pipeline._useful_stages, smem_plan.all_ahead)."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function

from test_codegen_emulate import in_child


@kiln.jit
def one_step_products(k_ptr, q_ptr, h_ptr, a_ptr, o_ptr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                      BV: tl.constexpr):
    """a = k @ q and o = k @ h.to(fp16) over K in steps of BK (one step where K == BK)."""
    rt, rv = tl.arange(0, BT), tl.arange(0, BV)
    a = tl.zeros((BT, BT), tl.float32)
    o = tl.zeros((BT, BV), tl.float32)
    for i in range(tl.cdiv(K, BK)):
        rk = i * BK + tl.arange(0, BK)
        k = tl.load(k_ptr + rt[:, None] * K + rk[None, :])
        q = tl.load(q_ptr + rk[:, None] * BT + rt[None, :])
        h = tl.load(h_ptr + rk[:, None] * BV + rv[None, :])
        a += tl.dot(k, q)
        o += tl.dot(k, h.to(tl.float16))
    tl.store(a_ptr + rt[:, None] * BT + rt[None, :], a)
    tl.store(o_ptr + rt[:, None] * BV + rv[None, :], o)


def _ir():
    x16, x32 = np.zeros(4096, np.float16), np.zeros(4096, np.float32)
    return one_step_products.warmup(x16, x16, x32, x32, x32, K=64, BT=16, BK=64, BV=64, num_warps=2, grid=(1,),
                                    target="sm_90a").asm["kir"]


def test_a_one_step_loop_takes_no_rings():
    built = compile_ir(parse_function(_ir()), "sm_90a", {"num_warps": 2, "num_stages": 3}, link=False)
    assert " for " not in built.kir and "async_copy" not in built.kir
    # no ring (a tile of several slots): only k's tile, stored once for both dots (shared_dot_operands)
    assert not re.search(r"local_alloc [^\n]*smem<\d+x\d+x\d+", built.kir)
    assert built.metadata["shared"] < 16384


def _emulated(kir):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(7)
    k = rng.integers(-3, 4, (16, 64)).astype(np.float16)
    q = rng.integers(-3, 4, (64, 16)).astype(np.float16)
    h = rng.integers(-3, 4, (64, 64)).astype(np.float32)
    a, o = np.zeros((16, 16), np.float32), np.zeros((16, 64), np.float32)
    run_on_cpu(parse_function(kir), (1,), [k, q, h, a, o], num_warps=2)
    k64 = k.astype(np.float64)
    return float(max(np.abs(a - k64 @ q).max(), np.abs(o - k64 @ h).max()))


def test_the_one_step_loop_computes_what_the_loop_did():
    assert in_child(_emulated, _ir()) == 0.0


def test_on_whole_warpgroups_the_one_step_loop_stays_for_its_rings_to_feed_wgmma():
    """Only a loop's rings feed wgmma; outside loops a dot runs on mma.sync."""
    x16, x32 = np.zeros(4096, np.float16), np.zeros(4096, np.float32)
    kir = one_step_products.warmup(x16, x16, x32, x32, x32, K=64, BT=64, BK=64, BV=64, num_warps=4, grid=(1,),
                                   target="sm_90a").asm["kir"]
    built = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False)
    assert " for " in built.kir and "wgmma.mma_async" in built.ptx


def _built(K, BT, num_warps, num_stages):
    x16, x32 = np.zeros(1 << 15, np.float16), np.zeros(1 << 15, np.float32)
    kir = one_step_products.warmup(x16, x16, x32, x32, x32, K=K, BT=BT, BK=64, BV=64, num_warps=num_warps,
                                   grid=(1,), target="sm_90a").asm["kir"]
    return compile_ir(parse_function(kir), "sm_90a", {"num_warps": num_warps, "num_stages": num_stages}, link=False)


def test_a_ring_has_no_more_slots_than_its_loop_has_trips():
    """Four stages asked of a one-trip loop on wgmma: its copies all go out before the loop, one slot a ring
    (before: two stages and the spare slot, 48 KB); copies past the last trip would only fill zeros."""
    built = _built(64, 64, 4, 4)
    slots = [int(n) for n in re.findall(r"local_alloc \{offset = \d+\} : smem<(\d+)x", built.kir)]
    assert sorted(slots) == [1, 1, 1, 2]  # (h's fp16 tile, computed in the loop, is staged in 2)


@pytest.mark.parametrize("num_stages", [3, 4])
@pytest.mark.parametrize("BT, num_warps", [(64, 4), (16, 2)])  # wgmma, mma.sync
def test_every_trip_s_copies_go_out_before_a_two_trip_loop(BT, num_warps, num_stages):
    """fla's chunk_fwd_kernel_o: a K loop of two trips at 3 stages. Both trips' copies are issued before the
    loop, each into a slot of its own (two a ring), the first trip waits for its own only; the loop issues
    none (an empty group keeps the waits' count). Before: two stages, the second trip's copies issued
    after the first trip's data came, in three slots on wgmma."""
    kir = _built(128, BT, num_warps, num_stages).kir
    loop = kir[kir.index(" = for "):]
    loop, before = loop[:loop.index("\n  }\n")], kir[:kir.index(" = for ")]
    assert before.count("async_commit") == 2 and before.count("async_copy") == 6
    assert "async_copy" not in loop and loop.count("async_commit") == 1 and "async_wait {pending = 1}" in loop
    slots = [int(n) for n in re.findall(r"local_alloc \{offset = \d+\} : smem<(\d+)x", before)]
    assert sorted(slots) == [2, 2, 2, 2]  # k, q and h's rings; h's fp16 tile staged in 2


def test_a_loop_with_more_trips_than_stages_keeps_its_ring():
    kir = _built(192, 64, 4, 3).kir
    loop = kir[kir.index(" = for "):]
    assert loop[:loop.index("\n  }\n")].count("async_copy") == 3 and "async_wait {pending = 1}" in loop


def _emulated_trips(K, BT, num_warps, num_stages):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(8)
    k = rng.integers(-3, 4, (BT, K)).astype(np.float16)
    q = rng.integers(-3, 4, (K, BT)).astype(np.float16)
    h = rng.integers(-3, 4, (K, 64)).astype(np.float32)
    a, o = np.zeros((BT, BT), np.float32), np.zeros((BT, 64), np.float32)
    warm = one_step_products.warmup(k, q, h, a, o, K=K, BT=BT, BK=64, BV=64, num_warps=num_warps, grid=(1,),
                                    target="sm_90a")
    run_on_cpu(warm.ir, (1,), [k, q, h, a, o], num_warps=num_warps, options={"num_stages": num_stages})
    k64 = k.astype(np.float64)
    return float(max(np.abs(a - k64 @ q).max(), np.abs(o - k64 @ h).max()))


@pytest.mark.parametrize("K, BT, num_warps, num_stages", [(128, 64, 4, 3), (128, 16, 2, 4), (64, 64, 4, 4),
                                                          (192, 16, 2, 4)])
def test_loops_whose_copies_all_go_out_first_compute_their_products_emulated(K, BT, num_warps, num_stages):
    assert in_child(_emulated_trips, K, BT, num_warps, num_stages, timeout=300) == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("K, BT, num_warps, num_stages", [(128, 64, 4, 3), (128, 16, 2, 4), (64, 64, 4, 4),
                                                          (192, 64, 8, 4), (256, 64, 4, 3)])
def test_loops_whose_copies_all_go_out_first_on_the_gpu(K, BT, num_warps, num_stages, cuda_torch):
    torch = cuda_torch
    gen = torch.Generator().manual_seed(8)
    k = torch.randint(-3, 4, (BT, K), generator=gen).half().cuda()
    q = torch.randint(-3, 4, (K, BT), generator=gen).half().cuda()
    h = torch.randint(-3, 4, (K, 64), generator=gen).float().cuda()
    a, o = torch.zeros(BT, BT, device="cuda"), torch.zeros(BT, 64, device="cuda")
    one_step_products[(1,)](k, q, h, a, o, K=K, BT=BT, BK=64, BV=64, num_warps=num_warps, num_stages=num_stages)
    assert torch.equal(a, k.float() @ q.float()) and torch.equal(o, k.float() @ h)


@kiln.jit
def tiles_of_products(k_ptr, q_ptr, a_ptr, tiles, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """For each of `tiles` tiles, a = k @ q over K in steps of BK: a constant-trip loop in another loop."""
    rt = tl.arange(0, BT)
    for tile in range(tiles):
        a = tl.zeros((BT, BT), tl.float32)
        for i in range(tl.cdiv(K, BK)):
            rk = i * BK + tl.arange(0, BK)
            a += tl.dot(tl.load(k_ptr + tile * BT * K + rt[:, None] * K + rk[None, :]),
                        tl.load(q_ptr + rk[:, None] * BT + rt[None, :]))
        tl.store(a_ptr + tile * BT * BT + rt[:, None] * BT + rt[None, :], a)


def test_a_constant_trip_loop_inside_another_keeps_copying_in_its_trips():
    # the next outer trip's first copies would go into the slot this loop's last trip read: two stages, as before
    x16, x32 = np.zeros(1 << 15, np.float16), np.zeros(1 << 15, np.float32)
    kir = tiles_of_products.warmup(x16, x16, x32, 2, K=128, BT=64, BK=64, num_warps=4, grid=(1,),
                                   target="sm_90a").asm["kir"]
    built = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False)
    inner = built.kir[built.kir.rindex(" = for "):]
    assert inner[:inner.index("\n    }\n")].count("async_copy") == 2 and "async_wait {pending = 0}" in inner
