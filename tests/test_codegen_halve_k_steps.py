"""kiln.codegen.passes.halve_k_steps on a CPU: which K loops run two steps of half the K (a tf32 tile whose step
leaves room for two ring slots only) and which are left as written, the half loop's IR, its ring in the
sm_90a build, and the CPU emulator's results against the loop as written (`half_steps = 0`); on the GPU,
the same numbers as the kernel written with half the K block."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.codegen import pipeline
from kiln.codegen.passes import halve_k_steps
from kiln.codegen.target import parse_target
from kiln.ir import copy_function

from test_codegen_emulate import in_child
from test_lang_dot import _tiled_matmul as _matmul  # tutorial 03's loop: wrapped rows and columns, the K edge masked


@kiln.jit
def _same_a(A, B, C, stride_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STEPS: tl.constexpr):
    """A K loop whose A block stays where it is: not a walk along K, so its steps are not halved."""
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    b_ptrs = B + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(STEPS):
        acc = tl.dot(tl.load(A + offs_m[:, None] * BK + offs_k[None, :]), tl.load(b_ptrs), acc)
        b_ptrs += BK * stride_bk
    tl.store(C + offs_m[:, None] * BN + offs_n[None, :], acc)


@kiln.jit
def _matmul_by_k(A, B, C, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The K loop stepping K itself (`range(0, K, BK)`), addresses and masks from the induction variable."""
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        cols = k + tl.arange(0, BK)
        a = tl.load(A + offs_m[:, None] * stride_am + cols[None, :], mask=cols[None, :] < K, other=0.0)
        b = tl.load(B + cols[:, None] * stride_bk + offs_n[None, :], mask=cols[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :], acc)


@kiln.jit
def _descriptor_matmul(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                       B_BY_N: tl.constexpr):
    """Tutorial 03's matmul through host descriptors, B [K, N]; or B [N, K] read transposed (tutorial 09's)."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        if B_BY_N:
            b = b_desc.load([pid_n * BN, k * BK]).T
        else:
            b = b_desc.load([k * BK, pid_n * BN])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


def _descriptors(a, b, c, bm, bn, bk, b_by_n):
    from kiln.tools.tensor_descriptor import TensorDescriptor
    b_block = [bn, bk] if b_by_n else [bk, bn]
    return (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, b_block),
            TensorDescriptor.from_tensor(c, [bm, bn]))


def _built_descriptors(b_by_n, dtype=np.float16, bm=128, bn=256, bk=128, warps=8):
    x = np.zeros((16, 16), dtype)
    return _descriptor_matmul.warmup(*_descriptors(x, x, np.zeros((16, 16), np.float32), bm, bn, bk, b_by_n), 512,
                                     BM=bm, BN=bn, BK=bk, B_BY_N=b_by_n, num_warps=warps, num_stages=3, grid=(1, 1),
                                     target="sm_90a")


def _built(dtype=np.float32, bm=128, bn=256, bk=64, warps=8, stages=3, target="sm_90a"):
    x = np.zeros((16, 16), dtype)
    return _matmul.warmup(x, x, np.zeros((16, 16), np.float32), 512, 512, 512, 512, 512, 512, BM=bm, BN=bn, BK=bk,
                          num_warps=warps, num_stages=stages, grid=(1,), target=target)


def _after_pass(fn, warps=8, target="sm_90a", stages=3):
    fn = copy_function(fn)
    ctx = pipeline.PassContext(target=parse_target(target), num_warps=warps, num_stages=stages)
    pipeline.run_passes(fn, ctx, check=True, stop=pipeline.PASSES.index(halve_k_steps) + 1)
    return str(fn)


def test_a_tf32_step_of_96_kb_runs_as_two_of_48():
    text = _after_pass(_built().ir)
    assert "half_steps = 1" in text
    loop = re.search(r"= for (%\d+), (%\d+), (%\d+), %\d+, %\d+, %\d+ : <128x256xfp32>, <128x32xptr<fp32>>, "
                     r"<32x256xptr<fp32>>", text)
    assert loop is not None  # the accumulator and the half-wide pointer blocks carried
    assert re.search(rf"{loop.group(1)} = constant {{value = 0}}", text)
    assert re.search(rf"{loop.group(2)} = mul %\d+, %\d+", text)  # twice the trips
    assert re.search(r"= load %\d+, %\d+, %\d+ : <128x32xfp32>", text)
    assert re.search(r"= load %\d+, %\d+, %\d+ : <32x256xfp32>", text)
    assert len(re.findall(r"= dot ", text)) == 1
    assert "<128x64xfp32>" not in text and "<64x256xfp32>" not in text


@pytest.mark.parametrize("dtype, bm, bn, bk", [(np.float16, 128, 256, 64), (np.float32, 128, 128, 32),
                                                (np.float32, 128, 128, 64), (np.float16, 128, 256, 32)])
def test_steps_that_leave_room_for_three_slots_are_left_as_written(dtype, bm, bn, bk):
    """fp16 128x256x64 (48 KB a step), tf32 128x128x32 and x64 (32 and 64 KB), fp16 128x256x32 (24 KB): three
    slots and more fit."""
    assert "half_steps" not in _after_pass(_built(dtype, bm, bn, bk).ir)


def test_a_loop_of_one_stage_is_left_as_written():
    assert "half_steps" not in _after_pass(_built(stages=1).ir, stages=1)


def test_only_sm_90a_at_whole_warpgroups_halves():
    fn = _built().ir
    assert "half_steps" not in _after_pass(fn, target="sm_80")
    assert "half_steps" not in _after_pass(fn, warps=2)
    written = copy_function(fn)
    written.attrs["half_steps"] = 0
    assert "half_steps = 0" in _after_pass(written) and "<128x64xfp32>" in _after_pass(written)


def test_a_64_bit_stride_gives_the_half_loop_int64_addresses():
    """A stride past 2**31 is an int64 argument: the half loop's address blocks from it are int64 (they were
    int32 blocks splatted from it, which the verifier refuses)."""
    x = np.zeros((16, 16), np.float32)
    built = _matmul.warmup(x, x, np.zeros((16, 16), np.float32), 512, 512, 512, 2**31 + 16, 512, 512, BM=128, BN=256,
                           BK=64, num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
    text = _after_pass(built.ir)
    stride = re.search(r"(%\d+): int64", text).group(1)  # (the signature's only 64-bit argument)
    assert "half_steps = 1" in text
    assert re.search(rf"= splat {stride} : <128x32xint64>", text)


def test_a_block_that_does_not_walk_k_is_left_as_written():
    x = np.zeros((16, 16), np.float32)
    built = _same_a.warmup(x, x, x, 256, BM=128, BN=256, BK=64, STEPS=4, num_warps=8, grid=(1,), target="sm_90a")
    assert "half_steps" not in _after_pass(built.ir)


def test_the_sm_90a_build_rings_four_half_steps():
    built = compile_ir(_built().ir, "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False)
    assert "half_steps = 1" in built.kir
    # 4 slots of 48 KB (a spare beside 3 stages) where the step as written had 2 of 96
    assert built.metadata["shared"] >= 4 * (128 * 32 + 32 * 256) * 4
    # B [K, N] row-major: the product transposed (lower/transposed_dot), each warpgroup's two 64-column slabs of B^T
    # times A's 128 rows, four k-steps of 8 a half step
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k8\.f32\.tf32", built.asm["ptx"])) == 8


@pytest.mark.parametrize("b_by_n", [False, True])
def test_descriptor_blocks_of_96_kb_a_step_run_as_two_of_48(b_by_n):
    """fp16 128x256x128 through host descriptors: each block at its K offset halved, over its fallback loads
    halved; B [N, K] is loaded half as wide and read transposed."""
    text = _after_pass(_built_descriptors(b_by_n).ir)
    assert "half_steps = 1" in text
    assert re.search(r"= descriptor_load %\d+, %\d+, %\d+, %\d+ : <128x64xfp16>", text)
    if b_by_n:
        b = re.search(r"(%\d+) = descriptor_load %\d+, %\d+, %\d+, %\d+ : <256x64xfp16>", text).group(1)
        assert re.search(rf"= permute {b} {{order = \[1, 0\]}} : <64x256xfp16>", text)
    else:
        assert re.search(r"= descriptor_load %\d+, %\d+, %\d+, %\d+ : <64x256xfp16>", text)
    assert len(re.findall(r"= dot ", text)) == 1
    assert "x128xfp16>" not in text.split("= for ", 1)[1]  # no whole block in the loop (C's store is after it)


@pytest.mark.parametrize("b_by_n", [False, True])
def test_the_sm_90a_descriptor_build_is_the_kernel_written_with_half_the_k(b_by_n):
    """128x256x128 halved builds the loop of 128x256x64: four m64n256k16 wgmmas a step, a ring of four 48 KB slots
    filled by TMA (before: eight wgmmas a step and two 96 KB slots)."""
    built = {bk: compile_ir(_built_descriptors(b_by_n, bk=bk).ir, "sm_90a", {"num_warps": 8, "num_stages": 3},
                            link=False) for bk in (64, 128)}
    assert "half_steps = 1" in built[128].kir and "half_steps" not in built[64].kir
    for pattern in (r"wgmma\.mma_async\.sync\.aligned\.m64n256k16", r"cp\.async\.bulk\.tensor\.2d"):
        assert len(re.findall(pattern, built[128].asm["ptx"])) == len(re.findall(pattern, built[64].asm["ptx"])) > 0
    assert built[128].metadata["shared"] == built[64].metadata["shared"] >= 4 * (128 * 64 + 64 * 256) * 2


def test_split_k_counts_the_loop_as_written_and_its_split_build_is_halved_too():
    """split_k runs first: its trip spec is the loop as written's (K + 63) / 64 (the launch sizes clusters by
    it), and each CTA's share of the split loop runs in half steps from its rank's first column on."""
    fn = copy_function(_built().ir)
    plain = compile_ir(fn, "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False)
    assert plain.metadata["split_trips"] == [5, 63, 64, 0, 1]  # K is argument 5
    fn.attrs["split_k"] = 1
    text = _after_pass(fn)
    assert "half_steps = 1" in text and "split_k = 1" in text
    loop = re.search(r"= for %\d+, %\d+, %\d+, %\d+, (%\d+), (%\d+) : <128x256xfp32>, <128x32xptr<fp32>>", text)
    assert loop is not None
    start = re.search(rf"{loop.group(1)} = addptr %\d+, (%\d+) : <128x32xptr<fp32>>", text).group(1)
    rank_cols = re.search(rf"{start} = add %\d+, (%\d+) : <128x32xint32>", text).group(1)
    assert re.search(rf"{rank_cols} = splat %\d+ : <128x32xint32>", text)  # the rank's first column, 64 a step


@pytest.fixture
def small_tiles_halve(monkeypatch):
    """The pass weighs steps against 64 KB of shared memory, so 64x64x64 fp32 tiles (32 KB a step) halve:
    the emulator runs one CTA of 4 warps instead of a 128x256 tile's 8 (the pass's proof does not depend
    on sizes; its rewrite's result is what is checked)."""
    monkeypatch.setattr(halve_k_steps, "max_shared_per_cta", lambda capability: 64 * 1024)


def _halved_or_written(fn, halved):
    fn = copy_function(fn)
    if not halved:
        fn.attrs["half_steps"] = 0
    assert ("half_steps = 1" in _after_pass(fn, warps=4)) == halved
    return fn


def run_matmul(halved, m, n, k):
    from kiln.codegen.emulate import run_on_cpu
    fn = _halved_or_written(_built(bm=64, bn=64, warps=4).ir, halved)
    rng = np.random.default_rng(7)
    lda, ldb = -(-k // 16) * 16, -(-n // 16) * 16  # (the build's strides are multiples of 16)
    a = rng.standard_normal((m, lda)).astype(np.float32)
    b = rng.standard_normal((k, ldb)).astype(np.float32)
    c = np.full((m, ldb), np.nan, np.float32)
    run_on_cpu(fn, (1, 1), [a, b, c, m, n, k, lda, ldb, ldb], num_warps=4)
    return c[:, :n], a[:, :k], b[:k, :n]


def test_the_half_loop_computes_what_the_loop_as_written_does(small_tiles_halve):
    """K = 200: three whole steps and a step of 8 (the half loop's seventh half step holds 8, its eighth
    none); rows and columns wrapped (60 x 50 in a 64 x 64 tile)."""
    c, a, b = in_child(run_matmul, True, 60, 50, 200)
    c0, _, _ = in_child(run_matmul, False, 60, 50, 200)
    np.testing.assert_array_equal(c, c0)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=2e-2, atol=5e-2)  # (tf32 products)


def run_descriptor_matmul(halved, b_by_n, m, n, k):
    """The portable sm_90a build (the descriptors' blocks through their fallback loads) of 64x64x64 fp32."""
    from kiln.codegen.emulate import run_on_cpu
    fn = _halved_or_written(_built_descriptors(b_by_n, np.float32, 64, 64, 64, warps=4).ir, halved)
    rng = np.random.default_rng(5)
    ld = -(-k // 16) * 16
    a = rng.standard_normal((m, ld)).astype(np.float32)
    b = rng.standard_normal((n, ld) if b_by_n else (k, 64)).astype(np.float32)
    c = np.full((m, 64), np.nan, np.float32)
    no_map = np.zeros(128, np.uint8)  # (the TMA map: the portable build reads through the pointers)
    b_shape = (n, k, ld, 1) if b_by_n else (k, n, 64, 1)
    run_on_cpu(fn, (1, 1), [a, m, k, ld, 1, no_map, b, *b_shape, no_map, c, m, n, 64, 1, no_map, k], num_warps=4)
    want = a[:, :k].astype(np.float64) @ (b[:, :k].T if b_by_n else b[:k, :n])
    return c[:, :n], want


@pytest.mark.parametrize("b_by_n", [False, True])
def test_the_half_descriptor_loop_computes_what_the_loop_as_written_does(small_tiles_halve, b_by_n):
    """K = 200 (the last half steps partly and wholly past K, where the descriptor reads zeros), 60 x 50 of a
    64 x 64 tile."""
    c, want = in_child(run_descriptor_matmul, True, b_by_n, 60, 50, 200)
    c0, _ = in_child(run_descriptor_matmul, False, b_by_n, 60, 50, 200)
    np.testing.assert_array_equal(c, c0)
    np.testing.assert_allclose(c, want, rtol=2e-2, atol=5e-2)  # (tf32 products)


def run_by_k(halved, k):
    from kiln.codegen.emulate import run_on_cpu
    x = np.zeros((16, 16), np.float32)
    fn = _halved_or_written(_matmul_by_k.warmup(x, x, x, 512, 512, 512, 64, BM=64, BN=64, BK=64, num_warps=4,
                                                num_stages=3, grid=(1,), target="sm_90a").ir, halved)
    rng = np.random.default_rng(11)
    lda = -(-k // 16) * 16
    a = rng.standard_normal((64, lda)).astype(np.float32)
    b = rng.standard_normal((k, 64)).astype(np.float32)
    c = np.full((64, 64), np.nan, np.float32)
    run_on_cpu(fn, (1,), [a, b, c, k, lda, 64, 64], num_warps=4)
    return c, a[:, :k], b


def test_a_loop_stepping_k_itself_halves_and_computes_what_it_did(small_tiles_halve):
    """range(0, K, BK): the induction variable moves BK a step, the half loop's BK / 2 (K = 176: two whole
    steps and one of 48, so the half loop's sixth half step holds 16)."""
    c, a, b = in_child(run_by_k, True, 176)
    c0, _, _ = in_child(run_by_k, False, 176)
    np.testing.assert_array_equal(c, c0)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(512, 512, 1024), (300, 520, 200)])
def test_the_half_loop_on_the_gpu_equals_the_kernel_written_with_half_the_k(m, n, k, cuda_torch, monkeypatch):
    """The same wgmmas in the same order as a K block of 32: the same bits. Split-K off: these grids leave the
    GPU idle, and a split build's sums are regrouped (the two loops' trips are not counted alike)."""
    monkeypatch.setenv("KILN_SPLIT_K", "0")
    torch = cuda_torch
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    out = _by_k_block(torch, m, n, (64, 32), lambda c, grid, bk: _matmul[grid](
        a, b, c, m, n, k, k, n, n, BM=128, BN=256, BK=bk, num_warps=8, num_stages=3))
    assert torch.equal(out[64], out[32])
    torch.testing.assert_close(out[64], a.double().matmul(b.double()).float(), rtol=2e-2, atol=0.2)


@pytest.mark.gpu
@pytest.mark.parametrize("b_by_n", [False, True])
@pytest.mark.parametrize("m, n, k", [(512, 512, 1024), (300, 520, 200)])
def test_the_half_descriptor_loop_on_the_gpu_equals_the_kernel_written_with_half_the_k(m, n, k, b_by_n, cuda_torch,
                                                                                      monkeypatch):
    monkeypatch.setenv("KILN_SPLIT_K", "0")
    torch = cuda_torch
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    b_stored = b.T.contiguous() if b_by_n else b
    out = _by_k_block(torch, m, n, (128, 64), lambda c, grid, bk: _descriptor_matmul[grid](
        *_descriptors(a, b_stored, c, 128, 256, bk, b_by_n), k, BM=128, BN=256, BK=bk, B_BY_N=b_by_n, num_warps=8,
        num_stages=3))
    assert torch.equal(out[128], out[64])
    torch.testing.assert_close(out[128], a.double().matmul(b.double()).float(), rtol=2e-2, atol=0.2)


def _by_k_block(torch, m, n, bks, launch):
    """{BK: C} of `launch(c, grid, BK)` for 128x256 tiles on 8 warps at each K block; the first's build halved."""
    out = {}
    for bk in bks:
        c = torch.full((m, n), float("nan"), device="cuda")
        kernel = launch(c, (triton_cdiv(m, 128), triton_cdiv(n, 256)), bk)
        out[bk] = c
        if bk == bks[0]:
            assert "half_steps = 1" in compile_ir(kernel.ir, "sm_90a", {"num_warps": 8, "num_stages": 3},
                                                  link=False).kir
    return out


def triton_cdiv(x, y):
    return (x + y - 1) // y


@pytest.mark.gpu
def test_a_split_build_of_the_half_loop_on_the_gpu(cuda_torch, monkeypatch):
    """8 programs on a GPU of 132 SMs: split-K's build, each CTA's share of the K loop in half steps, against
    torch (the cluster's sum regroups the fp32 adds)."""
    monkeypatch.setenv("KILN_SPLIT_K", "1")
    torch = cuda_torch
    m, n, k = 512, 512, 4096
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    _matmul[(m // 128, n // 256)](a, b, c, m, n, k, k, n, n, BM=128, BN=256, BK=64, num_warps=8, num_stages=3)
    torch.testing.assert_close(c, a.double().matmul(b.double()).float(), rtol=2e-2, atol=0.5)
