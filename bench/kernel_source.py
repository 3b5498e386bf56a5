"""bench/'s kernel files, written once for kiln, imported as kiln's or with their imports pointed at
upstream Triton (`import kiln as triton` -> `import triton`, `kiln.` -> `triton.`)."""
from __future__ import annotations

import importlib.util
import os
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def load(file: str, flavour: str):
    """bench/`file` as a module: as written ("kiln"), or for upstream Triton ("triton")."""
    src = open(os.path.join(HERE, file)).read()
    if flavour == "triton":
        src = src.replace("import kiln as triton", "import triton").replace("import kiln.", "import triton.")
        src = src.replace("from kiln.", "from triton.")
    folder = tempfile.mkdtemp(prefix=f"kiln-bench-{flavour}-")
    path = os.path.join(folder, f"{flavour}_{file}")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"{flavour}_{file[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
