"""On sm_90a, a loop whose dots wgmma cannot run (fewer rows than a warpgroup's 64: fla's 16-row
sub-chunks, the corpus's 32x32 dots on 4 warps) is pipelined as on sm_80: mma.sync reading cp.async
rings by ldmatrix, the copies issued stages ahead, as Triton pipelines its MMAv2 dots on Hopper. A loop
of dots wgmma runs keeps wgmma; the portable build (what the CPU emulator runs) was already this form."""
import pathlib
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function

from test_codegen_emulate import in_child

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"


@kiln.jit
def sub_chunks(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows, cols, ks = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * BN + cols[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * BN + cols[None, :], acc)


def _compiled(bm, num_warps=4):
    from kiln.codegen import compile
    a = np.zeros((bm, 128), np.float16)
    b = np.zeros((128, 64), np.float16)
    c = np.zeros((bm, 64), np.float32)
    warm = sub_chunks.warmup(a, b, c, 128, BM=bm, BN=64, BK=32, grid=(1,), target="sm_90a")
    return compile(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": num_warps, "num_stages": 3})


@pytest.mark.parametrize("bm", [16, 32])
def test_a_dot_of_fewer_rows_than_a_warpgroup_runs_on_mma_rings(bm):
    built = _compiled(bm)
    assert "mma_dot" in built.kir and "warp_group_dot" not in built.kir
    assert "mma.sync" in built.ptx and "ldmatrix" in built.ptx and "wgmma" not in built.ptx
    assert "cp.async.cg.shared.global" in built.ptx or "cp.async.ca.shared.global" in built.ptx
    assert not re.search(r"ld\.global\.[a-z0-9.]*b32", built.ptx)  # the tiles come by cp.async only


def test_a_dot_of_a_warpgroup_s_rows_keeps_wgmma():
    built = _compiled(64)
    assert "warp_group_dot" in built.kir and "wgmma.mma_async" in built.ptx


def test_the_corpus_dot_runs_on_mma_rings():
    from kiln.codegen import compile
    built = compile(parse_function((CORPUS / "dot_f16.kir").read_text()), "sm_90a")
    assert "mma_dot" in built.kir and "cp.async" in built.ptx


def _emulated(bm):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(3)
    a = rng.standard_normal((bm, 128)).astype(np.float16)
    b = rng.standard_normal((128, 64)).astype(np.float16)
    c = np.zeros((bm, 64), np.float32)
    warm = sub_chunks.warmup(a, b, c, 128, BM=bm, BN=64, BK=32, grid=(1,), target="sm_90a")
    run_on_cpu(warm.ir, (1,), [a, b, c, 128], num_warps=4, options={"num_stages": 3})
    return a, b, c


def test_the_sub_chunk_loop_matches_numpy():
    a, b, c = in_child(_emulated, 16, timeout=300)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("bm", [16, 32, 64])
def test_the_sub_chunk_loop_on_the_gpu(bm, cuda_torch):
    torch = cuda_torch
    a = torch.randn(bm, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    c = torch.zeros(bm, 64, device="cuda", dtype=torch.float32)
    sub_chunks[(1,)](a, b, c, 128, BM=bm, BN=64, BK=32, num_warps=4, num_stages=3)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-2)
