"""The IR of the newer Triton ops (gather, histogram, inline asm, libdevice), read as text and round-tripped."""
import numpy as np

import kiln
import kiln.language as tl
from kiln.ir import parse_function, print_function, verify
from kiln.ir.printer import print_function as print_ir


def kir(kernel, *args, **kwargs):
    fn = kernel.warmup(*args, grid=(1,), **kwargs).ir
    verify(fn)
    assert print_function(parse_function(print_function(fn))) == print_function(fn)
    return print_ir(fn, locs=False)


@kiln.jit
def _asm_two_results(x_ptr, a_ptr, b_ptr):
    offs = tl.arange(0, 8)
    x = tl.load(x_ptr + offs)
    a, b = tl.inline_asm_elementwise("mov.b32 $0, $2; mov.b32 $1, $2;", "=r,=r,r", [x],
                                     dtype=(tl.int32, tl.int32), is_pure=False, pack=1)
    tl.store(a_ptr + offs, a)
    tl.store(b_ptr + offs, b)


def test_inline_asm_keeps_asm_constraints_pack_and_impurity():
    x = np.zeros(8, np.int32)
    text = kir(_asm_two_results, x, x, x)
    (line,) = [l for l in text.splitlines() if "inline_asm" in l]
    assert 'asm = "mov.b32 $0, $2; mov.b32 $1, $2;"' in line and 'constraints = "=r,=r,r"' in line
    assert "pack = 1" in line and "volatile = true" in line
    assert line.endswith(": <8xint32>, <8xint32>")


@kiln.jit
def _gather_hist(src_ptr, out_ptr, hist_ptr):
    offs = tl.arange(0, 16)
    src = tl.load(src_ptr + offs)
    tl.store(out_ptr + offs, tl.gather(src, 15 - offs, 0))
    tl.store(hist_ptr + offs, tl.histogram(offs % 4, 16))


def test_gather_and_histogram_ir():
    x = np.zeros(16, np.int32)
    text = kir(_gather_hist, x, x, x)
    assert "gather" in text and "{axis = 0} : <16xint32>" in text
    assert "histogram" in text and "{num_bins = 16} : <16xint32>" in text
