"""A loop over constant bounds that runs once is its body (canonicalize; golden
`canonicalize_constant_loops.kir`): no rings for its loads, the same result. fla's chunk_bwd_kernel_dv
at K == BK on 2 warps and 3 stages asked 78 KB of rings (Triton's build: 16 KB), now 11.5 KB."""
import re

import numpy as np

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


def test_a_ring_has_no_more_stages_than_its_loop_has_trips():
    """Four stages asked of a one-trip loop on wgmma: two (the fewest a ring runs on) and the spare slot;
    copies past the last trip are predicated off, so more slots would never be filled."""
    x16, x32 = np.zeros(4096, np.float16), np.zeros(4096, np.float32)
    kir = one_step_products.warmup(x16, x16, x32, x32, x32, K=64, BT=64, BK=64, BV=64, num_warps=4, grid=(1,),
                                   target="sm_90a").asm["kir"]
    built = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 4, "num_stages": 4}, link=False)
    slots = [int(n) for n in re.findall(r"local_alloc \{offset = \d+\} : smem<(\d+)x", built.kir)]
    assert max(slots) == 3  # (h's fp16 tile, computed in the loop, is staged in 2)
