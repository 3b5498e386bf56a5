"""Line tables (kiln.codegen.lower.line_info): a kernel's PTX names its source files and lines (`.file`,
`.loc`), as Triton's does, for profilers; TRITON_DISABLE_LINE_INFO=1 (the `line_info = 0` option) leaves
them out, and either way the code is the same."""
import inspect
import re
import sys

import numpy as np

import kiln
import kiln.language as tl
from kiln.codegen import compile as compile_ir
from kiln.ir import parse_function

sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/codegen_corpus")
from ptx_diff import without_locations  # noqa: E402
from test_ttgir import tile_matmul  # noqa: E402  (a kernel of another module, for the line of a second file)


@kiln.jit
def doubled_plus_one(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _twice(tl.load(x_ptr + offs)) + 1.0)


@kiln.jit
def _twice(x):
    return x * 2.0


def _ptx(**options):
    x = np.zeros(128, np.float32)
    kir = doubled_plus_one.warmup(x, x, BLOCK=128, grid=(1,), target="sm_90a").asm["kir"]
    return compile_ir(parse_function(kir), "sm_90a", {"num_warps": 4, **options})


def test_the_ptx_names_the_kernel_s_file_and_lines():
    built = _ptx()
    files = dict(re.findall(r'\.file\s+(\d+) "([^"]+)"', built.ptx))
    assert list(files.values()) == [__file__]
    lines = {int(m) for m in re.findall(r"\.loc\s+1 (\d+) ", built.ptx)}
    first, helper = inspect.getsourcelines(doubled_plus_one.fn)[1], inspect.getsourcelines(_twice.fn)[1]
    assert first + 3 in lines  # the store's
    assert lines <= set(range(first, first + 4)) | set(range(helper, helper + 3))  # the kernel's and its helper's
    assert built.cubin[:4] == b"\x7fELF" and ".target sm_90a\n" in built.ptx  # no ", debug": an optimized build


def test_without_line_info_the_code_is_the_same():
    on, off = _ptx(), _ptx(line_info=0)
    assert ".loc" not in off.ptx and ".file" not in off.ptx
    assert without_locations(on.ptx) == without_locations(off.ptx)
    assert on.metadata["n_regs"] == off.metadata["n_regs"]


def test_a_helper_from_another_module_names_its_own_file():
    x = np.zeros(64 * 256, np.float16)
    ptx = tile_matmul.warmup(x, x, x, 256, 64, 64, 32, grid=(1,), target="sm_80").asm["ptx"]
    assert re.search(r'\.file\s+\d+ ".*test_ttgir\.py"', ptx)


def test_triton_s_knob_turns_them_off(monkeypatch):
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    x = np.zeros(256, np.float32)
    ptx = doubled_plus_one.warmup(x, x, BLOCK=256, grid=(1,), target="sm_90a").asm["ptx"]
    assert ".loc" not in ptx and ".file" not in ptx


def test_link_decisions_read_the_code_not_the_line_tables(tmp_path, monkeypatch):
    # a library installed under ~/.local: its path in the .file line is no `.local` stack (which took
    # bench's Inductor pointwise kernel from one link under the cap that fits to the search's two)
    import shutil
    import ml_dtypes
    folder = tmp_path / ".local" / "lib" / "site"
    folder.mkdir(parents=True)
    bench = __file__.rsplit("/", 2)[0] + "/bench/inductor_kernels.py"
    shutil.copy(bench, folder / "local_inductor_kernels.py")
    monkeypatch.syspath_prepend(str(folder))
    import local_inductor_kernels
    x = np.zeros(1 << 20, ml_dtypes.bfloat16)
    kir = local_inductor_kernels.triton_poi_fused_add_erf_mul_sigmoid_tanh_0.warmup(
        x, x, x, 1 << 20, XBLOCK=1024, num_warps=4, num_stages=1, grid=(1,)).asm["kir"]
    built = {li: compile_ir(parse_function(kir), "sm_90a", {"num_warps": 4, "num_stages": 1, "line_info": li})
             for li in (0, 1)}
    assert ".local/lib/site/local_inductor_kernels.py" in built[1].ptx and ".local" not in built[0].ptx
    assert built[1].metadata["links"] == built[0].metadata["links"] == 1
    assert built[1].metadata["n_regs"] == built[0].metadata["n_regs"]
