"""The repository's scripts/ as the tests run them: each file's path, and the file loaded as a module."""
import importlib.util
import pathlib

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"


def load(name: str):
    """scripts/<name>.py as a module (not run as __main__)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
