"""Every package folder is named in pyproject.toml, so a non-editable install ships it."""
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
FOLDERS = {"frontend": "kiln", "ir": "kiln.ir", "codegen": "kiln.codegen", "daemon": "kiln.daemon",
           "cache": "kiln.cache", "proto": "kiln.proto"}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_every_package_is_listed():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = set()
    for folder, name in FOLDERS.items():
        for here, _, files in os.walk(os.path.join(ROOT, folder)):
            if "__init__.py" in files:
                rel = os.path.relpath(here, os.path.join(ROOT, folder))
                found.add(name if rel == "." else name + "." + rel.replace(os.sep, "."))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
