"""kiln.codegen.passes.coarsen on a CPU: which loops take 64 / B steps as one (attention backward's
dK/dV and dQ loops) and which are left as written, the IR and PTX of the coarse loop, the CPU
emulator's results of coarsened loops against the same loops as written (`coarsen = 0`), and the
compile's fallback to the loops as written where a coarse build spills."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir, compiler
from kiln.codegen.compiler import _options, lower_to_llvm
from kiln.codegen.target import parse_target
from kiln.ir import copy_function, parse_function

from bench_support import bench_kernels
from test_codegen_emulate import in_child
from test_codegen_gpu_stage import _attention  # a forward: a row maximum over the walking keys


@kiln.jit
def _dkdv(Q, K, V, DO, DK, DV, M, Delta, start_m, num_steps, stride, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, D: tl.constexpr, MASK: tl.constexpr):
    """Tutorial 06's dK/dV loop, written as it writes it: pointer blocks and a row counter the loop
    carries, advanced BLOCK_M rows a step; keys start_n .. start_n + BLOCK_N of one head."""
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    k = tl.load(K + offs_n[:, None] * stride + offs_d[None, :])
    v = tl.load(V + offs_n[:, None] * stride + offs_d[None, :])
    offs_m = start_m + tl.arange(0, BLOCK_M)
    qT_ptrs = Q + offs_m[None, :] * stride + offs_d[:, None]
    do_ptrs = DO + offs_m[:, None] * stride + offs_d[None, :]
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    curr_m = start_m
    for _ in range(num_steps):
        qT = tl.load(qT_ptrs)
        offs = curr_m + tl.arange(0, BLOCK_M)
        m = tl.load(M + offs)
        pT = tl.math.exp2(tl.dot(k, qT) - m[None, :])
        if MASK:
            pT = tl.where(offs[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(do_ptrs)
        dv += tl.dot(pT.to(tl.float16), do)
        di = tl.load(Delta + offs)
        dsT = pT * (tl.dot(v, tl.trans(do)) - di[None, :])
        dk += tl.dot(dsT.to(tl.float16), tl.trans(qT))
        curr_m += BLOCK_M
        qT_ptrs += BLOCK_M * stride
        do_ptrs += BLOCK_M * stride
    tl.store(DK + offs_n[:, None] * stride + offs_d[None, :], dk)
    tl.store(DV + offs_n[:, None] * stride + offs_d[None, :], dv)


@kiln.jit
def _dq(Q, K, V, DO, DQ, M, Delta, lo, hi, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        D: tl.constexpr, DIAGONAL: tl.constexpr):
    """bench's dQ loop: addresses from the induction variable, a diagonal mask."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * stride + offs_d[None, :])
    do = tl.load(DO + offs_m[:, None] * stride + offs_d[None, :])
    m = tl.load(M + offs_m)
    delta = tl.load(Delta + offs_m)
    offs_n = tl.arange(0, BLOCK_N)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = (start_n + offs_n)[None, :] * stride + offs_d[:, None]
        kT = tl.load(K + cols)
        p = tl.math.exp2(tl.dot(q, kT) - m[:, None])
        if DIAGONAL:
            p = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], p, 0.0)
        vT = tl.load(V + cols)
        ds = p * (tl.dot(do, vT) - delta[:, None])
        dq = tl.dot(ds.to(tl.float16), tl.trans(kT), dq)
    tl.store(DQ + offs_m[:, None] * stride + offs_d[None, :], dq)


@kiln.jit
def _gemm(A, B, C, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """A GEMM's K loop: its one dot sums over the walking dim."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(B + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)


HALF, F32 = np.zeros((16, 16), np.float16), np.zeros(16, np.float32)


def _dkdv_kernel(num_steps=7, block_m=16, d=32, mask=False, start_m=0, block_n=64):
    return _dkdv.warmup(HALF, HALF, HALF, HALF, F32, F32, F32, F32, start_m, num_steps, d, BLOCK_M=block_m,
                        BLOCK_N=block_n, D=d, MASK=mask, grid=(1,), target="sm_90a")


def _dq_kernel(lo=0, hi=112, diagonal=False, d=32):
    return _dq.warmup(HALF, HALF, HALF, HALF, F32, F32, F32, lo, hi, d, BLOCK_M=64, BLOCK_N=16, D=d,
                      DIAGONAL=diagonal, grid=(1,), target="sm_90a")


def _passed(fn, num_warps=4, portable=False) -> str:
    """The kernel's IR after the passes (the text lowering took), for sm_90a."""
    text, _, _, _ = lower_to_llvm(copy_function(fn), parse_target("sm_90a"), _options({"num_warps": num_warps}),
                                  portable=portable)
    return text


def _loops(text: str) -> list[str]:
    """Each top-level `for` line of an IR text."""
    return [line for line in text.splitlines() if re.match(r"\s*%[\d, %]+ = for ", line)]


def _written(fn):
    plain = copy_function(fn)
    plain.attrs["coarsen"] = 0
    return plain


def test_the_dkdv_loop_takes_two_steps_of_32_as_one_then_the_rest_as_written():
    from kiln.codegen import pipeline
    from kiln.codegen.passes import coarsen
    k = bench_kernels().attention_bwd_dkdv_kernel.warmup(
        HALF, HALF, HALF, HALF, HALF, HALF, F32, F32, 0.125, 4096, HEAD_DIM=128, BLOCK_M=32, BLOCK_N=128,
        CAUSAL=False, num_warps=4, num_stages=3, grid=(1,), target="sm_90a")
    fn = parse_function(k.asm["kir"])
    ctx = pipeline.PassContext(target=parse_target("sm_90a"), num_warps=4)
    pipeline.run_passes(fn, ctx, check=True, stop=pipeline.PASSES.index(coarsen) + 1)
    text = str(fn)
    assert "coarsen = 1" in text
    coarse, rest = _loops(text)
    step = re.search(r"= for %\d+, %\d+, (%\d+)", coarse).group(1)
    assert re.search(rf"{step} = constant {{value = 64}} : int32", text)  # 2 steps of 32 a step
    assert "<128x128xfp32>" in coarse and "<128x128xptr" not in coarse  # addresses from the iv, not carried
    dots = re.findall(r"dot %\S+, %\S+, %\S+ \{[^}]*\} : <(\d+x\d+)xfp32>", text)
    assert dots.count("128x64") == 2  # S^T and dP^T 64 wide in the coarse loop
    assert dots.count("128x128") == 4  # dK and dV in both loops
    assert dots.count("128x32") == 2  # S^T and dP^T of the steps left, as written
    assert re.search(r"max %\d+, %\d+ : int32", text)  # the trip count, at least 0: pointer_tma's proof


def test_loops_are_coarsened_where_their_blocks_fit_the_warps_the_kernel_runs_on():
    """Counted in fp32 elements a thread holds in accumulators and N-walking dot results: at D64 the dK/dV
    loop holds 192 written and 256 coarse on 4 warps (left as written), dQ's 192 coarse; at D128 the dK/dV
    loop as written holds more than 192 on 4 warps, so the kernel will run on 8, where the coarse loop fits."""
    bench = bench_kernels()

    def coarsened(kernel, dim, block_m, block_n):
        k = kernel.warmup(*[HALF] * (6 if kernel is bench.attention_bwd_dkdv_kernel else 5), F32, F32, 0.125, 4096,
                          HEAD_DIM=dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=False, num_warps=4, num_stages=3,
                          grid=(1,), target="sm_90a")
        return "coarsen = 1" in _passed(k.ir)
    assert not coarsened(bench.attention_bwd_dkdv_kernel, 64, 32, 128)
    assert coarsened(bench.attention_bwd_dq_kernel, 64, 128, 32)
    assert coarsened(bench.attention_bwd_dkdv_kernel, 128, 32, 128)
    assert not coarsened(bench.attention_bwd_dq_kernel, 128, 128, 32)  # (alone: 192 written on 4 warps, 256 coarse)
    assert "coarsen = 1" in _passed(_dkdv_kernel(d=128, block_n=128).ir)
    assert "coarsen = 1" not in _passed(_dkdv_kernel(d=64, block_n=128).ir)


@pytest.mark.parametrize("dim", [64, 128])
def test_the_coarse_loop_s_wgmmas_are_64_wide_beside_the_remainder_s_32(dim):
    k = bench_kernels().attention_bwd_dq_kernel.warmup(
        HALF, HALF, HALF, HALF, HALF, F32, F32, 0.125, 4096, HEAD_DIM=dim, BLOCK_M=128, BLOCK_N=32, CAUSAL=False,
        num_warps=8, num_stages=3, grid=(1,), target="sm_90a")
    ptx = compile_ir(k.ir, "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False).ptx
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx))
    assert {"m64n64k16", "m64n32k16", f"m64n{dim}k16"} <= shapes


def test_a_block_of_64_a_forward_s_loop_and_a_gemm_s_k_loop_are_left_as_written():
    wide = _dkdv_kernel(block_m=64)
    forward = _attention.warmup(HALF, HALF, HALF, F32, 256, D=32, BM=64, BN=32, grid=(1,), target="sm_90a")
    gemm = _gemm.warmup(HALF, HALF, F32, 256, BM=64, BN=64, BK=32, grid=(1,), target="sm_90a")
    for kernel in (wide, forward, gemm):
        text = _passed(kernel.ir)
        assert "coarsen = " not in text and len(_loops(text)) == 1


def test_only_sm_90a_at_whole_warpgroups_is_coarsened():
    fn = _dkdv_kernel().ir
    assert "coarsen = 1" in _passed(fn)
    assert "coarsen = 1" in _passed(fn, portable=True)  # the emulator runs what sm_90a builds
    assert "coarsen = " not in _passed(fn, num_warps=2)
    text, _, _, _ = lower_to_llvm(copy_function(fn), parse_target("sm_80"), _options({"num_warps": 4}))
    assert "coarsen = " not in text


def _inputs(rows, d, seed=3):
    rng = np.random.default_rng(seed)
    q, k, v, do = ((rng.standard_normal((rows, d)) * 0.3).astype(np.float16) for _ in range(4))  # scores near 0
    m = rng.uniform(1, 2, rows).astype(np.float32)
    delta = rng.uniform(-0.5, 0.5, rows).astype(np.float32)
    return q, k, v, do, m, delta


def run_dkdv(coarsened, num_steps, block_m, d, mask, start_m=0):
    from kiln.codegen.emulate import run_on_cpu
    kernel = _dkdv_kernel(num_steps, block_m, d, mask, start_m)
    fn = kernel.ir if coarsened else _written(kernel.ir)
    rows = max(64, start_m + num_steps * block_m)
    q, k, v, do, m, delta = _inputs(rows, d)
    dk, dv = np.full((64, d), np.nan, np.float32), np.full((64, d), np.nan, np.float32)
    run_on_cpu(fn, (1,), [q, k, v, do, dk, dv, m, delta, start_m, num_steps, d], num_warps=4)
    return dk, dv, (q, k, v, do, m, delta)


def _dkdv_reference(inputs, start_m, num_steps, block_m, mask):
    q, k, v, do, m, delta = (x.astype(np.float32) for x in inputs)
    rows = slice(start_m, start_m + num_steps * block_m)
    pT = np.exp2(k[:64] @ q[rows].T - m[None, rows])
    if mask:
        pT = np.where(np.arange(rows.start, rows.stop)[None, :] >= np.arange(64)[:, None], pT, 0.0)
    dsT = pT * (v[:64] @ do[rows].T - delta[None, rows])
    return dsT @ q[rows], pT @ do[rows]


@pytest.mark.parametrize("mask", [False, True], ids=["full", "diagonal"])
def test_coarsened_dkdv_computes_what_the_loop_as_written_does(mask):
    """7 steps of 16: one coarse step of 4, then three as written."""
    dk, dv, inputs = in_child(run_dkdv, True, 7, 16, 32, mask)
    dk0, dv0, _ = in_child(run_dkdv, False, 7, 16, 32, mask)
    np.testing.assert_allclose(dk, dk0, rtol=1e-3, atol=2e-3)  # the fp32 sums regrouped
    np.testing.assert_allclose(dv, dv0, rtol=1e-3, atol=2e-3)
    want_dk, want_dv = _dkdv_reference(inputs, 0, 7, 16, mask)
    np.testing.assert_allclose(dk, want_dk, rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(dv, want_dv, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("num_steps, block_m, d, start_m", [(5, 32, 32, 0), (8, 16, 32, 16), (3, 16, 32, 0),
                                                              (0, 32, 32, 0), (6, 16, 16, 32)])
def test_carried_pointer_blocks_and_counters_resume_where_the_coarse_loop_stopped(num_steps, block_m, d, start_m):
    """Trip counts with and without steps left over, none at all, a start row past 0, and a head as
    wide as a step (d = 16 = B: one arange for both dims until the pass builds them apart)."""
    dk, dv, inputs = in_child(run_dkdv, True, num_steps, block_m, d, False, start_m)
    want_dk, want_dv = _dkdv_reference(inputs, start_m, num_steps, block_m, False)
    np.testing.assert_allclose(dk, want_dk, rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(dv, want_dv, rtol=2e-2, atol=5e-2)


def run_dq(coarsened, lo, hi, diagonal):
    from kiln.codegen.emulate import run_on_cpu
    kernel = _dq_kernel(lo, hi, diagonal)
    fn = kernel.ir if coarsened else _written(kernel.ir)
    q, k, v, do, m, delta = _inputs(max(64, hi), 32, seed=5)
    dq = np.full((64, 32), np.nan, np.float32)
    run_on_cpu(fn, (1,), [q, k, v, do, dq, m, delta, lo, hi, 32], num_warps=4)
    return dq, (q, k, v, do, m, delta)


@pytest.mark.parametrize("lo, hi, diagonal", [(0, 112, False), (16, 96, True), (96, 16, False)])  # (no step)
def test_coarsened_dq_computes_what_the_loop_as_written_does(lo, hi, diagonal):
    assert "coarsen = 1" in _passed(_dq_kernel(lo, hi, diagonal).ir)
    dq, inputs = in_child(run_dq, True, lo, hi, diagonal)
    dq0, _ = in_child(run_dq, False, lo, hi, diagonal)
    np.testing.assert_allclose(dq, dq0, rtol=1e-3, atol=2e-3)
    q, k, v, do, m, delta = (x.astype(np.float32) for x in inputs)
    p = np.exp2(q[:64] @ k[lo:hi].T - m[:64, None])
    if diagonal:
        p = np.where(np.arange(64)[:, None] >= np.arange(lo, hi)[None, :], p, 0.0)
    ds = p * (do[:64] @ v[lo:hi].T - delta[:64, None])
    np.testing.assert_allclose(dq, ds @ k[lo:hi], rtol=2e-2, atol=5e-2)


def _spilling(monkeypatch, spills) -> list:
    """Links of each build report `spills(coarsened, num_warps)` bytes of spills (None: what they spilled); the
    (coarsened, num_warps) of every lowering, in order."""
    real_lower, real_assemble, lowered = compiler.lower_to_llvm, compiler._assemble, []

    def lower(fn, tgt, opts, *args, **kwargs):
        out = real_lower(fn, tgt, opts, *args, **kwargs)
        lowered.append(("coarsen = 1" in out[0], opts["num_warps"]))
        return out

    def assemble(ptx, tgt, counts):
        cubin, info = real_assemble(ptx, tgt, counts)
        spilled = spills(*lowered[-1])
        if spilled is not None:
            info = re.sub(r"\d+ bytes spill stores, \d+ bytes spill loads",
                          f"{spilled // 2} bytes spill stores, {spilled - spilled // 2} bytes spill loads", info)
        return cubin, info
    monkeypatch.setattr(compiler, "lower_to_llvm", lower)
    monkeypatch.setattr(compiler, "_assemble", assemble)
    return lowered


def test_a_coarse_build_that_spills_gives_way_to_the_loops_as_written(monkeypatch):
    fn = _dkdv_kernel().ir
    lowered = _spilling(monkeypatch, lambda coarse, warps: 1200 if coarse else None)
    built = compile_ir(fn, "sm_90a", {"num_warps": 8, "num_stages": 3})
    assert lowered[0] == (True, 8) and lowered[-1] == (False, 8)
    assert built.metadata["n_spills"] == 0 and "coarsen = 0" in built.kir
    monkeypatch.undo()
    plain = compile_ir(fn, "sm_90a", {"num_warps": 8, "num_stages": 3})
    assert plain.metadata["n_spills"] == 0 and "coarsen = 1" in plain.kir


def test_a_loop_too_big_for_four_warps_is_built_on_eight_at_once():
    """The loops as written hold more than 4 warps can (two 128x128 fp32 accumulators): the compile goes
    straight to the 8-warp build it would have widened to, not through a 4-warp one that spills."""
    fn = _dkdv_kernel(d=128, block_n=128).ir
    built = compile_ir(fn, "sm_90a", {"num_warps": 4, "num_stages": 3})
    meta = built.metadata
    assert meta["num_warps"] == 4 and meta["threads"] == 256 and meta["n_spills"] == 0
    assert meta["pass_runs"] == 2 and meta["lowerings"] == 1 and "coarsen = 1" in built.kir
    assert built.ptx == compile_ir(fn, "sm_90a", {"num_warps": 8, "num_stages": 3}).ptx


def test_a_build_on_eight_warps_that_spills_gives_way_to_the_warps_asked(monkeypatch):
    fn = _dkdv_kernel(d=128, block_n=128).ir
    lowered = _spilling(monkeypatch, lambda coarse, warps: 1200 if warps == 8 else None)
    built = compile_ir(fn, "sm_90a", {"num_warps": 4, "num_stages": 3})
    # the 8-warp build and its loops as written spill, so the 4-warp one is built (and, spilling, its loops as
    # written, widened again)
    assert lowered[:3] == [(True, 8), (False, 8), (True, 4)] and (False, 4) in lowered
    assert built.metadata["threads"] == 128


@pytest.mark.gpu
@pytest.mark.parametrize("block_m, num_steps, d, mask, warps", [(32, 13, 32, False, 4), (16, 8, 128, True, 8),
                                                               (32, 5, 128, False, 4)])
def test_coarsened_dkdv_on_the_gpu(block_m, num_steps, d, mask, warps, cuda_torch):
    """Tutorial 06's dK/dV loop at its own step sizes (32 a step, 16 on the diagonal), 128 keys a program,
    against torch: coarse steps, then the steps left."""
    torch = cuda_torch
    keys, rows = 256, max(256, num_steps * block_m)
    q, do = (torch.randn(rows, d, device="cuda", dtype=torch.float16) * 0.3 for _ in range(2))
    k, v = (torch.randn(keys, d, device="cuda", dtype=torch.float16) * 0.3 for _ in range(2))
    m = torch.rand(rows, device="cuda") + 1
    delta = torch.rand(rows, device="cuda") - 0.5
    dk, dv = (torch.full((keys, d), float("nan"), device="cuda") for _ in range(2))
    options = {"num_warps": warps, "num_stages": 3}
    kernel = _dkdv[(keys // 128,)](q, k, v, do, dk, dv, m, delta, 0, num_steps, d, BLOCK_M=block_m, BLOCK_N=128, D=d,
                                   MASK=mask, **options)
    assert "coarsen = 1" in compile_ir(kernel.ir, "sm_90a", options, link=False).kir  # (kernel.asm: the IR as written)
    span = num_steps * block_m
    qf, kf, vf, dof = (x.float() for x in (q[:span], k, v, do[:span]))
    pT = torch.exp2(kf @ qf.T - m[None, :span])
    if mask:
        seen = torch.arange(span, device="cuda")[None, :] >= torch.arange(keys, device="cuda")[:, None]
        pT = torch.where(seen, pT, 0)
    dsT = pT * (vf @ dof.T - delta[None, :span])
    torch.testing.assert_close(dk, dsT @ qf, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(dv, pT @ dof, rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("lo, hi, diagonal", [(0, 4096 - 32 * 3, False), (64, 448, True)])
def test_coarsened_dq_on_the_gpu(lo, hi, diagonal, cuda_torch):
    torch = cuda_torch
    rows, d = 4096, 64
    q, k, v, do = (torch.randn(rows, d, device="cuda", dtype=torch.float16) * 0.3 for _ in range(4))
    m = torch.rand(rows, device="cuda") + 1
    delta = torch.rand(rows, device="cuda") - 0.5
    dq = torch.full((rows, d), float("nan"), device="cuda")
    kernel = _dq[(rows // 128,)](q, k, v, do, dq, m, delta, lo, hi, d, BLOCK_M=128, BLOCK_N=32, D=d,
                                 DIAGONAL=diagonal, num_warps=8, num_stages=3)
    assert "coarsen = 1" in compile_ir(kernel.ir, "sm_90a", {"num_warps": 8, "num_stages": 3}, link=False).kir
    qf, kf, vf, dof = (x.float() for x in (q, k[lo:hi], v[lo:hi], do))
    p = torch.exp2(qf @ kf.T - m[:, None])
    if diagonal:
        seen = torch.arange(rows, device="cuda")[:, None] >= torch.arange(lo, hi, device="cuda")[None, :]
        p = torch.where(seen, p, 0)
    ds = p * (dof @ vf.T - delta[:, None])
    torch.testing.assert_close(dq, ds @ kf, rtol=2e-2, atol=5e-2)
