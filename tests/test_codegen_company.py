"""A loop whose shared memory keeps another CTA off the SM that its registers would let on reads its
loop-invariant A operands from registers and runs a tight ring (kiln.codegen.passes.smem_plan._company):
tutorial 06's forward at D64 in 64x64 blocks on 4 warps, 3 CTAs a SM -> 4. The compile builds it
again as before (`company = 0`) where the link shows no CTA gained."""
import re

import numpy as np
import pytest

from kiln.codegen import compile as compile_ir, compiler, nvjitlink, occupancy

from bench_support import bench_forward, bench_kernels
from test_codegen_emulate import in_child
from test_codegen_gpu_stage import _attention

HALF, F32 = np.zeros((4,), np.float16), np.zeros((4,), np.float32)


def _forward(dim=64, block_m=64, block_n=64, warps=4, causal=True):
    """bench/kernels.py's attention forward (tutorial 06's, on pointers) for sm_90a."""
    k = bench_kernels().attention_fwd_kernel.warmup(
        HALF, HALF, HALF, HALF, F32, 0.125, *([dim * 1024, dim * 1024 * 32, dim, 1] * 4), 32, 1024, HEAD_DIM=dim,
        BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal, num_warps=warps, num_stages=3, grid=(1,), target="sm_90a")
    return k.ir


def _ctas(built) -> int:
    m = built.metadata
    return occupancy.ctas_per_sm(m["n_regs"], m["threads"], m["shared"], 90)


def _q_tiles(kir: str) -> list[str]:
    """The shared tiles allocated one at a time (Q's, stored once; rings have a slot dim)."""
    return re.findall(r"local_alloc [^\n]*: smem<(\d+x\d+)x[a-z]", kir)


def _without_company(fn):
    return compiler._without(fn, "company")


def test_the_d64_forward_in_64x64_blocks_reads_q_from_registers_and_fits_four_ctas():
    built = compile_ir(_forward(), "sm_90a", {"num_warps": 4, "num_stages": 3})
    assert re.search(r"company = \d+", built.kir) and not _q_tiles(built.kir)
    assert "smem<3x64x64xfp16" in built.kir  # K and V rings of 3 slots (tight: no spare)
    assert built.metadata["n_spills"] == 0 and _ctas(built) == 4
    assert built.metadata["pass_runs"] == 1 and built.metadata["links"] == 1
    plain = compile_ir(_without_company(_forward()), "sm_90a", {"num_warps": 4, "num_stages": 3})
    assert _q_tiles(plain.kir) == ["64x64"] and "smem<4x64x64xfp16" in plain.kir and _ctas(plain) == 3
    # every wgmma reads A from registers (QK^T's Q too), where as before only P V's did
    assert _register_a_wgmmas(built.ptx) == (16, 16) and _register_a_wgmmas(plain.ptx) == (16, 8)


def test_a_later_loop_reads_from_registers_what_an_earlier_one_does():
    """bench's dQ kernel at D128, 64-row blocks stepping 32 keys: its coarse loop (64 keys a step) gains a CTA
    with Q and dO in registers; its tail's own estimate gains none, and stored there they would keep the
    bytes (164864 a CTA: 1 CTA a SM). Both loops read them from registers: 99328 bytes, 2 CTAs, one build."""
    k = bench_kernels().attention_bwd_dq_kernel.warmup(
        *[HALF] * 5, F32, F32, 0.125, 4096, HEAD_DIM=128, BLOCK_M=64, BLOCK_N=32, CAUSAL=False, num_warps=4,
        num_stages=3, grid=(1,), target="sm_90a")
    built = compile_ir(k.ir, "sm_90a", {"num_warps": 4, "num_stages": 3})
    assert re.search(r"company = [1-9]", built.kir) and not _q_tiles(built.kir)
    assert built.metadata["pass_runs"] == 1 and built.metadata["n_spills"] == 0 and _ctas(built) == 2
    assert "smem<3x64x128xfp16" in built.kir and "smem<4x32x128xfp16" in built.kir  # the tail's ring keeps its spare
    wgmmas, from_registers = _register_a_wgmmas(built.ptx)
    assert wgmmas == from_registers
    plain = compile_ir(_without_company(k.ir), "sm_90a", {"num_warps": 4, "num_stages": 3})
    assert _q_tiles(plain.kir) == ["64x128", "64x128"] and _ctas(plain) == 1


def _register_a_wgmmas(ptx: str) -> tuple[int, int]:
    """(wgmmas, those whose A is a register vector `{...}` rather than a shared-memory descriptor)."""
    wgmmas = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    return len(wgmmas), sum(1 for line in wgmmas if re.search(r"\},\s*\{", line))


def test_where_registers_hold_the_ctas_anyway_q_stays_in_shared_memory():
    """128x64 blocks on 8 warps: 2 CTAs by registers either way (1-2% slower with Q in registers, H200); D128
    in 64x64 blocks: Q's 16 KB freed leave 2 CTAs by shared memory."""
    for fn, warps in ((_forward(block_m=128, warps=8), 8), (_forward(dim=128), 4)):
        kir = compile_ir(fn, "sm_90a", {"num_warps": warps, "num_stages": 3}, link=False).kir
        assert "company" not in kir
        assert len(_q_tiles(kir)) == 1  # (Q's tile, read by both of the causal forward's loops)


def test_a_build_whose_registers_keep_the_cta_off_is_built_again_as_before(monkeypatch):
    real = nvjitlink.resource_usage

    def usage(info):  # the company build's link reports registers for 3 CTAs of 4 warps only
        regs, spills = real(info)
        return (168 if regs < 168 else regs), spills
    monkeypatch.setattr(nvjitlink, "resource_usage", usage)
    fn = _forward(causal=False)
    built = compile_ir(fn, "sm_90a", {"num_warps": 4, "num_stages": 3})
    assert "company = 0" in built.kir and _q_tiles(built.kir) == ["64x64"]
    assert built.metadata["pass_runs"] == 2 and built.metadata["shared"] == 74752


def run_attention(company: bool, n=128, d=64):
    from kiln.codegen.emulate import run_on_cpu
    rng = np.random.default_rng(7)
    q, k, v = ((rng.standard_normal((n, d)) * 0.5).astype(np.float16) for _ in range(3))
    out = np.full((n, d), np.nan, np.float32)
    kernel = _attention.warmup(q, k, v, out, n, D=d, BM=64, BN=64, num_warps=4, num_stages=3, target="sm_90a")
    fn = kernel.ir if company else _without_company(kernel.ir)
    run_on_cpu(fn, (n // 64,), [q, k, v, out, n], num_warps=4)
    return out, compile_ir(fn, "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False).kir, (q, k, v)


def test_q_from_registers_computes_what_q_from_shared_memory_does():
    out, kir, (q, k, v) = in_child(run_attention, True)
    plain, plain_kir, _ = in_child(run_attention, False)
    assert not _q_tiles(kir) and _q_tiles(plain_kir)  # (the emulator runs what sm_90a builds)
    s = q.astype(np.float32) @ k.astype(np.float32).T
    p = np.exp2(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ v.astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(out, plain, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_the_d64_forward_in_64x64_blocks_on_the_gpu(causal, hopper_torch):
    kernel, o, want = bench_forward(hopper_torch, (2, 4, 1024, 64), 64, 64, causal, num_warps=4, num_stages=3,
                                    scale=0.125)
    assert re.search(r"company = [1-9]", compile_ir(kernel.ir, "sm_90a", {"num_warps": 4, "num_stages": 3}).kir)
    hopper_torch.testing.assert_close(o, want, rtol=2e-3, atol=2e-3)
