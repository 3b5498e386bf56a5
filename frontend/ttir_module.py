"""A kernel's TTIR as a tree to walk, the way Triton's MLIR bindings offer a module: what
`ASTSource.make_ir` returns under the drop-in.

Tools outside Triton walk the TTIR module for facts about a kernel. PyTorch's torch.compile does so
for every user-written Triton kernel it captures (`torch._higher_order_ops.triton_kernel_wrap`): it
walks the ops from the bottom up, follows each `tt.store` / `tt.atomic_*` pointer and each `tt.load`
back to the kernel's arguments, and so learns which tensors the kernel writes and which it reads.
Without a module to walk it assumes the kernel writes every tensor it is given.

The tree is kiln's block IR of the kernel (its @jit calls kept, as `tt.call`s of `tt.func private`s)
under TTIR's op names (`kiln.ttir.op_name`), with MLIR's structure: a `builtin.module` holding one
`tt.func` per function; `scf.for`'s operands are its bounds, step and initial values and its body's
arguments the induction variable and the carried values; `tt.reduce` and `tt.scan` bodies take two
arguments per operand; every region has one block. The methods are the bindings' names:

    module.walk(lambda op: op.get_name())          # post-order: an op after the ops in its regions
    op.get_operand(0).id(), op.get_block().get_argument(0).id(), op.get_region(0).id()
    op.get_str_attr("sym_name"), op.get_flat_symbol_ref_attr("callee"), op.get_bool_attr("pure")

`str(module)` is `kiln.ttir.render_ttir`'s text of the same function.
"""
from __future__ import annotations

import itertools

from kiln.ir.core import Block as KilnBlock, Function, Operation as KilnOperation
from kiln.ir.types import block_type

from .ttir import op_name, render_ttir

_ids = itertools.count(1)


class Value:
    """An SSA value: an op's result or a block's argument."""

    def __init__(self):
        self._id = next(_ids)

    def id(self) -> int:
        return self._id


class Region:
    def __init__(self, owner):
        self._id = next(_ids)
        self.owner = owner
        self.blocks: list[Block] = []

    def id(self) -> int:
        return self._id


class Block:
    def __init__(self, region: Region, num_args: int):
        self._id = next(_ids)
        self.region = region
        self.args = [Value() for _ in range(num_args)]
        self.ops: list[Operation] = []
        region.blocks.append(self)

    def id(self) -> int:
        return self._id

    def get_num_arguments(self) -> int:
        return len(self.args)

    def get_argument(self, i: int) -> Value:
        return self.args[i]

    def get_parent(self) -> Region:
        return self.region


class Operation:
    def __init__(self, name: str, operands, num_results: int, attrs: dict | None = None):
        self.name = name
        self.operands = list(operands)
        self.results = [Value() for _ in range(num_results)]
        self.attrs = dict(attrs or {})
        self.regions: list[Region] = []
        self.block: Block | None = None

    def get_name(self) -> str:
        return self.name

    def get_num_operands(self) -> int:
        return len(self.operands)

    def get_operand(self, i: int) -> Value:
        return self.operands[i]

    def get_num_results(self) -> int:
        return len(self.results)

    def get_result(self, i: int) -> Value:
        return self.results[i]

    def get_num_regions(self) -> int:
        return len(self.regions)

    def get_region(self, i: int) -> Region:
        return self.regions[i]

    def get_block(self) -> Block | None:
        return self.block

    def _attr(self, name: str, kind):
        value = self.attrs.get(name)
        return value if isinstance(value, kind) else None

    def get_str_attr(self, name: str) -> str | None:
        return self._attr(name, str)

    def get_flat_symbol_ref_attr(self, name: str) -> str | None:
        return self._attr(name, str)

    def get_bool_attr(self, name: str) -> bool | None:
        return self._attr(name, bool)

    def get_int_attr(self, name: str) -> int | None:
        value = self.attrs.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def walk(self, fn) -> None:
        """`fn(op)` for every op nested in this one, each after the ops in its regions, then this one."""
        for region in self.regions:
            for block in region.blocks:
                for op in list(block.ops):
                    op.walk(fn)
        fn(self)


class Module(Operation):
    """`builtin.module`: the kernel's `tt.func public`, then one `tt.func private` per callee."""

    def __init__(self, fn: Function):
        super().__init__("builtin.module", (), 0)
        self.function = fn
        body = Block(_region(self), 0)
        _Builder(body).function(fn.name, fn.body, "public")
        callees, done = _Builder.callees_of(fn.body), set()
        while len(done) < len(callees):  # a callee's body may call more
            symbol = next(s for s in callees if s not in done)
            done.add(symbol)
            _Builder(body).function(symbol, callees[symbol], "private")
            for inner, block in _Builder.callees_of(callees[symbol]).items():
                callees.setdefault(inner, block)

    def verify(self) -> bool:
        """Whether every operand is defined before its use, in its block or one around it (the SSA
        rule MLIR's verifier holds a module to), and each function's body ends in `tt.return`."""
        def defined_before(block: Block, visible: frozenset) -> bool:
            visible = visible | {v.id() for v in block.args}
            for op in block.ops:
                if any(v.id() not in visible for v in op.operands):
                    return False
                if not all(defined_before(b, visible) for region in op.regions for b in region.blocks):
                    return False
                visible = visible | {v.id() for v in op.results}
            return True
        functions = self.regions[0].blocks[0].ops
        return all(defined_before(block, frozenset()) and block.ops and block.ops[-1].name == "tt.return"
                   for func in functions for block in func.regions[0].blocks)

    def __str__(self) -> str:
        return render_ttir(self.function)


def _region(owner: Operation) -> Region:
    region = Region(owner)
    owner.regions.append(region)
    return region


class _Builder:
    """Appends the ops of kiln blocks to a block of the tree, each under its TTIR name."""

    def __init__(self, block: Block):
        self.block = block
        self.values: dict[int, Value] = {}  # id(kiln value) -> its value in the tree

    @staticmethod
    def callees_of(block: KilnBlock) -> dict:
        """symbol -> the body of the first `call` of it in `block` (at any depth)."""
        found: dict = {}
        stack = list(block.ops)
        while stack:
            op = stack.pop(0)
            if op.name == "call":
                found.setdefault(op.attrs["callee"], op.regions[0])
                continue  # a callee's own calls are found when its body is built
            stack.extend(inner for region in op.regions for inner in region.ops)
        return found

    def function(self, symbol: str, body: KilnBlock, visibility: str) -> None:
        func = self.append(self.block, "tt.func", (), 0, {"sym_name": symbol, "sym_visibility": visibility})
        self.blocks(func, [body], "tt.func")

    def append(self, block: Block, name: str, operands, num_results: int, attrs=None) -> Operation:
        op = Operation(name, operands, num_results, attrs)
        op.block = block
        block.ops.append(op)
        return op

    def blocks(self, owner: Operation, kiln_blocks, parent: str) -> None:
        """One region per kiln block, its arguments bound, its ops appended."""
        for kiln_block in kiln_blocks:
            block = Block(_region(owner), len(kiln_block.args))
            for value, arg in zip(kiln_block.args, block.args):
                self.values[id(value)] = arg
            for op in kiln_block.ops:
                self.op(op, block, parent)

    def use(self, value) -> Value:
        return self.values[id(value)]

    def op(self, op: KilnOperation, block: Block, parent: str) -> None:
        name = op_name(op, parent)
        operands = [self.use(v) for v in op.operands]
        if op.name == "not":  # TTIR: xori with all ones
            operands.append(self.append(block, "arith.constant", (), 1, {"value": -1}).results[0])
        elif name == "arith.subi" and op.name == "neg":  # TTIR: 0 - x
            operands.insert(0, self.append(block, "arith.constant", (), 1, {"value": 0}).results[0])
        elif op.name == "addptr" and _unsigned_narrow(op.operands[1].type):  # TTIR's addptr sign-extends
            operands[1] = self.append(block, "arith.extui", [operands[1]], 1).results[0]
        attrs = dict(op.attrs)
        if op.name == "inline_asm":
            attrs["pure"] = not op.attrs.get("volatile", False)
        new = self.append(block, name, operands, len(op.results), attrs)
        if op.name != "call":  # a call's body is a `tt.func private` of its own, which the call names
            self.blocks(new, op.regions, name)
        for value, result in zip(op.results, new.results):
            self.values[id(value)] = result


def _unsigned_narrow(t) -> bool:
    s = t.element_ty if isinstance(t, block_type) else t
    return s.is_int() and not s.is_int_signed() and s.primitive_bitwidth < 64
