"""The frontend's block IR, read as text: what a kernel becomes, and that it round-trips."""
import importlib
import os
import sys

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import parse_function, print_function, verify
from kiln.ir.printer import print_function as print_ir

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def kir(kernel, *args, grid=(1,), **kwargs) -> str:
    return print_ir(kernel.warmup(*args, grid=grid, **kwargs).ir, locs=False)


def lines(text):
    return [line.strip() for line in text.splitlines()]


@kiln.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


def test_vector_kernel_ir_text():
    x = np.zeros(64, np.float32)
    text = kir(scale_kernel, x, x, 64, 2.0, BLOCK=32)
    body = lines(text)
    assert body[0].startswith('kernel @scale_kernel(%0: ptr<fp32> {divisibility = 16, name = "x_ptr"}')
    assert '%3: fp32 {name = "factor"}' in body[0]
    assert "%4 = program_id {axis = 0} : int32" in body
    assert "%6 = mul %4, %5 : int32" in body
    assert "%7 = arange {end = 32, start = 0} : <32xint32>" in body
    assert any(line.startswith("%") and "= load" in line and ": <32xfp32>" in line for line in body)
    assert any(line.startswith("store ") for line in body)
    assert body[-2:] == ["return", "}"]


def test_specialization_folds_ones_and_marks_divisibility():
    x = np.zeros(64, np.float32)
    text = kir(scale_kernel, x, x, 1, 2.0, BLOCK=32)
    header = lines(text)[0]
    assert "name = \"n\"" not in header  # n == 1 became a constant
    assert "constant {value = 1} : int32" in text
    text = kir(scale_kernel, x, x, 48, 2.0, BLOCK=32)
    assert '%2: int32 {divisibility = 16, name = "n"}' in lines(text)[0]


def test_do_not_specialize_keeps_integer_arguments():
    @kiln.jit(do_not_specialize=["n"])
    def k(out_ptr, n):
        tl.store(out_ptr, n)
    out = np.zeros(1, np.int32)
    header = lines(kir(k, out, 1))[0]
    assert '%1: int32 {name = "n"}' in header


def test_constexpr_if_is_folded_and_runtime_if_yields():
    @kiln.jit
    def k(out_ptr, flag, MODE: tl.constexpr):
        x = 1.0
        if MODE == 2:
            x = 2.0
        y = 0
        if flag > 0:
            y = 5
        else:
            y = 7
        tl.store(out_ptr, x + y)
    out = np.zeros(1, np.float32)
    text = kir(k, out, 3, MODE=2)
    assert text.count(" if ") == 0 or "= if" in text
    assert sum(1 for line in lines(text) if "= if" in line) == 1  # only the runtime one
    assert sum(1 for line in lines(text) if line.startswith("yield")) == 2


def test_loop_carries_assigned_variables_only():
    @kiln.jit
    def k(out_ptr, n):
        acc = tl.zeros((16,), dtype=tl.float32)
        unused = 3
        for i in range(n):
            acc += i
        tl.store(out_ptr + tl.arange(0, 16), acc + unused)
    out = np.zeros(16, np.float32)
    text = kir(k, out, 5)
    for_line = next(line for line in lines(text) if "= for" in line)
    assert for_line.endswith(": <16xfp32> {")  # exactly one carried value
    assert "^(%" in text


def test_static_range_unrolls():
    @kiln.jit
    def k(out_ptr):
        acc = 0
        for i in tl.static_range(4):
            acc += i * 10
        tl.store(out_ptr, acc)
    out = np.zeros(1, np.int32)
    text = kir(k, out)
    assert "for" not in text
    assert "constant {value = 60} : int32" in text


def _example_kernels():
    sys.path.insert(0, EXAMPLES)
    out = []
    for name in ("vector_add", "fused_softmax", "matmul", "dropout", "layer_norm"):
        module = importlib.import_module(name)
        module.main()
        for value in vars(module).values():
            fn = value
            while not isinstance(fn, kiln.JITFunction) and hasattr(fn, "fn"):
                fn = fn.fn
            if isinstance(fn, kiln.JITFunction):
                out.extend(compiled.ir for compiled in fn.cache.values())
    return out


def test_every_example_kernel_round_trips_through_text():
    kernels = _example_kernels()
    assert len(kernels) >= 6
    for fn in kernels:
        text = print_function(fn)
        again = parse_function(text)
        verify(again)
        assert print_function(again) == text


def test_ir_records_user_locations():
    x = np.zeros(64, np.float32)
    text = print_function(scale_kernel.warmup(x, x, 64, 2.0, BLOCK=32, grid=(1,)).ir)
    assert f'loc("{os.path.abspath(__file__)}":' in text


def test_calling_a_kernel_outside_a_kernel_fails_clearly():
    with pytest.raises(RuntimeError, match="only be called inside a kernel"):
        scale_kernel(1, 2, 3, 4)
