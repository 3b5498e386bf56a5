"""Installed as `_kiln_dropin.py` in site-packages, run by `kiln-dropin.pth` at interpreter start
when KILN_DROPIN is set (setup_hook.py installs both).

Site-packages may not all be on sys.path yet while .pth files run (a venv's come before the
system's), so kiln itself (NumPy, ...) cannot be imported here: this finds kiln without importing
it and loads only kiln.dropin.hook, which needs nothing but the standard library.
"""
import importlib.util
import os
import sys


def main() -> None:
    try:
        spec = importlib.util.find_spec("kiln")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("kiln is not importable from this Python")
        path = os.path.join(list(spec.submodule_search_locations)[0], "dropin", "hook.py")
        hook_spec = importlib.util.spec_from_file_location("kiln.dropin.hook", path)
        hook = importlib.util.module_from_spec(hook_spec)
        hook_spec.loader.exec_module(hook)
        sys.modules["kiln.dropin.hook"] = hook
    except Exception as error:  # noqa: BLE001  (a .pth must not take Python down)
        print(f"kiln: drop-in mode not active: cannot load kiln's hook ({error})", file=sys.stderr)
        return
    hook.activate_if_asked()


main()
