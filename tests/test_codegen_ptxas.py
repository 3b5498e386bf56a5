"""A kernel that sets its warps' registers (`setmaxnreg`: a warp-specialized GEMM's producer hands
registers to its dot warps) is assembled by a standalone ptxas, which keeps those instructions;
nvJitLink assembles PTX as a separately compiled unit and drops them (C7504). Every other kernel,
and every kernel where no ptxas answers or it refuses the PTX, links through nvJitLink."""
import os

import pytest

from kiln.codegen import compile as compile_ir
from kiln.codegen import ptxas
from kiln.ir import parse_function

from sass_tools import sass
from test_codegen_warp_specialize import _built

FAKE_VERSION = "Cuda compilation tools, release 99.0, V99.0.1"


@pytest.fixture
def ptxas_env(monkeypatch):
    """Set KILN_PTXAS for one test, with `find`'s answer forgotten before and after."""
    def use(value):
        monkeypatch.setenv("KILN_PTXAS", value)
        ptxas.find.cache_clear()
    yield use
    monkeypatch.delenv("KILN_PTXAS", raising=False)
    ptxas.find.cache_clear()


def _fake_ptxas(tmp_path, body: str) -> str:
    """A program answering `--version` as ptxas 99.0 does and running `body` for anything else."""
    path = tmp_path / "ptxas"
    path.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{FAKE_VERSION}"; exit 0; fi\n{body}\n')
    path.chmod(0o755)
    return str(path)


def _specialized(link=True):
    built = _built()
    return compile_ir(parse_function(built.asm["kir"]), "sm_90a", {"num_warps": 8, "num_stages": 3}, link=link)


def test_a_kernel_that_sets_its_registers_is_assembled_by_ptxas():
    if ptxas.find() is None:
        pytest.skip("no standalone ptxas here (the GPU machine's CUDA has one)")
    kernel = _specialized()
    assert ptxas.wanted(kernel.ptx) and kernel.metadata["assembler"] == "ptxas"
    assert kernel.n_regs == 168 and kernel.metadata["links"] == 1  # the entry cap, .maxnreg 168
    assert sass(kernel.cubin).count("USETMAXREG") == 2  # the dot warps' increase and the producer's decrease, kept


def test_without_a_ptxas_it_links_through_nvjitlink_and_other_kernels_always_do(ptxas_env):
    ptxas_env("off")
    assert ptxas.find() is None and ptxas.version() == ""
    kernel = _specialized()
    assert "assembler" not in kernel.metadata and kernel.cubin[:4] == b"\x7fELF"
    plain = _built(ws=False)
    assert not ptxas.wanted(plain.asm["ptx"]) and "assembler" not in plain.metadata


def test_a_ptxas_that_does_not_answer_is_not_used(tmp_path, ptxas_env):
    ptxas_env(str(tmp_path / "missing"))
    assert ptxas.find() is None
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 1\n")
    silent.chmod(0o755)
    ptxas_env(str(silent))
    assert ptxas.find() is None


def test_a_ptxas_that_refuses_the_ptx_leaves_it_to_nvjitlink(tmp_path, ptxas_env):
    ptxas_env(_fake_ptxas(tmp_path, 'echo "ptxas fatal: Unsupported .version" >&2; exit 255'))
    assert ptxas.find() == (str(tmp_path / "ptxas"), "99.0.1")
    kernel = _specialized()
    assert "assembler" not in kernel.metadata and kernel.cubin[:4] == b"\x7fELF" and kernel.n_regs > 0


def test_its_version_is_part_of_the_compile_key(tmp_path, ptxas_env, monkeypatch):
    from kiln.proto import key
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    ptxas_env(_fake_ptxas(tmp_path, "exit 1"))
    key._identity.cache_clear()
    try:
        with_fake = key.compiler_identity()
        ptxas_env("off")
        key._identity.cache_clear()
        without = key.compiler_identity()
    finally:
        key._identity.cache_clear()
    assert with_fake["ptxas"] == "99.0.1" and without["ptxas"] == ""
    assert {k: v for k, v in with_fake.items() if k != "ptxas"} == {k: v for k, v in without.items() if k != "ptxas"}
    assert os.path.isfile(tmp_path / "cache" / "toolchain.json")
