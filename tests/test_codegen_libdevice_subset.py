"""A kernel links only the libdevice functions it calls (and what they call), not all 575."""
import llvmlite.binding as llvm

from kiln.codegen import backend
from kiln.codegen.libdevice import libdevice_bytes
from kiln.codegen.target import parse_target

SM90 = parse_target("sm_90a")


def defined_functions(bitcode: bytes) -> set[str]:
    return {f.name for f in llvm.parse_bitcode(bitcode).functions if not f.is_declaration}


def test_the_subset_holds_the_functions_asked_for_and_nothing_unused():
    whole = defined_functions(libdevice_bytes())
    subset = defined_functions(backend._libdevice_subset(frozenset({"__nv_erff", "__nv_tanhf"}), SM90))
    assert {"__nv_erff", "__nv_tanhf"} <= subset
    assert "__nv_sinf" in whole and "__nv_sinf" not in subset
    assert len(subset) < 10 < len(whole)


def test_a_function_keeps_what_it_calls():
    # powf calls libdevice helpers of its own; the subset must link without undefined symbols
    bitcode = backend._libdevice_subset(frozenset({"__nv_powf"}), SM90)
    module = llvm.parse_bitcode(bitcode)
    undefined = {f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_")}
    assert not undefined and "__nv_powf" in defined_functions(bitcode)


def test_a_kernel_calling_libdevice_compiles_to_ptx_without_the_rest():
    llir = """
target triple = "nvptx64-nvidia-cuda"
declare float @__nv_erff(float)
define ptx_kernel void @k(ptr addrspace(1) %p) {
  %x = load float, ptr addrspace(1) %p
  %y = call float @__nv_erff(float %x)
  store float %y, ptr addrspace(1) %p
  ret void
}
"""
    module = backend.optimize(llir, SM90, "k")
    assert [f.name for f in module.functions if not f.is_declaration] == ["k"]  # erff inlined, nothing left over
    assert ".entry k" in backend.emit_ptx(module, SM90)
