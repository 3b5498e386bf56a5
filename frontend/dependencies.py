"""Triton's `cache_key` of a @jit function (or a `@constexpr_function`) and `used_global_vals`.

The key is a SHA-256 of the function's source, each @jit or constexpr function it names (by that
function's own key and whether it is `noinline`, so a change anywhere below changes it), the line
of its first decorator, and the constexpr globals it reads. It is computed once and kept in the
function's `hash` until that is set to None (`_unsafe_update_src` does it; callers are not told,
as in Triton). Walking the source also records the globals (and closure values) the function and
its callees name, with a copy of each value: a launch checks them (kiln.compiler), and two
functions that saw different values of one global is an error, in Triton's words.

Triton refuses a function that names a plain Python function (its `cache_key` raises
"Unsupported function referenced"); kiln's kernels may call one (evaluated at compile time), so
kiln computes the key all the same and only the public `cache_key` raises, as Triton's does.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import types

from .jit_callable import JITCallable

# names of Python builtins a kernel may use: not globals worth checking
_PYTHON_BUILTINS = frozenset({"float", "getattr", "int", "isinstance", "len", "list", "max", "min", "print",
                              "range"})
# modules whose attributes are the language's own: nothing to record below them
_LANGUAGE_MODULES = ("kiln.language", "triton.language", "triton.experimental.gluon.language")
_PLAIN_MODULES = frozenset({"copy", "math"})


def is_jit_callable(value) -> bool:
    return isinstance(value, JITCallable)


def _is_language(value) -> bool:
    """kiln's (Triton's) own builtins, classes and stubs: their code is the compiler's."""
    if getattr(value, "__triton_builtin__", False):
        return True
    module = getattr(value, "__module__", None) or ""
    return isinstance(module, str) and module.split(".")[0] in ("kiln", "triton") and not is_jit_callable(value)


def _snapshot(value):
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001  (a value that does not copy is compared as it is)
        return value


class DependencyFinder(ast.NodeVisitor):
    """Walks one function's AST: hashes its source and its dependencies' keys, records the
    globals it names. `unsupported` is the first plain function it names (Triton refuses those)."""

    def __init__(self, name: str, globals: dict, nonlocals: dict, src: str):
        self.name = name
        self.globals, self.nonlocals = globals, nonlocals
        self.hasher = hashlib.sha256(src.encode("utf-8"))
        self.used_global_vals: dict = {}  # (name, id(scope)) -> (value as first seen, scope)
        self.unsupported = None
        self.local_names: set = set()
        self.in_defaults = False

    @property
    def digest(self) -> str:
        return self.hasher.hexdigest()

    # --- what a name refers to ------------------------------------------------------------
    def depend_on(self, fn) -> None:
        """A @jit or constexpr function this one names: its key, and its globals (checked against ours)."""
        key = fn._dependency_key()
        for entry in self.used_global_vals.keys() & fn.used_global_vals.keys():
            mine, theirs = self.used_global_vals[entry][0], fn.used_global_vals[entry][0]
            if not _equal(mine, theirs):
                raise RuntimeError(f"Global variable {entry[0]} has value {mine} when compiling {self.name}, but "
                                   f"inner kernel {fn.__name__} has conflicting value {theirs} from when it was "
                                   f"first compiled.  This is not allowed.")
        self.used_global_vals.update(fn.used_global_vals)
        if self.unsupported is None:
            self.unsupported = fn._unsupported_reference
        self.hasher.update((key + str(getattr(fn, "noinline", False))).encode("utf-8"))

    def refer(self, value, scope=None, name=None) -> None:
        from kiln.language.core import constexpr
        if value is None or isinstance(value, types.ModuleType):
            return
        if getattr(value, "__triton_aggregate__", False):
            for attr in getattr(value, "hash_attrs", ()):
                self.refer(attr)
            return
        if is_jit_callable(value):
            self.depend_on(value)
            return
        if callable(value) and not isinstance(value, constexpr):  # a function or a class
            if _is_language(value):
                return
            if not isinstance(value, type):
                if self.unsupported is None:
                    self.unsupported = value
                return
        if self.in_defaults:  # a default is evaluated once, when the function is defined
            return
        if scope is not None:
            self.used_global_vals[(name, id(scope))] = (_snapshot(value), scope)

    # --- the visitor ----------------------------------------------------------------------
    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store):
            return node.id
        if node.id in self.local_names:
            return None
        value, scope = self.globals.get(node.id), self.globals
        if value is None:
            value, scope = self.nonlocals.get(node.id), self.nonlocals
        if value is None:
            return None
        if node.id not in _PYTHON_BUILTINS:
            self.refer(value, scope, node.id)
        return value

    def visit_Attribute(self, node):
        base = self.visit(node.value)
        if base is None or isinstance(base, str):
            return None
        if isinstance(base, types.ModuleType) and (base.__name__ in _PLAIN_MODULES or
                                                   base.__name__.startswith(_LANGUAGE_MODULES)):
            return None
        value = getattr(base, node.attr, None)
        self.refer(value)
        return value

    def visit_Tuple(self, node):
        return [self.visit(element) for element in node.elts]

    def visit_FunctionDef(self, node):
        self.local_names = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
        self.generic_visit(node)

    def visit_arguments(self, node):
        for arg in node.posonlyargs + node.args + node.kwonlyargs:
            self.visit(arg)
        for extra in (node.vararg, node.kwarg):
            if extra is not None:
                self.visit(extra)
        self.in_defaults = True
        try:
            for default in node.defaults + [d for d in node.kw_defaults if d is not None]:
                self.visit(default)
        finally:
            self.in_defaults = False

    def _bind(self, target) -> None:
        bound = self.visit(target)
        for name in bound if isinstance(bound, list) else [bound]:
            if isinstance(name, str):
                self.local_names.add(name)

    def visit_Assign(self, node):
        for target in node.targets:  # bound before the value is read: `_, G = 0, 0; a = G` reads a local
            self._bind(target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._bind(node.target)
        self.generic_visit(node)

    def visit_For(self, node):
        self._bind(node.target)
        self.generic_visit(node)


class DependenciesFinder(DependencyFinder):
    """Triton's `triton.runtime.jit.DependenciesFinder`, for tools that hash a function as Triton
    does: `ret` is the digest, `record_reference(value, scope, name)` names one value, and a plain
    Python function named is refused at once, as Triton's finder refuses it (kiln's own records it)."""

    @property
    def ret(self) -> str:
        return self.digest

    def record_reference(self, val, var_dict=None, name=None) -> None:
        self.refer(val, var_dict, name)

    def refer(self, value, scope=None, name=None) -> None:
        super().refer(value, scope, name)
        if self.unsupported is not None:
            raise RuntimeError(f"Unsupported function referenced: {self.unsupported}")


def _equal(a, b) -> bool:
    from kiln.language.core import constexpr
    a = a.value if isinstance(a, constexpr) else a
    b = b.value if isinstance(b, constexpr) else b
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return a is b


def compute_key(fn) -> tuple[str, dict, object]:
    """(key, used_global_vals, first unsupported reference or None) of a JITCallable `fn`."""
    from kiln.language.core import constexpr
    from .jit import parse_source
    if getattr(fn, "fn", None) is None:  # a pickled copy whose key was not computed: its source alone
        return hashlib.sha256(fn.src.encode("utf-8")).hexdigest(), {}, None
    finder = DependencyFinder(f"{fn.__module__}.{fn.__qualname__}", fn.__globals__ or {}, fn.closure_vars(),
                              fn.src)
    parse = getattr(fn, "parse", None)  # a @jit function keeps its parsed source; parse a constexpr function's
    finder.visit(parse() if parse is not None else parse_source(fn.src))
    used = dict(sorted(finder.used_global_vals.items(), key=lambda item: (item[0][0], item[0][1])))
    text = finder.digest + str(fn.starting_line_number)
    text += str([(name, value) for (name, _), (value, _) in used.items() if isinstance(value, constexpr)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), used, finder.unsupported
