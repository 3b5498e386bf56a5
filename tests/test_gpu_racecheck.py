"""GPU tier: compute-sanitizer's racecheck finds no shared-memory hazard in the kernels
that use shared buffers the most (pipelined matmul with one and two warpgroups, as written and
split across a cluster (split-K), and with
a ring of S tiles, where each copy waits for the dot that read its tile, TMA-filled with no barrier
at the top of the body; the warp-specialized
matmul, cooperative and ping-pong; a tf32 K loop halve_k_steps runs in half steps; two
pipelined loops one after the other whose rings share bytes but not tile shapes, as in
Triton's tutorial-06 backward; causal attention forward and backward, and its forward through
descriptors, whose TMA rings two warpgroups hand back through mbarriers; reductions and
conversions that scratch_barriers left without a barrier before them; fp8 dots outside pipelined loops,
whose operand tiles one after another share bytes; a 16-bit dot chained to a wgmma loop's accumulator;
values several mma.sync dots read, stored once; a chunked recurrence that stores in its pipelined loop,
dots of fewer rows than a warpgroup on mma.sync rings, and on Hopper's mma.sync rings descriptor loads TMA fills
and fp8 tiles upcast as fragments; an 8-bit and a 32-bit B stored N-major, copied K-major by warps every
iteration; a batched dot's rings of batched tiles). Skipped without a
GPU or without compute-sanitizer.

Racecheck runs each kernel once at a small size (it is slow: every shared access is
tracked); the launches are the ones of test_attention_backward.py and bench/kernels.py.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
SANITIZER = shutil.which("compute-sanitizer") or next(
    (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.access(p, os.X_OK)), None)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(SANITIZER is None, reason="needs compute-sanitizer (CUDA toolkit)")]
HERE = os.path.dirname(os.path.abspath(__file__))


def matmul_script(m: int, n: int, k: int, configs, atol: float) -> str:
    """Tutorial 03's kernel (bench/kernels.py) on an m x k by k x n product, once per (BLOCK_M, BLOCK_N,
    BLOCK_K, warps, stages) of `configs`, checked against torch."""
    return f"""
for bm, bn, bk, warps, stages in {configs!r}:
    a = torch.randn({m}, {k}, device="cuda", dtype=torch.float16)
    b = torch.randn({k}, {n}, device="cuda", dtype=torch.float16)
    c = torch.empty({m}, {n}, device="cuda", dtype=torch.float16)
    grid = ({m} // bm * ({n} // bn),)
    kernels.matmul_kernel[grid](a, b, c, {m}, {n}, {k}, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=bm,
                                BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol={atol}, rtol=0.01)
"""


MATMUL = """
import torch
from test_attention_backward import kernels""" + matmul_script(
    256, 256, 192, ((128, 128, 64, 4, 3), (128, 64, 64, 4, 4), (128, 256, 64, 8, 3), (128, 256, 128, 8, 2)), 0.1)

# tutorial 03's kernel with its K loop asking for warp specialization: a producer warpgroup filling
# the rings behind empty mbarriers, with two warpgroups of dots (8 warps) and with two replicas of
# one taking turns (4 warps, ping-pong); more tiles than CTAs, so slots and turns wrap across tiles
WARP_SPECIALIZED = """
import torch
from test_attention_backward import kernels
for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4)):
    M, N, K = 2048, 2048, 320
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    grid = (M // bm * (N // bn),)
    kernels.matmul_kernel_ws[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=bm,
                                   BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.1, rtol=0.01)
"""

# K in two phases with different tile widths: the second loop's rings take the first's
# bytes, each byte copied by other threads than before (racecheck sees that write-after-write
# when no barrier separates the loops)
TWO_LOOPS = """
import torch
import kiln
import kiln.language as tl

@kiln.jit
def two_phase_matmul(a_ptr, b_ptr, c_ptr, K1, K, BM: tl.constexpr, BN: tl.constexpr, BK1: tl.constexpr,
                     BK2: tl.constexpr):
    rm, rn = tl.arange(0, BM), tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K1, BK1):
        ks = k + tl.arange(0, BK1)
        acc = tl.dot(tl.load(a_ptr + rm[:, None] * K + ks[None, :]), tl.load(b_ptr + ks[:, None] * BN + rn[None, :]), acc)
    for k in range(K1, K, BK2):
        ks = k + tl.arange(0, BK2)
        acc = tl.dot(tl.load(a_ptr + rm[:, None] * K + ks[None, :]), tl.load(b_ptr + ks[:, None] * BN + rn[None, :]), acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)

a = torch.randn(128, 384, device="cuda", dtype=torch.float16)
b = torch.randn(384, 128, device="cuda", dtype=torch.float16)
c = torch.empty(128, 128, device="cuda", dtype=torch.float32)
two_phase_matmul[(1,)](a, b, c, 128, 384, BM=128, BN=128, BK1=16, BK2=64, num_warps=4, num_stages=3)
torch.testing.assert_close(c, a.float() @ b.float(), atol=0.05, rtol=0.01)
"""

FP8_ATTENTION = """
import torch
from test_codegen_gpu_stage import _attention
q, k, v = (torch.randn(256, 64, device="cuda").to(torch.float8_e4m3fn) for _ in range(3))
out = torch.empty(256, 64, device="cuda")
for warps in (4, 8):
    _attention[(2,)](q, k, v.t().contiguous(), out, 256, D=64, BM=128, BN=64, V_TRANSPOSED=True,
                     num_warps=warps, num_stages=3)
torch.cuda.synchronize()
"""

ATTENTION = """
import torch
from test_attention_backward import kernels, run_attention
shape = (1, 2, 256, {dim})
q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(4))
o, lse = torch.empty_like(q), torch.empty(shape[:3], device="cuda", dtype=torch.float32)
grads = [torch.empty_like(q) for _ in range(3)]
run_attention(kernels, q, k, v, do, o, lse, grads, True, fwd=(64, 64), narrow={narrow}, wide={wide},
              num_warps={warps}, num_stages={stages})
torch.cuda.synchronize()
"""

# Reductions, conversions and exchanges one after the other with no barrier before each
# (scratch_barriers gives neighbours disjoint bytes): softmax, layer norm's sums around loops, two
# reductions in a loop, row and column sums of one tile added (a conversion), argmax (two values
# per slot), trans / reshape / split / join / histogram in a row, two scans and a sum
REDUCTIONS = """
import torch
from scratch_chains import chains, exchanges, rows_and_cols, scans

x = torch.randn(8, 1000, device="cuda")
out = torch.empty_like(x)
p = torch.softmax(torch.nn.functional.pad(x, (0, 24), value=-float("inf")), dim=1)
acc = torch.zeros_like(p)
for i in range(3):
    acc += p * p.sum(1, keepdim=True)
    acc -= acc.min(1, keepdim=True).values
want = (acc + acc.argmax(1, keepdim=True))[:, :1000]
for warps in (4, 8):
    chains[(8,)](x, out, 1000, BLOCK=1024, num_warps=warps)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
t = torch.randn(64, 64, device="cuda")
o = torch.empty(64, device="cuda")
for warps in (4, 8):
    rows_and_cols[(1,)](t, o, N=64, num_warps=warps)
    want = t.sum(0) + t.sum(1)
    torch.testing.assert_close(o, want + want.max(), atol=1e-4, rtol=1e-4)
t = torch.randn(32, 32, device="cuda")
o = torch.empty_like(t)
h = torch.empty(8, device="cuda", dtype=torch.int32)
u = t.T.reshape(32, 16, 2)
v = torch.stack((u[..., 1], u[..., 0]), -1).reshape(32, 32)
for warps in (4, 8):
    exchanges[(1,)](t, o, h, N=32, num_warps=warps)
    torch.testing.assert_close(o, v + v.sum(0), atol=1e-4, rtol=1e-4)
    assert h.tolist() == torch.bincount(torch.arange(32) % 7, minlength=8).tolist()
s = torch.randn(256, device="cuda")
c = s.cumsum(0)
for warps in (4, 8):
    scans[(1,)](s, o := torch.empty_like(s), N=256, num_warps=warps)
    torch.testing.assert_close(o, (c * 0.5).flip(0).cumsum(0).flip(0) + c.sum(), atol=1e-3, rtol=1e-4)
torch.cuda.synchronize()
"""


# Loops whose TMA rings two warpgroups hand back through mbarriers (no barrier per iteration):
# the forward through descriptors the kernel makes, causal (two loops, each with its rings and
# mbarriers, their bytes shared), 8 warps
RELEASED_RINGS = """
import torch
import kiln
from test_attention_backward import kernels
kiln.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
# D128 in 128-key blocks: three slots, no spare, the copies two iterations ahead (smem_plan.released_ring)
for dim, block_n, n_ctx, causal in ((64, 64, 512, True), (64, 128, 512, True), (128, 128, 1024, True),
                                    (128, 128, 1024, False)):
    q, k, v = (torch.randn(1, 2, n_ctx, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    o, m = torch.empty_like(q), torch.empty(1, 2, n_ctx, device="cuda", dtype=torch.float32)
    scores = q.float() @ k.float().transpose(-1, -2) * dim ** -0.5
    if causal:
        scores = scores.masked_fill(torch.ones(n_ctx, n_ctx, device="cuda").triu(1).bool(), float("-inf"))
    want = scores.softmax(-1) @ v.float()  # not SDPA: racecheck reports cuDNN's attention kernel
    kernels.attention_descriptor_fwd_kernel[(n_ctx // 128, 2)](q, k, v, o, m, dim ** -0.5, 1, 2, n_ctx, HEAD_DIM=dim,
                                                               BLOCK_M=128, BLOCK_N=block_n, CAUSAL=causal,
                                                               num_warps=8, num_stages=3)
    torch.testing.assert_close(o.float(), want, atol=2e-2, rtol=2e-2)
torch.cuda.synchronize()
"""


# fp8 dots no loop pipelined (standalone_wgmma): two in a row whose operand tiles share bytes (the chain's second
# stores over the first's tiles once every warpgroup's wgmma retired), and one per iteration of an unpipelined loop
STANDALONE_FP8 = """
import torch
import test_codegen_fp8_standalone_dots as dots
gen, e4m3, e5m2 = torch.Generator().manual_seed(3), torch.float8_e4m3fn, torch.float8_e5m2
x, y, w = (dots.small_powers(torch, shape, e4m3, gen) for shape in ((128, 64), (64, 128), (128, 128)))
a, b = dots.small_powers(torch, (128, 256), e4m3, gen), dots.small_powers(torch, (256, 128), e5m2, gen)
for warps in (4, 8):  # small powers of two: exact sums
    z = torch.zeros(128, 128, device="cuda")
    dots.block_dot[(1,)](x, y, w, z, BM=128, BN=128, BK=64, CHAIN=True, num_warps=warps)
    assert torch.equal(z.double(), (x.double() @ y.double()).float().to(e4m3).double() @ w.double())
    dots.unpipelined_loop_dot[(1,)](a, b, z, 256, BM=128, BN=128, BK=64, num_warps=warps)
    assert torch.equal(z.double(), a.double() @ b.double())
torch.cuda.synchronize()
"""

# a 16-bit dot after a wgmma K loop, its A the loop's accumulator (standalone_wgmma): B stored over the bytes the
# loop's rings held, at one and two warpgroups
CHAINED = """
import torch
import test_codegen_chained_wgmma as chained
for warps, bv in ((4, 64), (8, 128)):
    chained.test_the_chained_dots_on_the_gpu(warps, bv, 3, "float16", torch)
torch.cuda.synchronize()
"""

# values several mma.sync dots read, stored once to a tile each (shared_dot_operands: in a loop, a barrier before
# the store), and conversions within warps by shuffles (no shared memory), at 1, 2 and 4 warps
SHARED_TILES = """
import torch
import test_codegen_shared_dot_operands as shared
import test_codegen_warp_shuffles as shuffles
for warps in (1, 2, 4):
    shared.test_the_shared_tiles_on_the_gpu(warps, torch)
    shuffles.test_the_substitution_on_the_gpu(warps, torch)
torch.cuda.synchronize()
"""


SPLIT_K = """
import torch
from kiln.runtime import launcher
from test_attention_backward import kernels
sized, clusters = launcher.cluster_ctas, []
launcher.cluster_ctas = lambda *args: clusters.append(sized(*args)) or clusters[-1]
launcher.CLUSTER_SHARE = {4: 1, 2: 1}  # 16 iterations split too: a shape racecheck runs quickly""" + matmul_script(
    128, 512, 1024, ((128, 128, 64, 8, 3), (64, 128, 64, 4, 3)), 0.2) + """\
assert clusters and min(clusters) >= 2, clusters  # the split build ran
torch.cuda.synchronize()
"""

# tutorial 03's 128x256x64 tile at tf32: 96 KB a step, run by halve_k_steps as steps of 32 in a ring of four
# 48 KB slots; K = 200 leaves the last half step masked; one CTA a tile (KILN_SPLIT_K=0) or split over clusters
HALVED = """
import os
import torch
from kiln.codegen import compile as compile_ir
from kiln.runtime import launcher
from test_attention_backward import kernels
sized, clusters = launcher.cluster_ctas, []
launcher.cluster_ctas = lambda *args: clusters.append(sized(*args)) or clusters[-1]
launcher.CLUSTER_SHARE = {4: 1, 2: 1}
M, N, K = 256, 512, 200
a = torch.randn(M, K, device="cuda")
b = torch.randn(N, K, device="cuda").T  # K-major: a weight's transpose, as bench/matmul.py's tf32
c = torch.full((M, N), float("nan"), device="cuda")
kernel = kernels.matmul_kernel[(M // 128 * (N // 256),)](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                                         BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8,
                                                         num_warps=8, num_stages=3)
assert "half_steps = 1" in compile_ir(kernel.ir, "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False).kir
torch.testing.assert_close(c, a.double() @ b.double(), rtol=2e-2, atol=0.5, check_dtype=False)
split = os.environ["KILN_SPLIT_K"] == "1"
assert (bool(clusters) and min(clusters) >= 2) == split, clusters  # the split build ran, or did not
torch.cuda.synchronize()
"""


# loops that store (fla's chunked recurrence: a state stored each chunk, its inputs on rings; wgmma at 4 and 8
# warps, mma.sync at 2) and dots of fewer rows than a warpgroup on mma.sync rings on sm_90a
STORING_LOOPS = """
import torch
import test_codegen_small_dot_rings as small
import test_codegen_storing_recurrence as rec
for warps in (2, 4, 8):
    rec.test_the_recurrence_on_the_gpu(warps, 3, False, torch)
    rec.test_the_recurrence_on_the_gpu(warps, 2, True, torch)
for bm in (16, 32):
    small.test_the_sub_chunk_loop_on_the_gpu(bm, torch)
torch.cuda.synchronize()
"""


# mma.sync rings on Hopper (one warp, two, and 16 rows on 4 warps): descriptor loads TMA fills (ldmatrix reads
# a slot that TMA refills an iteration later), and fp8 tiles whose fragments are upcast
HOPPER_MMA_RINGS = """
import torch
import test_codegen_fp8_mma_rings as fp8
import test_codegen_mma_tma_rings as tma
for config in tma.CONFIGS:
    tma.run_on_gpu(config, torch)
for config in tma.TF32_CONFIGS:
    tma.run_on_gpu(config, torch, "float32")
for config in fp8.CONFIGS:
    fp8.run_on_gpu(config, torch)
torch.cuda.synchronize()
"""

# a batched dot's rings of batched tiles (mma.sync, 1 to 4 warps; fp16, bf16, tf32, int8, fp8; B as stored and
# transposed; a masked K tail), then bench's batched kernel over many programs at a config of each kind
BATCHED_RINGS = """
import torch
import test_codegen_batched_rings as rings
from test_attention_backward import kernels
for config in rings.GPU_CONFIGS:
    rings.test_batched_rings_on_the_gpu(*config)
z, m, n, k = 64, 64, 64, 256
a, b = torch.randint(-2, 3, (z, m, k), device="cuda").half(), torch.randint(-2, 3, (z, k, n), device="cuda").half()
for bt, bm, bn, bk in ((8, 16, 32, 32), (2, 64, 64, 32), (1, 64, 64, 32)):
    c = torch.zeros(z, m, n, device="cuda", dtype=torch.half)
    kernels.batched_dot_kernel[(z // bt, m // bm, n // bn)](a, b, c, m, n, k, BT=bt, BM=bm, BN=bn, BK=bk, num_warps=4,
                                                            num_stages=3)
    assert torch.equal(c, torch.bmm(a, b))
torch.cuda.synchronize()
"""

# an 8-bit and a 32-bit B stored N-major (`x @ W`), which wgmma reads K-major: each iteration's tile copied from its
# N-major ring into a staged K-major one by warps (lower/tile_transpose), or read from it as the transposed product's
# A; the pointer kernel, for fp8 the host-descriptor one, for tf32 an unmasked one; small integers, exact throughout
N_MAJOR_B = """
import torch
from kiln.tools.tensor_descriptor import TensorDescriptor
from test_attention_backward import kernels
M, N, K = 256, 512, 384
for dtype, out_dtype, configs in ((torch.float8_e4m3fn, torch.float16, ((128, 128, 128, 4, 3), (128, 256, 64, 8, 3))),
                                  (torch.float32, torch.float32, ((128, 128, 32, 4, 3), (128, 256, 32, 8, 3)))):
    a, b = torch.randint(-2, 3, (M, K), device="cuda"), torch.randint(-2, 3, (K, N), device="cuda")
    want = a.float() @ b.float()  # small integers: exact in fp32, fp16, tf32
    a, b = a.to(dtype), b.to(dtype)
    for bm, bn, bk, warps, stages in configs:
        meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
        grid = (M // bm * (N // bn),)
        c = torch.zeros(M, N, device="cuda", dtype=out_dtype)
        kernels.matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), **meta)
        assert torch.equal(c.float(), want)
        if dtype == torch.float8_e4m3fn:
            c.zero_()
            descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
                     TensorDescriptor.from_tensor(c, [bm, bn]))
            kernels.matmul_descriptor_kernel[grid](*descs, M, N, K, **meta)
            assert torch.equal(c.float(), want)
# a tf32 B whose loads have no masks (no TMA box): staged by 16-byte copies for the transposed product
from test_codegen_gpu_stage import _fp32_matmul
for bm, bn, warps in ((128, 128, 4), (64, 256, 8)):
    a, b = torch.randint(-2, 3, (bm, K), device="cuda").float(), torch.randint(-2, 3, (K, bn), device="cuda").float()
    c = torch.zeros(bm, bn, device="cuda")
    _fp32_matmul[(1,)](a, b, c, K, bn, 1, BM=bm, BN=bn, BK=32, PRECISION="tf32", num_warps=warps, num_stages=3)
    assert torch.equal(c, a @ b)
torch.cuda.synchronize()
"""


def racecheck(script: str, tmp_path, **env_vars) -> str:
    path = tmp_path / "kernels_under_racecheck.py"  # a file: kiln reads a kernel's source from it
    path.write_text(script)
    env = dict(os.environ, KILN_INTERPRET="0", KILN_DAEMON="off", KILN_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]), **env_vars)
    run = subprocess.run([SANITIZER, "--tool", "racecheck", "--racecheck-report", "all", "--print-limit", "5",
                          sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    return out


def hazards(out: str) -> tuple[int, int]:
    found = re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", out)
    assert found, out[-4000:]
    return int(found.group(1)), int(found.group(2))


def test_pipelined_matmul_has_no_shared_memory_hazard(tmp_path):
    out = racecheck(MATMUL, tmp_path, KILN_SPLIT_K="0")  # the kernel as written, one CTA a tile
    assert hazards(out) == (0, 0), out[-4000:]


@pytest.mark.parametrize("split", ["0", "1"])
def test_a_k_loop_run_in_half_steps_has_no_shared_memory_hazard(split, tmp_path):
    out = racecheck(HALVED, tmp_path, KILN_SPLIT_K=split)
    assert hazards(out) == (0, 0), out[-4000:]


def test_split_k_matmul_has_no_shared_memory_hazard(tmp_path):
    out = racecheck(SPLIT_K, tmp_path)  # clusters of 4 and 2 CTAs, partials summed through their shared memory
    assert hazards(out) == (0, 0), out[-4000:]


def test_warp_specialized_matmul_has_no_shared_memory_hazard(tmp_path):
    out = racecheck(WARP_SPECIALIZED, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_loops_one_after_the_other_have_no_shared_memory_hazard(tmp_path):
    out = racecheck(TWO_LOOPS, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_reductions_and_conversions_without_barriers_between_have_no_shared_memory_hazard(tmp_path):
    out = racecheck(REDUCTIONS, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_rings_released_through_mbarriers_have_no_shared_memory_hazard(tmp_path):
    out = racecheck(RELEASED_RINGS, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_loops_that_store_and_small_dot_rings_have_no_shared_memory_hazard(tmp_path):
    out = racecheck(STORING_LOOPS, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_mma_sync_rings_on_hopper_have_no_shared_memory_hazard(tmp_path):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("Hopper's rings (TMA, fp8 fragments upcast)")
    out = racecheck(HOPPER_MMA_RINGS, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_batched_rings_have_no_shared_memory_hazard(tmp_path):
    out = racecheck(BATCHED_RINGS, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_n_major_b_copied_k_major_by_warps_has_no_shared_memory_hazard(tmp_path):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("wgmma's staged operands")
    out = racecheck(N_MAJOR_B, tmp_path, KILN_SPLIT_K="0")
    assert hazards(out) == (0, 0), out[-4000:]


def test_fp8_attention_has_no_shared_memory_hazard(tmp_path):
    out = racecheck(FP8_ATTENTION, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_standalone_fp8_dots_have_no_shared_memory_hazard(tmp_path):
    out = racecheck(STANDALONE_FP8, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_a_dot_chained_to_a_wgmma_loop_has_no_shared_memory_hazard(tmp_path):
    out = racecheck(CHAINED, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


def test_dot_operands_stored_once_and_shuffled_conversions_have_no_shared_memory_hazard(tmp_path):
    out = racecheck(SHARED_TILES, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]


@pytest.mark.parametrize("dim,narrow,wide,warps,stages", [(64, 32, 128, 4, 3), (128, 32, 64, 4, 2),
                                                          (64, 64, 128, 8, 2)])
def test_causal_attention_has_no_shared_memory_hazard(dim, narrow, wide, warps, stages, tmp_path):
    script = ATTENTION.format(dim=dim, narrow=narrow, wide=wide, warps=warps, stages=stages)
    out = racecheck(script, tmp_path)
    assert hazards(out) == (0, 0), out[-4000:]
