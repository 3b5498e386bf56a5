"""The `kiln.v1` protobuf schema of block IR and of the compile service.

`ir_pb2`, `compiler_pb2` and `compiler_pb2_grpc` are generated from proto/kiln/v1/*.proto
by scripts/gen_proto.py and committed; `convert` maps block IR to and from them and
`key` computes the compile key.
"""
from .convert import (IR_VERSION, ConversionError, canonical_bytes, function_from_bytes,
                      function_from_proto, function_to_proto)
from .key import compile_key, compiler_identity

__all__ = ["IR_VERSION", "ConversionError", "canonical_bytes", "compile_key", "compiler_identity",
           "function_from_bytes", "function_from_proto", "function_to_proto"]
