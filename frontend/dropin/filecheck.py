"""`triton._filecheck` in the drop-in mode: the helpers Triton's frontend tests check IR text with.

- `run_filecheck(name, module_str, check_template)`: matches the CHECK lines of `check_template`
  against `module_str` with kiln.filecheck (FileCheck's rules, in Python; no FileCheck binary);
  a failure is a `FileCheckError` (a ValueError) that ends with the input it was matched against.
- `run_parser(kernel_fn, args=(), kwargs={})`: kiln's frontend builds the kernel for those
  arguments; the result is its **TTIR** text as Triton's frontend writes it, without source locations
  (`kiln.ttir.parse_to_ttir`: `tt.func`, `tt.make_range`, `scf.for`, `arith` ops, and the calls of
  other `@jit` functions kept as `tt.call` to a `tt.func private` per specialization), and it raises
  `CompilationError` where Triton's frontend does. kiln never inserts overflow checks, so
  `sanitize_overflow` is accepted and has no effect; `target` is accepted and unused (the frontend's
  IR is the same for every target).
- `run_filecheck_test(kernel_fn)`: the kernel's own source (its `# CHECK` comments) checked
  against `run_parser(kernel_fn)`; `filecheck_test(kernel_fn)` makes that a test function of
  the kernel's name, as upstream's `@filecheck_test @triton.jit def test_x(): ...` is.
"""
from __future__ import annotations

import functools
import inspect

from kiln.filecheck import FileCheckError, check
from kiln.ttir import parse_to_ttir

__all__ = ["FileCheckError", "filecheck_test", "run_filecheck", "run_filecheck_test", "run_parser"]


def run_filecheck(name: str, module_str: str, check_template: str) -> None:
    """Raise FileCheckError unless `module_str` passes the CHECK lines of `check_template`."""
    try:
        check(module_str, check_template, check_name=name, input_name="input")
    except FileCheckError as e:
        raise FileCheckError(f"{e}\n\ninput:\n{module_str}", e.directive) from None


def run_parser(kernel_fn, args=(), kwargs=None, target=None) -> str:
    """The TTIR text (no locations) of `kernel_fn` specialized for `args` and `kwargs`."""
    kwargs = {k: v for k, v in (kwargs or {}).items() if k != "sanitize_overflow"}
    return parse_to_ttir(kernel_fn, args, kwargs)


def run_filecheck_test(kernel_fn) -> None:
    """Check the kernel's IR against the CHECK comments of its own source."""
    run_filecheck(kernel_fn.__name__, run_parser(kernel_fn), inspect.getsource(kernel_fn.fn))


def filecheck_test(kernel_fn):
    """A test function, named as the kernel is, that runs `run_filecheck_test(kernel_fn)`."""

    @functools.wraps(kernel_fn)
    def test():
        run_filecheck_test(kernel_fn)

    return test
