"""The committed *_pb2*.py modules match what scripts/gen_proto.py makes of the .proto files."""
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("grpc_tools")

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gen_proto.py"


def _script():
    spec = importlib.util.spec_from_file_location("gen_proto", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_modules_are_current():
    gen = _script()
    generated = gen.generate()
    assert {"ir_pb2.py", "compiler_pb2.py", "compiler_pb2_grpc.py"} <= set(generated)
    assert gen.stale(generated) == [], "run: python scripts/gen_proto.py"


def test_generated_modules_import_as_kiln_proto():
    from kiln.proto import compiler_pb2, compiler_pb2_grpc, ir_pb2
    assert compiler_pb2.CompileRequest.DESCRIPTOR.fields_by_name["ir"].message_type is ir_pb2.Function.DESCRIPTOR
    assert compiler_pb2.DESCRIPTOR.name == "kiln/v1/compiler.proto"
    assert hasattr(compiler_pb2_grpc, "CompilerStub")
