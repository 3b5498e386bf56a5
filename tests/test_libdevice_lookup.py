"""Where kiln finds libdevice.10.bc (kiln.codegen.libdevice.libdevice_path), on fake folders: the
KILN_LIBDEVICE setting, then cuda.pathfinder, then the CUDA wheels, a conda environment, CUDA_HOME,
CUDA_PATH, /usr/local/cuda*, Triton's wheel; none found is one error that says what to install."""
import functools
import sys

import pytest

from kiln.codegen import libdevice


@pytest.fixture
def lookup(tmp_path, monkeypatch):
    """libdevice_path() over fake folders only: no pathfinder, sys.path = [tmp/site], /usr/local =
    tmp/local, no CUDA variables; its memo cleared before and after."""
    for name in ("KILN_LIBDEVICE", "CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(libdevice, "_pathfinder_libdevice", lambda: None)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    monkeypatch.setattr(libdevice, "libdevice_candidates",
                        functools.partial(libdevice.libdevice_candidates, local=tmp_path / "local"))
    libdevice.libdevice_path.cache_clear()
    yield lambda: (libdevice.libdevice_path.cache_clear(), libdevice.libdevice_path())[1]
    libdevice.libdevice_path.cache_clear()


def bitcode(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"BC\xc0\xde")
    return path


def test_the_candidates_in_order(tmp_path):
    site, local = tmp_path / "site", tmp_path / "local"
    expected = [
        bitcode(site / "nvidia/cu13/nvvm/libdevice/libdevice.10.bc"),  # nvidia-nvvm (CUDA 13)
        bitcode(site / "nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc"),  # nvidia-cuda-nvcc-cu12
        bitcode(tmp_path / "conda/nvvm/libdevice/libdevice.10.bc"),
        bitcode(tmp_path / "home/nvvm/libdevice/libdevice.10.bc"),
        bitcode(tmp_path / "path/nvvm/libdevice/libdevice.10.bc"),
        bitcode(local / "cuda/nvvm/libdevice/libdevice.10.bc"),
        bitcode(local / "cuda-12.10/nvvm/libdevice/libdevice.10.bc"),  # newest first, by number
        bitcode(local / "cuda-12.9/nvvm/libdevice/libdevice.10.bc"),
        bitcode(local / "cuda-11.8/nvvm/libdevice/libdevice.10.bc"),
        bitcode(site / "triton/backends/nvidia/lib/libdevice.10.bc"),
    ]
    environ = {"CONDA_PREFIX": str(tmp_path / "conda"), "CUDA_HOME": str(tmp_path / "home"),
               "CUDA_PATH": str(tmp_path / "path")}
    found = [p for p in libdevice.libdevice_candidates(["", str(site)], environ, local=local) if p.is_file()]
    assert found == expected


def test_the_first_that_exists_is_taken(tmp_path, monkeypatch, lookup):
    toolkit = bitcode(tmp_path / "local/cuda-12.9/nvvm/libdevice/libdevice.10.bc")
    assert lookup() == str(toolkit)
    home = bitcode(tmp_path / "home/nvvm/libdevice/libdevice.10.bc")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    assert lookup() == str(home)
    wheel = bitcode(tmp_path / "site/nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc")
    assert lookup() == str(wheel)


def test_pathfinder_comes_before_kilns_own_list(tmp_path, monkeypatch, lookup):
    bitcode(tmp_path / "site/nvidia/cu13/nvvm/libdevice/libdevice.10.bc")
    elsewhere = bitcode(tmp_path / "pathfinder/libdevice.10.bc")
    monkeypatch.setattr(libdevice, "_pathfinder_libdevice", lambda: str(elsewhere))
    assert lookup() == str(elsewhere)


def test_the_setting_comes_first_and_must_exist(tmp_path, monkeypatch, lookup):
    monkeypatch.setattr(libdevice, "_pathfinder_libdevice", lambda: str(bitcode(tmp_path / "pf/libdevice.10.bc")))
    mine = bitcode(tmp_path / "mine/custom.bc")
    monkeypatch.setenv("KILN_LIBDEVICE", str(mine))
    assert lookup() == str(mine)
    monkeypatch.setenv("KILN_LIBDEVICE", str(tmp_path / "missing.bc"))
    with pytest.raises(FileNotFoundError, match=r"^KILN_LIBDEVICE=.*missing\.bc: no such file$"):
        lookup()


def test_none_found_is_one_error_that_says_what_to_install(lookup):
    with pytest.raises(FileNotFoundError) as error:
        lookup()
    message = str(error.value)
    assert message.startswith("libdevice.10.bc not found: kernels that call math functions")
    for fix in ("pip install 'kiln[cu13]'", "'kiln[cu12]'", "CUDA toolkit", "KILN_LIBDEVICE"):
        assert fix in message
    assert "\n" not in message


def test_a_pathfinder_that_cannot_find_it_is_passed_over(monkeypatch):
    pathfinder = pytest.importorskip("cuda.pathfinder")

    def not_found(name):
        raise RuntimeError(f"Failure finding {name}")
    monkeypatch.setattr(pathfinder, "find_bitcode_lib", not_found)
    assert libdevice._pathfinder_libdevice() is None
    monkeypatch.delattr(pathfinder, "find_bitcode_lib")  # a cuda-pathfinder older than bitcode lookups
    assert libdevice._pathfinder_libdevice() is None
