"""A small FileCheck: `// CHECK:` lines of a test file matched, in order, against a pass's output.

    // CHECK: text        a later line holds `text`
    // CHECK-NEXT: text   the line right after the previous match holds it
    // CHECK-NOT: text    no line between the previous match and the next one holds it

`{{regex}}` inside a pattern is a regular expression; the rest is literal text, and runs of
spaces match any run of spaces."""
from __future__ import annotations

import re
from dataclasses import dataclass

_DIRECTIVE = re.compile(r"^\s*//\s*(CHECK(?:-NEXT|-NOT)?):\s?(.*)$")


@dataclass(frozen=True)
class Check:
    kind: str  # CHECK, CHECK-NEXT, CHECK-NOT
    pattern: str
    line: int  # in the test file, for the message

    def regex(self) -> re.Pattern:
        parts = re.split(r"\{\{(.*?)\}\}", self.pattern.strip())
        return re.compile("".join(part if i % 2 else _literal(part) for i, part in enumerate(parts)))


def _literal(text: str) -> str:
    return "".join(r"\s+" if piece.isspace() else re.escape(piece) for piece in re.split(r"(\s+)", text) if piece)


class CheckFailure(AssertionError):
    pass


def checks_of(text: str) -> list[Check]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        m = _DIRECTIVE.match(line)
        if m:
            out.append(Check(m.group(1), m.group(2), number))
    return out


def run_checks(checks: list[Check], output: str) -> None:
    """Raise CheckFailure, naming the check and where the search stood, unless `output` passes."""
    lines = output.splitlines()
    position = 0  # the first line a CHECK may match
    last = None  # the line the previous positive check matched
    pending_not: list[Check] = []

    def forbid(upto: int) -> None:
        for check in pending_not:
            for n in range(position, upto):
                if check.regex().search(lines[n]):
                    raise CheckFailure(f"line {check.line}: CHECK-NOT {check.pattern!r} found at output line {n + 1}: "
                                       f"{lines[n].strip()!r}")
        pending_not.clear()

    for check in checks:
        if check.kind == "CHECK-NOT":
            pending_not.append(check)
            continue
        if check.kind == "CHECK-NEXT":
            n = (last + 1) if last is not None else 0
            if n >= len(lines) or not check.regex().search(lines[n]):
                got = lines[n].strip() if n < len(lines) else "<end of output>"
                raise CheckFailure(f"line {check.line}: CHECK-NEXT {check.pattern!r} is not the next line, "
                                   f"which is {got!r}")
        else:
            n = next((i for i in range(position, len(lines)) if check.regex().search(lines[i])), None)
            if n is None:
                raise CheckFailure(f"line {check.line}: CHECK {check.pattern!r} not found after output line "
                                   f"{position}")
        forbid(n)
        last, position = n, n + 1
    forbid(len(lines))
