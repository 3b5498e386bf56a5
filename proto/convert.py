"""Block IR to and from its protobuf form `kiln.v1.Function`, and its canonical bytes.

Values travel as numbers in definition order (see proto/kiln/v1/ir.proto); attributes
as a list sorted by name; source file names once each in `Function.files`. So the
encoding of a function depends only on the function, and `canonical_bytes` can be hashed.
"""
from __future__ import annotations

import numbers
import re

from google.protobuf.message import DecodeError

from kiln.ir.core import Block, Function, Loc, Operation, Value
from kiln.ir.ops import GPU_STAGE_OPS, OPS
from kiln.ir.types import SCALAR_TYPES, block_type, dtype, pointer_type, tensormap

from . import ir_pb2

IR_VERSION = ir_pb2.IR_VERSION_1
_INT64 = (-(1 << 63), (1 << 63) - 1)
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*\Z")
_ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # what the IR text's parser reads back as a name


class ConversionError(ValueError):
    """A protobuf that is not valid block IR (or an IR that cannot be encoded)."""


# --- types -----------------------------------------------------------------------------

def type_to_proto(t: dtype) -> ir_pb2.Type:
    if isinstance(t, block_type):
        if t.encoding is not None:
            raise ConversionError(f"{t} has a layout: a GPU-stage type, codegen's own")
        return ir_pb2.Type(block=ir_pb2.BlockType(element=type_to_proto(t.element_ty), shape=t.shape))
    if isinstance(t, pointer_type):
        return ir_pb2.Type(pointer=ir_pb2.PointerType(
            element=type_to_proto(t.element_ty), address_space=t.address_space, const=t.const))
    if isinstance(t, dtype):
        return ir_pb2.Type(scalar=t.name)
    raise ConversionError(f"not a block IR type: {t!r}")


def type_from_proto(pb: ir_pb2.Type) -> dtype:
    kind = pb.WhichOneof("kind")
    if kind == "scalar":
        if pb.scalar == tensormap.name:
            return tensormap
        if pb.scalar not in SCALAR_TYPES:
            raise ConversionError(f"unknown scalar type {pb.scalar!r}")
        return SCALAR_TYPES[pb.scalar]
    if kind == "pointer":
        element = type_from_proto(pb.pointer.element)
        if isinstance(element, block_type):
            raise ConversionError("a pointer cannot point to a block")
        return pointer_type(element, pb.pointer.address_space, pb.pointer.const)
    if kind == "block":
        element = type_from_proto(pb.block.element)
        if isinstance(element, block_type):
            raise ConversionError("a block cannot hold blocks")
        if not pb.block.shape or any(d < 1 for d in pb.block.shape):
            raise ConversionError(f"bad block shape {list(pb.block.shape)}")
        return block_type(element, pb.block.shape)
    raise ConversionError("a type with no kind")


# --- attributes --------------------------------------------------------------------------

def _list_to_proto(name: str, items) -> ir_pb2.Attr:
    items = list(items)
    if all(isinstance(v, bool) for v in items) and items:
        return ir_pb2.Attr(bool_list=ir_pb2.BoolList(values=items))
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
        if any(not _INT64[0] <= v <= _INT64[1] for v in items):
            raise ConversionError(f"attribute {name!r}: list item outside int64")
        return ir_pb2.Attr(int_list=ir_pb2.IntList(values=[int(v) for v in items]))
    if all(isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) for v in items):
        return ir_pb2.Attr(float_list=ir_pb2.FloatList(values=[float(v) for v in items]))
    if all(isinstance(v, str) for v in items):
        return ir_pb2.Attr(string_list=ir_pb2.StringList(values=items))
    raise ConversionError(f"attribute {name!r}: a list must hold ints, floats, bools or strings alone: {items!r}")


def attr_to_proto(name: str, value) -> ir_pb2.Attr:
    if isinstance(value, bool):
        return ir_pb2.Attr(bool_value=value)
    if isinstance(value, numbers.Integral):
        value = int(value)
        if _INT64[0] <= value <= _INT64[1]:
            return ir_pb2.Attr(int_value=value)
        return ir_pb2.Attr(big_int=str(value))
    if isinstance(value, numbers.Real):
        return ir_pb2.Attr(float_value=float(value))
    if isinstance(value, str):
        return ir_pb2.Attr(string_value=value)
    if isinstance(value, dtype):
        return ir_pb2.Attr(type_value=type_to_proto(value))
    if isinstance(value, (list, tuple)):
        return _list_to_proto(name, value)
    raise ConversionError(f"attribute {name!r}: cannot encode {value!r}")


def attr_from_proto(name: str, pb: ir_pb2.Attr):
    kind = pb.WhichOneof("value")
    if kind is None:
        raise ConversionError(f"attribute {name!r} has no value")
    if kind == "big_int":
        try:
            return int(pb.big_int)
        except ValueError:
            raise ConversionError(f"attribute {name!r}: bad integer {pb.big_int!r}") from None
    if kind == "type_value":
        return type_from_proto(pb.type_value)
    value = getattr(pb, kind)
    return list(value.values) if kind.endswith("_list") else value


def attrs_to_proto(attrs: dict, out) -> None:
    """Append `attrs` to the repeated NamedAttr field `out`, sorted by name."""
    for name in sorted(attrs):
        out.add(name=name, value=attr_to_proto(name, attrs[name]))


def attrs_from_proto(items) -> dict:
    attrs = {}
    for item in items:
        if not _ATTR_NAME.match(item.name) or item.name in attrs:
            raise ConversionError(f"attribute name {item.name[:64]!r} is not a word of letters, digits and _, "
                                  "or is repeated")
        attrs[item.name] = attr_from_proto(item.name, item.value)
    return attrs


# --- functions ---------------------------------------------------------------------------

class _Encoder:
    def __init__(self):
        self.numbers: dict[int, int] = {}   # id(Value) -> value number
        self.files: dict[str, int] = {}

    def define(self, v: Value) -> None:
        self.numbers[id(v)] = len(self.numbers)

    def use(self, v: Value, op: Operation) -> int:
        try:
            return self.numbers[id(v)]
        except KeyError:
            raise ConversionError(f"'{op.name}' uses a value of type {v.type} before it is defined") from None

    def op(self, op: Operation) -> ir_pb2.Operation:
        pb = ir_pb2.Operation(name=op.name, operands=[self.use(v, op) for v in op.operands],
                              result_types=[type_to_proto(r.type) for r in op.results])
        for r in op.results:
            self.define(r)
        attrs_to_proto(op.attrs, pb.attrs)
        for region in op.regions:
            self.region(region, pb.regions.add())
        if op.loc is not None:
            file = self.files.setdefault(op.loc.file, len(self.files))
            pb.loc.CopyFrom(ir_pb2.Location(file=file, line=op.loc.line, col=op.loc.col))
        return pb

    def region(self, block: Block, pb: ir_pb2.Region) -> None:
        pb.arg_types.extend(type_to_proto(a.type) for a in block.args)
        for a in block.args:
            self.define(a)
        pb.ops.extend(self.op(op) for op in block.ops)

    def function(self, fn: Function) -> ir_pb2.Function:
        pb = ir_pb2.Function(ir_version=IR_VERSION, name=fn.name)
        for value, name, attrs in zip(fn.args, fn.arg_names, fn.arg_attrs):
            arg = pb.args.add(name=name, type=type_to_proto(value.type))
            attrs_to_proto(attrs, arg.attrs)
            self.define(value)
        attrs_to_proto(fn.attrs, pb.attrs)
        pb.body.extend(self.op(op) for op in fn.body.ops)
        pb.files.extend(self.files)  # dicts keep insertion order: order of first use
        return pb


class _Decoder:
    def __init__(self, files):
        self.values: list[Value] = []
        self.in_scope: list[bool] = []
        self.files = list(files)

    def define(self, v: Value, in_scope: bool = True) -> None:
        self.values.append(v)
        self.in_scope.append(in_scope)

    def use(self, number: int, where: str) -> Value:
        if number >= len(self.values) or not self.in_scope[number]:
            raise ConversionError(f"{where}: operand %{number} is not a value defined before it in scope")
        return self.values[number]

    def op(self, pb: ir_pb2.Operation, where: str) -> Operation:
        where = f"{where} '{pb.name}'"
        if pb.name not in OPS:
            raise ConversionError(f"{where}: unknown op")
        if pb.name in GPU_STAGE_OPS:
            raise ConversionError(f"{where}: codegen's own op, not one a kernel may send")
        operands = [self.use(n, where) for n in pb.operands]
        types = [self.type(t, where) for t in pb.result_types]
        attrs = attrs_from_proto(pb.attrs)
        op = Operation(pb.name, operands, types, attrs, (), self.loc(pb, where))
        first = len(self.values)
        for r in op.results:  # numbered before the regions, but not visible inside them
            self.define(r, in_scope=False)
        for i, region in enumerate(pb.regions):
            block = self.region(region, f"{where} region {i}:")
            block.parent = op
            op.regions.append(block)
        for n in range(first, first + len(op.results)):
            self.in_scope[n] = True
        return op

    def region(self, pb: ir_pb2.Region, where: str) -> Block:
        first = len(self.values)
        block = Block([self.type(t, where) for t in pb.arg_types])
        for a in block.args:
            self.define(a)
        for i, op in enumerate(pb.ops):
            block.append(self.op(op, f"{where} op {i}"))
        for n in range(first, len(self.values)):
            self.in_scope[n] = False
        return block

    def type(self, pb: ir_pb2.Type, where: str) -> dtype:
        try:
            return type_from_proto(pb)
        except (ConversionError, TypeError) as e:
            raise ConversionError(f"{where}: {e}") from None

    def loc(self, pb: ir_pb2.Operation, where: str) -> Loc | None:
        if not pb.HasField("loc"):
            return None
        if pb.loc.file >= len(self.files):
            raise ConversionError(f"{where}: location names file #{pb.loc.file} of {len(self.files)}")
        return Loc(self.files[pb.loc.file], pb.loc.line, pb.loc.col)

    def function(self, pb: ir_pb2.Function) -> Function:
        if not _SYMBOL.match(pb.name):
            raise ConversionError(f"bad kernel name {pb.name!r}")
        types = [self.type(a.type, f"argument {a.name!r}") for a in pb.args]
        fn = Function(pb.name, types, [a.name for a in pb.args],
                      [attrs_from_proto(a.attrs) for a in pb.args], attrs_from_proto(pb.attrs))
        for a in fn.args:
            self.define(a)
        for i, op in enumerate(pb.body):
            fn.body.append(self.op(op, f"@{pb.name} op {i}"))
        return fn


def function_to_proto(fn: Function) -> ir_pb2.Function:
    """`fn` as a `kiln.v1.Function` message."""
    return _Encoder().function(fn)


def function_from_proto(pb: ir_pb2.Function, verify: bool = False) -> Function:
    """The `Function` that `pb` describes; `ConversionError` if it is not valid block IR.

    The structure (known ops, types, value numbers in scope, an IR version this kiln
    reads) is always checked; with `verify`, the IR verifier's type rules as well.
    """
    if pb.ir_version != IR_VERSION:
        raise ConversionError(f"unsupported ir_version {pb.ir_version}: this kiln reads version {IR_VERSION}")
    fn = _Decoder(pb.files).function(pb)
    if verify:
        from kiln.ir.verifier import VerificationError, verify as verify_ir
        try:
            verify_ir(fn)
        except VerificationError as e:
            raise ConversionError(str(e)) from None
    return fn


def function_from_bytes(data: bytes, verify: bool = False) -> Function:
    """Parse a serialized `kiln.v1.Function` (see `function_from_proto`)."""
    pb = ir_pb2.Function()
    try:
        pb.ParseFromString(data)
    except DecodeError as e:
        raise ConversionError(f"not a serialized kiln.v1.Function: {e}") from None
    return function_from_proto(pb, verify)


def canonical_bytes(fn: Function) -> bytes:
    """The deterministic serialization of `fn`: what a compile worker receives."""
    return function_to_proto(fn).SerializeToString(deterministic=True)


def key_bytes(fn: Function) -> bytes:
    """What the compile key hashes: `canonical_bytes(fn)` with each source file named by its place
    in the file table, so that a kernel's key does not change with where its file lives or what it
    is called (another node's checkout, another user's home, a container's mount; Inductor names
    its files by a hash of their whole text, so one kernel gets a file per device index). Triton
    keys on the source, not its file, alike. The paths stay in what is compiled: they are only
    line info, and a kernel found under its key carries the first compile's."""
    return canonical_forms(fn)[1]


def canonical_forms(fn: Function, encoded: ir_pb2.Function | None = None) -> tuple[bytes, bytes]:
    """`(canonical_bytes(fn), key_bytes(fn))`, from one encoding: `encoded`, fn's own made already
    (`function_to_proto(fn)`, left as it was), or a new one."""
    pb = function_to_proto(fn) if encoded is None else encoded
    canonical = pb.SerializeToString(deterministic=True)
    files = list(pb.files)
    del pb.files[:]
    pb.files.extend(str(i) for i in range(len(files)))
    keyed = pb.SerializeToString(deterministic=True)
    del pb.files[:]
    pb.files.extend(files)
    return canonical, keyed
