"""SASS for the tests that check what ptxas made of kiln's PTX: `kiln.tools.disasm`'s listing, through the
cuobjdump `knobs.nvidia.cuobjdump` finds (the test extra installs NVIDIA's wheel); skipped where there is
none. `innermost_loop` is bench/sass_loops.py's `main_loop`."""
import importlib.util

import pytest

from bench_support import BENCH

_spec = importlib.util.spec_from_file_location("kiln_bench_sass_loops", BENCH / "sass_loops.py")
_loops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_loops)
innermost_loop, opcode = _loops.main_loop, _loops.opcode


def sass(cubin: bytes) -> str:
    """The SASS listing of `cubin`."""
    from kiln.tools.disasm import get_sass, path_to_cuobjdump
    try:
        path_to_cuobjdump()  # the knob's lookup, which get_sass makes too
    except RuntimeError:
        pytest.skip("no cuobjdump here (`pip install -e '.[test]'` brings one; or set TRITON_CUOBJDUMP_PATH)")
    return get_sass(cubin)
