"""The `kiln.v1` protobuf schema of block IR and of the compile service.

`ir_pb2`, `compiler_pb2` and `compiler_pb2_grpc` are generated from proto/kiln/v1/*.proto
by scripts/gen_proto.py and committed; `convert` maps block IR to and from them and
`key` computes the compile key.

The names below load on first use: a warm-cache first call asks `key.compiler_identity` and
never needs protobuf (~10 ms of imports on a rank's first kernel).
"""
from __future__ import annotations

import importlib

_FROM = {"IR_VERSION": "convert", "ConversionError": "convert", "canonical_bytes": "convert",
         "function_from_bytes": "convert", "function_from_proto": "convert", "function_to_proto": "convert",
         "compile_key": "key", "compiler_identity": "key"}
__all__ = sorted(_FROM)


def __getattr__(name: str):
    if name in _FROM:
        return getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
