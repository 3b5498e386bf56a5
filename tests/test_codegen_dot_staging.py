"""The dot_staging pass decides what runs each dot and where its operands are staged; lowering takes
its plan as it is: the shared memory a compile reports is the plan's, and a dot the pass did not
give buffers of its own (they would not fit, or they would cost a CTA per SM) compiles within the
CTA's shared memory and computes what it computes with them."""
import pathlib

import numpy as np
import pytest

import kiln
import kiln.language as tl

from kiln.codegen import compile as compile_ir
from kiln.codegen.analysis.dots import staging_end
from kiln.codegen.analysis.scratch_use import scratch_extent
from kiln.codegen.lower import LoweringError, lower_function
from kiln.codegen.occupancy import ctas_by_shared, ctas_per_sm, max_shared_per_cta
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

from test_codegen_emulate import in_child

TESTS = pathlib.Path(__file__).parent
CORPUS = TESTS / "codegen_corpus"


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_shared_memory_lowering_takes_is_the_staging_plan_and_the_scratch_extent(target):
    staged = 0
    for path in sorted(CORPUS.glob("*.kir")):
        for warps in (4, 8):
            fn = parse_function(path.read_text())
            ctx = PassContext(parse_target(target), warps, 3)
            run_passes(fn, ctx)
            _, _, shared = lower_function(fn, ctx)
            if staging_end(fn):
                staged += 1
                assert shared == staging_end(fn) + scratch_extent(fn), path.name
    assert staged  # the corpus has dots in loops that stage in buffers of their own


@kiln.jit
def negated_matmul(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = (-a) @ b over k-steps: operands computed in registers, so each k-step stages them."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = -tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = -tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def sm80_negated_matmul(bm, bn, bk):
    """Compiled for sm_80 (mma.sync), PTX only; `.kir` is its IR after the passes."""
    x = np.zeros((64, 64), np.float16)
    built = negated_matmul.warmup(x, x, np.zeros((64, 64), np.float32), 4096, BM=bm, BN=bn, BK=bk,
                                  num_warps=8, grid=(1,), target="sm_80")
    return compile_ir(parse_function(built.asm["kir"]), "sm_80", {"num_warps": 8, "num_stages": 3}, link=False)


def test_a_dot_whose_buffers_would_not_fit_stages_in_the_scratch_area_within_the_limit():
    kernel = sm80_negated_matmul(128, 256, 128)  # stages 128x(128+8) A and 128x(256+8) B: 102400 bytes
    assert "mma.sync.aligned.m16n8k16" in kernel.ptx
    assert 'engine = "mma"' in kernel.kir and "staging = [" not in kernel.kir
    assert kernel.metadata["lowerings"] == 1
    assert 2 * 102400 > max_shared_per_cta(80) >= kernel.metadata["shared"] >= 102400


def test_lowering_refuses_a_dot_no_pass_gave_an_engine():
    fn = parse_function(sm80_negated_matmul(128, 256, 128).kir)
    for op in fn.walk():
        if op.name == "dot":
            del op.attrs["engine"]
    with pytest.raises(LoweringError, match="dot without an engine"):
        lower_function(fn, PassContext(parse_target("sm_80"), 8, 3))


@kiln.jit
def four_dot_loop(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = sum over k-steps of four products of operands computed in registers (the shape of fla's
    chunked linear-attention kernels: several small dots an iteration, on few warps), no two reading one
    value (shared_dot_operands stores such a value once for its dots)."""
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc0 = tl.zeros((BM, BN), tl.float32)
    acc1 = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc0 = tl.dot(-a, b + 1, acc0)
        acc1 = tl.dot(a * 2, b * 2, acc1)
        acc0 = tl.dot(a * 3, b * 3, acc0)
        acc1 = tl.dot(a + 1, -b, acc1)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc0 + acc1 * 0.5)


def _four_dot_ir(warps, bm=32, bn=32, bk=64):
    x = np.zeros((64, 64), np.float16)
    return four_dot_loop.warmup(x, x, np.zeros((64, 64), np.float32), 256, BM=bm, BN=bn, BK=bk,
                                num_warps=warps, grid=(1,), target="sm_90a").asm["kir"]


def _ctas(kernel):
    md = kernel.metadata
    return ctas_per_sm(md["n_regs"], md["threads"], md["shared"], 90)


def test_dot_buffers_that_cost_a_cta_per_sm_give_way_to_the_scratch_area():
    """Two warps, four 32x32x64 dots in the loop: their buffers, 4 x 2 x 9728 bytes, would hold the SM to
    two CTAs; without them the registers decide (fla's kkt solve on 2 warps: 109,824 bytes against Triton's 7,168)."""
    kir = _four_dot_ir(2)
    # one stage: the loads stay in the loop and every dot stages registers (with two, a and b would come
    # through rings, the negations and products reading them back from the tiles)
    planned = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 2, "num_stages": 1}, link=False)
    assert planned.kir.count("staging = [") == 4 and "dot_staging = 77824" in planned.kir
    built = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 2, "num_stages": 1})
    assert "dot_staging = 0" in built.kir and "staging = [" not in built.kir
    assert built.kir.count('engine = "mma"') == 4 and built.metadata["lowerings"] == 2
    assert built.metadata["shared"] < 20000 and _ctas(built) > ctas_by_shared(planned.metadata["shared"], 90)


def test_a_staged_build_that_cannot_hold_as_many_threads_is_never_linked():
    """Its shared memory alone holds two CTAs of 64 threads an SM; the build without the buffers holds more at
    any register count: that one is built first and is the kernel, the staged one lowered and never linked
    (kiln.codegen.compiler._staging_dropped_first; a 1-warp fp8 matmul of triton_kernels built 25 s, 12 s since)."""
    kir = _four_dot_ir(2)
    built = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 2, "num_stages": 1})
    plain = parse_function(kir)
    plain.attrs["dot_staging"] = 0
    alone = compile_ir(plain, "sm_90a", {"num_warps": 2, "num_stages": 1})
    assert built.ptx == alone.ptx and built.metadata["links"] == alone.metadata["links"]
    assert built.metadata["lowerings"] == alone.metadata["lowerings"] + 1


def test_at_4_warps_a_plain_build_that_spills_nothing_is_taken_before_the_staged_one():
    """Four 64x64x64 dots on 4 warps: their buffers take 164,864 bytes (one CTA an SM), the plain build two at
    any register count. A staged build that spilled would be built again on 8 warps before the comparison
    (`_widened`), so the plain one is taken ahead only where it spills nothing: here, and the staged build is
    lowered, never linked (triton_kernels' persistent 16x256 matmuls on 4 warps: 1 s -> 0.5 s each)."""
    kir = _four_dot_ir(4, 64, 64, 64)
    built = compile_ir(parse_function(kir), "sm_90a", {"num_warps": 4, "num_stages": 1})
    plain = parse_function(kir)
    plain.attrs["dot_staging"] = 0
    alone = compile_ir(plain, "sm_90a", {"num_warps": 4, "num_stages": 1})
    assert alone.n_spills == 0 and built.ptx == alone.ptx
    assert built.metadata["links"] == alone.metadata["links"] and built.metadata["lowerings"] == alone.metadata["lowerings"] + 1


def test_at_4_warps_a_plain_build_that_spills_waits_for_the_staged_one(monkeypatch):
    """The same kernel, its plain build made to report spills: the staged build is linked after all (it might
    have widened), then the comparison keeps the plain one, which holds more threads."""
    from kiln.codegen import compiler
    real = compiler._compile

    def plain_spills(fn, target, options, check, link, counts, may_widen=True):
        built = real(fn, target, options, check, link, counts, may_widen)
        if fn.attrs.get("dot_staging") == 0:
            built.metadata.update(n_spills=64)
        return built
    links = []
    assemble = compiler._assemble
    monkeypatch.setattr(compiler, "_compile", plain_spills)
    monkeypatch.setattr(compiler, "_assemble", lambda *a: links.append(1) or assemble(*a))
    built = compile_ir(parse_function(_four_dot_ir(4, 64, 64, 64)), "sm_90a", {"num_warps": 4, "num_stages": 1})
    assert "dot_staging = 0" in built.kir and len(links) == 2  # the plain build's link, then the staged one's


def test_a_build_without_the_buffers_widened_to_8_warps_counts_its_threads(monkeypatch):
    """The build without the dots' buffers may come back widened to 8 warps (it spilled on 4: fla's
    chunk_fwd_mesa_cg_dim64_kernel at one stage). One CTA of 256 threads holds more of the SM than two
    staged CTAs of 64 threads: it is the one kept, though it is one CTA an SM against two."""
    from kiln.codegen import compiler
    real = compiler._compile

    def plain_comes_widened(fn, target, options, check, link, counts, may_widen=True):
        built = real(fn, target, options, check, link, counts, may_widen)
        if fn.attrs.get("dot_staging") == 0:  # stands in for _widened's 8-warp build: 200 registers, no spills
            built.metadata.update(n_regs=200, threads=256, n_spills=0)
        return built
    monkeypatch.setattr(compiler, "_compile", plain_comes_widened)
    built = compile_ir(parse_function(_four_dot_ir(2)), "sm_90a", {"num_warps": 2, "num_stages": 1})
    assert built.metadata["threads"] == 256 and _ctas(built) == 1
    assert "dot_staging = 0" in built.kir


def test_dot_buffers_that_cost_no_cta_stay():
    """Eight warps, four 64x64x32 dots: 256 threads of ~128 registers hold the SM to two CTAs, as
    the buffers (4 x 2 x 9728 bytes) do: they stay, and the kernel is built once."""
    built = compile_ir(parse_function(_four_dot_ir(8, 64, 64, 32)), "sm_90a", {"num_warps": 8, "num_stages": 1})
    assert built.kir.count("staging = [") == 4 and "dot_staging = 77824" in built.kir
    assert built.metadata["lowerings"] == 1
    assert _ctas(built) == ctas_by_shared(built.metadata["shared"], 90)


def _emulated_four_dots(kir, with_buffers):
    from kiln.codegen.emulate import run_on_cpu
    fn = parse_function(kir)
    if not with_buffers:
        fn.attrs["dot_staging"] = 0
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (32, 256)).astype(np.float16)
    b = rng.integers(-3, 4, (256, 32)).astype(np.float16)
    c = np.zeros((32, 32), np.float32)
    run_on_cpu(fn, (1,), [a, b, c, 256], num_warps=2)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (-a64 @ (b64 + 1) + (3 * a64) @ (3 * b64)) + 0.5 * ((2 * a64) @ (2 * b64) - (a64 + 1) @ b64)
    return float(np.abs(c - want).max())


@pytest.mark.parametrize("with_buffers", [True, False])
def test_dots_staging_in_the_scratch_area_compute_what_their_buffers_do(with_buffers):
    """On the CPU emulator, both ways exact (small integers): the scratch area's barriers keep each
    dot's operands until every warp read them."""
    assert in_child(_emulated_four_dots, _four_dot_ir(2), with_buffers) == 0.0
