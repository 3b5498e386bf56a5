"""Triton 3.6 frontend surface that upstream's test_frontend.py and test_line_info.py use: where the
interpreter reads a kernel from (`rewrite()`, `rewriter.def_file_lineno`), builtins given `_semantic=`,
plain static methods and `@constexpr_function` methods of aggregates, a tuple's type, and Triton's
wording for a `return` inside a loop and for constexpr min/max of NaN or -0.0."""
import ast
import inspect

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin.jit import get_jit_fn_file_line
from kiln.errors import CompilationError


@kiln.autotune(configs=[kiln.Config({"BLOCK": 4})], key=[])
@kiln.jit(
    do_not_specialize=["n"],
)
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def _def_line(fn) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if line.lstrip().startswith("def "))


def test_rewriter_names_the_file_and_the_line_of_the_def_under_decorators():
    jitfn = copy_kernel.fn
    assert jitfn.rewriter.def_file_lineno == _def_line(jitfn.fn)
    assert jitfn.rewriter.filename == __file__ and jitfn.rewriter.fn is jitfn.fn
    assert get_jit_fn_file_line(copy_kernel) == (__file__, _def_line(jitfn.fn))


def test_rewrite_gives_the_ast_numbered_by_the_files_lines():
    tree = copy_kernel.fn.rewrite()
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef) and fn.name == "copy_kernel"
    assert fn.lineno == _def_line(copy_kernel.fn.fn)
    store = fn.body[-1]
    assert store.lineno == fn.lineno + 2


def test_rewriter_of_a_kernel_built_by_exec():
    text = "import kiln\nimport kiln.language as tl\n\n\n@kiln.jit\ndef made(x):\n    pass\n"
    scope = {}
    exec(compile(text, "<made>", "exec"), scope)
    assert scope["made"].rewriter.def_file_lineno == 6 and scope["made"].rewriter.filename == "<made>"


# --- aggregates: a builtin-made field, a plain static method, a @constexpr_function method ------

@tl.core._aggregate
class Ramp:
    values: tl.tensor
    offset: tl.constexpr

    def __init__(self, offset, _semantic=None):
        self.values = tl.arange(0, 4, _semantic=_semantic)  # Triton's builtins take the code generator's state
        self.offset = tl.constexpr(offset)

    @staticmethod
    def starting_at(offset):
        return Ramp(offset)

    @staticmethod
    def shifted(values, by):  # a plain static method handed a tensor runs as Python on it
        return values + by

    @kiln.constexpr_function
    def doubled_offset(self):
        return self.offset * 2


@kiln.jit
def ramp_kernel(out_ptr):
    ramp = Ramp.starting_at(3)
    offs = tl.arange(0, 4)
    tl.store(out_ptr + offs, Ramp.shifted(ramp.values, ramp.offset) + ramp.doubled_offset())
    tl.static_assert(ramp.doubled_offset() == 6)


def test_aggregate_fields_from_builtins_static_methods_and_constexpr_function_methods():
    out = np.zeros(4, np.int32)
    ramp_kernel[(1,)](out)
    np.testing.assert_array_equal(out, np.arange(4) + 3 + 6)
    assert Ramp.doubled_offset.fn.__name__ == "doubled_offset"


@kiln.constexpr_function
def second_of(values):
    return values[1]


@tl.core.builtin
def listed(*args, _semantic=None):
    return list(args)


def test_builtins_drop_semantic_and_constexpr_functions_take_constexprs_from_python():
    tl.static_assert(True, _semantic=None)
    assert second_of(tl.constexpr((4, 8))) == 8 and second_of([1, 2]) == 2
    assert listed(1, 2, _semantic=None) == [1, 2]


# --- a tuple's type, from a runtime `if` too -----------------------------------------------------

@kiln.jit
def pair_of(x):
    if x < 0:
        return 1, x
    else:
        return 0, x


@kiln.jit
def tuple_type_kernel(out_ptr, v):
    c = pair_of(v)
    tl.static_assert(c.type == tl.tuple_type([tl.int32, tl.int32]))
    tl.static_assert((1, v).type == tl.tuple_type([tl.constexpr_type(1), tl.int32]))  # assigned, the 1 would be an int32
    tl.store(out_ptr, c[0] * 10 + c[1])


def test_a_tuple_returned_from_a_runtime_if_has_a_tuple_type():
    out = np.zeros(1, np.int32)
    tuple_type_kernel[(1,)](out, -3)
    assert out[0] == 10 - 3
    tuple_type_kernel[(1,)](out, 5)
    assert out[0] == 5
    assert tl.tuple_type([tl.int32]) != tl.tuple_type([tl.int32], ["x"])


# --- Triton's words for what it refuses ----------------------------------------------------------

@kiln.jit
def return_in_while_kernel(x_ptr):
    i = 0
    while i < 10:
        if i == 5:
            return
        i += 1


@kiln.jit
def constexpr_min_kernel(out_ptr, a: tl.constexpr, b: tl.constexpr):
    tl.store(out_ptr, min(a, b) + max(a, b, 3.0))


def test_return_in_a_loop_is_refused_in_tritons_words():
    with pytest.raises(CompilationError, match="Cannot have `return` statements inside `while` or `for` statements"):
        return_in_while_kernel[(1,)](np.zeros(1, np.int32))


@pytest.mark.parametrize("b", [float("nan"), -0.0])
def test_constexpr_min_and_max_refuse_nan_and_negative_zero(b):
    out = np.zeros(1, np.float32)
    constexpr_min_kernel[(1,)](out, 1.0, 2.0)
    assert out[0] == 1.0 + 3.0
    with pytest.raises(CompilationError, match=r"min\(\) of constexprs cannot take"):
        constexpr_min_kernel[(1,)](out, 1.0, b)
