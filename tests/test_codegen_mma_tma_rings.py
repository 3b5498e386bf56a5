"""Descriptor loads in a pipelined loop whose dots run on mma.sync on sm_90a (kernels of fewer than
4 warps, dots of fewer rows than a warpgroup's 64) fill their rings by TMA, as Triton's do at any
warp count: one box copy a tile where cp.async took 8-16 bytes a thread with their address
arithmetic (tutorial 03's descriptor matmul at 16x256x64 on one warp: a 1,073-instruction loop that
spilled 240 bytes, 0.24 of Triton's speed on an H100). ldmatrix reads the slots through the generic
proxy, so each thread fences before TMA (the async proxy) writes a slot again. Elsewhere (sm_80, a
portable build) the descriptor's pointer loads stay the loads. A tf32 B [K, N] comes by TMA too,
N-major as it lies, its fragments read a register a load (before, its blocks were copied by cp.async
through the descriptor's pointer loads: 16x128x32 on one warp ran at 0.08-0.23 of Triton on an H100).
CPU (PTX) and the GPU against torch."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl


@kiln.jit
def descriptor_matmul(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ B through host descriptors, one BM x BN block a program, K up to its edge."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([k * BK, pid_n * BN])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


M, N, K = 100, 264, 200  # edges past the last blocks in every dim: TMA fills what lies past them with zeros


def _warm(bm, bn, bk, warps, stages, target, dtype=np.float16):
    from kiln.tools.tensor_descriptor import TensorDescriptor
    a, b, c = np.zeros((M, K), dtype), np.zeros((K, N), dtype), np.zeros((M, N), dtype)
    return descriptor_matmul.warmup(TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
                                    TensorDescriptor.from_tensor(c, [bm, bn]), M, N, K, BM=bm, BN=bn, BK=bk,
                                    num_warps=warps, num_stages=stages, grid=(1, 1), target=target)


# (BM, BN, BK, warps, stages): one warp (triton_kernels' small-M tiles), two, and 16 rows on 4 warps
CONFIGS = [(16, 256, 64, 1, 4), (32, 64, 64, 2, 3), (16, 128, 64, 4, 3)]


@pytest.mark.parametrize("config", CONFIGS)
def test_mma_sync_rings_on_hopper_are_filled_by_tma(config):
    ptx = _warm(*config, "sm_90a").asm["ptx"]
    assert "mma.sync.aligned" in ptx and "wgmma" not in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in ptx  # the ring's copies
    assert not re.search(r"cp\.async\.c[ag]\.", ptx)  # no copy of a few bytes a thread
    # at the top of an iteration: the slot's wait, then the fence after the reads of iteration i - 1
    # and the barrier after which its slot is refilled
    top = ptx[ptx.rindex("mbarrier.try_wait.parity"):]
    assert top.index("fence.proxy.async.shared::cta") < top.index("bar.sync") < top.index("mbarrier.arrive.expect_tx")


def test_the_one_warp_tile_no_longer_spills():
    k = _warm(*CONFIGS[0], "sm_90a")
    assert k.metadata["n_spills"] == 0  # 240 bytes through cp.async's address arithmetic


@pytest.mark.parametrize("target", ["sm_80", "sm_89"])
def test_targets_without_tma_copy_the_blocks_through_pointers(target):
    ptx = _warm(*CONFIGS[0], target).asm["ptx"]
    assert "cp.async.bulk" not in ptx and re.search(r"cp\.async\.c[ag]\.shared\.global", ptx)
    assert "mbarrier" not in ptx and "fence.proxy" not in ptx


# tf32 with B [K, N] row-major (x @ W): one warp and two
TF32_CONFIGS = [(16, 128, 32, 1, 3), (64, 128, 32, 2, 3)]


@pytest.mark.parametrize("config", TF32_CONFIGS)
def test_a_tf32_b_n_major_comes_by_tma_too(config):
    k = _warm(*config, "sm_90a", np.float32)
    ptx = k.asm["ptx"]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert not re.search(r"cp\.async\.c[ag]\.", ptx)
    # B's 128 columns of 4 bytes in boxes of 32 (a 128-byte swizzle's rows), A's in one: 5 a stage
    assert ptx.count("cp.async.bulk.tensor.2d") == 5 * config[4]
    assert k.metadata["n_spills"] == 0  # through the pointer loads' cp.async: 16 and 192 bytes


def run_on_gpu(config, torch, dtype="float16"):
    """The kernel at `config` against torch, with edges past the last blocks of M, N and K."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk, warps, stages = config
    dtype = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    grid = (-(-M // bm), -(-N // bn))
    descriptor_matmul[grid](TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
                            TensorDescriptor.from_tensor(c, [bm, bn]), M, N, K, BM=bm, BN=bn, BK=bk,
                            num_warps=warps, num_stages=stages)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.05, rtol=0.01)


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS)
def test_tma_filled_mma_sync_rings_match_torch_on_the_gpu(config, hopper_torch):
    run_on_gpu(config, hopper_torch)


@pytest.mark.gpu
@pytest.mark.parametrize("config", TF32_CONFIGS)
def test_tma_filled_tf32_rings_match_torch_on_the_gpu(config, hopper_torch):
    run_on_gpu(config, hopper_torch, "float32")
