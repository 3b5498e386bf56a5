"""TRITON_KERNEL_DUMP (kiln.ir_dump): a kernel built in this process writes each stage's text under
TRITON_DUMP_DIR/<hash>/, as Triton's compile does; nothing is written without it."""
import os

import numpy as np

import kiln
import kiln.language as tl
from kiln.dropin import knobs


@kiln.jit
def scaled_copy(x_ptr, y_ptr, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * factor)


def _build(block):
    x = np.zeros(1024, np.float32)
    return scaled_copy.warmup(x, x, 2.0, BLOCK=block, grid=(1,), target="sm_90a")


def test_each_stage_is_written_where_triton_s_knobs_say(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_KERNEL_DUMP", "1")
    monkeypatch.setenv("TRITON_DUMP_DIR", str(tmp_path / "dump"))
    kernel = _build(128)
    folder = tmp_path / "dump" / kernel.hash
    files = {p.suffix: p for p in folder.iterdir()}
    assert {".kir", ".ttir", ".ttgir", ".llir", ".ptx", ".cubin"} <= set(files)
    assert all(p.stem == "scaled_copy" for p in files.values())
    assert "tt.func public @scaled_copy" in files[".ttir"].read_text()
    assert 'ttg.target = "cuda:90"' in files[".ttgir"].read_text()
    assert ".entry scaled_copy" in files[".ptx"].read_text() and files[".ptx"].read_text() == kernel.asm["ptx"]
    assert files[".cubin"].read_bytes() == kernel.asm["cubin"] and files[".cubin"].read_bytes()[:4] == b"\x7fELF"
    if ".sass" in files:  # where a cuobjdump is found
        assert "scaled_copy" in files[".sass"].read_text()
    assert not [p for p in folder.iterdir() if ".tmp." in p.name]


def test_the_knob_set_in_code_dumps_too(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_KERNEL_DUMP", raising=False)
    with knobs.compilation.scope(), knobs.cache.scope():
        knobs.compilation.dump_ir = True
        knobs.cache.dump_dir = str(tmp_path / "in-code")
        kernel = _build(256)
    assert (tmp_path / "in-code" / kernel.hash / "scaled_copy.ptx").is_file()


def test_nothing_is_written_without_it(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_KERNEL_DUMP", raising=False)
    monkeypatch.setenv("TRITON_DUMP_DIR", str(tmp_path / "dump"))
    _build(512)
    assert not os.path.exists(tmp_path / "dump")
