"""`kiln.filecheck`: LLVM FileCheck's matching, in Python, for tests that read text (IR, PTX, logs).

`check(input_text, check_text)` finds the directives in `check_text` and matches them against
`input_text`; it returns the variables the checks captured, or raises `FileCheckError`.

Directives. A directive is a prefix (`CHECK` unless `prefixes=` names others) not preceded by a
letter, digit, `_` or `-`, a suffix, and a colon, anywhere in a line; what follows the colon, with
the surrounding whitespace dropped, is its pattern. A line whose `COM:` or `RUN:` comes first is
a comment. One directive per line.

    CHECK: p          p matches at or after the end of the previous match (on the same line too)
    CHECK-NEXT: p     ... and that match is on the line right after the previous match's
    CHECK-SAME: p     ... and that match is on the previous match's line
    CHECK-EMPTY:      the line right after the previous match's is empty (no pattern)
    CHECK-NOT: p      p matches nowhere between the previous match and the next one (or the end
                      of the block)
    CHECK-DAG: p      a run of DAG directives matches in any order, each at its first place after
                      the previous match that overlaps no other match of the run; the search then
                      goes on after the match of the run that ends last. A NOT between two DAGs
                      ends the run; it holds between the runs' matches.
    CHECK-LABEL: p    labels are matched first, in order, each after the previous; they cut the
                      input into blocks, and the directives between two labels match only in the
                      block between the two labels' matches
    CHECK-COUNT-n: p  p matches n times, each after the previous (as n CHECK lines)

A NEXT, SAME or EMPTY needs a previous match: it cannot be the first directive (a LABEL is a
match). A check text with no directive is an error, and so is an empty pattern except on EMPTY.

Patterns. The text is literal, except:
  - `{{re}}` is a Python regular expression; it ends at the first `}}`, or at the last `}` of a
    longer run of them (`{{a{2}}}` is `a{2}`). `^` and `$` match at line boundaries.
  - `[[NAME:re]]` matches the regular expression `re` (written bare, brackets in it nesting:
    `[[N:[0-9]+]]`) and sets variable NAME to what it matched; `[[NAME]]` matches the text NAME
    holds, literally. A variable set by one directive serves every later one (and later in the
    same pattern); using one never set is an error, as is a NOT or a LABEL that sets one (labels,
    matched before the rest, use none either). Numeric (`[[#...]]`) and global (`$`) variables
    are not supported.
Whitespace: as FileCheck without --strict-whitespace, every run of spaces and tabs, in the input
and in a pattern's literal text, counts as one space, so `a  b` matches `a`, a tab, `b`; not `ab`.

Errors name the directive, its line and column in the check text, and the place in the input
where its search began (or where the offending text was), as FileCheck's messages do; columns
in the input are those after whitespace folding. The regular expressions are Python's `re`,
not POSIX's: the syntax that FileCheck tests use in practice (classes, `.*`, `+`, `?`, `|`,
groups) means the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_SUFFIXES = ("NEXT", "SAME", "NOT", "DAG", "LABEL", "EMPTY")
_COMMENT = re.compile(r"(?<![A-Za-z0-9_-])(?:COM|RUN):")
_PREFIX_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACES = re.compile(r"[ \t]+")


class FileCheckError(ValueError):
    """A check that failed (or a check text that is malformed): `directive` is the Directive, or None."""

    def __init__(self, message: str, directive: "Directive | None" = None):
        super().__init__(message)
        self.directive = directive


@dataclass(frozen=True)
class Directive:
    prefix: str
    kind: str  # "" (plain), NEXT, SAME, NOT, DAG, LABEL, EMPTY or COUNT
    pattern: str
    line: int  # 1-based, in the check text
    column: int  # 1-based, of the prefix
    source: str  # the check text's line, for messages
    count: int = 1

    @property
    def name(self) -> str:
        return self.prefix + (f"-COUNT-{self.count}" if self.kind == "COUNT" else f"-{self.kind}" if self.kind else "")


def parse(check_text: str, prefixes=("CHECK",), check_name: str = "<check>") -> list[Directive]:
    """The directives of `check_text`, in order."""
    prefixes = _validated(prefixes)
    alternatives = "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
    directive_re = re.compile(rf"(?<![A-Za-z0-9_-])({alternatives})(?:-({'|'.join(_SUFFIXES)})|-COUNT-([0-9]+))?:")
    found = []
    for number, text in enumerate(check_text.splitlines(), 1):
        text = _SPACES.sub(" ", text)  # as FileCheck reads both files: runs of spaces and tabs are one space
        m = directive_re.search(text)
        if m is None:
            continue
        comment = _COMMENT.search(text)
        if comment is not None and comment.start() < m.start():
            continue
        kind = "COUNT" if m.group(3) is not None else (m.group(2) or "")
        d = Directive(m.group(1), kind, text[m.end():].strip(), number, m.start() + 1, text,
                      int(m.group(3)) if m.group(3) is not None else 1)
        if kind == "EMPTY" and d.pattern:
            raise FileCheckError(_at(check_name, d, f"{d.name} takes no pattern, found {d.pattern!r}"), d)
        if kind != "EMPTY" and not d.pattern:
            raise FileCheckError(_at(check_name, d, f"found an empty pattern on {d.name}:"), d)
        if kind == "COUNT" and d.count < 1:
            raise FileCheckError(_at(check_name, d, f"{d.name}: the count must be at least 1"), d)
        if kind in ("NEXT", "SAME", "EMPTY") and not found:
            raise FileCheckError(_at(check_name, d, f"found {d.name} with no directive before it to follow"), d)
        found.append(d)
    if not found:
        raise FileCheckError(f"{check_name}: no directive found with prefix {' or '.join(prefixes)}")
    return found


def check(input_text: str, check_text: str, prefixes=("CHECK",), check_name: str = "<check>",
          input_name: str = "<input>") -> dict:
    """Match the directives of `check_text` against `input_text`; the variables they set, or FileCheckError."""
    directives = parse(check_text, prefixes, check_name)
    return _Matcher(_SPACES.sub(" ", input_text), check_name, input_name).run(directives)


def _validated(prefixes) -> tuple:
    prefixes = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    if not prefixes:
        raise ValueError("no check prefix given")
    for p in prefixes:
        if not _PREFIX_NAME.fullmatch(p):
            raise ValueError(f"check prefix {p!r}: a letter, then letters, digits, '_' or '-'")
    if len(set(prefixes)) != len(prefixes):
        raise ValueError(f"check prefixes {prefixes} name one twice")
    return prefixes


def _at(check_name: str, d: Directive, message: str) -> str:
    return f"{check_name}:{d.line}:{d.column}: error: {message}\n{d.source}\n{' ' * (d.column - 1)}^"


@dataclass
class _Match:
    start: int
    end: int


class _Matcher:
    def __init__(self, text: str, check_name: str, input_name: str):
        self.text, self.check_name, self.input_name = text, check_name, input_name
        self.vars: dict[str, str] = {}

    # --- the walk -------------------------------------------------------------------------
    def run(self, directives: list[Directive]) -> dict:
        labels = [i for i, d in enumerate(directives) if d.kind == "LABEL"]
        matches, pos = [], 0
        for i in labels:
            m = self.search(directives[i], pos, len(self.text))
            if m is None:
                self.fail(directives[i], "expected string not found in input", pos, "scanning from here")
            matches.append(m)
            pos = m.end
        # block b: the directives after label b-1 and before label b, matched after label b-1's
        # match and before label b's
        bounds = [-1] + labels + [len(directives)]
        for b in range(len(bounds) - 1):
            start = matches[b - 1] if b > 0 else None
            end = matches[b].start if b < len(matches) else len(self.text)
            self.block(directives[bounds[b] + 1:bounds[b + 1]], start, end)
        return dict(self.vars)

    def block(self, directives: list[Directive], previous: _Match | None, end: int) -> None:
        pos = previous.end if previous is not None else 0
        nots: list[Directive] = []
        i = 0
        while i < len(directives):
            d = directives[i]
            if d.kind == "NOT":
                self.compile(d)  # a NOT with an unset variable fails now, not only where text is found
                nots.append(d)
                i += 1
                continue
            if d.kind == "DAG":
                j = i
                while j < len(directives) and directives[j].kind == "DAG":
                    j += 1
                found = self.dag(directives[i:j], pos, end)
                self.forbid(nots, pos, min(m.start for m in found))
                previous = max(found, key=lambda m: m.end)
                i = j
            else:
                first, previous = self.positive(d, previous, pos, end)
                self.forbid(nots, pos, first.start)
                i += 1
            nots, pos = [], previous.end
        self.forbid(nots, pos, end)

    def positive(self, d: Directive, previous: _Match | None, pos: int, end: int) -> tuple[_Match, _Match]:
        """The first and last match of a CHECK, COUNT, NEXT, SAME or EMPTY."""
        if d.kind in ("NEXT", "SAME", "EMPTY") and previous is None:
            self.bad(d, "no match before it to follow")
        if d.kind == "EMPTY":
            line_end = self.text.find("\n", previous.end, end)
            if line_end < 0 or line_end + 1 >= end or self.text[line_end + 1] != "\n":
                self.fail(d, "the line after the previous match is not empty", pos, "previous match ended here")
            m = _Match(line_end + 1, line_end + 1)
            return m, m
        first = last = None
        for _ in range(d.count):
            m = self.search(d, pos, end)
            if m is None:
                self.fail(d, "expected string not found in input", pos, "scanning from here")
            first, last, pos = first or m, m, m.end
        if d.kind in ("NEXT", "SAME"):
            lines = self.text.count("\n", previous.end, first.start)
            if d.kind == "NEXT" and lines != 1:
                where = "on the same line as" if lines == 0 else f"{lines} lines after"
                self.fail(d, f"the match is {where} the previous match, not on the line after it", first.start,
                          "the match is here", previous.end, "previous match ended here")
            if d.kind == "SAME" and lines != 0:
                self.fail(d, "the match is not on the same line as the previous match", first.start,
                          "the match is here", previous.end, "previous match ended here")
        return first, last

    def dag(self, group: list[Directive], pos: int, end: int) -> list[_Match]:
        taken: list[_Match] = []
        for d in group:
            start = pos
            while True:
                m = self.find(d, start, end)
                if m is None:
                    self.fail(d, "expected string not found in input", pos, "scanning from here")
                overlap = next((t for t in taken if m[0].start < t.end and t.start < m[0].end), None)
                if overlap is None:
                    break
                start = max(overlap.end, m[0].start + 1)
            self.vars.update(m[1])
            taken.append(m[0])
        return taken

    def forbid(self, nots: list[Directive], start: int, end: int) -> None:
        for d in nots:
            m = self.search(d, start, end)
            if m is not None:
                self.fail(d, "excluded string found in input", m.start, "found here")

    # --- patterns -------------------------------------------------------------------------
    def search(self, d: Directive, start: int, end: int) -> _Match | None:
        """The first match of `d`'s pattern in text[start:end], its variables set."""
        found = self.find(d, start, end)
        if found is None:
            return None
        self.vars.update(found[1])
        return found[0]

    def find(self, d: Directive, start: int, end: int) -> tuple[_Match, dict] | None:
        """The first match of `d`'s pattern in text[start:end] and the variables it would set."""
        m = self.compile(d).search(self.text, start, end)
        if m is None:
            return None
        return _Match(m.start(), m.end()), {n[2:]: v for n, v in m.groupdict().items() if n.startswith("v_")}

    def compile(self, d: Directive) -> re.Pattern:
        out, defined, s, i = [], set(), d.pattern, 0
        while i < len(s):
            if s.startswith("{{", i):
                close = s.find("}}", i + 2)
                if close < 0:
                    self.bad(d, "a '{{' with no '}}' after it")
                while close + 2 < len(s) and s[close + 2] == "}":
                    close += 1
                out.append(f"(?:{s[i + 2:close]})")
                i = close + 2
            elif s.startswith("[[", i):
                close = _variable_end(s, i + 2)
                if close < 0:
                    self.bad(d, "a '[[' with no ']]' after it")
                out.append(self.variable(d, s[i + 2:close], defined))
                i = close + 2
            else:
                nxt = min((j for j in (s.find("{{", i), s.find("[[", i)) if j >= 0), default=len(s))
                out.append(_literal(s[i:nxt]))
                i = nxt
        try:
            return re.compile("".join(out), re.MULTILINE)
        except re.error as e:
            self.bad(d, f"invalid regular expression: {e}")

    def variable(self, d: Directive, body: str, defined: set) -> str:
        if body.startswith(("#", "$")):
            self.bad(d, f"[[{body}]]: numeric and global variables are not supported")
        name, colon, regex = body.partition(":")
        if not _VAR_NAME.fullmatch(name):
            self.bad(d, f"[[{body}]]: {name!r} is not a variable name")
        if colon:
            if d.kind in ("NOT", "LABEL"):
                self.bad(d, f"{d.name} cannot set a variable ([[{body}]])")
            if name in defined:
                self.bad(d, f"variable {name} is set twice in one pattern")
            defined.add(name)
            return f"(?P<v_{name}>{regex})"
        if name in defined:
            return f"(?P=v_{name})"
        if name not in self.vars:
            self.bad(d, f"variable {name} is used but was never set")
        return _literal(self.vars[name])

    # --- messages -------------------------------------------------------------------------
    def bad(self, d: Directive, message: str):
        raise FileCheckError(_at(self.check_name, d, f"{d.name}: {message}"), d)

    def fail(self, d: Directive, message: str, pos: int, note: str, pos2: int | None = None, note2: str = ""):
        parts = [_at(self.check_name, d, f"{d.name}: {message}"), self.note(pos, note)]
        if pos2 is not None:
            parts.append(self.note(pos2, note2))
        used = sorted(set(re.findall(r"\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]", d.pattern)) & self.vars.keys())
        parts += [f"{self.check_name}:{d.line}: note: with {n} equal to {self.vars[n]!r}" for n in used]
        raise FileCheckError("\n".join(parts), d)

    def note(self, pos: int, what: str) -> str:
        line = self.text.count("\n", 0, pos) + 1
        line_start = self.text.rfind("\n", 0, pos) + 1
        line_end = self.text.find("\n", pos)
        text = self.text[line_start:line_end if line_end >= 0 else len(self.text)]
        column = pos - line_start + 1
        return f"{self.input_name}:{line}:{column}: note: {what}\n{text}\n{' ' * (column - 1)}^"


def _literal(text: str) -> str:
    return re.escape(_SPACES.sub(" ", text))


def _variable_end(s: str, i: int) -> int:
    """The index of the ']]' that closes a '[[' whose body starts at i, brackets in it nested; -1 if none."""
    depth = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            depth += 1
        elif c == "]":
            if depth == 0 and s.startswith("]]", i):
                return i
            depth = max(depth - 1, 0)
        i += 1
    return -1
