"""`kiln.tools.disasm` (Triton's `triton.tools.disasm`) and `asm["sass"]`: a cubin's SASS through the
cuobjdump that `knobs.nvidia.cuobjdump` finds (the test extra's wheel), on the CPU."""
import importlib
import pickle
import re

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin import hook, nvidia_tools
from kiln.dropin.compile import AsmDict
from kiln.tools.disasm import get_sass, scheduling

if nvidia_tools.find("cuobjdump", None) is None:
    pytest.skip("no cuobjdump here (`pip install -e '.[test]'` brings one)", allow_module_level=True)

LINE = re.compile(r"(--|\d\d):[-0-7]:[-0-7]:[-Y]:[0-9a-f]\t[^\t\n]+;")


@kiln.jit
def running_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        total += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), total)


def _compiled():
    x = np.zeros(256, np.float32)
    return running_sum.warmup(x, x, 256, BLOCK=128, num_warps=4, grid=(1,), target="sm_90a")


def test_a_listing_is_the_function_then_an_instruction_a_line_with_labels_for_branch_targets():
    cubin = _compiled().asm["cubin"]
    sass = get_sass(cubin)
    assert get_sass(cubin, "running_sum") == sass  # the function named (cuobjdump -fun)
    name, *lines = sass.rstrip("\n").split("\n")
    assert name == "Function:running_sum"
    labels = [line[:-1] for line in lines if re.fullmatch(r"LBB\d+:", line)]
    instructions = [line for line in lines if line not in {f"{label}:" for label in labels}]
    assert instructions and all(LINE.fullmatch(line) for line in instructions), instructions[:5]
    targets = re.findall(r"\bBRA (LBB\d+);", sass)
    # numbered in the order the branches name them, each defined once, where its instruction is
    assert targets and sorted(set(targets), key=targets.index) == [f"LBB{i}" for i in range(len(labels))]
    assert sorted(labels) == sorted(set(targets))
    assert any(re.search(r"\bLDG\.E", line) for line in instructions) and instructions[-1].endswith("NOP;")


def test_the_scheduling_fields_read_as_tritons_do():
    word = (5 << 41) | (0 << 45) | (2 << 46) | (7 << 49) | (0b000011 << 52)  # stall 5, yield, write 2, waits 0-1
    assert scheduling(word) == "03:-:2:Y:5"
    assert scheduling((1 << 45) | (7 << 46) | (3 << 49)) == "--:3:-:-:0"


def test_asm_sass_is_the_cubins_listing_and_only_once_there_is_a_cubin():
    compiled = _compiled()
    assert "sass" not in compiled.asm
    assert compiled.asm["sass"] == get_sass(compiled.asm["cubin"]) and "sass" in compiled.asm
    x = np.zeros(256, np.float32)
    unbuilt = running_sum.warmup(x, x, 256, BLOCK=128, num_warps=4, grid=(1,))  # no GPU here: no binary
    if "cubin" not in unbuilt.asm:
        with pytest.raises(KeyError):
            unbuilt.asm["sass"]


def test_a_drop_in_compiled_kernels_asm_gives_sass_after_a_pickle_round_trip():
    """Inductor pickles a compiled kernel's `__dict__`: its `asm` stays Triton's AsmDict."""
    asm = pickle.loads(pickle.dumps(AsmDict(kir="", cubin=_compiled().asm["cubin"])))
    assert asm["sass"].startswith("Function:running_sum\n")
    with pytest.raises(KeyError, match="Unknown key: 'hsaco'"):
        asm["hsaco"]


def test_triton_tools_disasm_is_this_module_under_the_drop_in():
    assert hook.kiln_name("triton.tools.disasm") == "kiln.tools.disasm"
    assert importlib.import_module(hook.kiln_name("triton.tools.disasm")).get_sass is get_sass
