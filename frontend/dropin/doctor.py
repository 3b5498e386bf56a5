"""`kiln doctor`: which implementation `import triton` gives in this environment, and why."""
from __future__ import annotations

import importlib.machinery
import json
import os
import site
import subprocess
import sys

from . import hook
from .setup_hook import PTH_NAME

# Run in a fresh interpreter with the caller's environment: what a job started now would get.
_PROBE = """
import json, sys
out = {}
try:
    import triton
    out.update(module=triton.__name__, file=getattr(triton, "__file__", None), version=triton.__version__,
               kiln=bool(getattr(triton, "DROPIN", False)))
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def installed_hook() -> str | None:
    """The path of kiln-dropin.pth in this Python's site-packages, or None."""
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    for directory in dirs:
        path = os.path.join(directory, PTH_NAME)
        if os.path.isfile(path):
            return path
    return None


def installed_triton() -> dict | None:
    """The real Triton on sys.path, looked up without kiln's finder and without importing it."""
    spec = importlib.machinery.PathFinder.find_spec("triton")
    if spec is None:
        return None
    location = spec.origin or (list(spec.submodule_search_locations or [""])[0])
    version = None
    try:
        from importlib.metadata import version as dist_version
        version = dist_version("triton")
    except Exception:  # noqa: BLE001  (a source checkout has no distribution metadata)
        pass
    return {"location": location, "version": version}


def report(environ=None) -> dict:
    environ = dict(os.environ if environ is None else environ)
    value = environ.get(hook.ENV)
    try:
        asked, problem = hook.requested(environ), None
    except ValueError as e:
        asked, problem = False, str(e)
    probe = subprocess.run([sys.executable, "-c", _PROBE], env=environ, capture_output=True, text=True, timeout=120)
    try:
        result = json.loads(probe.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"error": f"the probe failed: {probe.stderr.strip()[-500:]}"}
    pth = installed_hook()
    if result.get("kiln"):
        why = f"{hook.ENV}={value} and {pth} resolves `import triton` to kiln in every Python of this environment"
    elif problem:
        why = problem
    elif not asked:
        why = f"{hook.ENV} is not set: kiln's drop-in mode is off (`kiln run -- CMD` or {hook.ENV}=1 turns it on)"
    elif pth is None:
        why = f"{hook.ENV}={value} but kiln's hook ({PTH_NAME}) is not installed in {sys.executable}'s " \
              "site-packages: reinstall kiln (pip install kiln, or pip install -e . in a checkout)"
    else:
        why = f"{hook.ENV}={value} and the hook is installed, yet `import triton` is not kiln: " \
              f"{result.get('error') or result.get('file')}"
    return {"import_triton": "kiln" if result.get("kiln") else ("triton" if "module" in result else "none"),
            "module": result.get("module"), "file": result.get("file"), "version": result.get("version"),
            "error": result.get("error"), "why": why, "KILN_DROPIN": value, "hook": pth,
            "installed_triton": installed_triton(), "python": sys.executable}


def format_report(r: dict) -> str:
    if r["import_triton"] == "kiln":
        head = f"import triton -> kiln (Triton {r['version']} API), {r['file']}"
    elif r["import_triton"] == "triton":
        head = f"import triton -> Triton {r['version']}, {r['file']}"
    else:
        head = f"import triton -> fails ({r['error']})"
    real = r["installed_triton"]
    lines = [head, f"  why: {r['why']}",
             f"  hook: {r['hook'] or 'not installed'}",
             "  installed Triton: " + (f"{real['version'] or '?'} at {real['location']}" +
                                       (" (shadowed by kiln while the drop-in mode is on)"
                                        if r["import_triton"] == "kiln" else "") if real else "none"),
             f"  python: {r['python']}"]
    return "\n".join(lines)
