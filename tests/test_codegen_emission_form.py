"""The optimized module is emitted with InstCombine's `or disjoint` written as `add nuw nsw`
(kiln.codegen.backend.for_emission: LLVM 22's strength reduction is slow on the `or` form)."""
import llvmlite.binding as llvm

from kiln.codegen import backend, compile as compile_ir
from kiln.codegen.target import parse_target
from kiln.ir import parse_function
from test_codegen_dumped_ir import CORPUS

SM90 = parse_target("sm_90a")

OFFSETS = """
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %p, i32 %row, <2 x i32> %pair) {
  %base = shl i32 %row, 4
  %lane = or disjoint i32 %base, 3
  %both = or disjoint <2 x i32> %pair, <i32 8, i32 8>
  %plain = or i32 %row, 5
  %at = getelementptr i32, ptr addrspace(1) %p, i32 %lane
  store i32 %plain, ptr addrspace(1) %at
  %one = extractelement <2 x i32> %both, i32 1
  store i32 %one, ptr addrspace(1) %p
  ret void
}
"""


def test_disjoint_ors_are_emitted_as_adds_and_plain_ors_kept():
    module, text = backend.for_emission(llvm.parse_assembly(OFFSETS))
    assert "or disjoint" not in text
    assert "%lane = add nuw nsw i32 %base, 3" in text
    assert "%both = add nuw nsw <2 x i32> %pair, " in text
    assert "%plain = or i32 %row, 5" in text
    assert str(module) == text
    assert ".entry k" in backend.emit_ptx(module, SM90)


def test_a_module_without_them_is_emitted_as_it_is():
    module = llvm.parse_assembly(OFFSETS.replace("or disjoint", "xor"))
    again, text = backend.for_emission(module)
    assert again is module and text == str(module)


def test_a_compiles_llir_is_the_module_it_emitted():
    kernel = compile_ir(parse_function((CORPUS / "dot_f16.kir").read_text()), "sm_90a", link=False)
    assert "or disjoint" not in kernel.llir and "add nuw nsw" in kernel.llir
    assert backend.emit_ptx(llvm.parse_assembly(kernel.llir), SM90) == kernel.ptx
