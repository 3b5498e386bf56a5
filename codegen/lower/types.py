"""Block IR scalar types -> LLVM types (registers hold int1 as i1; memory holds it as i8)."""
from __future__ import annotations

import llvmlite.ir as ir

from kiln.ir.types import bfloat16_bits, scalar_of

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))


class BFloatType(ir.Type):
    """LLVM's `bfloat`, which llvmlite lacks; constants print as `0xR` hex."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, BFloatType)

    def __hash__(self):
        return hash("bfloat")

    def format_constant(self, value):
        return f"0xR{bfloat16_bits(value):04X}"  # (ml_dtypes' rounding, without its import)


F16, BF16, F32, F64 = ir.HalfType(), BFloatType(), ir.FloatType(), ir.DoubleType()
GLOBAL_PTR = ir.PointerType(addrspace=1)
SHARED_PTR = ir.PointerType(addrspace=3)
GENERIC_PTR = ir.PointerType()
VOID = ir.VoidType()

_SCALAR = {
    "int1": I1, "int8": I8, "uint8": I8, "int16": I16, "uint16": I16,
    "int32": I32, "uint32": I32, "int64": I64, "uint64": I64,
    "fp8e4nv": I8, "fp8e5": I8, "fp8e4b8": I8, "fp8e5b16": I8, "fp8e4b15": I8, "fp16": F16, "bf16": BF16, "fp32": F32, "fp64": F64,
}


def reg_type(t) -> ir.Type:
    """The LLVM type of one element of `t` in a register."""
    s = scalar_of(t)
    if s.is_ptr():
        return GLOBAL_PTR
    return _SCALAR[s.name]


def mem_type(t) -> ir.Type:
    """The LLVM type of one element of `t` in global memory."""
    s = scalar_of(t)
    return I8 if s.name == "int1" else reg_type(s)


def int_type(bits: int) -> ir.IntType:
    return ir.IntType(bits)


def bits_of(t) -> int:
    s = scalar_of(t)
    return 64 if s.is_ptr() else (8 if s.name == "int1" else s.primitive_bitwidth)


def half_words(lw, halves: list) -> list:
    """fp16 registers as f16x2 words (i32s), consecutive pairs, the first in the low half: how
    the tensor cores take and give fp16 accumulators (an accumulator's columns 2t and 2t + 1)."""
    if len(halves) % 2:
        raise ValueError(f"{len(halves)} fp16 registers do not pair into f16x2 words")
    words = []
    for lo, hi in zip(halves[::2], halves[1::2]):
        pair = ir.Constant(ir.VectorType(F16, 2), ir.Undefined)
        pair = lw.b.insert_element(lw.b.insert_element(pair, lo, lw.i32(0)), hi, lw.i32(1))
        words.append(lw.b.bitcast(pair, I32))
    return words


def word_halves(lw, words: list) -> list:
    """f16x2 words back to fp16 registers, low half first."""
    pairs = [lw.b.bitcast(w, ir.VectorType(F16, 2)) for w in words]
    return [lw.b.extract_element(p, lw.i32(i)) for p in pairs for i in range(2)]
