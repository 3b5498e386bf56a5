"""kiln.jit.parse_source: parsing a kernel's source from several threads at once (the drop-in
compiles kernels on several threads) gives each its tree, on CPython 3.11 too (gh-106905)."""
import ast
import gc
import importlib
import threading
import time

import pytest

kiln_jit = importlib.import_module("kiln.jit")  # the module: `kiln.jit` the attribute is the decorator

SOURCE = "def kernel(x_ptr, n):\n" + "".join(f"    y{i} = (x_ptr + {i}) * (n - {i})\n" for i in range(200))


def test_a_parse_raced_by_another_thread_is_done_again(monkeypatch):
    real_parse, calls = ast.parse, []

    def raced_once(text, *args, **kwargs):  # ast.parse is the process's: pytest's reports call it too
        if text == SOURCE:
            calls.append(text)
            if len(calls) == 1:
                raise SystemError("AST constructor recursion depth mismatch (before=48, after=47)")
        return real_parse(text, *args, **kwargs)

    monkeypatch.setattr(kiln_jit.ast, "parse", raced_once)
    tree = kiln_jit.parse_source(SOURCE)
    assert len(calls) == 2 and ast.dump(tree) == ast.dump(real_parse(SOURCE))


def test_other_system_errors_are_not_retried(monkeypatch):
    real_parse = ast.parse

    def broken(text, *args, **kwargs):
        if text == SOURCE:
            raise SystemError("something else")
        return real_parse(text, *args, **kwargs)

    monkeypatch.setattr(kiln_jit.ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        kiln_jit.parse_source(SOURCE)


def test_threads_parsing_at_once_each_get_the_whole_tree():
    expected, results, errors = ast.dump(ast.parse(SOURCE)), [], []
    # A garbage collection inside the AST builder that lets another thread run, as a busy process's
    # finalizers do: without the lock some parse here fails with the recursion depth mismatch.
    def yield_the_gil(phase, info):
        time.sleep(0.0001)

    def parse_many():
        try:
            for _ in range(20):
                results.append(ast.dump(kiln_jit.parse_source(SOURCE)))
        except Exception as error:  # noqa: BLE001 - the test reports any failure below
            errors.append(error)

    threads = [threading.Thread(target=parse_many) for _ in range(8)]
    gc.callbacks.append(yield_the_gil)  # the C collector reads this very list
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.callbacks.remove(yield_the_gil)
    assert not errors and results == [expected] * 160
