"""The table from op name to its NumPy implementation.

Every implementation is `impl(ctx, op, *operand_values)` and returns the op's result (a
tuple or list for several, None for none). `ctx` is the running program (`run.Program`):
it gives `pid`, `grid`, `memory`, and runs regions. Terminators are handled by the walker.
"""
from __future__ import annotations

from kiln.ir.ops import BINARY_OPS, ORDER_OPS, ROUNDED_OPS

from . import arith, control, debug, dot, indexing, libdevicefns, mathfns, memops, shapes, specialfns


def _noop(ctx, op, *values):
    return None


IMPLS = {name: arith.binary for name in BINARY_OPS}
IMPLS.update({name: mathfns.unary for name in mathfns.FLOAT_UNARY})
IMPLS.update({name: specialfns.unary for name in specialfns.SPECIAL_UNARY})
IMPLS.update({name: libdevicefns.rounded for name in ROUNDED_OPS})
IMPLS.update({name: libdevicefns.special for name in libdevicefns.SPECIAL})
IMPLS.update({name: libdevicefns.bessel_of_order for name in ORDER_OPS})
IMPLS.update({
    "neg": arith.neg, "abs": arith.absolute, "not": arith.bitwise_not,
    "isnan": mathfns.isnan, "isinf": mathfns.isinf, "fma": mathfns.fma,
    "popc": arith.bit_count, "clz": arith.bit_count, "brev": arith.bit_count,
    "isfinite": mathfns.isfinite, "signbit": mathfns.signbit,
    "gather": indexing.gather, "histogram": indexing.histogram, "inline_asm": indexing.inline_asm,
    "cmp": arith.cmp, "select": arith.select,
    "cast": shapes.cast, "bitcast": shapes.bitcast,
    "cvt_r": libdevicefns.cvt_r, "rsqrt_rn": libdevicefns.rsqrt_rn,
    "constant": shapes.constant, "arange": shapes.arange,
    "program_id": shapes.program_id, "num_programs": shapes.num_programs,
    "splat": shapes.splat, "broadcast": shapes.broadcast, "expand_dims": shapes.expand_dims,
    "reshape": shapes.reshape, "permute": shapes.permute,
    "join": shapes.join, "split": shapes.split, "cat": shapes.cat,
    "multiple_of": shapes.identity, "max_contiguous": shapes.identity,
    "addptr": memops.addptr, "load": memops.load, "store": memops.store,
    "descriptor_load": lambda ctx, op, *values: values[-1],  # its fallback: the same block through pointers
    "atomic_rmw": memops.atomic_rmw, "atomic_cas": memops.atomic_cas,
    "dot": dot.dot,
    "for": control.for_loop, "if": control.if_else, "while": control.while_loop,
    "reduce": control.reduce, "scan": control.scan,
    "print": debug.print_values, "assert": debug.assert_true, "barrier": _noop, "assume": _noop,
    # grid dependency control orders this grid after the one before it on the GPU: the
    # interpreter runs grids one after another already
    "gdc_wait": _noop, "gdc_launch_dependents": _noop,
})

TERMINATORS = frozenset({"yield", "condition", "return"})
