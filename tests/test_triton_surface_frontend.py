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
