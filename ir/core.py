"""Block IR: values, operations, blocks and the kernel function that holds them.

An `Operation` has a name (`add`, `load`, `for`), operands (`Value`s defined earlier),
results (new `Value`s with types), attributes (ints, floats, bools, strings, int lists
and types) and regions (`Block`s with their own arguments, each ending in a
terminator). Control flow is structured: `for`, `while`, `if`, `reduce` and `scan`
carry values through their blocks' arguments and `yield`, so there is no phi and no
goto. The op set and each op's type rule live in `kiln.ir.ops`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from .types import dtype


@dataclass(frozen=True)
class Loc:
    """Where an op came from in the user's source."""

    file: str
    line: int
    col: int = 0

    def __str__(self):
        return f"{self.file}:{self.line}:{self.col}"


class Value:
    """An SSA value: an op's result or a block's argument."""

    __slots__ = ("type", "owner", "index")

    def __init__(self, type: dtype, owner: "Operation | Block | None" = None, index: int = 0):
        self.type, self.owner, self.index = type, owner, index

    @property
    def defining_op(self) -> "Operation | None":
        return self.owner if isinstance(self.owner, Operation) else None

    def __repr__(self):
        return f"Value({self.type})"


def const_int(v: Value) -> int | None:
    """The int a `constant` op gives `v` (not a bool), or None."""
    op = v.defining_op
    if op is not None and op.name == "constant" and isinstance(op.attrs["value"], int) \
            and not isinstance(op.attrs["value"], bool):
        return op.attrs["value"]
    return None


def is_zero_constant(v: Value) -> bool:
    """Is `v` a constant zero (a number, not False)?"""
    op = v.defining_op
    return op is not None and op.name == "constant" and op.attrs["value"] in (0, 0.0) \
        and not isinstance(op.attrs["value"], bool)


class Operation:
    __slots__ = ("name", "operands", "results", "attrs", "regions", "loc", "parent")

    def __init__(self, name: str, operands=(), result_types=(), attrs=None, regions=(), loc: Loc | None = None):
        self.name = name
        self.operands: list[Value] = list(operands)
        self.results: list[Value] = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.regions: list[Block] = list(regions)
        self.loc = loc
        self.parent: Block | None = None
        for region in self.regions:
            region.parent = self

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    def defined_values(self) -> list[Value]:
        """The values this op defines: its results and its regions' block arguments."""
        return list(self.results) + [a for region in self.regions for a in region.args]

    def walk(self) -> Iterator["Operation"]:
        """This op and every op nested in its regions, in program order."""
        yield self
        for region in self.regions:
            yield from region.walk()

    def __repr__(self):
        return f"<Operation {self.name} at {self.loc}>"


class Block:
    """A list of ops with typed arguments; the body of a region."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types=()):
        self.args: list[Value] = [Value(t, self, i) for i, t in enumerate(arg_types)]
        self.ops: list[Operation] = []
        self.parent: Operation | Function | None = None

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    def add_arg(self, t: dtype) -> Value:
        v = Value(t, self, len(self.args))
        self.args.append(v)
        return v

    @property
    def terminator(self) -> Operation | None:
        return self.ops[-1] if self.ops else None

    def walk(self) -> Iterator[Operation]:
        for op in self.ops:
            yield from op.walk()


class Function:
    """A kernel: named arguments, their attributes and one body block ending in `return`."""

    __slots__ = ("name", "arg_names", "arg_attrs", "body", "attrs")

    def __init__(self, name: str, arg_types, arg_names=None, arg_attrs=None, attrs=None):
        self.name = name
        self.body = Block(arg_types)
        self.body.parent = self
        self.arg_names = list(arg_names or [f"arg{i}" for i in range(len(arg_types))])
        self.arg_attrs: list[dict[str, Any]] = [dict(a) for a in (arg_attrs or [{} for _ in arg_types])]
        self.attrs: dict[str, Any] = dict(attrs or {})

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def walk(self) -> Iterator[Operation]:
        return self.body.walk()

    def __str__(self):
        from .printer import print_function
        return print_function(self)


class Builder:
    """Appends ops at the end of a block; `loc` is stamped on every op it creates."""

    def __init__(self, block: Block | None = None):
        self.block = block
        self.loc: Loc | None = None

    def create(self, name: str, operands=(), result_types=(), attrs=None, regions=()) -> Operation:
        op = Operation(name, operands, result_types, attrs, regions, self.loc)
        self.block.append(op)
        return op

    def value(self, name: str, operands, result_type: dtype, **attrs) -> Value:
        """Create a one-result op and return its result."""
        return self.create(name, operands, [result_type], attrs).results[0]
