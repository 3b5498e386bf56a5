"""kiln.runtime.build (`triton.runtime.build`): C extension modules built with the machine's compiler,
kept in the file cache, loaded only while they match the digest recorded when they were built."""
import os
import shutil
import subprocess
import sys

import pytest

from kiln.runtime import build

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("clang") is None
                                and not os.environ.get("CC"), reason="no C compiler on this machine")

GREETER = r"""
#include <Python.h>

static PyObject* greet(PyObject* self, PyObject* args) {
    const char *who;
    if (!PyArg_ParseTuple(args, "s", &who))
        return NULL;
    return PyUnicode_FromFormat("hello, %s", who);
}

static PyMethodDef methods[] = {{"greet", greet, METH_VARARGS, "greets"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, "NAME", NULL, -1, methods};
PyMODINIT_FUNC PyInit_NAME(void) { return PyModule_Create(&definition); }
"""


def source(name):
    return GREETER.replace("NAME", name)


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """A cache of its own; the names of the modules the compiler built."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    built, real = [], build._build

    def counting(name, *args, **kwargs):
        built.append(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(build, "_build", counting)
    return built


def test_a_module_is_built_once_and_then_loaded_from_the_cache(builds):
    first = build.compile_module_from_src(source("kiln_greeter_a"), "kiln_greeter_a")
    assert first.greet("kiln") == "hello, kiln"
    with pytest.raises(TypeError):
        first.greet()
    again = build.compile_module_from_src(source("kiln_greeter_a"), "kiln_greeter_a")
    assert again.__file__ == first.__file__ and builds == ["kiln_greeter_a"]
    other = build.compile_module_from_src(source("kiln_greeter_a"), "kiln_greeter_a", ccflags=["-O1"])
    assert other.__file__ != first.__file__ and builds == ["kiln_greeter_a"] * 2  # other arguments, another build


def test_a_damaged_cached_module_is_built_again(builds):
    first = build.compile_module_from_src(source("kiln_greeter_b"), "kiln_greeter_b")
    with open(first.__file__, "r+b") as f:  # the same size, other bytes: not the file that was built
        f.seek(100)
        f.write(b"\0" * 16)
    again = build.compile_module_from_src(source("kiln_greeter_b"), "kiln_greeter_b")
    assert again.greet("you") == "hello, you" and builds == ["kiln_greeter_b"] * 2


def test_a_compile_error_says_what_the_compiler_said(builds):
    with pytest.raises(RuntimeError, match="(?s)building kiln_broken failed.*error"):
        build.compile_module_from_src("this is not C", "kiln_broken")


def test_knobs_build_impl_builds_instead(builds, monkeypatch, tmp_path):
    from kiln.knobs import build as build_knobs
    calls = []

    def impl(name, src, srcdir, library_dirs, include_dirs, libraries):
        calls.append((name, os.path.basename(src)))
        monkeypatch.setattr(build_knobs, "impl", None)  # the real compiler, for the module itself
        try:
            return build._build(name, src, srcdir, library_dirs, include_dirs, libraries)
        finally:
            monkeypatch.setattr(build_knobs, "impl", impl)
    monkeypatch.setattr(build_knobs, "impl", impl)
    module = build.compile_module_from_src(source("kiln_greeter_c"), "kiln_greeter_c")
    assert module.greet("impl") == "hello, impl" and calls == [("kiln_greeter_c", "kiln_greeter_c.c")]


def test_library_flags_name_files_or_libraries():
    assert build._library_flag("cuda") == "-lcuda"
    assert build._library_flag("libcuda.so.1") == "-l:libcuda.so.1"
    assert build._library_flag("libfoo.a") == "-l:libfoo.a"


def test_under_the_drop_in_it_is_triton_runtime_build(tmp_path):
    from kiln.dropin import doctor
    if doctor.installed_hook() is None:
        pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .")
    code = ("import triton.runtime.build as b, kiln.runtime.build as k\n"
            "from triton.runtime.build import compile_module_from_src\n"
            "assert b is k and compile_module_from_src is k.compile_module_from_src\n")
    env = {**os.environ, "KILN_DROPIN": "1", "KILN_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
