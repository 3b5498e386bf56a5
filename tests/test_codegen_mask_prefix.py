"""Prefix-shaped masks (kiln.codegen.passes.mask_prefix) and the ring copies made of them.

Which masks are proved a prefix of every aligned run along the inner dim, and the counts
built for them, both checked against the interpreter's values on every run; then the
smem_pipeline pass on IR text (a count beside the mask of a prefix-shaped copy) and the
PTX: 16-byte cp.async with a src-size where the mask is a prefix, the ignore-src predicate
where it is constant over the copy, and no ring where neither is proved."""
import re
from itertools import product

import numpy as np
import pytest

from kiln.codegen import compile as compile_ir
from kiln.codegen.passes import mask_prefix
from kiln.codegen.analysis.axis_info import AxisAnalysis
from kiln.interpret.args import bind_arguments
from kiln.interpret.run import Program
from kiln.ir import parse_function, print_function, verify
from kiln.ir.core import Operation

from test_codegen_gpu_stage import MATMUL, pipelined

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


# --- the pass and the PTX: C = A B with A's K edge masked by a bound known nowhere -------

# A's load in the loop of MATMUL masked by column (i * 32 + k) PRED %kb, %kb an argument
# of unknown divisibility; B's by the loop's own rows (constant along B's inner dim N).
EDGE = """
    %k0 = mul %i, %c32 : int32
    %k0s = splat %k0 : <1x32xint32>
    %kcol = add %kc, %k0s : <1x32xint32>
    %kbs = splat %kb : <1x32xint32>
    MASK
    %inb = broadcast %in : <64x32xint1>
    %za = constant {value = 0.0} : <64x32xfp16>
    %x = load %qa, %inb, %za : <64x32xfp16>
    %k0r = splat %k0 : <32x1xint32>
    %kin = add %kr, %k0r : <32x1xint32>
    %kbr = splat %kb : <32x1xint32>
    %rin = cmp %kin, %kbr {pred = "lt"} : <32x1xint1>
    %rinb = broadcast %rin : <32x64xint1>
    %zb = constant {value = 0.0} : <32x64xfp16>
    %y = load %qb, %rinb, %zb : <32x64xfp16>"""
K_MASKS = {
    "prefix": '%in = cmp %kcol, %kbs {pred = "lt"} : <1x32xint1>',
    "prefix, as bound > column": '%in = cmp %kbs, %kcol {pred = "gt"} : <1x32xint1>',
    "suffix": '%in = cmp %kcol, %kbs {pred = "gt"} : <1x32xint1>',
    "every third": ('%three = constant {value = 3} : <1x32xint32>\n    %m3 = rem %kcol, %three : <1x32xint32>\n'
                    '    %zk = constant {value = 0} : <1x32xint32>\n    %in = cmp %m3, %zk {pred = "eq"} : <1x32xint1>'),
}


def k_edge_matmul(case):
    text = MATMUL.replace('%lda: int32 {divisibility = 16, name = "lda"}',
                          '%lda: int32 {divisibility = 16, name = "lda"}, %kb: int32 {name = "kb"}')
    text = text.replace("    %x = load %qa : <64x32xfp16>\n    %y = load %qb : <32x64xfp16>",
                        EDGE.replace("MASK", K_MASKS[case]).lstrip("\n"))
    text = text.replace("  %acc0 = constant", "  %c32 = constant {value = 32} : int32\n  %acc0 = constant")
    fn = parse_function(text)
    verify(fn)
    return fn


def copies(fn):
    return [op for op in fn.walk() if op.name == "async_copy"]


def chain(v, depth):
    """The names of the ops defining `v`, following each op's last operand `depth` times."""
    names = []
    for _ in range(depth):
        names.append(v.defining_op.name)
        v = v.defining_op.operands[-1] if v.defining_op.name in ("cast", "broadcast") else v.defining_op.operands[1]
    return names


@pytest.mark.parametrize("case", ["prefix", "prefix, as bound > column"])
def test_a_prefix_masked_load_becomes_a_copy_with_its_counts(case):
    fn, _ = pipelined(print_function(k_edge_matmul(case)))
    text = print_function(fn, locs=False)
    assert print_function(parse_function(text), locs=False) == text
    a_copies = [op for op in copies(fn) if op.operands[1].type.shape == (64, 32)]
    b_copies = [op for op in copies(fn) if op.operands[1].type.shape == (32, 64)]
    assert len(a_copies) == len(b_copies) == 3  # iterations 0 and 1 before the loop, i + 2 in it
    for op in a_copies:  # 16-byte copies: runs of 8 fp16
        assert len(op.operands) == 4 and op.attrs == {"prefix_run": 8}
        # the loop's in-range predicate picks the column's count: min(kb - column, 8) where column < kb
        assert chain(op.operands[3], 2) == ["select", "broadcast"]
        assert chain(op.operands[3].defining_op.operands[1].defining_op.operands[0], 2) == ["select", "cast"]
    assert re.search(r"= min %\d+, %\d+ : <1x32xuint32>", text) and re.search(r"= sub %\d+, %\d+ : <1x32xint32>", text)
    assert re.search(r"async_copy %\d+, %\d+, %\d+, %\d+ \{prefix_run = 8\}", text)
    for op in b_copies:  # B's mask is constant along its rows: a mask bit per copy, as before
        assert len(op.operands) == 3 and not op.attrs


@pytest.mark.parametrize("case", ["suffix", "every third"])
def test_a_mask_not_proved_a_prefix_keeps_the_loop_off_the_rings(case):
    fn, _ = pipelined(print_function(k_edge_matmul(case)))
    assert not copies(fn) and "dot" in [op.name for op in fn.walk()]


def test_the_verifier_checks_a_copys_count():
    fn, _ = pipelined(print_function(k_edge_matmul("prefix")))
    text = print_function(fn, locs=False)
    with pytest.raises(Exception, match="prefix_run"):
        verify(parse_function(text.replace("{prefix_run = 8}", "", 1)))
    with pytest.raises(Exception, match="power of two"):
        verify(parse_function(text.replace("{prefix_run = 8}", "{prefix_run = 6}", 1)))


SRC_SIZE = r"cp\.async\.cg\.shared\.global \[%r\d+(\+\d+)?\], \[%rd\d+\], 16, %r\d+;"
IGNORE_SRC = r"cp\.async\.cg\.shared\.global \[%r\d+(\+\d+)?\], \[%rd\d+\], 16, %p\d+;"


def test_prefix_masked_copies_are_16_bytes_with_a_src_size():
    """A's K edge: 16-byte copies whose src-size is the run's bytes inside K (the rest zero-
    filled); B's: the ignore-src predicate, which ptxas folds into the copy's own."""
    k = compile_ir(k_edge_matmul("prefix"), "sm_90a", {"num_warps": 4, "num_stages": 3}, check=True)
    ptx = k.ptx
    assert "wgmma.mma_async" in ptx and "cp.async.ca" not in ptx
    src_size, ignore_src = len(re.findall(SRC_SIZE, ptx)), len(re.findall(IGNORE_SRC, ptx))
    assert src_size and ignore_src and src_size + ignore_src == ptx.count("cp.async.cg.shared.global")
    assert ".local" not in ptx and k.n_spills == 0


@pytest.mark.parametrize("case", ["suffix", "every third"])
def test_a_mask_not_proved_a_prefix_keeps_its_narrow_loads(case):
    k = compile_ir(k_edge_matmul(case), "sm_90a", {"num_warps": 4, "num_stages": 3}, check=True)
    assert "cp.async" not in k.ptx and "wgmma" not in k.ptx and "mma.sync" in k.ptx
