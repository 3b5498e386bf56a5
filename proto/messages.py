"""Plain-dict views of the service's option and metadata messages.

Compile options and kernel metadata are dicts on both sides (they enter the compile key
and the cache as JSON); on the wire the well-known ones are typed fields and the rest
travel in `extra`.
"""
from __future__ import annotations

import json

from google.protobuf import descriptor

from . import compiler_pb2
from .convert import attr_to_proto, attrs_from_proto, attrs_to_proto, ConversionError

OPTION_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug")
METADATA_FIELDS = ("name", "target", "num_warps", "num_stages", "num_ctas", "n_regs", "n_spills", "shared")


def options_to_proto(options: dict) -> compiler_pb2.CompileOptions:
    pb = compiler_pb2.CompileOptions()
    _fill(pb, options, OPTION_FIELDS)
    return pb


def options_from_proto(pb: compiler_pb2.CompileOptions) -> dict:
    options = {f: getattr(pb, f) for f in OPTION_FIELDS if pb.HasField(f)}
    return _merge_extra(options, pb.extra)


def metadata_to_proto(metadata: dict) -> compiler_pb2.KernelMetadata:
    pb = compiler_pb2.KernelMetadata()
    _fill(pb, metadata, METADATA_FIELDS, lenient=True)
    return pb


def metadata_from_proto(pb: compiler_pb2.KernelMetadata) -> dict:
    # proto3 scalars have no presence: a zero is reported as zero
    return _merge_extra({f: getattr(pb, f) for f in METADATA_FIELDS}, pb.extra)


def _fill(pb, values: dict, fields, lenient: bool = False) -> None:
    extra = {}
    for name, value in values.items():
        # A typed field only for a value of exactly its type (not True for num_warps, nor
        # 1 for debug), so that the dict comes back equal and the compile key stays the same.
        if (name in fields and type(value) is _PYTHON_TYPE[pb.DESCRIPTOR.fields_by_name[name].type]
                and (type(value) is not int or _INT32[0] <= value <= _INT32[1])):
            setattr(pb, name, value)
        else:
            extra[name] = value
    for name in sorted(extra):
        try:
            attr = attr_to_proto(name, extra[name])
        except ConversionError:
            if lenient:  # metadata is informative: keep what cannot be typed as JSON text
                attr = attr_to_proto(name, json.dumps(extra[name], default=str))
            else:
                raise ConversionError(f"{name} = {extra[name]!r} is not an int, float, bool, str or a list of them") from None
        pb.extra.add(name=name, value=attr)


_INT32 = (-(1 << 31), (1 << 31) - 1)
_FD = descriptor.FieldDescriptor
_PYTHON_TYPE = {_FD.TYPE_INT32: int, _FD.TYPE_BOOL: bool, _FD.TYPE_STRING: str}


def _merge_extra(values: dict, extra) -> dict:
    values.update(attrs_from_proto(extra))
    return values
