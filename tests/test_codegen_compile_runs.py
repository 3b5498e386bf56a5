"""How often a compile runs the pass list and lowering. A persistent GEMM first tries keeping its
rings live through the epilogue (tile_overlap); where the shared memory the passes planned (what
lowering takes at least) already takes it past the SM, or costs it a CTA per SM, the compile drops
that variant without lowering it. Either way the passes before tile_overlap run once: the other
variant resumes from a copy of their result."""
import importlib.util
import pathlib

import numpy as np
import pytest

from kiln.codegen.analysis.scratch_use import planned_shared_bytes
from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.lower import lower_function
from kiln.codegen.target import parse_target
from kiln.ir import parse_function

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"
BENCH = pathlib.Path(__file__).parent.parent / "bench"


def bench_matmul(bm, bn, bk, warps):
    """bench/kernels.py's tutorial-03 matmul (grouped tiles, masks) at 4096^3, as ptx_diff builds it."""
    spec = importlib.util.spec_from_file_location("kiln_bench_kernels", BENCH / "kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    x, n = np.zeros((64, 64), np.float16), 4096
    return kernels.matmul_kernel.warmup(x, x, x, n, n, n, n, 1, n, 1, n, 1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                        GROUP_M=8, num_warps=warps, num_stages=3, grid=(1,), target="sm_90a")


def test_a_gemm_whose_overlap_cannot_fit_is_lowered_once():
    kernel = bench_matmul(128, 256, 64, 8)
    assert "wgmma.mma_async" in kernel.asm["ptx"]
    assert kernel.metadata["pass_runs"] == 1 and kernel.metadata["pass_resumes"] == 1
    assert kernel.metadata["lowerings"] == 1


def test_a_gemm_whose_overlap_costs_a_cta_by_its_plan_is_lowered_once():
    kernel = bench_matmul(64, 64, 32, 4)
    assert kernel.metadata["pass_runs"] == 1 and kernel.metadata["pass_resumes"] == 1
    assert kernel.metadata["lowerings"] == 1  # the plan shows the overlap costs it a CTA per SM


def test_the_dumped_ir_says_which_variant_it_is():
    from kiln.codegen import compile as compile_ir
    kernel = bench_matmul(64, 64, 32, 4)
    compiled = compile_ir(parse_function(kernel.asm["kir"]), "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False)
    assert compiled.kir.splitlines()[0].endswith("attributes {splittable = 1, tile_overlap = 0} {")
    assert parse_function(compiled.kir).attrs["tile_overlap"] == 0


def test_a_resumed_variant_compiles_as_a_whole_run_of_its_passes():
    """The variant without the overlap, resumed after tile_overlap, is the kernel the whole pass
    list makes with the overlap off."""
    from kiln.codegen.compiler import lower_to_llvm
    kernel = bench_matmul(128, 256, 64, 8)
    fn = parse_function(kernel.asm["kir"])
    tgt = parse_target("sm_90a")
    opts = {"num_warps": 8, "num_stages": 3}
    resumed, llir, _, shared = lower_to_llvm(fn, tgt, opts, counts=(counts := {}))
    assert counts == {"pass_runs": 1, "pass_resumes": 1, "lowerings": 1}
    work = parse_function(kernel.asm["kir"])
    work.attrs["tile_overlap"] = 0
    ctx = PassContext(tgt, 8, 3)
    run_passes(work, ctx)
    whole, _, whole_shared = lower_function(work, ctx)
    assert (llir, shared) == (whole, whole_shared)




@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.kir")), ids=lambda p: p.stem)
def test_the_planned_shared_bytes_never_exceed_what_lowering_uses(path):
    for target in ("sm_80", "sm_90a"):
        fn = parse_function(path.read_text())
        ctx = PassContext(parse_target(target), 4, 3)
        run_passes(fn, ctx)
        _, _, shared = lower_function(fn, ctx)
        assert planned_shared_bytes(fn) <= shared
