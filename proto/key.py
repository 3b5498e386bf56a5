"""The compile key: what a compiled kernel is stored under, on every process of the node.

SHA-256 over the canonical IR bytes, the target, the options (keys sorted) and the
compiler's identity (kiln version, a hash of codegen's sources, the LLVM and nvJitLink
versions), each part length-prefixed so that no two different inputs run together.
Nothing else enters it: two processes that build the same kernel get the same key.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from pathlib import Path

from kiln.ir.core import Function

from .convert import canonical_bytes

_DOMAIN = b"kiln.compile_key.v1"


def compile_key(fn: Function, target: str, options: dict, compiler_identity: dict | None = None) -> str:
    """The hex SHA-256 compile key of `fn` built for `target` with `options`.

    `compiler_identity` defaults to this process's `compiler_identity()`.
    """
    return key_from_canonical(canonical_bytes(fn), target, options, compiler_identity)


def key_from_canonical(ir_bytes: bytes, target: str, options: dict, compiler_identity: dict | None = None) -> str:
    identity = compiler_identity if compiler_identity is not None else _identity()
    h = hashlib.sha256()
    for part in (_DOMAIN, ir_bytes, target.encode(), _json(options, "options"), _json(identity, "identity")):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _json(value: dict, what: str) -> bytes:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise TypeError(f"compile key: {what} must be plain JSON values ({e})") from None


def compiler_identity() -> dict[str, str]:
    """What, besides the IR, target and options, decides the generated code."""
    return dict(_identity())


@functools.lru_cache(maxsize=1)  # computed on first need, once per process
def _identity() -> dict[str, str]:
    return {
        "kiln": _kiln_version(),
        "codegen": codegen_source_hash(),
        "llvm": _llvm_version(),
        "nvjitlink": _nvjitlink_version(),
    }


def _kiln_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("kiln")
    except PackageNotFoundError:
        return "unknown"


def codegen_source_hash() -> str:
    """SHA-256 over the paths and contents of the `kiln.codegen` package's .py files.

    Found without importing codegen, which is heavy and may not import at all.
    """
    spec = importlib.util.find_spec("kiln.codegen")
    h = hashlib.sha256()
    if spec is None or not spec.submodule_search_locations:
        return "absent"
    root = Path(list(spec.submodule_search_locations)[0])
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _llvm_version() -> str:
    try:
        import llvmlite.binding as llvm
        return ".".join(map(str, llvm.llvm_version_info))
    except Exception:  # no llvmlite: codegen cannot run either, but keys still work
        return "none"


def _nvjitlink_version() -> str:
    try:
        from cuda.bindings import nvjitlink
        return ".".join(map(str, nvjitlink.version()))
    except Exception:  # the wheel or its shared library is missing: PTX-only builds
        return "none"
