#!/usr/bin/env python3
"""Regenerate the committed protobuf/gRPC modules in proto/ from proto/kiln/v1/*.proto.

    python scripts/gen_proto.py           # rewrite proto/*_pb2*.py
    python scripts/gen_proto.py --check   # exit 1 if the committed modules are stale

Needs grpcio-tools (a development dependency only: the runtime needs protobuf and grpcio).
protoc names the modules after their .proto paths (`kiln.v1.ir_pb2`); we flatten them
into proto/ and rewrite their imports so they load as `kiln.proto.ir_pb2`, while the
descriptor pool keeps the unique file names `kiln/v1/*.proto`.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent.parent / "proto"
SOURCES = ("kiln/v1/ir.proto", "kiln/v1/compiler.proto")
WITH_SERVICES = ("kiln/v1/compiler.proto",)
# The generated gRPC module refuses a grpcio older than the grpcio-tools that wrote it.
# It uses nothing newer than the grpcio on the GPU machine, so we declare that as the floor
# (pyproject.toml requires the same).
GRPC_FLOOR = "1.84.0"


def _fix(text: str) -> str:
    text = re.sub(r"^from kiln\.v1 import (\w+)", r"from kiln.proto import \1", text, flags=re.M)
    text = re.sub(r"^GRPC_GENERATED_VERSION = '[^']*'", f"GRPC_GENERATED_VERSION = '{GRPC_FLOOR}'", text, flags=re.M)
    return text


def generate() -> dict[str, str]:
    """The generated modules as {file name in proto/: text}."""
    from grpc_tools import protoc  # imported here: only this script needs grpcio-tools

    include = Path(protoc.__file__).parent / "_proto"
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for source in SOURCES:
            args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={tmp}"]
            if source in WITH_SERVICES:
                args.append(f"--grpc_python_out={tmp}")
            if protoc.main(args + [str(PROTO_DIR / source)]) != 0:
                raise RuntimeError(f"protoc failed on {source}")
        for path in sorted(Path(tmp, "kiln", "v1").glob("*.py")):
            out[path.name] = _fix(path.read_text())
    return out


def stale(generated: dict[str, str]) -> list[str]:
    """Names of committed modules that differ from `generated` (or are missing)."""
    return [name for name, text in generated.items()
            if not (PROTO_DIR / name).exists() or (PROTO_DIR / name).read_text() != text]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale modules")
    args = parser.parse_args(argv)
    generated = generate()
    names = stale(generated)
    if args.check:
        for name in names:
            print(f"stale: proto/{name}", file=sys.stderr)
        return 1 if names else 0
    for name in names:
        (PROTO_DIR / name).write_text(generated[name])
        print(f"wrote proto/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
