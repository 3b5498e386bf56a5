"""`triton.knobs`: the settings Triton groups by area, those that mean something for kiln.

`runtime.launch_enter_hook`/`launch_exit_hook` are called around every launch of a kernel compiled
by `triton.compile` (with its launch metadata); `cache.dir` is kiln's node cache;
`nvidia.libdevice_path` the libdevice kiln links; and `nvidia.ptxas` the assembler kiln uses, which is
nvJitLink in-process (its `version` is nvJitLink's, "13.0"; there is no ptxas program, so `path` is None). Setting a knob kiln has no use for is an error
rather than silently ignored.
"""
from __future__ import annotations

import os


class _Knobs:
    _names: tuple = ()

    def __setattr__(self, name, value):
        if name not in self._names:
            raise AttributeError(f"kiln has no knob {type(self).__name__.strip('_').lower()}.{name} "
                                 f"(it has: {', '.join(self._names)})")
        object.__setattr__(self, name, value)


class _Runtime(_Knobs):
    _names = ("launch_enter_hook", "launch_exit_hook", "jit_post_compile_hook", "jit_cache_hook", "interpret",
              "debug")

    def __init__(self):
        for name in self._names:
            object.__setattr__(self, name, None)


class _Cache(_Knobs):
    """`dir` is kiln's node cache; the others serve `triton.runtime.cache`'s file managers
    (kiln.dropin.file_cache): set here, else Triton's environment variables say."""
    _names = ("dir", "dump_dir", "override_dir", "manager_class")

    def __init__(self):
        object.__setattr__(self, "manager_class", None)  # None: TRITON_CACHE_MANAGER, else Triton's default
        object.__setattr__(self, "_set", {})

    @property
    def dir(self) -> str:
        from kiln.cache.env import cache_dir
        return str(cache_dir())

    @property
    def dump_dir(self) -> str:
        return self._set.get("dump_dir") or os.environ.get("TRITON_DUMP_DIR") or os.path.join(self.dir, "dump")

    @dump_dir.setter
    def dump_dir(self, value):
        self._set["dump_dir"] = value

    @property
    def override_dir(self) -> str:
        return (self._set.get("override_dir") or os.environ.get("TRITON_OVERRIDE_DIR")
                or os.path.join(self.dir, "override"))

    @override_dir.setter
    def override_dir(self, value):
        self._set["override_dir"] = value


class _Assembler:
    """Triton's `knobs.nvidia.ptxas` (a tool with a path and a version), for nvJitLink."""
    path = None

    @property
    def version(self) -> str:
        from cuda.bindings import nvjitlink
        major, minor = nvjitlink.version()
        return f"{major}.{minor}"


class _Nvidia(_Knobs):
    _names = ("libdevice_path",)
    ptxas = _Assembler()

    @property
    def libdevice_path(self):
        try:
            from cuda import pathfinder
            return str(pathfinder.find_bitcode_lib("device"))
        except Exception:  # noqa: BLE001  (no CUDA libdevice here: Inductor then skips what needs it)
            return None


runtime = _Runtime()
cache = _Cache()
nvidia = _Nvidia()
