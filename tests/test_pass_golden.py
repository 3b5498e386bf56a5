"""Golden IR tests: each `tests/pass_golden/*.kir` names the passes it runs (`// RUN: a, b`) and the
target (`// TARGET: sm_90a`, the default; `// WARPS: 4`), holds the input function, and says with
`// CHECK` lines what the printed result must hold (kiln.filecheck: FileCheck's directives)."""
import importlib
import pathlib
import re

import pytest

from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
from kiln.filecheck import check, parse
from kiln.ir import parse_function, print_function, verify

GOLDEN = pathlib.Path(__file__).parent / "pass_golden"


def header(text: str, key: str, default: str) -> str:
    m = re.search(rf"^//\s*{key}:\s*(.+)$", text, re.M)
    return m.group(1).strip() if m else default


def run_file(path: pathlib.Path) -> str:
    text = path.read_text()
    ir = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    fn = parse_function(ir)
    ctx = PassContext(parse_target(header(text, "TARGET", "sm_90a")), int(header(text, "WARPS", "4")))
    for name in header(text, "RUN", "").split(","):
        importlib.import_module(f"kiln.codegen.passes.{name.strip()}").apply(fn, ctx)
        verify(fn)
    return print_function(fn)


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.kir")), ids=lambda p: p.stem)
def test_golden(path):
    text = path.read_text()
    assert parse(text, check_name=path.name), f"{path.name} has no CHECK lines"
    check(run_file(path), text, check_name=path.name, input_name=f"{path.stem} after its passes")
