"""A 32-bit value a pipelined loop computes and two dots read in different orders (lightning attention's
no-decay forward: `k_trans`, B of q @ k_trans and A of kv += k_trans @ v) is staged once an order
(`smem_plan.staging_key`). Stored once, in the first dot's order, wgmma read tf32 A from a tile stored
M-major as if it were K-major (no transpose for tf32), and the portable build's mma.sync refused it."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from bench_support import needs_cuda
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function
from kiln.ir.types import shared_type
from test_codegen_emulate import in_child

N, D, E, BLOCK = 128, 64, 32, 64


@kiln.jit
def linear_attention(Q, K, V, Out, n, D: tl.constexpr, E: tl.constexpr, BLOCK: tl.constexpr,
                     NUM_BLOCK: tl.constexpr):
    """Block-causal linear attention without decay: o = (q k^T) v within the block + q kv of the blocks before."""
    off = tl.arange(0, BLOCK)
    kv = tl.zeros([D, E], dtype=tl.float32)
    for _ in range(NUM_BLOCK):
        rows = off[:, None] < n
        q = tl.load(Q + off[:, None] * D + tl.arange(0, D)[None, :], mask=rows, other=0.0).to(tl.float32)
        k_trans = tl.load(K + tl.arange(0, D)[:, None] + off[None, :] * D, mask=off[None, :] < n,
                          other=0.0).to(tl.float32)
        v = tl.load(V + off[:, None] * E + tl.arange(0, E)[None, :], mask=rows, other=0.0).to(tl.float32)
        o = tl.dot(tl.dot(q, k_trans), v) + tl.dot(q, kv)
        tl.store(Out + off[:, None] * E + tl.arange(0, E)[None, :], o, mask=rows)
        kv += tl.dot(k_trans, v)
        off += BLOCK


def _inputs(seed=0):
    """Entries -1, 0, 1: every product and sum exact in tf32 and fp32."""
    rng = np.random.default_rng(seed)
    q, k = (rng.integers(-1, 2, (N, D)).astype(np.float16) for _ in range(2))
    v = rng.integers(-1, 2, (N, E)).astype(np.float16)
    return q, k, v, np.zeros((N, E), np.float32)


def _want(q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    out, kv = np.zeros((N, E)), np.zeros((D, E))
    for start in range(0, N, BLOCK):
        rows = slice(start, start + BLOCK)
        out[rows] = (q[rows] @ k[rows].T) @ v[rows] + q[rows] @ kv
        kv += k[rows].T @ v[rows]
    return out


def _build(target):
    return linear_attention.warmup(*_inputs(), N, D=D, E=E, BLOCK=BLOCK, NUM_BLOCK=N // BLOCK, num_warps=4,
                                   grid=(1,), target=target)


def test_wgmma_reads_each_32_bit_tile_k_major():
    fn = parse_function(_build("sm_90a").asm["kir"])
    run_passes(fn, PassContext(parse_target("sm_90a"), 4, 3))
    dots = [op for op in fn.walk() if op.name == "warp_group_dot"]
    assert len(dots) == 4
    for dot in dots:
        a, b = dot.operands[:2]
        assert isinstance(a.type, shared_type) and a.type.order == (1, 0), dot  # A [M, K]: K inner
        assert b.type.order == (0, 1), dot  # B [K, N]: K inner


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_the_portable_build_equals_numpy(target):
    def check():
        from kiln.codegen.emulate import run_on_cpu
        args = _inputs()
        run_on_cpu(_build(target).ir, (1,), [*args, N], num_warps=4, target=target)
        return args
    q, k, v, out = in_child(check, timeout=300)
    np.testing.assert_array_equal(out, _want(q, k, v))


@pytest.mark.gpu
@needs_cuda
def test_the_gpu_build_equals_numpy():
    import torch
    q, k, v, out = _inputs()
    on_gpu = [torch.from_numpy(x).cuda() for x in (q, k, v, out)]
    linear_attention[(1,)](*on_gpu, N, D=D, E=E, BLOCK=BLOCK, NUM_BLOCK=N // BLOCK, num_warps=4)
    np.testing.assert_array_equal(on_gpu[3].cpu().numpy(), _want(q, k, v))
