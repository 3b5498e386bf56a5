"""`triton.runtime.build`: a Python C extension built from source with the machine's C compiler and
kept in Triton's file cache (`triton.runtime.cache`), for code that compiles its own helpers or
launchers as Triton's backends do (`compile_module_from_src`). kiln's own launches need none of it.

The compiler is `knobs.build.cc` (CC), else gcc, else clang; `knobs.build.impl`, when set, builds
instead. A module is looked up by a hash of its source, its build arguments and the platform, and
is loaded only if its bytes still have the SHA-256 recorded beside it when it was built: a damaged
or foreign file, or one that fails to load, is built again.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sysconfig
import tempfile
from types import ModuleType

log = logging.getLogger("kiln.runtime.build")
_DOMAIN = "kiln runtime.build v1"


@functools.lru_cache(maxsize=None)
def platform_key() -> str:
    """The machine, system and ABI a built module is for (part of its cache key)."""
    return ",".join([platform.machine(), platform.system(), *platform.architecture()])


def _library_flag(lib: str) -> str:
    """The linker flag for `lib`: a file name (`libfoo.so.1`, `libfoo.a`) is linked as named,
    a plain name (`cuda`) by the `-l` search."""
    if re.search(r"\.so(\.\d+)*$", lib) or lib.endswith(".a"):
        return f"-l:{lib}"
    return f"-l{lib}"


def _compiler() -> str:
    from kiln.knobs import build
    chosen = build.cc or shutil.which("gcc") or shutil.which("clang")
    if chosen is None:
        raise RuntimeError("no C compiler found to build the extension module: install gcc or clang, or name one "
                           "with CC (or triton.knobs.build.cc), or set triton.knobs.build.impl")
    return chosen


def _python_include() -> str:
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":  # Debian's system Python: its headers are under the prefix scheme
        scheme = "posix_prefix"
    return sysconfig.get_paths(scheme=scheme)["include"]


def _build(name: str, src: str, srcdir: str, library_dirs: list[str], include_dirs: list[str],
           libraries: list[str], ccflags: list[str] | None = None) -> str:
    """Compile C file `src` into the extension `name` in `srcdir`; the shared object's path."""
    from kiln.knobs import build
    if build.impl is not None:
        return build.impl(name, src, srcdir, library_dirs, include_dirs, libraries)
    so = os.path.join(srcdir, name + sysconfig.get_config_var("EXT_SUFFIX"))
    includes = [*include_dirs, srcdir, _python_include(), *sorted(build.backend_dirs)]
    # -Wno-psabi: gcc's note that an ABI changed across its releases is not about this code
    command = [_compiler(), src, "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", so,
               *(_library_flag(lib) for lib in libraries), *(f"-L{d}" for d in library_dirs),
               *(f"-I{d}" for d in includes if d is not None), *(ccflags or [])]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building {name} failed ({' '.join(command)}):\n{done.stderr[-4000:]}")
    return so


def _load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a loadable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_module_from_src(src: str, name: str, library_dirs: list[str] | None = None,
                            include_dirs: list[str] | None = None, libraries: list[str] | None = None,
                            ccflags: list[str] | None = None) -> ModuleType:
    """The extension module `name` built from C source `src` (its `PyInit_<name>`), from the file
    cache when this source and these arguments were built before on this platform."""
    from kiln.dropin.file_cache import get_cache_manager
    args = [library_dirs or [], include_dirs or [], libraries or [], ccflags or []]
    key = hashlib.sha256(json.dumps([_DOMAIN, src, name, args, platform_key()]).encode()).hexdigest()
    cache = get_cache_manager(key)
    filename = name + sysconfig.get_config_var("EXT_SUFFIX")
    cached = _verified(cache, filename)
    if cached is not None:
        try:
            return _load(name, cached)
        except (ImportError, OSError) as error:
            log.warning("the cached build of %s could not be loaded (%s): building it again", name, error)
    with tempfile.TemporaryDirectory(prefix="kiln-build-") as folder:
        source = os.path.join(folder, name + ".c")
        with open(source, "w") as f:
            f.write(src)
        with open(_build(name, source, folder, *args), "rb") as f:
            data = f.read()
    cached = cache.put(data, filename, binary=True)
    cache.put(hashlib.sha256(data).hexdigest(), filename + ".sha256", binary=False)
    return _load(name, cached)


def _verified(cache, filename: str) -> str | None:
    """The cached file's path if its bytes have the digest recorded when it was stored, else None."""
    path, digest_path = cache.get_file(filename), cache.get_file(filename + ".sha256")
    if path is None or digest_path is None:
        return None
    try:
        with open(digest_path) as f:
            recorded = f.read().strip()
        with open(path, "rb") as f:
            actual = hashlib.sha256(f.read()).hexdigest()
    except (OSError, UnicodeDecodeError):
        return None
    if actual != recorded:
        log.warning("the cached build %s does not match its recorded digest: building it again", path)
        return None
    return path
