"""The compile key: what a compiled kernel is stored under, on every process of the node.

SHA-256 over the canonical IR bytes (source files by their place in its file table, not their paths: `convert.key_bytes`), the target, the options (keys sorted) and the
compiler's identity (kiln version, a hash of codegen's and the IR package's sources, the LLVM and nvJitLink
versions, a digest of the libdevice it links), each part length-prefixed so that no two
different inputs run together.
Nothing else enters it: two processes that build the same kernel get the same key.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

from kiln.ir.core import Function

_DOMAIN = b"kiln.compile_key.v1"


def compile_key(fn: Function, target: str, options: dict, compiler_identity: dict | None = None,
                encoded=None) -> str:
    """The hex SHA-256 compile key of `fn` built for `target` with `options`.

    `compiler_identity` defaults to this process's `compiler_identity()`; `encoded`: fn's
    `function_to_proto`, where the caller made it already (a miss sends it to the daemon).
    """
    from .convert import canonical_forms  # protobuf: not for the identity alone (a warm first call)
    return key_from_canonical(canonical_forms(fn, encoded)[1], target, options, compiler_identity)


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
    import kiln
    return {"kiln": kiln.__version__, "codegen": codegen_source_hash(), **_toolchain_versions()}


def _toolchain_versions() -> dict[str, str]:
    """The LLVM, nvJitLink and standalone ptxas versions (ptxas assembles the kernels that set
    their registers, kiln.codegen.ptxas; "" where there is none) and the libdevice's digest (its
    contents: a path says nothing of them, and differs between nodes). Asking costs ~50 ms of
    imports and a lookup, too much for a warm-cache first call, so the answer is remembered on
    disk next to the cache, keyed by the size and mtime of the files it came from."""
    from kiln.cache import paths
    from kiln.cache.env import cache_dir, cache_shared

    fingerprint = _toolchain_fingerprint()
    memo = cache_dir() / "toolchain.json"
    try:
        saved = json.loads(memo.read_text())
        remembered = {name: saved[name] for name in ("llvm", "nvjitlink", "ptxas", "libdevice")}
        if saved["fingerprint"] == fingerprint and all(type(v) is str for v in remembered.values()):
            return remembered
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from kiln.codegen.libdevice import libdevice_digest
    from kiln.codegen import ptxas
    versions = {"llvm": _llvm_version(), "nvjitlink": _nvjitlink_version(), "ptxas": ptxas.version(),
                "libdevice": libdevice_digest()}
    try:
        (paths.shared_dir if cache_shared() else paths.private_dir)(memo.parent)  # the cache's, made as the cache makes it
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"fingerprint": fingerprint, **versions}))
        (paths.share_file if cache_shared() else paths.private_file)(tmp)
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache directory: ask the libraries again next time
    return versions


def _toolchain_fingerprint() -> str:
    files = []
    for package, pattern in (("llvmlite", "binding/*llvmlite*"), ("nvidia", "*/lib/libnvJitLink.so*"),
                             ("cuda", "bindings/nvjitlink*")):
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(root).glob(pattern))
    from kiln.cache.env import library_path  # (a layer above proto: imported on use)
    from kiln.codegen.libdevice import libdevice_fingerprint
    from kiln.codegen.ptxas import candidates  # (paths only: asking one its version runs it)
    files += [Path(os.path.realpath(f)) for f in candidates()]
    stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]
    return hashlib.sha256(json.dumps([sys.version, library_path(), stats,
                                      libdevice_fingerprint()]).encode()).hexdigest()


# The code generator: its passes and lowering, and the IR package whose layouts, index math and
# types they build on (a change to `kiln.ir.layout` alone changes the PTX of the same IR)
GENERATOR_PACKAGES = ("kiln.ir", "kiln.codegen")


def codegen_source_hash() -> str:
    """SHA-256 over the paths and contents of the .py files of GENERATOR_PACKAGES.

    Found without importing codegen, which is heavy and may not import at all.
    """
    roots = []
    for package in GENERATOR_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return "absent"
        roots.append((package, Path(list(spec.submodule_search_locations)[0])))
    return sources_hash(roots)


def sources_hash(roots) -> str:
    """SHA-256 over each (name, folder)'s .py files, by the name and their paths under the folder."""
    h = hashlib.sha256()
    for name, root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = f"{name}/{path.relative_to(root).as_posix()}".encode()
            data = path.read_bytes()
            h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _llvm_version() -> str:
    # llvmlite pins its LLVM, so its version names the LLVM (read as the toolchain check reads it:
    # its `__version__`, without loading LLVM)
    from kiln.codegen.toolchain import installed_version
    return installed_version("llvmlite") or "none"


def _nvjitlink_version() -> str:
    found = _wheel_version(("nvidia-nvjitlink", "nvidia-nvjitlink-cu13", "nvidia-nvjitlink-cu12"))
    return found or "none"  # no wheel: PTX-only builds, or a system toolkit


def _wheel_version(names) -> str | None:
    """The version of the first of `names` installed on sys.path, read from the name of its
    `.dist-info` folder (`{name}-{version}.dist-info`, the name normalized): importlib.metadata's
    answer without its import and its scan of every distribution (~45 ms of a new node's first compile)."""
    found = {}
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for stem in (item[:-len(".dist-info")] for item in listing if item.endswith(".dist-info")):
            name, _, version = stem.partition("-")
            if version:
                found.setdefault(_normalized(name), version)  # the first on sys.path, as importlib's
    return next((found[n] for n in map(_normalized, names) if n in found), None)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()
