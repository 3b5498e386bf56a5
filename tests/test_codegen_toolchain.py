"""An installed llvmlite or cuda-bindings below kiln's floor is named in one line, with the fix."""
import subprocess
import sys
from importlib import metadata

from kiln.codegen import toolchain


def versions(**installed):
    return installed.get


def test_libraries_at_or_above_their_floors_say_nothing():
    assert toolchain.too_old(versions(**{"llvmlite": "0.48.0", "cuda-bindings": "13.0.2"})) == []
    assert toolchain.too_old(versions(**{"llvmlite": "0.50.0rc1", "cuda-bindings": "12.9.3"})) == []


def test_an_old_library_is_one_line_with_the_reason_and_the_fix():
    lines = toolchain.too_old(versions(**{"llvmlite": "0.47.0", "cuda-bindings": "12.8.0"}))
    assert len(lines) == 2
    assert lines[0].startswith("kiln: llvmlite 0.47.0 is older than 0.48 (") and "pip install -U 'llvmlite>=0.48'" in lines[0]
    assert "cuda-bindings 12.8.0 is older than 12.9.3" in lines[1]


def test_a_broken_release_above_the_floor_is_named_with_the_first_that_works():
    lines = toolchain.too_old(versions(**{"llvmlite": "0.48.0", "cuda-bindings": "13.0.1"}))
    assert lines == ["kiln: cuda-bindings 13.0.1 is a broken release (they fail nvJitLink on a host without a driver); "
                     "pip install -U 'cuda-bindings>=13.0.2'"]
    assert toolchain.too_old(versions(**{"cuda-bindings": "13.5.0"})) == []


def test_a_library_that_is_not_installed_is_not_this_checks_to_report():
    assert toolchain.too_old(versions()) == []


def test_the_installed_versions_are_the_distributions_own():
    for name in toolchain.FLOORS:
        assert toolchain.installed_version(name) == metadata.version(name)


def test_this_environment_imports_the_code_generator_without_a_warning():
    """The modules that load llvmlite's binding and nvJitLink check the versions as they load."""
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c",
                           "import kiln.codegen.compiler, kiln.codegen.nvjitlink"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
