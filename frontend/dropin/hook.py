"""The drop-in switch: under KILN_DROPIN=1, `import triton` (and every `triton.*`) is kiln.

`kiln-dropin.pth`, which installing kiln puts in site-packages, runs `activate_if_asked()` when
each Python of that environment starts — the job's processes and every process they start
(Inductor's compile workers, torchrun's ranks), since children inherit the environment. Unless
the variable is set it does nothing else and imports nothing. When set, it puts `TritonFinder`
first on `sys.meta_path`, ahead of an installed Triton, which stays on disk untouched.

This module imports nothing of kiln: kiln is imported by the first `import triton`.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys

ENV = "KILN_DROPIN"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

# triton.X -> the kiln module it is. A name not listed maps by its prefix: triton.language.Y is
# kiln.language.Y. Names whose kiln module does not exist fail as a missing triton module would.
MODULES = {
    "triton": "kiln.dropin.facade",
    "triton.compiler": "kiln.dropin.compile",
    "triton.compiler.compiler": "kiln.dropin.compile",
    "triton.compiler.errors": "kiln.errors",
    "triton.errors": "kiln.errors",  # TritonError, the base of Triton's errors
    "triton.backends": "kiln.dropin.backends",
    "triton.backends.compiler": "kiln.dropin.backends",
    "triton.backends.driver": "kiln.dropin.backends",
    "triton.backends.nvidia": "kiln.dropin.nvidia_backend",
    "triton.backends.nvidia.compiler": "kiln.dropin.nvidia_backend",
    "triton.backends.nvidia.driver": "kiln.dropin.nvidia_backend",
    "triton.knobs": "kiln.dropin.knobs",
    "triton.runtime": "kiln.dropin.runtime",
    "triton.runtime.autotuner": "kiln.dropin.runtime",
    "triton.runtime.cache": "kiln.dropin.file_cache",
    "triton.runtime.driver": "kiln.dropin.runtime",
    "triton.runtime.errors": "kiln.runtime.errors",
    "triton.runtime.jit": "kiln.dropin.jit",
    "triton.runtime.interpreter": "kiln.dropin.interpreter",
    "triton.runtime._allocation": "kiln.runtime._allocation",
    "triton.runtime._async_compile": "kiln.runtime._async_compile",
    "triton.runtime.build": "kiln.runtime.build",
    "triton._filecheck": "kiln.dropin.filecheck",
    "triton._utils": "kiln.dropin.utils",
    "triton._C": "kiln.dropin.libtriton",  # the C++ extension: only what tutorials take from it
    "triton._C.libtriton": "kiln.dropin.libtriton",
}
# torch modules that kiln adjusts once they have run (functions of dropin/inductor.py): in every
# drop-in process...
ALWAYS_AFTER_IMPORT = {"torch._inductor.runtime.triton_heuristics": "launch_compiled_when_interpreting"}
# ...and when graph sharing is on
AFTER_IMPORT = {"torch._dynamo.convert_frame": "defer_full_collections",
                "torch._dynamo.guards": "describe_guards_briefly",
                "torch._inductor.codecache": "share_torch_key",
                "torch._inductor.config": "split_foreach_kernels",
                "torch._inductor.remote_cache": "serve_caches",
                "torch._inductor.async_compile": "use_node_pool",
                "torch._functorch._aot_autograd.graph_compile": "compile_backward_ahead",
                "torch._inductor.runtime.triton_heuristics": "benchmark_once"}
# ...and the caches it serves, turned on before torch reads its configuration (a user's 0 stays)
TORCH_CACHES = ("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
                "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE")
PREFIXES = {"triton.language": "kiln.language", "triton.tools": "kiln.tools", "triton.testing": "kiln.testing",
            "triton.profiler": "kiln.profiler"}


def requested(environ=os.environ) -> bool:
    """Whether KILN_DROPIN asks for the drop-in mode; a value that is neither yes nor no is an error."""
    value = environ.get(ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{ENV}={environ.get(ENV)!r}: use 1 to resolve `import triton` to kiln, or 0 (or unset) for off")


def kiln_name(name: str) -> str | None:
    """The kiln module that triton module `name` resolves to, or None for a name outside triton."""
    if name in MODULES:
        return MODULES[name]
    for prefix, target in PREFIXES.items():
        if name == prefix or name.startswith(prefix + "."):
            return target + name[len(prefix):]
    if name.startswith("triton."):
        return "kiln.dropin.missing"  # no kiln counterpart: a ModuleNotFoundError at import
    return None


class _Alias(importlib.abc.Loader):
    """Loads `triton.X` as the kiln module object itself (one object under two names)."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        if self.target == "kiln.dropin.missing":
            raise _missing(spec.name)
        try:
            module = importlib.import_module(self.target)
        except ModuleNotFoundError as error:
            if error.name == self.target or self.target.startswith(f"{error.name}."):
                raise _missing(spec.name) from None  # the user asked for triton.X: name that, not kiln's module
            raise
        self.spec = module.__spec__  # the import system sets __spec__ to triton's: kept as kiln's below
        return module

    def exec_module(self, module):
        module.__spec__ = self.spec  # the kiln module itself ran when it was imported


def _missing(name: str) -> ModuleNotFoundError:
    return ModuleNotFoundError(f"No module named {name!r} (kiln's drop-in mode, {ENV}=1, has no counterpart of it)",
                               name=name)


class _ThenAdjust(importlib.abc.Loader):
    """Runs a torch module as its own loader would, then kiln's adjustments of it."""

    def __init__(self, loader, adjustments: tuple):
        self.loader, self.adjustments = loader, adjustments

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for adjust in self.adjustments:
            try:
                getattr(importlib.import_module("kiln.dropin.inductor"), adjust)(module)
            except Exception as error:  # noqa: BLE001 - torch then works as it would without kiln
                print(f"kiln: {module.__name__} left as it is ({adjust}): {type(error).__name__}: {error}",
                      file=sys.stderr)


def share_graphs(environ=os.environ) -> bool:
    """KILN_SHARE_GRAPHS: on unless 0/false/no/off (kiln.cache.env reads it too; this module imports no kiln)."""
    return environ.get("KILN_SHARE_GRAPHS", "1").strip().lower() not in ("0", "false", "no", "off")


class TritonFinder(importlib.abc.MetaPathFinder):
    """Finds `triton` and `triton.*` as kiln's modules (and the torch modules kiln adjusts)."""

    def __init__(self, adjust_torch: bool = False):
        self.adjust_torch = adjust_torch

    def find_spec(self, name, path=None, target=None):
        adjustments = self._adjustments(name)
        if adjustments:
            return self._adjusted(name, path, target, adjustments)
        target_name = kiln_name(name)
        if target_name is None:
            return None
        is_package = True  # every alias may have children: `triton.X.Y` is found by name, not by path
        return importlib.machinery.ModuleSpec(name, _Alias(target_name), is_package=is_package)

    def find_distributions(self, context=None):
        """`importlib.metadata`'s `triton`, asked by name: the release the facade follows, as
        `triton.__version__` says (libraries pick an API by `importlib.metadata.version("triton")`, and a
        machine with kiln alone has no Triton distribution to ask). Other names, and the listing of all
        distributions, are the other finders'."""
        name = getattr(context, "name", None)
        if name is None or name.lower().replace("-", "_").replace(".", "_") != "triton":
            return iter(())
        return iter((_triton_distribution(),))

    def _adjustments(self, name) -> tuple:
        always = (ALWAYS_AFTER_IMPORT[name],) if name in ALWAYS_AFTER_IMPORT else ()
        return always + ((AFTER_IMPORT[name],) if self.adjust_torch and name in AFTER_IMPORT else ())

    def _adjusted(self, name, path, target, adjustments):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenAdjust(spec.loader, adjustments)
                return spec
        return None

    def __repr__(self):
        return "kiln.dropin.hook.TritonFinder()"


def _triton_distribution():
    """The drop-in's `triton` for importlib.metadata: its METADATA only (no files, no requirements).
    Made when first asked for: every drop-in process imports this module at its start, and most never
    ask, so they need not import importlib.metadata."""
    import importlib.metadata as metadata

    class TritonDistribution(metadata.Distribution):
        def read_text(self, filename):
            if filename != "METADATA":
                return None
            version = importlib.import_module(MODULES["triton"]).__version__
            return f"Metadata-Version: 2.1\nName: triton\nVersion: {version}\nSummary: kiln's drop-in for Triton\n"

        def locate_file(self, path):
            return metadata.PackagePath(path)

    return TritonDistribution()


def active() -> bool:
    return any(isinstance(finder, TritonFinder) for finder in sys.meta_path)


def activate() -> None:
    """Resolve `import triton` to kiln in this process (from now on; a Triton already imported stays)."""
    if active():
        return
    if "triton" in sys.modules and not _is_kiln(sys.modules["triton"]):
        raise RuntimeError(f"{ENV}=1 but the real Triton was imported before kiln's drop-in hook ran "
                           f"({getattr(sys.modules['triton'], '__file__', '?')})")
    adjust_torch = share_graphs()
    if adjust_torch:
        for name in TORCH_CACHES:
            os.environ.setdefault(name, "1")
    sys.meta_path.insert(0, TritonFinder(adjust_torch))


def _is_kiln(module) -> bool:
    return (getattr(module, "__name__", "") or "").startswith("kiln.")


def activate_if_asked() -> None:
    """What the .pth runs at interpreter start. It never stops the interpreter: a bad value or a
    failure is one line on stderr, and `import triton` then finds whatever is installed."""
    try:
        if requested():
            activate()
    except Exception as error:  # noqa: BLE001  (a .pth line must not take Python down)
        print(f"kiln: drop-in mode not active: {error}", file=sys.stderr)
