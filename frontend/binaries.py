"""Where a kernel's binary comes from: the node cache, else a compile (then stored).

The lookup order of a first call is in-memory (the caller's `CompiledKernel`) -> the
node-wide disk cache, read directly -> compile. A hit imports neither llvmlite nor
codegen, which is what makes a warm first call fast. A cache that cannot be opened or
written costs one warning, never a failed launch.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

ARTIFACTS = ("cubin", "ptx", "llir")


@dataclass
class Binary:
    cubin: bytes
    ptx: str
    llir: str
    metadata: dict = field(default_factory=dict)
    source: str = "compiled"  # or "cache"


@functools.lru_cache(maxsize=1)
def node_cache():
    try:
        from kiln.cache import Cache
        return Cache()
    except Exception as e:  # unwritable directory, broken database, missing diskcache
        warnings.warn(f"kiln: the kernel cache is unavailable ({e}); compiling in this process", stacklevel=3)
        return None


def compile_key(ir, target: str, options: dict) -> str:
    from kiln.proto.key import compile_key as key
    return key(ir, target, options)


def fetch(ir, target: str, options: dict) -> Binary:
    """The binary of `ir` for `target`, from the node cache or freshly compiled."""
    cache = node_cache()
    key = compile_key(ir, target, options) if cache is not None else None
    if cache is not None:
        try:
            hit = cache.get_result(key, names=ARTIFACTS)
        except Exception as e:
            warnings.warn(f"kiln: reading the kernel cache failed ({e})", stacklevel=2)
            hit = None
        if hit is not None:
            artifacts, metadata = hit
            if all(name in artifacts for name in ARTIFACTS):
                return Binary(artifacts["cubin"], artifacts["ptx"].decode(), artifacts["llir"].decode(),
                              metadata, source="cache")
    from kiln.codegen import compile as compile_ir
    compiled = compile_ir(ir, target, options)
    binary = Binary(compiled.cubin, compiled.ptx, compiled.llir, dict(compiled.metadata))
    if cache is not None:
        try:
            cache.put_result(key, {"cubin": binary.cubin, "ptx": binary.ptx, "llir": binary.llir,
                                   "kir": compiled.kir}, binary.metadata)
        except Exception as e:
            warnings.warn(f"kiln: storing in the kernel cache failed ({e})", stacklevel=2)
    return binary
