"""TRITON_KERNEL_DUMP (kiln.ir_dump): a kernel built in this process writes each stage's text under
TRITON_DUMP_DIR/<hash>/, as Triton's compile does; nothing is written without it."""
import os

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin import knobs


@kiln.jit
def scaled_copy(x_ptr, y_ptr, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * factor)


def _build(block):
    """scaled_copy built for sm_90a at `block` (each test its own block: a kernel built once is not again)."""
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


# TRITON_KERNEL_OVERRIDE (kiln.ir_override): a dump copied to the override folder and edited is built


def _override(monkeypatch, tmp_path, block, ext, edit):
    """Dump the kernel at `block`, edit its `ext` file into the override folder, build it again fresh:
    (what the dump had, the kernel rebuilt)."""
    monkeypatch.setenv("TRITON_KERNEL_DUMP", "1")
    monkeypatch.setenv("TRITON_DUMP_DIR", str(tmp_path / "dump"))
    dumped = _build(block)
    before = {"ptx": dumped.asm["ptx"], "n_regs": dumped.n_regs, "hash": dumped.hash}  # (the same object again)
    monkeypatch.delenv("TRITON_KERNEL_DUMP")
    folder = tmp_path / "override" / dumped.hash
    folder.mkdir(parents=True)
    source = tmp_path / "dump" / dumped.hash / f"scaled_copy.{ext}"
    if ext == "cubin":
        (folder / source.name).write_bytes(edit(source.read_bytes()))
    else:
        (folder / source.name).write_text(edit(source.read_text()))
    monkeypatch.setenv("TRITON_KERNEL_OVERRIDE", "1")
    monkeypatch.setenv("TRITON_OVERRIDE_DIR", str(tmp_path / "override"))
    again = _fresh(block)
    assert again.hash == before["hash"]
    return before, again


def _fresh(block):
    """The same specialization as `_build(block)`, built again (a new process would)."""
    x = np.zeros(1024, np.float32)
    kernel = scaled_copy.warmup(x, x, 2.0, BLOCK=block, grid=(1,))  # (the interpreter here: nothing built)
    kernel.binaries.clear()
    kernel.build("sm_90a")
    return kernel


def test_an_edited_ptx_is_linked_and_launched(monkeypatch, tmp_path, capsys):
    marker = "// edited by hand"
    dumped, again = _override(monkeypatch, tmp_path, 1024, "ptx", lambda text: text + marker + "\n")
    assert again.asm["ptx"].endswith(marker + "\n") and again.asm["cubin"][:4] == b"\x7fELF"
    assert again.built.source == "override" and again.n_regs == dumped["n_regs"]
    assert "Overriding kernel with file" in capsys.readouterr().out


def test_an_edited_block_ir_is_compiled(monkeypatch, tmp_path):
    # the factor's multiply made an add: the PTX built from the override has the add
    def edit(text):
        lines = text.splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if " = mul " in line and "fp32" in line)
        lines[at] = lines[at].replace(" = mul ", " = add ")
        return "".join(lines)
    dumped, again = _override(monkeypatch, tmp_path, 64, "kir", edit)
    assert "add.f32" in again.asm["ptx"] and "add.f32" not in dumped["ptx"]


def test_triton_s_own_texts_are_named_and_left_out(monkeypatch, tmp_path):
    with pytest.warns(RuntimeWarning, match="does not read Triton's .ttgir"):
        dumped, again = _override(monkeypatch, tmp_path, 32, "ttgir", lambda text: text)
    assert again.asm["ptx"] == dumped["ptx"] and again.built.source != "override"


def test_an_llvm_module_is_emitted_and_linked(monkeypatch, tmp_path):
    dumped, again = _override(monkeypatch, tmp_path, 16, "llir", lambda text: "; edited by hand\n" + text)
    assert again.asm["llir"].startswith("; edited by hand") and again.built.source == "override"
    assert ".entry scaled_copy" in again.asm["ptx"] and again.asm["cubin"][:4] == b"\x7fELF"
