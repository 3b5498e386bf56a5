"""wgmma's shared-memory descriptors made in uniform registers: a warpgroup's rows start at an
offset from its warp index, taken from lane 0 (`shfl.sync.idx`) so that ptxas sees it is the same
in every lane. From `tid.x >> 5` it is not: a loop-invariant descriptor (attention's Q, stored
once) lived in vector registers and was moved to uniform ones at every wgmma (R2UR; bench's
attention forward at D128: 16 per iteration, 353 instructions to Triton's 332)."""
import re

import numpy as np

from bench_support import bench_kernels
from sass_tools import innermost_loop, sass

kernels = bench_kernels()


def _forward_d128():
    q = np.zeros((1, 1, 256, 128), np.float16)
    m = np.zeros((1, 1, 256), np.float32)
    strides = [s // 2 for s in q.strides] * 4
    return kernels.attention_fwd_kernel.warmup(q, q, q, q, m, 0.1, *strides, 1, 256, HEAD_DIM=128, BLOCK_M=128,
                                               BLOCK_N=64, CAUSAL=False, num_warps=8, num_stages=3, grid=(1,),
                                               target="sm_90a")


def test_the_warp_index_wgmma_reads_is_lane_0s():
    ptx = _forward_d128().asm["ptx"]
    assert len(re.findall(r"wgmma\.mma_async", ptx)) >= 2
    (shfl,) = re.findall(r"shfl\.sync\.idx\.b32\s+%r\d+, (%r\d+), 0, 31, -1;", ptx)
    # the value shuffled is tid.x >> 5
    tid = re.search(r"mov\.u32\s+(%r\d+), %tid\.x;", ptx).group(1)
    assert re.search(rf"shr\.u32\s+{shfl}, {tid}, 5;", ptx)


def test_attentions_loop_moves_no_descriptor_into_uniform_registers():
    loop = innermost_loop(sass(_forward_d128().asm["cubin"]))
    assert sum("HGMMA" in text for text in loop) >= 8
    assert not [text for text in loop if re.search(r"\bR2UR\b", text)]
