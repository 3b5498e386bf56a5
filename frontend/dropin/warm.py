"""The warm hit of `triton.compile`: a kernel compiled before is found from its source, without
building its block IR again.

Triton's warm hit hashes the source text and the options and reads the binary; kiln's compile key
is over the block IR, which costs a walk of the kernel's AST to build. So a compile also records,
under a *source key*, what the frontend made of the source: the block IR text, the compile key
of its binary, and the launch layout. The source key is the SHA-256 of everything the frontend
reads to build that IR:

- kiln's frontend identity (`triton_key()`: kiln's compiler identity and a hash of the frontend's
  sources) and a hash of the block IR package's sources;
- the kernel's source, where it is (file, first line, indent: the IR carries locations), and
  the same for every `@jit` function it reaches through its globals and closure, transitively;
- the values of the other globals and closure variables it names (the frontend reads them as
  constants), when they are plain values (numbers, strings, tuples of them, kiln's dtypes), or
  kiln's own objects (modules, builtins, covered by the frontend identity), and the current GPU's
  target where it names `tl.target_info` (whose answers come from that GPU);
- the signature, constexprs, hints, options, target and KILN_DEBUG.

A kernel that names anything else (a plain Python helper, an object of another library) has no
source key: it always builds its IR, as before. A record is data (JSON and IR text, parsed by
kiln's IR parser), stored in the node cache bound to its source key and checked on every read;
its binary comes from the node cache (or the shared tier) under its compile key, checked as
every binary is. Whatever misses takes the full path, which writes the record again.
"""
from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import json
import threading
import types
from pathlib import Path

from kiln.language.semantic import fp32_default  # a dot's default precision is in the IR the key stands for

_DOMAIN = "kiln.dropin.source_key.v1"
_PLAIN = (bool, int, float, str, bytes, type(None))


class _NoKey(Exception):
    """The kernel reads something whose value cannot be fingerprinted."""


_identity_lock = threading.Lock()


def frontend_identity() -> str:
    """What decides the IR kiln's frontend builds from a source: `triton_key()` (kiln's compiler
    identity, the frontend's sources) and the block IR package's sources. Read once per process:
    a rank's compile threads all ask at their first kernel, and one of them reads the files."""
    with _identity_lock:
        return _frontend_identity()


@functools.lru_cache(maxsize=1)
def _frontend_identity() -> str:
    from kiln import ir
    from .backends import triton_key
    digest = hashlib.sha256(triton_key().encode())
    root = Path(ir.__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def source_key(src, backend, options, debug: bool) -> str | None:
    """The source key of compiling `src` (an ASTSource) with `backend` (kiln.dropin.backends: the
    target) and `options` (its parsed Options); None when the kernel reads a value that cannot be
    fingerprinted."""
    try:
        parts = [_DOMAIN, frontend_identity(), src.name, fingerprint(src.fn), sorted(src.signature.items()),
                 sorted((list(k), _value(v)) for k, v in src.constants.items()),
                 sorted((list(k), _value(v)) for k, v in src.attrs.items()),
                 sorted((k, _value(v)) for k, v in vars(options).items()),
                 [backend.hash(), backend.binary_target], debug, fp32_default()]
    except _NoKey:
        return None
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def fingerprint(jitfn) -> str:
    """The hash of `jitfn`'s source and of what it reads (see the module's doc); raises _NoKey."""
    return _Fingerprint().of(jitfn)


class _Fingerprint:
    def __init__(self):
        self.seen: dict[int, str] = {}

    def of(self, jitfn) -> str:
        if id(jitfn) in self.seen:
            return self.seen[id(jitfn)] or "recursive"
        self.seen[id(jitfn)] = ""
        if getattr(jitfn, "fn", None) is None:
            raise _NoKey()  # unpickled without its function: its globals are gone
        info = jitfn.source_info()
        parts = [info.file, info.first_line, info.indent, jitfn.src, jitfn.__name__, repr(jitfn.debug),
                 repr(jitfn.noinline)]
        scope = {**jitfn.fn.__globals__, **jitfn.closure_vars()}
        for chain in sorted(_free_names(jitfn.parse())):
            parts.append([".".join(chain), self.value(chain, scope)])
        digest = hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()
        self.seen[id(jitfn)] = digest
        return digest

    def value(self, chain: tuple, scope: dict):
        """The fingerprint of what `a.b.c` names: modules are followed attribute by attribute."""
        from kiln.jit import JITFunction
        name = chain[0]
        if name in scope:
            obj = scope[name]
        elif hasattr(builtins, name):
            return "builtin"
        else:
            return "undefined"  # the frontend's own names (_BUILTINS) or a NameError: the same each time
        for attr in chain[1:]:
            if not isinstance(obj, types.ModuleType) or _is_kiln(obj):
                break
            if not hasattr(obj, attr):
                return "undefined"
            obj = getattr(obj, attr)
        if isinstance(obj, JITFunction):
            return ["jit", self.of(obj)]
        if _is_kiln(obj):
            found = ["kiln", getattr(obj, "__name__", type(obj).__name__), repr(obj) if _is_value(obj) else ""]
            if "target_info" in chain or getattr(obj, "__module__", None) == "kiln.language.target_info" \
                    or getattr(obj, "__name__", None) == "kiln.language.target_info":
                from kiln.language.target_info import current_target
                found.append(repr(current_target()))  # it answers for the GPU of this process
            return found
        if isinstance(obj, types.ModuleType):
            return ["module", obj.__name__]
        if obj is getattr(builtins, getattr(obj, "__name__", ""), None):
            return ["builtin", obj.__name__]
        return ["value", _value(obj)]


def _is_kiln(obj) -> bool:
    """kiln's own modules and objects: the frontend identity covers their code."""
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    if not isinstance(module, str):
        module = type(obj).__module__
    return module == "kiln" or module.startswith("kiln.")


def _is_value(obj) -> bool:
    """A kiln object compared by value (a dtype, a constexpr), not a function or class."""
    from kiln.language.core import constexpr
    if isinstance(obj, constexpr):  # callable (it calls what it holds), but a value: a global one may change
        return True
    return not isinstance(obj, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)) \
        and not callable(obj)


def _value(v):
    """A JSON form of a plain value that tells different values apart; raises _NoKey otherwise."""
    if isinstance(v, _PLAIN):
        return [type(v).__name__, v.hex() if isinstance(v, bytes) else repr(v)]
    if isinstance(v, (tuple, list)):  # a NamedTuple by its fields too: the kernel reads them by name
        return [type(v).__module__, type(v).__qualname__, getattr(type(v), "_fields", None), [_value(x) for x in v]]
    if _is_kiln(v) and _is_value(v):
        return ["kiln", type(v).__qualname__, repr(v)]
    raise _NoKey()


def _free_names(tree: ast.AST) -> set[tuple]:
    """Every `name` and `name.attr...` chain the function reads, locals included (a local that
    shadows a global still names the global before its first assignment)."""
    chains = set()

    def chain_of(node):
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        return (node.id, *reversed(attrs)) if isinstance(node, ast.Name) else None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = chain_of(node)
            if chain:
                chains.add(chain)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            chains.add((node.id,))
    return chains


# --- the records -------------------------------------------------------------------------------

_FIELDS = {"name": str, "kir": str, "runtime": list, "arg_types": list, "num_warps": int, "num_stages": int, "debug": bool,
           "compile_key": (str, type(None)), "binary_target": (str, type(None)), "binary_options": dict}


def load(key: str) -> dict | None:
    """The record stored under source key `key`, if there is one and it is well formed."""
    from kiln.daemon.tiers import node_cache
    try:
        record = node_cache().get_record(key)
    except Exception:  # noqa: BLE001 - a cache that cannot be read: the full path
        return None
    if record is None or set(record) != set(_FIELDS):
        return None
    if not all(isinstance(record[k], t) and not (t is int and isinstance(record[k], bool))
               for k, t in _FIELDS.items()):
        return None
    if not all(type(i) is int and i >= 0 for i in record["runtime"]):
        return None
    if not all(type(k) is str and type(v) is int for k, v in record["binary_options"].items()):
        return None
    from kiln.ir.types import parse_type
    try:
        [parse_type(t) for t in record["arg_types"]]  # a str each, spelling a type
    except (AttributeError, ValueError):
        return None
    return record


def store(key: str, record: dict) -> None:
    from kiln.daemon.tiers import cache_write_failed, node_cache
    try:
        node_cache().put_record(key, record)
    except Exception as e:  # noqa: BLE001 - the next compile builds the IR again
        cache_write_failed(e)
