"""Prefix-shaped masks (kiln.codegen.passes.mask_prefix): which masks are proved a prefix
of every aligned run along the inner dim, and the counts built for them, both checked
against the interpreter's values on every run."""
from itertools import product

import numpy as np
import pytest

from kiln.codegen.passes import mask_prefix
from kiln.codegen.passes.axis_info import AxisAnalysis
from kiln.interpret.args import bind_arguments
from kiln.interpret.run import Program
from kiln.ir import parse_function, verify
from kiln.ir.core import Operation

# A 4 x 32 mask over columns %c = %lo + arange(32) (%lo a multiple of 16, so aligned runs of
# 16 never wrap), %u = %odd + arange(32) (no alignment known), rows 0..3; %hi a bound known
# nowhere. Each case's lines define %mask.
MASKS = """
kernel @m(%lo: int32 {divisibility = 16, name = "lo"}, %hi: int32 {name = "hi"}, %rows: int32 {name = "rows"}, %odd: int32 {name = "odd"}) {
  %r = arange {end = 32, start = 0} : <32xint32>
  %los = splat %lo : <32xint32>
  %c1 = add %r, %los : <32xint32>
  %ce = expand_dims %c1 {axis = 0} : <1x32xint32>
  %c = broadcast %ce : <4x32xint32>
  %odds = splat %odd : <32xint32>
  %u1 = add %r, %odds : <32xint32>
  %ue = expand_dims %u1 {axis = 0} : <1x32xint32>
  %u = broadcast %ue : <4x32xint32>
  %h = splat %hi : <4x32xint32>
  %zero = constant {value = 0} : <4x32xint32>
  %rr = arange {end = 4, start = 0} : <4xint32>
  %re = expand_dims %rr {axis = 1} : <4x1xint32>
  %rws = splat %rows : <4x1xint32>
  %rowin = cmp %re, %rws {pred = "lt"} : <4x1xint1>
  %row = broadcast %rowin : <4x32xint1>
MASK
  return
}
"""

PROVED = {  # lines defining %mask -> the run it is proved a prefix of
    "lt": ('%mask = cmp %c, %h {pred = "lt"} : <4x32xint1>', 16),
    "le": ('%mask = cmp %c, %h {pred = "le"} : <4x32xint1>', 16),
    "gt": ('%mask = cmp %h, %c {pred = "gt"} : <4x32xint1>', 16),
    "ge": ('%mask = cmp %h, %c {pred = "ge"} : <4x32xint1>', 16),
    "edge": ('%lower = cmp %c, %zero {pred = "ge"} : <4x32xint1>\n'  # a descriptor load's bounds check
             '%upper = cmp %c, %h {pred = "lt"} : <4x32xint1>\n'
             '%cols = and %lower, %upper : <4x32xint1>\n'
             '%mask = and %row, %cols : <4x32xint1>', 16),
    "or": ('%upper = cmp %c, %h {pred = "lt"} : <4x32xint1>\n'
           '%mask = or %upper, %row : <4x32xint1>', 16),
    "both bounds": ('%h2 = splat %rows : <4x32xint32>\n'
                    '%a = cmp %c, %h {pred = "lt"} : <4x32xint1>\n'
                    '%b = cmp %c, %h2 {pred = "le"} : <4x32xint1>\n'
                    '%mask = and %a, %b : <4x32xint1>', 16),
    "int64": ('%c64 = cast %c : <4x32xint64>\n'
              '%h64 = cast %h : <4x32xint64>\n'
              '%mask = cmp %c64, %h64 {pred = "lt"} : <4x32xint1>', 16),
    "uint32": ('%cu = cast %c : <4x32xuint32>\n'
               '%hu = cast %h : <4x32xuint32>\n'
               '%mask = cmp %cu, %hu {pred = "lt"} : <4x32xint1>', 16),
    "1-D, expanded": ('%h1 = splat %hi : <32xint32>\n'
                      '%m1 = cmp %c1, %h1 {pred = "lt"} : <32xint1>\n'
                      '%me = expand_dims %m1 {axis = 0} : <1x32xint1>\n'
                      '%mask = broadcast %me : <4x32xint1>', 16),
    "suffix": ('%mask = cmp %c, %h {pred = "gt"} : <4x32xint1>', 1),  # false first, then true
    "not below": ('%mask = cmp %c, %h {pred = "ge"} : <4x32xint1>', 1),
    "every third": ('%three = constant {value = 3} : <4x32xint32>\n'
                    '%m3 = rem %c, %three : <4x32xint32>\n'
                    '%mask = cmp %m3, %zero {pred = "eq"} : <4x32xint1>', 1),
    "unaligned": ('%mask = cmp %u, %h {pred = "lt"} : <4x32xint1>', 1),  # a run may wrap past INT_MAX
    "strided": ('%two = constant {value = 2} : <4x32xint32>\n'
                '%c2 = mul %c, %two : <4x32xint32>\n'
                '%mask = cmp %c2, %h {pred = "lt"} : <4x32xint1>', 1),
    "not a prefix": ('%upper = cmp %c, %h {pred = "lt"} : <4x32xint1>\n'
                     '%mask = xor %upper, %row : <4x32xint1>', 1),
    "rows only": ('%mask = and %row, %row : <4x32xint1>', 32),  # constant along the columns
}


def mask_kernel(case):
    fn = parse_function(MASKS.replace("MASK", PROVED[case][0]))
    verify(fn)
    return fn, fn.body.ops[-2].results[0]


@pytest.mark.parametrize("case", PROVED)
def test_which_masks_are_proved_prefixes_of_each_run(case):
    fn, mask = mask_kernel(case)
    assert mask_prefix.prefix_run(mask, 1, AxisAnalysis(fn)) == PROVED[case][1]


INT32 = (-2 ** 31, -48, -17, -1, 0, 1, 5, 15, 16, 17, 31, 32, 33, 47, 2 ** 31 - 1)
ALIGNED = (-2 ** 31, -48, -32, 0, 16, 2 ** 31 - 32)


def with_count(fn, mask, run):
    """`fn` with the mask's count built at its end, as smem_pipeline builds it; the count."""
    added = []

    def emit(name, operands, t, **attrs):
        added.append(Operation(name, operands, [t], attrs))
        return added[-1].results[0]
    count = mask_prefix.count_true(mask, 1, run, AxisAnalysis(fn), emit, lambda v: v)
    for op in added:
        op.parent = fn.body
        fn.body.ops.insert(len(fn.body.ops) - 1, op)
    verify(fn)
    return count


def interpret(fn, values, args):
    """The interpreter's arrays for `values` after running `fn` on scalar `args`."""
    bound, memory = bind_arguments(fn, list(args))
    program = Program(fn, fn.name, (1, 1, 1), memory)
    with np.errstate(all="ignore"):
        program.run_block(fn.body, bound)
    return [program.env[v] for v in values]


@pytest.mark.parametrize("case", [c for c, (_, run) in PROVED.items() if run > 1])
def test_counts_are_each_runs_true_elements_which_come_first(case):
    """For every aligned run of v <= w elements (w the proved run) starting at e: the mask
    is true on a prefix of it, min(count[e], v) long. Bounds at and past the ends of int32."""
    fn, mask = mask_kernel(case)
    run = min(PROVED[case][1], 16)
    count = with_count(fn, mask, run)
    checked = 0
    for lo, hi, rows in product(ALIGNED, INT32, (0, 2, 4)):
        m, n = interpret(fn, [mask, count], (lo, hi, rows, 3))
        for v in (1, 2, 4, 8, 16)[:run.bit_length()]:
            bits = m.reshape(4, 32 // v, v)
            true = bits.sum(axis=2)
            assert (bits == (np.arange(v) < true[..., None])).all(), (lo, hi, rows, v)  # a prefix
            np.testing.assert_array_equal(np.minimum(n[:, ::v], v), true, err_msg=f"lo={lo} hi={hi} rows={rows} v={v}")
            assert ((0 <= n) & (n <= run)).all()  # a src-size of at most the run's bytes
            checked += true.size
    assert checked > 1000
