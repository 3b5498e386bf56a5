"""bench/kernels.py's forms of tutorial 09's persistent matmuls through descriptors (bench/tutorial09.py times
them on a GPU): their products on the CPU (the interpreter: tiles looped over two programs, edges past the
blocks), and their sm_90a builds, TMA rings feeding wgmma in the nested K loop."""
import re

import numpy as np
import pytest

from bench_support import bench_kernels

M, N, K = 200, 136, 96  # 2 x 2 tiles of 128 for 2 programs; every edge inside a block


def _launch(kind, a, bt, c, **meta):
    import kiln
    lib = bench_kernels()
    if kind == "host":
        from kiln.tools.tensor_descriptor import TensorDescriptor
        bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
        descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(bt, [bn, bk]),
                 TensorDescriptor.from_tensor(c, [bm, bn]))
        return lib.tma_persistent_matmul_kernel, (*descs, a.shape[0], bt.shape[0], a.shape[1])
    kiln.set_allocator(lambda size, align, stream: np.empty(size, np.int8))  # the maps the kernel writes
    return lib.descriptor_persistent_matmul_kernel, (a, bt, c, a.shape[0], bt.shape[0], a.shape[1])


@pytest.mark.parametrize("kind", ["host", "device"])
def test_the_persistent_descriptor_kernels_compute_the_product(kind):
    torch = pytest.importorskip("torch")
    torch.manual_seed(9)
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    meta = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, NUM_SMS=2)
    kernel, args = _launch(kind, a, b.T.contiguous(), c, **meta)
    kernel[(2,)](*args, **meta)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("kind", ["host", "device"])
def test_their_sm_90a_builds_feed_wgmma_from_tma_rings(kind):
    a, bt, c = (np.zeros(shape, np.float16) for shape in ((4096, 4096), (4096, 4096), (4096, 4096)))
    meta = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, NUM_SMS=132)
    kernel, args = _launch(kind, a, bt, c, **meta)
    ptx = kernel.warmup(*args, **meta, num_warps=8, num_stages=3, grid=(132,), target="sm_90a").asm["ptx"]
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.f16\.f16", ptx)) == 4
    assert "cp.async.bulk.tensor.2d" in ptx and "cp.async.cg" not in ptx
