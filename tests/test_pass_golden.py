"""Golden IR tests: each `tests/pass_golden/*.kir` names the passes it runs (`// RUN: a, b`) and the
target (`// TARGET: sm_90a`, the default; `// WARPS: 4`), holds the input function, and says with
`// CHECK` lines what the printed result must hold (tests/filecheck.py)."""
import importlib
import pathlib
import re

import pytest

from filecheck import CheckFailure, Check, checks_of, run_checks
from kiln.codegen.pipeline import PassContext
from kiln.codegen.target import parse_target
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
    ctx.function = fn
    for name in header(text, "RUN", "").split(","):
        importlib.import_module(f"kiln.codegen.passes.{name.strip()}").apply(fn, ctx)
        verify(fn)
    return print_function(fn)


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.kir")), ids=lambda p: p.stem)
def test_golden(path):
    checks = checks_of(path.read_text())
    assert checks, f"{path.name} has no CHECK lines"
    run_checks(checks, run_file(path))


OUTPUT = """kernel @k() {
  %a = constant {value = 3} : int32
  %b = add %a, %a : int32
  return
}"""


def test_checks_pass_in_order_and_next_means_the_very_next_line():
    run_checks(checks_of("// CHECK: constant {value = 3}\n// CHECK-NEXT: add\n// CHECK: return"), OUTPUT)
    run_checks(checks_of("// CHECK: %b = add {{%[a-z]}}, %a"), OUTPUT)


@pytest.mark.parametrize("spec", [
    "// CHECK: return\n// CHECK: add",  # out of order
    "// CHECK: constant\n// CHECK-NEXT: return",  # not the next line
    "// CHECK: constant\n// CHECK-NOT: add\n// CHECK: return",  # forbidden between the two
    "// CHECK-NOT: mul\n// CHECK-NOT: add",  # forbidden anywhere
    "// CHECK: %c = ",  # absent
])
def test_a_failing_check_fails(spec):
    with pytest.raises(CheckFailure):
        run_checks(checks_of(spec), OUTPUT)


def test_a_check_is_one_directive_per_line():
    assert checks_of("  // CHECK-NEXT: x\nkernel\n// CHECK-NOT: y") == [Check("CHECK-NEXT", "x", 1), Check("CHECK-NOT", "y", 3)]
