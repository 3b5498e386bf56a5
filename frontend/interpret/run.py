"""Run a block-IR kernel on the CPU: one program after another, each op a NumPy
operation on the whole block.

`Program` walks a function's blocks with one environment (a dict from `Value` to
array) and hands each op to its implementation in `ops.IMPLS`; region-holding ops call
back into `run_block` (or `run_combine` for the combine region of a reduce or scan,
whose scalar arguments then hold whole arrays of lanes).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from kiln.ir.core import Block, Function, Operation

from .args import bind_arguments
from .errors import InterpreterError, OpFault, located
from .ops import IMPLS, TERMINATORS


class Program:
    def __init__(self, fn: Function, kernel: str, grid: tuple[int, int, int], memory):
        self.fn, self.kernel, self.grid, self.memory = fn, kernel, grid, memory
        self.pid = (0, 0, 0)
        self.env: dict = {}
        self.combine_depth = 0  # > 0 while values of scalar type hold arrays of lanes

    def run_block(self, block: Block, values: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Bind the block's arguments, run its ops, return its terminator's operands."""
        env = self.env
        for arg, value in zip(block.args, values):
            env[arg] = value
        for op in block.ops:
            if op.name in TERMINATORS:
                return [env[v] for v in op.operands]
            self.execute(op)
        return []

    def run_combine(self, block: Block, values, lane_shape) -> list[np.ndarray]:
        self.combine_depth += 1
        try:
            results = self.run_block(block, values)
        finally:
            self.combine_depth -= 1
        return [np.broadcast_to(r, lane_shape) for r in results]

    def execute(self, op: Operation) -> None:
        impl = IMPLS.get(op.name)
        if impl is None:
            raise located(self.kernel, op, "the interpreter has no implementation of this op")
        try:
            out = impl(self, op, *(self.env[v] for v in op.operands))
        except InterpreterError:
            raise
        except OpFault as e:
            raise located(self.kernel, op, str(e), self.pid) from None
        except Exception as e:  # NumPy errors are interpreter or IR bugs: say where
            raise located(self.kernel, op, f"{type(e).__name__}: {e}", self.pid) from e
        results = op.results
        if not results:
            return
        if len(results) == 1 and not isinstance(out, (list, tuple)):
            out = (out,)
        if len(out) != len(results):
            raise located(self.kernel, op, f"internal error: {len(out)} values for {len(results)} results")
        for value, array in zip(results, out):
            self.env[value] = self.conform(op, value, array)

    def conform(self, op: Operation, value, array) -> np.ndarray:
        """The result as an array of its type's dtype; outside combine regions, of its shape."""
        array = np.asarray(array)
        want = value.type.to_numpy()
        if array.dtype != want:
            array = array.astype(want)
        if not self.combine_depth and array.shape != value.type.shape:
            raise located(self.kernel, op, f"internal error: result of shape {array.shape}, "
                                           f"type {value.type} expected")
        return array


def _normalize_grid(grid) -> tuple[int, int, int]:
    if isinstance(grid, int):
        grid = (grid,)
    grid = tuple(int(g) for g in grid)
    if not 1 <= len(grid) <= 3 or any(g < 0 for g in grid):
        raise InterpreterError(f"grid must be 1 to 3 non-negative ints, got {grid}")
    return grid + (1,) * (3 - len(grid))


def run(fn: Function, grid, args: Sequence, *, name: str | None = None, extra_memory: Sequence = ()) -> None:
    """Run `fn` over `grid` with `args` (aligned with `fn.args`), writing into the
    arrays and tensors passed for pointer arguments. `extra_memory` lists more arrays
    a kernel may reach through raw addresses (pointers loaded from memory, say)."""
    kernel = name or fn.name
    grid3 = _normalize_grid(grid)
    values, memory = bind_arguments(fn, list(args), extra_memory)
    program = Program(fn, kernel, grid3, memory)
    with np.errstate(all="ignore"):
        for z in range(grid3[2]):
            for y in range(grid3[1]):
                for x in range(grid3[0]):
                    program.pid = (x, y, z)
                    program.run_block(fn.body, values)
