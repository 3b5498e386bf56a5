"""How often a compile runs the pass list and lowering. A persistent GEMM may keep its rings live
through the epilogue (tile_overlap); the pass weighs that on a copy, by the shared memory the rest
of the plan gives it (what lowering takes at least), and rewrites the kernel only where it neither
takes it past the SM nor costs it a CTA per SM. Either way the pass list runs once."""
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


def test_a_gemm_whose_overlap_cannot_fit_runs_its_passes_once():
    kernel = bench_matmul(128, 256, 64, 8)
    assert "wgmma.mma_async" in kernel.asm["ptx"]
    assert kernel.metadata["pass_runs"] == 1 and kernel.metadata["lowerings"] == 1
    assert "pass_resumes" not in kernel.metadata


def test_a_gemm_whose_overlap_costs_a_cta_by_its_plan_runs_its_passes_once():
    kernel = bench_matmul(64, 64, 32, 4)
    assert kernel.metadata["pass_runs"] == 1 and kernel.metadata["lowerings"] == 1  # the plan shows the CTA it costs


def test_a_gemm_whose_overlap_pays_is_rewritten_in_the_same_single_run():
    from kiln.codegen.passes import tile_overlap
    kernel = bench_matmul(128, 128, 64, 8)
    assert kernel.metadata["pass_runs"] == 1 and kernel.metadata["lowerings"] == 1
    assert tile_overlap.overlapped(parse_function(kernel.build("sm_90a").kir))


def test_the_dumped_ir_says_which_variant_it_is():
    from kiln.codegen import compile as compile_ir
    kernel = bench_matmul(64, 64, 32, 4)
    compiled = compile_ir(parse_function(kernel.asm["kir"]), "sm_90a", {"num_warps": 4, "num_stages": 3}, link=False)
    header = compiled.kir.splitlines()[0]  # (K + 31) / 32 iterations of its K loop, K the sixth argument
    assert header.endswith("attributes {split_trips = [5, 31, 32, 0, 1], splittable = 1, tile_overlap = 0} {")
    assert parse_function(compiled.kir).attrs["tile_overlap"] == 0


def test_a_declined_overlap_compiles_as_the_pass_list_with_the_overlap_off():
    """The variant tile_overlap declines (weighed on a copy) is the kernel the pass list makes with
    the overlap off from the start: the trial leaves nothing behind."""
    from kiln.codegen.compiler import lower_to_llvm
    kernel = bench_matmul(128, 256, 64, 8)
    fn = parse_function(kernel.asm["kir"])
    tgt = parse_target("sm_90a")
    opts = {"num_warps": 8, "num_stages": 3}
    declined, llir, _, shared = lower_to_llvm(fn, tgt, opts, counts=(counts := {}))
    assert counts == {"pass_runs": 1, "lowerings": 1}
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
