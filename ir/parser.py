"""Parse the text form printed by `kiln.ir.printer` back into a `Function`."""
from __future__ import annotations

import functools
import json
import re

from .core import Block, Function, Loc, Operation
from .types import parse_type

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<value>%[A-Za-z0-9_.$]+)
  | (?P<symbol>@[A-Za-z_][A-Za-z0-9_.$]*)
  | (?P<type><[^=(){}]*?>(?![>:]))
  | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf)(?![A-Za-z0-9_]))
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*(?:<[^(){}\s,]*>)?)
  | (?P<punct>\^|[(){}\[\],:=])
""", re.VERBOSE)


class IRParseError(ValueError):
    pass


class _Parser:
    def __init__(self, text: str):
        self.tokens = []
        pos, line, counted = 0, 1, 0  # newlines counted up to `counted` (from the start each time: quadratic)
        while pos < len(text):
            line += text.count("\n", counted, pos)
            counted = pos
            m = _TOKEN.match(text, pos)
            if not m:
                raise IRParseError(f"line {line}: unexpected character {text[pos]!r}")
            if m.lastgroup != "ws":
                self.tokens.append((m.lastgroup, m.group(), line))
            pos = m.end()
        self.i = 0
        self.values: dict[str, object] = {}

    # --- token helpers ---------------------------------------------------------------
    def peek(self, ahead=0):
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else ("eof", "", -1)

    def next(self):
        tok = self.peek()
        self.i += 1
        return tok

    def error(self, msg):
        kind, text, line = self.peek()
        raise IRParseError(f"line {line}: {msg} (at {text!r})")

    def expect(self, text):
        if self.peek()[1] != text:
            self.error(f"expected {text!r}")
        return self.next()

    def accept(self, text):
        if self.peek()[1] == text:
            self.next()
            return True
        return False

    def type(self):
        kind, text, _ = self.peek()
        if kind not in ("type", "word"):
            self.error("expected a type")
        self.next()
        try:
            return parse_type(text)
        except (ValueError, TypeError) as e:
            self.error(str(e))

    def use(self):
        kind, text, _ = self.next()
        if kind != "value":
            self.i -= 1
            self.error("expected a value")
        if text not in self.values:
            self.i -= 1
            self.error(f"use of undefined value {text}")
        return self.values[text]

    def define(self, name, value):
        if name in self.values:
            raise IRParseError(f"value {name} defined twice")
        self.values[name] = value

    # --- attributes ----------------------------------------------------------------
    def attr_value(self):
        kind, text, _ = self.next()
        if kind == "string":
            return json.loads(text)
        if kind == "number":
            if text == "inf":
                return float("inf")
            if text == "-inf":
                return float("-inf")
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "word" and text in ("true", "false"):
            return text == "true"
        if kind == "word" and text in ("nan", "inf"):
            return float(text)
        if text == "[":
            items = []
            while not self.accept("]"):
                items.append(self.attr_value())
                if not self.accept(","):
                    self.expect("]")
                    break
            return items
        if text == "-" and self.peek()[1] == "inf":
            self.next()
            return float("-inf")
        self.i -= 1
        self.error("expected an attribute value")

    def attrs(self):
        out = {}
        self.expect("{")
        while not self.accept("}"):
            key = self.next()[1]
            self.expect("=")
            out[key] = self.attr_value()
            if not self.accept(","):
                self.expect("}")
                break
        return out

    # --- ops -----------------------------------------------------------------------
    def block(self):
        self.expect("^")
        self.expect("(")
        names, types = [], []
        while not self.accept(")"):
            names.append(self.next()[1])
            self.expect(":")
            types.append(self.type())
            self.accept(",")
        self.expect(":")
        block = Block(types)
        for name, arg in zip(names, block.args):
            self.define(name, arg)
        while self.peek()[1] != "}":
            block.append(self.op())
        return block

    def op(self):
        result_names = []
        if self.peek()[0] == "value":
            while True:
                result_names.append(self.next()[1])
                if not self.accept(","):
                    break
            self.expect("=")
        kind, name, line = self.next()
        if kind != "word":
            self.i -= 1
            self.error("expected an op name")
        operands = []
        # operands sit on the op's own line: `barrier` then `%5 = ...` is two ops
        if self.peek()[0] == "value" and self.peek()[2] == line:
            while True:
                operands.append(self.use())
                if not self.accept(","):
                    break
        attrs = self.attrs() if self.peek()[1] == "{" and self.peek(1)[0] == "word" and self.peek(2)[1] == "=" else {}
        types = []
        if self.accept(":"):
            while True:
                types.append(self.type())
                if not self.accept(","):
                    break
        loc = self.loc()
        regions = []
        if self.accept("{"):
            while True:
                regions.append(self.block())
                self.expect("}")
                if not self.accept("{"):
                    break
        if len(types) != len(result_names):
            self.error(f"{name}: {len(result_names)} results but {len(types)} types")
        op = Operation(name, operands, types, attrs, regions, loc)
        for rname, value in zip(result_names, op.results):
            self.define(rname, value)
        return op

    def loc(self):
        if self.peek()[1] != "loc":
            return None
        self.next()
        self.expect("(")
        file = json.loads(self.next()[1])
        self.expect(":")
        line = self.attr_value()
        self.expect(":")
        col = self.attr_value()
        self.expect(")")
        return Loc(file, line, col)

    def function(self):
        self.expect("kernel")
        kind, sym, _ = self.next()
        if kind != "symbol":
            self.i -= 1
            self.error("expected @name")
        self.expect("(")
        names, types, attrs = [], [], []
        while not self.accept(")"):
            names.append(self.next()[1])
            self.expect(":")
            types.append(self.type())
            attrs.append(self.attrs() if self.peek()[1] == "{" else {})
            self.accept(",")
        fn_attrs = {}
        if self.accept("attributes"):
            fn_attrs = self.attrs()
        arg_names = [a.pop("name", f"arg{i}") for i, a in enumerate(attrs)]
        fn = Function(sym[1:], types, arg_names, attrs, fn_attrs)
        for name, arg in zip(names, fn.args):
            self.define(name, arg)
        self.expect("{")
        while not self.accept("}"):
            fn.body.append(self.op())
        if self.peek()[0] != "eof":
            self.error("text after the kernel")
        return fn


def parse_function(text: str) -> Function:
    """The `Function` printed as `text`; raises `IRParseError` naming the line."""
    return _Parser(text).function()


def copy_function(fn: Function) -> Function:
    """`parse_function(print_function(fn))` without the text: a new `Function` with new values
    and ops, whose types are those their printed names parse to, whose attributes are the
    values the text reads back (tuples become lists) and whose attribute dicts are in printed
    (sorted) order. A pass rewrites the copy, not `fn`. Values `fn` uses before defining them
    raise `IRParseError`, as their text does."""
    values: dict[int, object] = {}

    def block(src: Block) -> Block:
        out = Block([_type(a.type) for a in src.args])
        values.update(zip(map(id, src.args), out.args))
        for op in src.ops:
            out.append(operation(op))
        return out

    def operation(op: Operation) -> Operation:
        try:
            operands = [values[id(v)] for v in op.operands]
        except KeyError:
            raise IRParseError(f"{op.name}: use of an undefined value") from None
        regions = [block(region) for region in op.regions]
        new = Operation(op.name, operands, [_type(r.type) for r in op.results], _attrs(op.attrs), regions, op.loc)
        values.update(zip(map(id, op.results), new.results))
        return new

    arg_attrs = [_attrs({k: v for k, v in attrs.items() if k != "name"}) for attrs in fn.arg_attrs]
    copy = Function(fn.name, [_type(a.type) for a in fn.args], fn.arg_names, arg_attrs, _attrs(fn.attrs))
    values.update(zip(map(id, fn.args), copy.args))
    for op in fn.body.ops:
        copy.body.append(operation(op))
    return copy


@functools.lru_cache(maxsize=4096)
def _parsed_type(name: str):
    return parse_type(name)


def _type(t):
    """The type that `t`'s text parses to (a pointer's address space and const-ness are not printed)."""
    return _parsed_type(str(t))


def _attrs(attrs: dict) -> dict:
    return {key: _attr(value) for key, value in sorted(attrs.items())}


def _attr(value):
    """An attribute value as the text reads it back (the printer's `format_attr` cases)."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_attr(v) for v in value]
    raise TypeError(f"cannot print attribute value {value!r}")
