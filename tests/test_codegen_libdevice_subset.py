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


class DictStore(dict):
    def get(self, key):
        return dict.get(self, key)

    def put(self, key, data):
        self[key] = data


ERF = frozenset({"__nv_erff"})


def fresh_subset(monkeypatch, store, names=ERF, extract=None):
    """`_libdevice_subset(names)` as a new process asks for it (nothing in memory), with `store`."""
    monkeypatch.setattr(backend, "subset_store", store)
    if extract is not None:
        monkeypatch.setattr(backend, "_extract_subset", extract)
    backend._libdevice_subset.cache_clear()
    try:
        return backend._libdevice_subset(names, SM90)
    finally:
        backend._libdevice_subset.cache_clear()


def test_a_subset_made_once_is_kept_in_the_store_and_found_by_the_next_process(monkeypatch):
    store = DictStore()
    made = fresh_subset(monkeypatch, store)
    assert list(store.values()) == [made]

    def extract(*args):
        raise AssertionError("made again although the store holds it")
    assert fresh_subset(monkeypatch, store, extract=extract) == made


def test_the_key_names_the_functions_target_and_fusion():
    keys = {backend.subset_key(ERF, SM90, True), backend.subset_key(ERF, SM90, False),
            backend.subset_key(ERF, parse_target("sm_80"), True),
            backend.subset_key(frozenset({"__nv_erff", "__nv_tanhf"}), SM90, True)}
    assert len(keys) == 4


def test_a_stored_subset_that_is_no_bitcode_or_lacks_a_function_is_a_miss(monkeypatch):
    tanh = fresh_subset(monkeypatch, None, names=frozenset({"__nv_tanhf"}))
    key = backend.subset_key(ERF, SM90, True)
    for bad in (b"not bitcode", tanh, "text", None):
        store = DictStore({key: bad})
        made = fresh_subset(monkeypatch, store)
        assert "__nv_erff" in defined_functions(made)
        assert store[key] == made  # made again and stored over the bad one


def test_a_store_that_fails_costs_nothing_but_the_time(monkeypatch):
    class Broken:
        def get(self, key):
            raise OSError("disk gone")

        def put(self, key, data):
            raise OSError("disk gone")
    assert "__nv_erff" in defined_functions(fresh_subset(monkeypatch, Broken()))
