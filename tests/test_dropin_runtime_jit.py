"""Names of Triton 3.6's `triton.runtime.jit` that tools import, in the drop-in (kiln.dropin.jit)."""
import hashlib
import inspect
import os
import subprocess
import sys

import pytest

import kiln
import kiln.language as tl
from kiln.dropin.backends import make_backend
from kiln.dropin.jit import (DependenciesFinder, JitFunctionInfo, convert_to_tuple_if_list,
                             create_function_from_signature, get_full_name, get_jit_fn_file_line, jit)
from kiln.runtime import GPUTarget
from kiln.tensor_wrapper import MockTensor
from kiln.jit import JITCallable


def _unchanged(fn):
    return fn


@_unchanged
def twice(x):
    return 2 * x


@jit
def store_one(x_ptr):
    tl.store(x_ptr, 1.0)


SCALE = 3


@jit
def scaled_one(x_ptr):
    tl.store(x_ptr, store_one_value() * SCALE)


@jit
def store_one_value():
    return 1.0


@jit
def calls_twice(x_ptr):
    tl.store(x_ptr, twice(1.0))


def _def_line(fn) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if line.startswith("def "))


def test_a_jit_callable_is_made_from_a_plain_function():
    callable_ = JITCallable(twice)
    assert callable_.src.startswith("def twice(x):") and callable_.__name__ == "twice"
    key = callable_.cache_key
    assert len(key) == 64 and JITCallable(twice).cache_key == key
    callable_._unsafe_update_src("def twice(x):\n    return x + x\n")
    assert callable_.cache_key != key
    assert get_jit_fn_file_line(callable_) == (__file__, _def_line(twice))  # the `def`, not the decorator


def test_file_line_of_a_kernel_and_of_wrappers_around_it():
    assert get_jit_fn_file_line(store_one) == (__file__, _def_line(store_one.fn))
    tuned = kiln.autotune(configs=[kiln.Config({})], key=[])(kiln.heuristics({"B": lambda args: 1})(store_one))
    assert get_jit_fn_file_line(tuned) == get_jit_fn_file_line(store_one)


def test_full_name_is_module_and_qualified_name():
    assert get_full_name(twice) == f"{__name__}.twice"
    assert get_full_name(store_one) == f"{__name__}.store_one"


def _finder(kernel, scope) -> DependenciesFinder:
    finder = DependenciesFinder(kernel.__name__, scope, {}, kernel.src)
    finder.visit(kernel.parse())
    return finder


def test_dependencies_finder_hashes_the_source_and_its_callees():
    alone = _finder(scaled_one, {})  # no globals to look in: the source alone
    assert alone.ret == hashlib.sha256(scaled_one.src.encode()).hexdigest()
    found = _finder(scaled_one, globals())
    assert found.ret != alone.ret
    (name, scope_id), = found.used_global_vals
    assert name == "SCALE" and scope_id == id(globals()) and found.used_global_vals[name, scope_id][0] == 3
    store_one_value._unsafe_update_src("def store_one_value():\n    return 2.0\n")
    try:
        assert _finder(scaled_one, globals()).ret != found.ret  # a callee's source is part of it
    finally:
        store_one_value._unsafe_update_src(inspect.getsource(store_one_value.fn).split("\n", 1)[1])


def test_dependencies_finder_records_one_reference_and_refuses_plain_functions():
    finder = DependenciesFinder("k", {}, {}, "def k():\n    pass\n")
    before = finder.ret
    finder.record_reference(store_one_value, {}, "store_one_value")
    assert finder.ret != before
    scope = {"SCALE": 5}
    finder.record_reference(5, scope, "SCALE")
    assert finder.used_global_vals[("SCALE", id(scope))] == (5, scope)
    with pytest.raises(RuntimeError, match="Unsupported function referenced"):
        _finder(calls_twice, globals())  # kiln compiles such a call; Triton's finder refuses it


@jit(do_not_specialize=["m"])
def bound_kernel(x_ptr, n, m, f: tl.float32, k: "i64", flag, B: tl.constexpr, extra=16):
    pass


def test_binder_from_a_signature_specializes_as_triton_does():
    bind = create_function_from_signature(bound_kernel.signature, bound_kernel.params,
                                          make_backend(GPUTarget("cuda", 90, 32)))
    x = MockTensor(tl.float32)  # address 0: 16-byte aligned
    args, specialization, options = bind(x, 32, 32, 1.0, 7, True, 4, num_warps=4)
    assert args == {"x_ptr": x, "n": 32, "m": 32, "f": 1.0, "k": 7, "flag": True, "B": 4, "extra": 16}
    assert specialization == [("*fp32", "D"), ("i32", "D"), ("i32", None), ("fp32", None), ("i64", ""),
                              ("u1", None), ("constexpr", 4), ("i32", "D")]
    assert options == {"num_warps": 4}
    _, specialization, options = bind(x, 1, 1, 2.5, 1, False, 4, 17)
    assert specialization[1:5] == [("constexpr", 1), ("i32", None), ("fp32", None), ("i64", 1)]
    assert specialization[-1] == ("i32", "") and options == {}
    with pytest.raises(TypeError):
        bind(x)


def test_small_helpers_of_the_module():
    assert convert_to_tuple_if_list([1, [2, [3]], (4, [5])]) == (1, (2, (3,)), (4, [5]))
    assert convert_to_tuple_if_list("text") == "text"
    info = JitFunctionInfo(__name__, "store_one", store_one)
    assert (info.module, info.name, info.jit_function) == (__name__, "store_one", store_one)


def test_the_names_import_from_triton_runtime_jit_under_the_dropin():
    names = ("DependenciesFinder", "JITCallable", "JitFunctionInfo", "KernelInterface", "MockTensor", "TensorWrapper",
             "convert_to_tuple_if_list", "create_function_from_signature", "get_full_name", "get_jit_fn_file_line")
    code = f"from triton.runtime.jit import {', '.join(names)}; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KILN_DROPIN": "1"},
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
