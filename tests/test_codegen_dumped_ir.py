"""The IR a compile dumps (`CompiledKernel.kir`, after every pass) is the whole truth: parsed back
and lowered with the compile's options alone, it gives the compile's PTX. Lowering reads nothing
the passes kept aside (index math, live buffers, contiguity are read from the IR as the passes read
them), so a dumped kernel can be checked, edited and lowered on its own."""
import dataclasses
import pathlib

import pytest

from kiln.codegen import backend, compile as compile_ir
from kiln.codegen.lower import lower_function
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.ir import parse_function
from test_codegen_ptx_golden import ptx_diff  # the corpus's own PTX comparison (locations and call numbering aside)

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"
KERNELS = sorted(CORPUS.glob("*.kir"))
LANGUAGE = sorted((CORPUS / "lang").glob("*.kir"))


def lowered_alone(kir: str, target: str, num_warps: int) -> str:
    """PTX of already-optimized IR text: lowering, LLVM and NVPTX, no pass."""
    tgt = parse_target(target)
    fn = parse_function(kir)
    ctx = PassContext(tgt, num_warps)
    llir, arg_layout, _ = lower_function(fn, ctx)
    if any("global_scratch" in a for a in arg_layout):  # as the compile raises it for tensormap.replace
        tgt = dataclasses.replace(tgt, ptx_version=max(tgt.ptx_version, 83))
    module, _ = backend.for_emission(backend.optimize(llir, tgt, fn.name))
    return backend.emit_ptx(module, tgt)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.stem)
def test_a_dumped_kernel_lowers_to_the_compiles_ptx(path, target):
    kernel = compile_ir(parse_function(path.read_text()), target, link=False)
    again = lowered_alone(kernel.kir, target, kernel.metadata["num_warps"])
    assert ptx_diff.without_locations(again) == ptx_diff.without_locations(kernel.ptx)


@pytest.mark.parametrize("path", LANGUAGE, ids=lambda p: p.stem)
def test_a_dumped_language_kernel_lowers_to_the_compiles_ptx(path):
    kernel = compile_ir(parse_function(path.read_text()), "sm_90a", link=False)
    again = lowered_alone(kernel.kir, "sm_90a", kernel.metadata["num_warps"])
    assert ptx_diff.without_locations(again) == ptx_diff.without_locations(kernel.ptx)


def test_dumped_tensor_core_kernels_lower_to_their_compiles_ptx():
    """bench/'s matmuls and attention: the persistent, TMA, wgmma and ring passes' IR."""
    for name, built in ptx_diff.bench_kernels():  # the frontend's IR: compiled again here, not linked
        options = {"num_warps": built.metadata.num_warps, "num_stages": built.metadata.num_stages}
        kernel = compile_ir(parse_function(built.asm["kir"]), "sm_90a", options, link=False)
        again = lowered_alone(kernel.kir, "sm_90a", kernel.metadata["num_warps"])
        assert ptx_diff.without_locations(again) == ptx_diff.without_locations(kernel.ptx), name
