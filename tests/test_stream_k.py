"""bench/kernels.py's stream-K matmul (bench/stream_k.py): whole waves tile by tile, the last wave shared
out k-step by k-step, a split tile's partials stored in slots its completing program adds up. In the
interpreter and on the GPU it computes A @ B and leaves its counts zeroed for the next launch; for sm_90a
both of its K loops run on wgmma."""
import numpy as np
import pytest

from bench_support import bench_kernels

KERNELS = bench_kernels()
# (M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, programs): tails of 2, 2, 1 and 5 tiles, split at every k-step
# boundary the runs fall on (a tile shared by two to four programs, one run spanning two tiles)
SHAPES = [(96, 64, 80, 32, 32, 16, 4), (100, 70, 90, 32, 32, 16, 5), (64, 64, 256, 32, 32, 16, 3),
          (128, 96, 48, 32, 32, 16, 7)]


def _workspace(M, N, K, bm, bn, bk, programs, zeros):
    """The partial slots and the counts, made by `zeros(shape, numpy dtype)`."""
    tail, slots = KERNELS.stream_k_slots(M, N, K, bm, bn, bk, programs)
    return zeros((tail, slots, bm, bn), np.float32), zeros((tail,), np.int32)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"-p{s[6]}")
def test_stream_k_in_the_interpreter_matches_numpy_twice(shape, monkeypatch):
    monkeypatch.setenv("KILN_INTERPRET", "1")
    M, N, K, bm, bn, bk, programs = shape
    rng = np.random.default_rng(M * N + K)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    partial, arrived = _workspace(M, N, K, bm, bn, bk, programs, np.zeros)
    want = a.astype(np.float32) @ b.astype(np.float32)
    for _ in range(2):  # the second launch reads the workspace the first left behind
        c = np.full((M, N), np.nan, np.float16)
        KERNELS.stream_k_matmul_kernel[(programs,)](a, b, c, partial, arrived, M, N, K, K, 1, N, 1, N, 1,
                                                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=2, NUM_SMS=programs)
        np.testing.assert_allclose(c.astype(np.float32), want, atol=0.05, rtol=0.01)
        assert not arrived.any()  # the counts zeroed for the next launch (the slots are overwritten)


def test_stream_k_builds_both_loops_on_wgmma_for_sm_90a():
    x, f, i = np.zeros((64, 64), np.float16), np.zeros(64, np.float32), np.zeros(64, np.int32)
    n = 4096
    built = KERNELS.stream_k_matmul_kernel.warmup(x, x, x, f, i, n, n, n, n, 1, n, 1, n, 1, BLOCK_M=128, BLOCK_N=256,
                                                  BLOCK_K=64, GROUP_M=8, NUM_SMS=132, num_warps=8, num_stages=3,
                                                  grid=(1,), target="sm_90a")
    ptx = built.asm["ptx"]
    assert ptx.count("wgmma.commit_group") == 2  # one K loop for the whole waves, one for the tail's runs
    assert "mma.sync" not in ptx and built.metadata["n_spills"] == 0
    # partials stored, a barrier, the count's acq_rel add: its completer reads every partial after it
    assert "atom.global.gpu.acq_rel.add.u32" in ptx and "ld.global.cg" in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (64, 128, 32, 4, 4)])
@pytest.mark.parametrize("shape", [(4096, 4096, 320), (1000, 776, 520), (3000, 5000, 1000)])
def test_stream_k_on_the_gpu_matches_torch_twice(shape, cfg, hopper_torch):
    torch = hopper_torch
    M, N, K = shape
    bm, bn, bk, stages, warps = cfg
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    programs = min(torch.cuda.get_device_properties(0).multi_processor_count, -(-M // bm) * -(-N // bn))
    partial, arrived = _workspace(M, N, K, bm, bn, bk, programs, lambda shape, dtype: torch.zeros(
        shape, device="cuda", dtype=getattr(torch, np.dtype(dtype).name)))
    for _ in range(2):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        KERNELS.stream_k_matmul_kernel[(programs,)](a, b, c, partial, arrived, M, N, K, K, 1, N, 1, N, 1,
                                                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, NUM_SMS=programs,
                                                    num_warps=warps, num_stages=stages)
        torch.cuda.synchronize()
        torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.05 * K ** 0.5, rtol=0.01)
        assert not arrived.any()  # the counts zeroed for the next launch (the slots are overwritten)
