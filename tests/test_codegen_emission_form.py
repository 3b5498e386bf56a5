"""The optimized module is emitted with InstCombine's `or disjoint` written as `add nuw nsw`
(kiln.codegen.backend.for_emission: LLVM 22's strength reduction is slow on the `or` form), and at
LLVM's codegen level None where that strength reduction would take quadratic time (`slsr_quadratic`:
hundreds of GEPs by a variable off each base, a large tile's pointers unrolled in a thread)."""
import llvmlite.binding as llvm
import numpy as np

import kiln
import kiln.language as tl

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


@kiln.jit
def strided_copy(x_ptr, out_ptr, sm, sn, R: tl.constexpr, C: tl.constexpr):
    r, c = tl.arange(0, R), tl.arange(0, C)
    tl.store(out_ptr + r[:, None] * sm + c[None, :], tl.load(x_ptr + r[:, None] + c[None, :] * sn) * 2)


def _strided_llir(rows, cols):
    x = np.zeros(rows * cols * 8, np.float16)
    warm = strided_copy.warmup(x, x, 7, 9, R=rows, C=cols, grid=(1,), target="sm_90a", num_warps=1)
    return compile_ir(parse_function(warm.asm["kir"]), "sm_90a", {"num_warps": 1}, link=False).llir


def test_a_thread_s_large_unrolled_tile_is_emitted_at_level_none():
    text = _strided_llir(128, 256)  # 1,024 elements a thread: a GEP off x_ptr each
    assert backend.slsr_quadratic(text)
    ptx = backend.emit_ptx(llvm.parse_assembly(text), SM90)
    assert ptx == backend._target_machine(SM90, opt=0).emit_assembly(llvm.parse_assembly(text))
    assert ptx != backend._target_machine(SM90, opt=2).emit_assembly(llvm.parse_assembly(text))


def test_small_tiles_and_the_corpus_keep_the_default_level():
    assert not backend.slsr_quadratic(_strided_llir(64, 64))  # 128 elements a thread
    for name in ("dot_f16.kir", "layer_norm.kir"):
        kernel = compile_ir(parse_function((CORPUS / name).read_text()), "sm_90a", link=False)
        assert not backend.slsr_quadratic(kernel.llir)
        assert kernel.ptx == backend._target_machine(SM90, opt=2).emit_assembly(llvm.parse_assembly(kernel.llir))


def test_gep_offsets_by_constants_are_not_counted():
    geps = "\n".join(f"  %g{i} = getelementptr i8, ptr addrspace(1) %p, i64 {i}" for i in range(400))
    assert not backend.slsr_quadratic(geps)
    assert backend.slsr_quadratic(geps.replace("i64 ", "i64 %v"))
