"""Plain-dict views of the service's option and metadata messages.

Compile options and kernel metadata are dicts on both sides (they enter the compile key
and the cache as JSON). On the wire the well-known options are typed fields and the
rest travel in `extra`; metadata has typed fields for the well-known entries and the
whole dict as JSON, since codegen reports nested values (the argument layout).
"""
from __future__ import annotations

import json

from google.protobuf import descriptor

from . import compiler_pb2
from .convert import ConversionError, attr_to_proto, attrs_from_proto

OPTION_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug")
METADATA_FIELDS = ("name", "target", "num_warps", "num_stages", "num_ctas", "n_regs", "n_spills", "shared")


def options_to_proto(options: dict) -> compiler_pb2.CompileOptions:
    pb = compiler_pb2.CompileOptions()
    _fill(pb, options, OPTION_FIELDS)
    return pb


def options_from_proto(pb: compiler_pb2.CompileOptions) -> dict:
    options = {f: getattr(pb, f) for f in OPTION_FIELDS if pb.HasField(f)}
    options.update(attrs_from_proto(pb.extra))
    return options


def metadata_to_proto(metadata: dict) -> compiler_pb2.KernelMetadata:
    """Typed fields for the well-known entries, and the whole dict, exactly, as JSON."""
    pb = compiler_pb2.KernelMetadata(json=json.dumps(metadata, sort_keys=True, default=str))
    for name in METADATA_FIELDS:
        value = metadata.get(name)
        if _fits(pb, name, value):
            setattr(pb, name, value)
    return pb


def metadata_from_proto(pb: compiler_pb2.KernelMetadata) -> dict:
    if pb.json:
        return json.loads(pb.json)
    return {f: getattr(pb, f) for f in METADATA_FIELDS}  # a client that sent typed fields only


def _fill(pb, values: dict, fields) -> None:
    extra = {}
    for name, value in values.items():
        if name in fields and _fits(pb, name, value):
            setattr(pb, name, value)
        else:
            extra[name] = value
    for name in sorted(extra):
        try:
            attr = attr_to_proto(name, extra[name])
        except ConversionError:
            raise ConversionError(f"{name} = {extra[name]!r} is not an int, float, bool, str or a list of them") from None
        pb.extra.add(name=name, value=attr)


def _fits(pb, name: str, value) -> bool:
    """Whether `value` has exactly the type of field `name` (not True for num_warps, nor 1
    for debug), so that the dict comes back equal and the compile key stays the same."""
    kind = _PYTHON_TYPE[pb.DESCRIPTOR.fields_by_name[name].type]
    return type(value) is kind and (kind is not int or _INT32[0] <= value <= _INT32[1])


_INT32 = (-(1 << 31), (1 << 31) - 1)
_FD = descriptor.FieldDescriptor
_PYTHON_TYPE = {_FD.TYPE_INT32: int, _FD.TYPE_BOOL: bool, _FD.TYPE_STRING: str}
