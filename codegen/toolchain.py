"""One clear line when a library kiln compiles with is older than the floor it needs.

pip honours pyproject's floors, but an environment can still hold older builds (another
package pinned them, `pip install --no-deps`, a system package), and those fail far from the
cause: llvmlite 0.45-0.47 silently drop `.maxntid` / `.maxnreg` from the PTX, cuda-bindings
12.9.2 and older (and 13.0.0-13.0.1) fail nvJitLink on a host without a driver. Checked from the
packages' `__version__` (their top-level modules hold only that, not the libraries that fail):
importlib.metadata's import and lookups cost every compile process's start ~35 ms."""
from __future__ import annotations

import functools
import importlib
import re
import warnings

# distribution -> the package whose `__version__` is its version
PACKAGES = {"llvmlite": "llvmlite", "cuda-bindings": "cuda.bindings"}
# distribution -> (the oldest that works, what goes wrong before it)
FLOORS = {
    "llvmlite": ((0, 48), "0.45-0.47 drop .maxntid/.maxnreg from the PTX; older ones fail"),
    "cuda-bindings": ((12, 9, 3), "12.9.2 and older fail nvJitLink on a host without a driver"),
}
# distribution -> (releases above the floor that do not work, what goes wrong, the first that works after them)
BROKEN = {
    "cuda-bindings": ({(13, 0, 0), (13, 0, 1)}, "they fail nvJitLink on a host without a driver", "13.0.2"),
}


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string ("0.50.0rc1" -> (0, 50, 0))."""
    numbers = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(numbers)


def installed_version(name: str) -> str | None:
    """The installed version of distribution `name`, or None where it is not installed."""
    try:
        version = getattr(importlib.import_module(PACKAGES[name]), "__version__", None)
    except ImportError:
        return None
    if type(version) is str:
        return version
    from importlib import metadata  # a build without __version__: its metadata, at their cost
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def too_old(installed=installed_version) -> list[str]:
    """One line per installed distribution below its floor; absent ones are not this check's to report."""
    lines = []
    for name, (floor, why) in FLOORS.items():
        version = installed(name)
        if version is None:
            continue
        if _release(version) < floor:
            wanted = ".".join(map(str, floor))
            lines.append(f"kiln: {name} {version} is older than {wanted} ({why}); pip install -U '{name}>={wanted}'")
        elif name in BROKEN and _release(version)[:3] in BROKEN[name][0]:
            releases, why, fixed = BROKEN[name]
            lines.append(f"kiln: {name} {version} is a broken release ({why}); pip install -U '{name}>={fixed}'")
    return lines


@functools.cache  # once a process: the modules that load llvmlite's binding and nvJitLink ask first
def warn_if_too_old() -> None:
    for line in too_old():
        warnings.warn(line, RuntimeWarning, stacklevel=3)
