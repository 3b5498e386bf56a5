"""Names of Triton 3.6's `triton.runtime.jit` that tools import, in the drop-in (kiln.dropin.jit)."""
import inspect

import kiln
import kiln.language as tl
from kiln.dropin.jit import get_full_name, get_jit_fn_file_line, jit
from kiln.jit import JITCallable


def _unchanged(fn):
    return fn


@_unchanged
def twice(x):
    return 2 * x


@jit
def store_one(x_ptr):
    tl.store(x_ptr, 1.0)


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
