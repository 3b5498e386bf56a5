"""`asm['ttir']`: a kernel's block IR written in Triton's TTIR spelling (MLIR's text form).

Tools and tests written for Triton read `compiled.asm["ttir"]` for facts about the frontend's
output: an argument's type (`%val: f16`), a conversion (`arith.extf %val : f16 to f32`), a
constant's type (`arith.constant 1.000000e+10 : f32`), a loop's hints (`tt.flatten`). This is
the same program as `asm["kir"]`, op for op, each op spelled as the TTIR op that means the same:

    module {
      tt.func public @add(%x: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %n: i32) attributes {noinline = false} {
        %0 = tt.get_program_id x : i32 loc("add.py":4:10)
        ...
        tt.return
      }
    }

It is a rendering for reading, not an input: kiln never parses it. What differs from Triton's:
`@jit` calls are inlined (no `tt.call`; `parse_to_ttir` keeps them, as Triton's frontend
does, under Triton's symbol names), nothing is optimized (no CSE, canonicalization or
unrolling: Triton's `ttir` is after its TTIR passes), results are numbered (`%0`, and MLIR's
`%c1_i32`, `%cst`, `%true` for constants) where Triton names them after the variables, and an
op with no TTIR counterpart prints in MLIR's generic form under kiln's name (`"kiln.erfinv"(%0)
: (f32) -> f32`). Spelling rules (predicates, signedness) follow the operand types: kiln keeps
signedness in the type, TTIR in the op (`arith.divsi` / `arith.divui`).
"""
from __future__ import annotations

import json
import math

import numpy as np

from kiln.ir.core import Block, Function, Operation, Value
from kiln.ir.types import block_type, dtype, pointer_type

__all__ = ["call_leaves", "mangle_call", "parse_to_ttir", "render_ttir", "ttir_type"]

_SCALARS = {
    "int1": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "i8", "uint16": "i16", "uint32": "i32", "uint64": "i64",
    "fp8e4nv": "f8E4M3FN", "fp8e5": "f8E5M2", "fp8e4b8": "f8E4M3FNUZ", "fp8e5b16": "f8E5M2FNUZ",
    "fp8e4b15": "f8E4M3B11FNUZ", "fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64",
}


def ttir_type(t: dtype) -> str:
    """`t` in MLIR's spelling: `i32`, `!tt.ptr<f16>`, `tensor<16x!tt.ptr<f32>>`."""
    if isinstance(t, block_type):
        return "tensor<" + "x".join(str(d) for d in t.shape) + "x" + ttir_type(t.element_ty) + ">"
    if isinstance(t, pointer_type):
        space = "" if t.address_space == 1 else f", {t.address_space}"
        return f"!tt.ptr<{ttir_type(t.element_ty)}{space}>"
    name = _SCALARS.get(getattr(t, "name", None))
    return name if name is not None else f"!kiln<{json.dumps(str(t))}>"


def _scalar(t: dtype) -> dtype:
    return t.element_ty if isinstance(t, block_type) else t


def _kind(t: dtype) -> str:
    """'f' (float), 's' (signed int), 'u' (unsigned int or int1), 'p' (pointer) or '?'."""
    s = _scalar(t)
    if isinstance(s, pointer_type):
        return "p"
    if s.is_floating():
        return "f"
    if s.is_int():
        return "s" if s.is_int_signed() else "u"
    return "?"


# --- constants ------------------------------------------------------------------------------

def _float_text(value: float, t: dtype) -> str:
    """MLIR's float literal: `4.200000e+01`; more digits where six do not give the value back
    in `t`; the bits in hex for inf and nan (`0x7F800000`)."""
    np_type = t.to_numpy()
    if not math.isfinite(value):
        bits = np.array([value], dtype=np_type).view(f"u{np_type.itemsize}")[0]
        return f"0x{int(bits):0{2 * np_type.itemsize}X}"
    text = f"{value:.6e}"
    if np.array(float(text), dtype=np_type) != np.array(value, dtype=np_type):
        text = f"{float(np.array(value, dtype=np_type)):.17e}"
    return text


def _int_value(value, t: dtype) -> int:
    """The integer as MLIR prints an iN: two's complement, signed (uint32 0xFFFFFFFF is -1)."""
    bits = t.primitive_bitwidth
    value = int(value) & ((1 << bits) - 1)
    return value - (1 << bits) if bits > 1 and value >> (bits - 1) else value


def _constant(value, t: dtype, type_text=ttir_type) -> tuple[str, str]:
    """(MLIR's name for the result, the literal with its type, written by `type_text`)."""
    s = _scalar(t)
    if s.is_bool():
        literal, name = ("true", "true") if value else ("false", "false")
    elif s.is_floating():
        literal, name = _float_text(float(value), s), "cst"
    else:
        v = _int_value(value, s)
        literal, name = str(v), f"c{v}_{ttir_type(s)}"
    if isinstance(t, block_type):
        return "cst", f"dense<{literal}> : {type_text(t)}"
    return name, f"{literal} : {type_text(t)}"


# --- calls: Triton's symbol names --------------------------------------------------------------

def call_leaves(value):
    """(tensors, rebuild) of a @jit call's argument or result: the tensors that the call passes
    (a tuple's, an aggregate's, a block pointer's), and `rebuild(tensors)` giving the value back
    with everything else (constexprs, functions, Python values) as it was."""
    from kiln.aggregates import _STRUCTURED
    from kiln.language.core import is_aggregate, tensor
    if isinstance(value, tensor):
        return [value], lambda leaves: leaves[0]
    if isinstance(value, _STRUCTURED):
        return value.leaves(), value.rebuild
    if is_aggregate(value):
        names = type(value).__kiln_aggregate_fields__
        leaves, rebuild_fields = call_leaves(tuple(getattr(value, n) for n in names))
        return leaves, lambda new: value._rebuild(dict(zip(names, rebuild_fields(new))))
    if isinstance(value, tuple):
        parts = [call_leaves(v) for v in value]

        def rebuild(leaves):
            out, start = [], 0
            for found, sub in parts:
                out.append(sub(leaves[start:start + len(found)]))
                start += len(found)
            return type(value)(*out) if hasattr(type(value), "_fields") else tuple(out)
        return [leaf for found, _ in parts for leaf in found], rebuild
    return [], lambda leaves: value


def _mangle_type(value) -> str:
    """Triton's `type.mangle()` of a value passed to a @jit function."""
    from kiln.language.core import constexpr, is_aggregate, tensor
    if isinstance(value, constexpr):
        return f"constexpr_type[{value.value}]"
    if isinstance(value, tensor):
        return _mangle_dtype(value.type)
    if is_aggregate(value):
        cls = type(value)
        fields = ", ".join(_mangle_type(getattr(value, n)) for n in cls.__kiln_aggregate_fields__)
        return f"{cls.__module__}.{cls.__qualname__}<{fields}>"
    if isinstance(value, tuple):
        return "T" + "_".join(_mangle_type(v) for v in value) + "T"
    return f"constexpr_type[{value}]"


def _mangle_dtype(t: dtype) -> str:
    if isinstance(t, block_type):
        return f"{_mangle_dtype(t.element_ty)}S{'_'.join(str(d) for d in t.shape)}S"
    if isinstance(t, pointer_type):
        return "P" + _mangle_dtype(t.element_ty)
    if t.is_int():
        return ("i" if t.is_int_signed() or t.primitive_bitwidth == 1 else "u") + str(t.primitive_bitwidth)
    return str(t)


def mangle_call(fn, arguments: dict) -> str:
    """The symbol Triton gives `fn` called with these arguments (name -> value, in order):
    `module.qualname__<types of the runtime arguments>__<constants by path>`, as its
    `code_generator.mangle_fn` spells them."""
    from kiln.jit import JITFunction
    from kiln.language.core import constexpr, dtype as tl_dtype, tensor
    from kiln.language.semantic import unwrap
    constants, values = [], []

    def visit(path, value):
        if isinstance(value, constexpr) and isinstance(value.value, (list, tuple)) \
                and not hasattr(type(value.value), "_fields"):
            value = value.value
        if isinstance(value, (list, tuple)) and not isinstance(value, tensor):
            for i, item in enumerate(value):
                visit(path + (i,), item)
        elif isinstance(value, (bool, int, float, tl_dtype, JITFunction)) and not path[1:]:
            constants.append((path, constexpr(value)))  # Triton wraps these when they are arguments
        elif value is None or isinstance(value, (constexpr, tl_dtype, JITFunction)):
            constants.append((path, value))
        else:
            values.append(value)

    for i, value in enumerate(arguments.values()):
        visit((i,), value if not isinstance(unwrap(value), (list, tuple)) else unwrap(value))

    def text(value):
        return f"constexpr[{value.value}]" if isinstance(value, constexpr) else repr(value)
    consts = "_".join(f"{path}c{text(v)}" for path, v in sorted(constants, key=lambda c: c[0]))
    consts = consts.replace(".", "_d_").replace("'", "_sq_").replace("[", "_").replace("]", "_")
    types = "_".join(_mangle_type(v) for v in values)
    return f"{fn.fn.__module__}.{fn.fn.__qualname__}__{types}__{consts}"


def _symbol(name: str) -> str:
    """`@name`, quoted where MLIR needs it (`@"f__T<i32S4S>__"`)."""
    bare = name[:1].isalpha() or name[:1] == "_"
    return "@" + (name if bare and all(c.isalnum() or c in "_$." for c in name) else json.dumps(name))


# --- ops ------------------------------------------------------------------------------------

# kiln op -> TTIR op, by the operands' kind ('f', 's', 'u'; '*' for any). Binary ops print as
# `NAME %a, %b : T`, unary ones as `NAME %a : T`.
_ELEMENTWISE = {
    "add": {"f": "arith.addf", "*": "arith.addi"}, "sub": {"f": "arith.subf", "*": "arith.subi"},
    "mul": {"f": "arith.mulf", "*": "arith.muli"},
    "div": {"f": "arith.divf", "s": "arith.divsi", "u": "arith.divui"},
    "rem": {"f": "arith.remf", "s": "arith.remsi", "u": "arith.remui"},
    "min": {"f": "arith.minnumf", "s": "arith.minsi", "u": "arith.minui"},
    "max": {"f": "arith.maxnumf", "s": "arith.maxsi", "u": "arith.maxui"},
    "and": {"*": "arith.andi"}, "or": {"*": "arith.ori"}, "xor": {"*": "arith.xori"},
    "shl": {"*": "arith.shli"}, "shr": {"s": "arith.shrsi", "u": "arith.shrui"},
    "umulhi": {"*": "tt.mulhiui"}, "div_rn": {"f": "tt.precise_divf"}, "sqrt_rn": {"f": "tt.precise_sqrt"},
    "pow": {"f": "math.powf"}, "atan2": {"f": "math.atan2"}, "copysign": {"f": "math.copysign"},
    "abs": {"f": "math.absf", "s": "math.absi"},
    "exp": {"f": "math.exp"}, "exp2": {"f": "math.exp2"}, "log": {"f": "math.log"},
    "log2": {"f": "math.log2"}, "log1p": {"f": "math.log1p"}, "sqrt": {"f": "math.sqrt"},
    "rsqrt": {"f": "math.rsqrt"}, "sin": {"f": "math.sin"}, "cos": {"f": "math.cos"},
    "tan": {"f": "math.tan"}, "tanh": {"f": "math.tanh"}, "erf": {"f": "math.erf"},
    "floor": {"f": "math.floor"}, "ceil": {"f": "math.ceil"}, "round": {"f": "math.round"},
    "trunc": {"f": "math.trunc"}, "fma": {"f": "math.fma"}, "expm1": {"f": "math.expm1"},
    "log10": {"f": "math.log10"}, "cbrt": {"f": "math.cbrt"}, "sinh": {"f": "math.sinh"},
    "cosh": {"f": "math.cosh"}, "asin": {"f": "math.asin"}, "acos": {"f": "math.acos"},
    "atan": {"f": "math.atan"}, "erfc": {"f": "math.erfc"}, "rint": {"f": "math.roundeven"},
    "popc": {"*": "math.ctpop"}, "clz": {"*": "math.ctlz"},
}

_INT_PREDICATES = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_FLOAT_PREDICATES = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_AXES = "xyz"
_LOOP_HINTS = {  # kiln's `for` attribute -> TTIR's
    "num_stages": "tt.num_stages", "loop_unroll_factor": "tt.loop_unroll_factor",
    "flatten": "tt.flatten", "disallow_acc_multi_buffer": "tt.disallow_acc_multi_buffer",
    "warp_specialize": "tt.warp_specialize",
}


def _cast_name(src: dtype, dst: dtype) -> str:
    """The TTIR op that converts a `src` value to `dst` as kiln's `cast` does."""
    a, b = _kind(src), _kind(dst)
    s, d = _scalar(src), _scalar(dst)
    if a == "p" or b == "p":
        return "tt.bitcast" if a == b else ("tt.ptr_to_int" if a == "p" else "tt.int_to_ptr")
    if a == "f" and b == "f":
        if s.is_fp8() or d.is_fp8():
            return "tt.fp_to_fp"
        return "arith.extf" if d.primitive_bitwidth > s.primitive_bitwidth else "arith.truncf"
    if a == "f":
        return "arith.fptosi" if b == "s" else "arith.fptoui"
    if b == "f":
        return "arith.sitofp" if a == "s" else "arith.uitofp"
    if d.primitive_bitwidth > s.primitive_bitwidth:
        return "arith.extsi" if a == "s" else "arith.extui"
    return "arith.trunci" if d.primitive_bitwidth < s.primitive_bitwidth else "arith.bitcast"


# ops that are one TTIR op of a fixed name (besides those the renderer spells by their operands' kinds)
_FIXED = {
    "constant": "arith.constant", "select": "arith.select", "bitcast": "tt.bitcast",
    "program_id": "tt.get_program_id", "num_programs": "tt.get_num_programs", "arange": "tt.make_range",
    "splat": "tt.splat", "broadcast": "tt.broadcast", "expand_dims": "tt.expand_dims", "reshape": "tt.reshape",
    "permute": "tt.trans", "join": "tt.join", "cat": "tt.cat", "split": "tt.split", "addptr": "tt.addptr",
    "load": "tt.load", "store": "tt.store", "atomic_rmw": "tt.atomic_rmw", "atomic_cas": "tt.atomic_cas",
    "dot": "tt.dot", "reduce": "tt.reduce", "scan": "tt.scan", "for": "scf.for", "if": "scf.if",
    "while": "scf.while", "call": "tt.call", "condition": "scf.condition", "return": "tt.return",
    "print": "tt.print", "assert": "tt.assert", "barrier": "gpu.barrier", "gather": "tt.gather",
    "histogram": "tt.histogram", "inline_asm": "tt.elementwise_inline_asm", "assume": "llvm.intr.assume",
}
_YIELDS = {"tt.reduce": "tt.reduce.return", "tt.scan": "tt.scan.return", "tt.func": "tt.return"}


def op_name(op: Operation, parent: str) -> str:
    """The name of the TTIR op kiln's `op` is (inside an op named `parent`: a `yield` is that op's
    terminator), or `kiln.NAME` where TTIR has none. Of the ops the renderer writes as two (`not`,
    an integer `neg`, an `addptr` of an unsigned offset), the second: the one with `op`'s result."""
    if op.name in _FIXED:
        return _FIXED[op.name]
    if op.name == "yield":
        return _YIELDS.get(parent, "scf.yield")
    if op.name == "cast":
        return _cast_name(op.operands[0].type, op.results[0].type)
    if op.name == "cmp":
        return "arith.cmpf" if _kind(op.operands[0].type) == "f" else "arith.cmpi"
    if op.name == "not":
        return "arith.xori"
    if op.name == "neg":
        return "arith.negf" if _kind(op.operands[0].type) == "f" else "arith.subi"
    return _elementwise_name(op) or "kiln." + op.name


def _elementwise_name(op: Operation) -> str | None:
    """The TTIR op of an elementwise kiln op by its operands' kind (`_ELEMENTWISE`), or None."""
    table = _ELEMENTWISE.get(op.name)
    if table is None or not op.operands:
        return None
    kind = _kind(op.operands[0].type)
    return table.get(kind) or table.get("*") or (table.get("s") if kind == "u" else None)


def _attr(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value} : i32"
    if isinstance(value, float):
        return f"{_float_text(value, dtype('fp32'))} : f32"
    if isinstance(value, (list, tuple)):
        return "array<i32: " + ", ".join(str(int(v)) for v in value) + ">"
    text = str(value)
    return text if text.startswith("#") else json.dumps(text)  # an MLIR attribute alias: as is


def _attrs(attrs: dict) -> str:
    if not attrs:
        return ""
    return " {" + ", ".join(k if v is True else f"{k} = {_attr(v)}" for k, v in sorted(attrs.items())) + "}"


def _print_prefix(prefix: str, has_values: bool) -> str:
    """The prefix as Triton's frontend stores it: ending in ": " when values follow, and a
    longer one starting with a space (`device_print("x", v)` prints " x: ")."""
    if has_values:
        prefix = prefix if prefix.endswith(" ") else prefix + " "
        prefix = prefix if prefix.endswith(": ") else prefix[:-1] + ": "
    return " " + prefix if len(prefix) > 2 and not prefix.startswith(" ") else prefix


class _Renderer:
    def __init__(self, args, names, locs: bool, lines: list, callees: dict):
        self.locs = locs
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.counter = 0
        self.block_args = len(args)
        self.lines = lines
        self.callees = callees  # symbol -> the body of its first call, for `tt.func private`
        for value, name in zip(args, names):
            self.names[id(value)] = self.fresh(name if name.isidentifier() else "arg")

    def type(self, t: dtype) -> str:
        """`t` as this rendering spells types (TTIR's: no layouts)."""
        return ttir_type(t)

    # -- names --
    def fresh(self, base: str) -> str:
        """`%base`, or MLIR's `%base_0`, `%base_1`, ... once that is taken."""
        name, n = base, 0
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return "%" + name

    def number(self) -> str:
        while str(self.counter) in self.taken:
            self.counter += 1
        self.taken.add(str(self.counter))
        self.counter += 1
        return f"%{self.counter - 1}"

    def define(self, op: Operation, base: str | None = None) -> str:
        """Name `op`'s results (`%3`, or `%3:2` for two), or '' for none; the text before `=`."""
        if not op.results:
            return ""
        head = self.fresh(base) if base else self.number()
        if len(op.results) == 1:
            self.names[id(op.results[0])] = head
            return head + " = "
        for i, r in enumerate(op.results):
            self.names[id(r)] = f"{head}#{i}"
        return f"{head}:{len(op.results)} = "

    def block_arg(self, value: Value) -> str:
        name = self.fresh(f"arg{self.block_args}")
        self.block_args += 1
        self.names[id(value)] = name
        return name

    def use(self, v: Value) -> str:
        return self.names.get(id(v), "%<undefined>")

    def uses(self, values) -> str:
        return ", ".join(self.use(v) for v in values)

    def loc(self, op: Operation) -> str:
        if not self.locs or op.loc is None:
            return ""
        return f" loc({json.dumps(op.loc.file)}:{op.loc.line}:{op.loc.col})"

    def emit(self, indent: str, text: str, op: Operation | None = None):
        self.lines.append(indent + text + (self.loc(op) if op is not None else ""))

    # -- ops --
    def op(self, op: Operation, indent: str, parent: str):
        special = getattr(self, "op_" + op.name, None)
        if special is not None:
            special(op, indent, parent)
            return
        name = _elementwise_name(op)
        if name is not None:
            t = self.type(op.results[0].type)
            self.emit(indent, f"{self.define(op)}{name} {self.uses(op.operands)} : {t}", op)
            return
        self.generic(op, indent, "kiln." + op.name)

    def generic(self, op: Operation, indent: str, name: str):
        ins = ", ".join(self.type(v.type) for v in op.operands)
        outs = ", ".join(self.type(r.type) for r in op.results)
        outs = outs if len(op.results) == 1 else f"({outs})"
        head = self.define(op)
        text = f'{head}"{name}"({self.uses(op.operands)}){_attrs(op.attrs)} : ({ins}) -> {outs}'
        if not op.regions:
            self.emit(indent, text, op)
            return
        self.emit(indent, text.replace(f" : ({ins})", " ({", 1))
        for i, region in enumerate(op.regions):
            if i:
                self.lines.append(indent + "}, {")
            self.region(region, indent, op.name, header=True)
        self.emit(indent, f"}}) : ({ins}) -> {outs}", op)

    def region(self, block: Block, indent: str, parent: str, header: bool):
        if header:
            args = ", ".join(f"{self.block_arg(a)}: {self.type(a.type)}" for a in block.args)
            self.lines.append(f"{indent}^bb0({args}):")
        for inner in block.ops:
            self.op(inner, indent + "  ", parent)

    def op_constant(self, op, indent, parent):
        name, literal = _constant(op.attrs["value"], op.results[0].type, self.type)
        self.emit(indent, f"{self.define(op, name)}arith.constant {literal}", op)

    def _synthesized_constant(self, value, t, indent, op) -> str:
        """A constant that TTIR spells where kiln's op implies it (`not` is `xori` with -1)."""
        base, literal = _constant(value, t, self.type)
        name = self.fresh(base)
        self.emit(indent, f"{name} = arith.constant {literal}", op)
        return name

    def op_not(self, op, indent, parent):
        t = op.results[0].type
        ones = self._synthesized_constant(-1, t, indent, op)
        self.emit(indent, f"{self.define(op)}arith.xori {self.use(op.operands[0])}, {ones} : {self.type(t)}", op)

    def op_neg(self, op, indent, parent):
        t = op.results[0].type
        if _kind(t) == "f":
            self.emit(indent, f"{self.define(op)}arith.negf {self.use(op.operands[0])} : {self.type(t)}", op)
            return
        zero = self._synthesized_constant(0, t, indent, op)
        self.emit(indent, f"{self.define(op)}arith.subi {zero}, {self.use(op.operands[0])} : {self.type(t)}", op)

    def op_cast(self, op, indent, parent):
        src, dst = op.operands[0].type, op.results[0].type
        name = _cast_name(src, dst)
        extra = f", rounding = {op.attrs['rounding']}" if "rounding" in op.attrs and name == "tt.fp_to_fp" else ""
        sep = " -> " if name.startswith("tt.") else " to "
        self.emit(indent, f"{self.define(op)}{name} {self.use(op.operands[0])}{extra} : "
                          f"{self.type(src)}{sep}{self.type(dst)}", op)

    def op_bitcast(self, op, indent, parent):
        src, dst = op.operands[0].type, op.results[0].type
        self.emit(indent, f"{self.define(op)}tt.bitcast {self.use(op.operands[0])} : "
                          f"{self.type(src)} -> {self.type(dst)}", op)

    def op_cmp(self, op, indent, parent):
        a = op.operands[0].type
        kind = _kind(a)
        if kind == "f":
            name, pred = "arith.cmpf", _FLOAT_PREDICATES[op.attrs["pred"]]
        else:
            pred = op.attrs["pred"]
            pred = pred if pred in ("eq", "ne") else ("u" if kind in ("u", "p") else "s") + pred
            name = "arith.cmpi"
        self.emit(indent, f"{self.define(op)}{name} {pred}, {self.uses(op.operands)} : {self.type(a)}", op)

    def op_select(self, op, indent, parent):
        cond, value = op.operands[0].type, op.results[0].type
        types = f"{self.type(cond)}, {self.type(value)}" if isinstance(cond, block_type) else self.type(value)
        self.emit(indent, f"{self.define(op)}arith.select {self.uses(op.operands)} : {types}", op)

    def op_program_id(self, op, indent, parent):
        self.emit(indent, f"{self.define(op)}tt.get_program_id {_AXES[op.attrs['axis']]} : i32", op)

    def op_num_programs(self, op, indent, parent):
        self.emit(indent, f"{self.define(op)}tt.get_num_programs {_AXES[op.attrs['axis']]} : i32", op)

    def op_arange(self, op, indent, parent):
        start, end = op.attrs["start"], op.attrs["end"]
        self.emit(indent, f"{self.define(op)}tt.make_range {{end = {end} : i32, start = {start} : i32}} : "
                          f"{self.type(op.results[0].type)}", op)

    def _shape_op(self, op, indent, name, attrs=""):
        ins = ", ".join(self.type(v.type) for v in op.operands[:1])
        self.emit(indent, f"{self.define(op)}{name} {self.uses(op.operands)}{attrs} : {ins} -> "
                          f"{self.type(op.results[0].type)}", op)

    def op_splat(self, op, indent, parent):
        self._shape_op(op, indent, "tt.splat")

    def op_broadcast(self, op, indent, parent):
        self._shape_op(op, indent, "tt.broadcast")

    def op_expand_dims(self, op, indent, parent):
        self._shape_op(op, indent, "tt.expand_dims", f" {{axis = {op.attrs['axis']} : i32}}")

    def op_reshape(self, op, indent, parent):
        self._shape_op(op, indent, "tt.reshape", " allow_reorder" if op.attrs.get("can_reorder") else "")

    def op_permute(self, op, indent, parent):
        order = ", ".join(str(i) for i in op.attrs["order"])
        self._shape_op(op, indent, "tt.trans", f" {{order = array<i32: {order}>}}")

    def op_join(self, op, indent, parent):
        self._shape_op(op, indent, "tt.join")

    def op_cat(self, op, indent, parent):
        self._shape_op(op, indent, "tt.cat")

    def op_split(self, op, indent, parent):
        self._shape_op(op, indent, "tt.split")

    def op_addptr(self, op, indent, parent):
        ptr, offset = op.operands
        offset_text, offset_type = self.use(offset), offset.type
        s = _scalar(offset_type)
        if not s.is_int_signed() and s.primitive_bitwidth < 64:
            # kiln's addptr zero-extends an unsigned offset; TTIR's addptr sign-extends
            wide = block_type(dtype("int64"), offset_type.shape) if isinstance(offset_type, block_type) \
                else dtype("int64")
            name = self.number()
            self.emit(indent, f"{name} = arith.extui {offset_text} : {self.type(offset_type)} to "
                              f"{self.type(wide)}", op)
            offset_text, offset_type = name, wide
        self.emit(indent, f"{self.define(op)}tt.addptr {self.use(ptr)}, {offset_text} : "
                          f"{self.type(ptr.type)}, {self.type(offset_type)}", op)

    def _memory_attrs(self, op) -> str:
        attrs = {}
        for key, ttir_key in (("cache", "cache"), ("evict", "evict"), ("volatile", "isVolatile")):
            if key in op.attrs:
                attrs[ttir_key] = op.attrs[key]
        return _attrs(attrs)

    def op_load(self, op, indent, parent):
        self.emit(indent, f"{self.define(op)}tt.load {self.uses(op.operands)}{self._memory_attrs(op)} : "
                          f"{self.type(op.operands[0].type)}", op)

    def op_store(self, op, indent, parent):
        self.emit(indent, f"tt.store {self.uses(op.operands)}{self._memory_attrs(op)} : "
                          f"{self.type(op.operands[0].type)}", op)

    def op_atomic_rmw(self, op, indent, parent):
        kind = op.attrs["kind"]
        k = _kind(op.operands[1].type)
        if kind in ("max", "min"):
            kind = kind if k == "s" else "u" + kind
        kind = {"add": "fadd" if k == "f" else "add", "xchg": "exch"}.get(kind, kind)
        types = ", ".join(self.type(v.type) for v in op.operands)
        self.emit(indent, f"{self.define(op)}tt.atomic_rmw {kind}, {op.attrs['sem']}, {op.attrs['scope']}, "
                          f"{self.uses(op.operands)} : ({types}) -> {self.type(op.results[0].type)}", op)

    def op_atomic_cas(self, op, indent, parent):
        types = ", ".join(self.type(v.type) for v in op.operands)
        self.emit(indent, f"{self.define(op)}tt.atomic_cas {op.attrs['sem']}, {op.attrs['scope']}, "
                          f"{self.uses(op.operands)} : ({types}) -> {self.type(op.results[0].type)}", op)

    def op_dot(self, op, indent, parent):
        a, b, c = op.operands
        precision = op.attrs.get("input_precision")
        extra = f", inputPrecision = {precision}" if precision else ""
        self.emit(indent, f"{self.define(op)}tt.dot {self.uses(op.operands)}{extra} : {self.type(a.type)} * "
                          f"{self.type(b.type)} -> {self.type(c.type)}", op)

    def _combine(self, op, indent, name, attrs):
        ins = ", ".join(self.type(v.type) for v in op.operands)
        outs = ", ".join(self.type(r.type) for r in op.results)
        head = self.define(op)
        self.emit(indent, f'{head}"{name}"({self.uses(op.operands)}) <{{{attrs}}}> ({{')
        self.region(op.regions[0], indent, name, header=True)
        self.emit(indent, f"}}) : ({ins}) -> {outs if len(op.results) == 1 else '(' + outs + ')'}", op)

    def op_reduce(self, op, indent, parent):
        self._combine(op, indent, "tt.reduce", f"axis = {op.attrs['axis']} : i32")

    def op_scan(self, op, indent, parent):
        reverse = "true" if op.attrs.get("reverse") else "false"
        self._combine(op, indent, "tt.scan", f"axis = {op.attrs['axis']} : i32, reverse = {reverse}")

    def op_for(self, op, indent, parent):
        lb, ub, step, *inits = op.operands
        body = op.regions[0]
        head = self.define(op)
        iv = self.block_arg(body.args[0])
        text = f"{head}scf.for {iv} = {self.use(lb)} to {self.use(ub)} step {self.use(step)}"
        if inits:
            pairs = ", ".join(f"{self.block_arg(a)} = {self.use(v)}" for a, v in zip(body.args[1:], inits))
            text += f" iter_args({pairs}) -> ({', '.join(self.type(v.type) for v in inits)})"
        self.emit(indent, f"{text} : {self.type(lb.type)} {{")
        self.region(body, indent, "scf.for", header=False)
        hints = {_LOOP_HINTS[k]: v for k, v in op.attrs.items() if k in _LOOP_HINTS and v is not None}
        if op.attrs.get("disable_licm"):  # Triton's attribute, spelt without its aliases
            hints["llvm.loop_annotation"] = "#llvm.loop_annotation<licm = <disable = true, versioningDisable = true>>"
        self.emit(indent, "}" + _attrs(hints), op)

    def op_if(self, op, indent, parent):
        types = ", ".join(self.type(r.type) for r in op.results)
        head = self.define(op)
        self.emit(indent, f"{head}scf.if {self.use(op.operands[0])}{' -> (' + types + ')' if types else ''} {{")
        self.region(op.regions[0], indent, "scf.if", header=False)
        self.lines.append(indent + "} else {")
        self.region(op.regions[1], indent, "scf.if", header=False)
        self.emit(indent, "}", op)

    def op_while(self, op, indent, parent):
        before, after = op.regions
        ins = ", ".join(self.type(v.type) for v in op.operands)
        outs = ", ".join(self.type(r.type) for r in op.results)
        head = self.define(op)
        pairs = ", ".join(f"{self.block_arg(a)} = {self.use(v)}" for a, v in zip(before.args, op.operands))
        self.emit(indent, f"{head}scf.while ({pairs}) : ({ins}) -> ({outs}) {{")
        self.region(before, indent, "scf.while", header=False)
        self.lines.append(indent + "} do {")
        self.region(after, indent, "scf.while", header=True)
        self.emit(indent, "}", op)

    def op_call(self, op, indent, parent):
        callee = op.attrs["callee"]
        self.callees.setdefault(callee, op.regions[0])
        ins = ", ".join(self.type(v.type) for v in op.operands)
        outs = ", ".join(self.type(r.type) for r in op.results)
        self.emit(indent, f"{self.define(op)}tt.call {_symbol(callee)}({self.uses(op.operands)}) : ({ins}) -> "
                          f"{outs if len(op.results) == 1 else '(' + outs + ')'}", op)

    def op_yield(self, op, indent, parent):
        name = {"tt.reduce": "tt.reduce.return", "tt.scan": "tt.scan.return", "tt.func": "tt.return"}.get(
            parent, "scf.yield")
        types = ", ".join(self.type(v.type) for v in op.operands)
        self.emit(indent, f"{name} {self.uses(op.operands)} : {types}" if op.operands else name, op)

    def op_condition(self, op, indent, parent):
        cond, *rest = op.operands
        types = ", ".join(self.type(v.type) for v in rest)
        self.emit(indent, f"scf.condition({self.use(cond)}) {self.uses(rest)} : {types}" if rest
                  else f"scf.condition({self.use(cond)})", op)

    def op_return(self, op, indent, parent):
        self.emit(indent, "tt.return", op)

    def op_print(self, op, indent, parent):
        signed = ", ".join("1" if _kind(v.type) == "s" else "0" for v in op.operands)
        operands = "".join(f" : {self.use(v)} : {self.type(v.type)}" for v in op.operands)
        hex_ = "true" if op.attrs.get("hex") else "false"
        self.emit(indent, f"tt.print {json.dumps(_print_prefix(op.attrs.get('prefix', ''), bool(op.operands)))} "
                          f"{{hex = {hex_}, isSigned = array<i32{': ' + signed if signed else ''}>}}{operands}", op)

    def op_assert(self, op, indent, parent):
        cond = op.operands[0]
        self.emit(indent, f"tt.assert {self.use(cond)}, {json.dumps(op.attrs.get('message', ''))} : "
                          f"{self.type(cond.type)}", op)

    def op_assume(self, op, indent, parent):
        self.emit(indent, f"llvm.intr.assume {self.use(op.operands[0])} : i1", op)

    def op_barrier(self, op, indent, parent):
        self.emit(indent, "gpu.barrier", op)

    def op_gather(self, op, indent, parent):
        src, index = op.operands
        self.emit(indent, f"{self.define(op)}tt.gather {self.use(src)}[{self.use(index)}] "
                          f"{{axis = {op.attrs['axis']} : i32}} : ({self.type(src.type)}, {self.type(index.type)}) "
                          f"-> {self.type(op.results[0].type)}", op)

    def op_histogram(self, op, indent, parent):
        self._shape_op(op, indent, "tt.histogram")

    # -- functions --
    def kernel(self, fn: Function):
        args = []
        for value, attrs in zip(fn.args, fn.arg_attrs):
            text = f"{self.use(value)}: {self.type(value.type)}"
            if "divisibility" in attrs:
                text += f" {{tt.divisibility = {attrs['divisibility']} : i32}}"
            args.append(text)
        self.lines.append(f"  tt.func public {_symbol(fn.name)}({', '.join(args)}) attributes {{noinline = false}} {{")
        self.region(fn.body, "  ", "tt.func", header=False)
        self.lines.append("  }")

    def callee(self, symbol: str, body: Block):
        args = ", ".join(f"{self.use(a)}: {self.type(a.type)}" for a in body.args)
        results = [self.type(v.type) for v in body.ops[-1].operands]
        ret = "" if not results else f" -> {results[0]}" if len(results) == 1 else f" -> ({', '.join(results)})"
        self.lines.append(f"  tt.func private {_symbol(symbol)}({args}){ret} attributes {{noinline = false}} {{")
        self.region(body, "  ", "tt.func", header=False)
        self.lines.append("  }")


def render_ttir(fn: Function, locs: bool = True) -> str:
    """`fn` in Triton's TTIR spelling (the module docstring says how it differs from Triton's);
    the bodies of its `call` ops (`build_kernel(keep_calls=True)`) follow as `tt.func private`,
    one per symbol."""
    lines, callees = ["module {"], {}
    _Renderer(fn.args, fn.arg_names, locs, lines, callees).kernel(fn)
    done = set()
    while len(done) < len(callees):  # a body may call more
        symbol = next(s for s in callees if s not in done)
        done.add(symbol)
        body = callees[symbol]
        _Renderer(body.args, [f"arg{i}" for i in range(len(body.args))], locs, lines, callees).callee(symbol, body)
    lines.append("}")
    return "\n".join(lines) + "\n"


def parse_to_ttir(jitfn, args=(), kwargs=None, locs: bool = False) -> str:
    """The TTIR text of kernel `jitfn` specialized for `args` and `kwargs`, with its calls of
    other @jit functions kept (`tt.call`, a `tt.func private` per specialization), as Triton's
    frontend builds it: what upstream's `triton._filecheck.run_parser` checks."""
    return render_ttir(kernel_with_calls(jitfn, args, kwargs), locs=locs)


def kernel_with_calls(jitfn, args=(), kwargs=None) -> Function:
    """The block IR of kernel `jitfn` specialized for `args` and `kwargs` as `parse_to_ttir` renders
    it: its calls of other @jit functions kept as `call` ops (printed, walked, never run)."""
    from .ast_to_ir import build_kernel
    from .compiler import codegen_options
    from .specialize import COMPILE_ONLY, specialize
    key, values, _ = jitfn.binder(*args, **(kwargs or {}))
    options = {k: v for k, v in jitfn.binder.options(key, values).items() if v is not None}
    compile_only = COMPILE_ONLY.set(True)  # nothing runs: host tensors are fine, as in Triton's frontend
    try:
        _, params, _ = specialize(jitfn, dict(zip(jitfn.arg_names, values)), options)
    finally:
        COMPILE_ONLY.reset(compile_only)
    return build_kernel(jitfn, params, name=jitfn.kernel_name(params), options=codegen_options(options),
                        keep_calls=True)
