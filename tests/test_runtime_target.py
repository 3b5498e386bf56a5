"""KILN_TARGET: compiling a device's kernels for an older target than its own (sm_80 code
on a Hopper, JIT-compiled from PTX by the driver)."""
import pytest

from kiln.codegen.target import TargetError
from kiln.runtime import cuda_driver


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(cuda_driver, "target", lambda device: "sm_90a")


def test_the_device_target_unless_told_otherwise(hopper, monkeypatch):
    monkeypatch.delenv("KILN_TARGET", raising=False)
    assert cuda_driver.compile_target(0) == "sm_90a"
    monkeypatch.setenv("KILN_TARGET", " ")
    assert cuda_driver.compile_target(0) == "sm_90a"


def test_kiln_target_names_the_target(hopper, monkeypatch):
    monkeypatch.setenv("KILN_TARGET", "sm_80")
    assert cuda_driver.compile_target(0) == "sm_80"


def test_an_unknown_target_is_refused_at_once(hopper, monkeypatch):
    monkeypatch.setenv("KILN_TARGET", "sm_99x")
    with pytest.raises(TargetError):
        cuda_driver.compile_target(0)
