"""`triton._filecheck` under the drop-in (kiln.dropin.filecheck): the kernel's TTIR checked with CHECK lines."""
import inspect
import os
import subprocess
import sys

import pytest
import torch

import kiln
import kiln.language as tl
from kiln.dropin import doctor, hook
from kiln.dropin.filecheck import filecheck_test, run_filecheck, run_filecheck_test, run_parser
from kiln.errors import CompilationError
from kiln.filecheck import FileCheckError


@kiln.jit
def scaled_range(X, N: tl.constexpr):
    # CHECK-LABEL: tt.func public @scaled_range
    # CHECK: [[R:%[0-9]+]] = tt.make_range {end = 8 : i32, start = 0 : i32}
    # CHECK-NOT: loc(
    # CHECK: [[P:%[0-9]+]] = tt.addptr {{%[0-9]+}}, [[R]]
    # CHECK: tt.store [[P]],
    tl.store(X + tl.arange(0, N), tl.arange(0, N))


@kiln.jit
def counted_loop():
    # CHECK-LABEL: tt.func public @counted_loop
    # CHECK: scf.for [[I:%arg[0-9]+]] = {{.*}} iter_args([[ACC:%arg[0-9]+]] = {{.*}}) -> (i32)
    # CHECK-NEXT: = arith.addi [[ACC]], [[I]] : i32
    acc = 0
    for i in range(4):
        acc += i


@kiln.jit
def doubled(x):
    return x * 2


@kiln.jit
def calls_a_helper(X):
    # CHECK-LABEL: tt.func public @calls_a_helper
    # CHECK: tt.call @{{.*}}doubled{{.*}}(
    # CHECK: tt.func private @{{.*}}doubled
    tl.store(X, doubled(tl.load(X)))


@kiln.jit
def claims_a_tt_call():
    # CHECK: tt.call @anchor
    pass


@kiln.jit
def assigns_an_attribute():
    x = tl.arange(0, 4)
    x.dtype = 3


def test_the_drop_in_maps_the_module():
    assert hook.kiln_name("triton._filecheck") == "kiln.dropin.filecheck"


@pytest.mark.skipif(doctor.installed_hook() is None, reason="kiln's drop-in hook is not installed here")
def test_upstream_imports_resolve_under_the_drop_in():
    code = ("from triton._filecheck import filecheck_test, run_filecheck, run_filecheck_test, run_parser\n"
            "import kiln.dropin.filecheck as k; print(run_parser is k.run_parser)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, hook.ENV: "1"}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_run_parser_is_ttir_without_locations():
    text = run_parser(scaled_range, args=(torch.empty(8, dtype=torch.int32), 8), kwargs={"sanitize_overflow": False})
    assert text.startswith("module {\n  tt.func public @scaled_range(")
    assert "loc(" not in text
    run_filecheck("scaled_range", text, inspect.getsource(scaled_range.fn))  # its own CHECK comments


def test_run_parser_keeps_calls_of_jit_functions():
    text = run_parser(calls_a_helper, args=(torch.empty(1, dtype=torch.float32),))
    run_filecheck("calls_a_helper", text, inspect.getsource(calls_a_helper.fn))


def test_run_filecheck_fails_with_the_input_after_the_message():
    with pytest.raises(FileCheckError) as e:
        run_filecheck("mine", "kernel @k() {\n  return\n}\n", "CHECK: kernel @k\nCHECK-NEXT: yield")
    message = str(e.value)
    assert message.startswith("mine:2:1: error: CHECK-NEXT: expected string not found in input")
    assert message.endswith("input:\nkernel @k() {\n  return\n}\n")
    assert isinstance(e.value, ValueError)  # as Triton's run_filecheck raises


def test_filecheck_test_checks_the_kernels_own_comments():
    test = filecheck_test(counted_loop)
    assert test.__name__ == "counted_loop"
    test()
    with pytest.raises(FileCheckError, match="CHECK: expected string not found"):
        filecheck_test(claims_a_tt_call)()


def test_run_filecheck_test_needs_its_kernel_to_compile():
    with pytest.raises(CompilationError):
        run_parser(assigns_an_attribute)
    with pytest.raises(CompilationError):
        run_filecheck_test(assigns_an_attribute)
