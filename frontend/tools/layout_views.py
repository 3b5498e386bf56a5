"""LinearLayout's text views (`get_distributed_view`, `get_shared_view`), as Triton prints them.

A distributed layout maps (register, lane, warp, block) to tensor coordinates: its view prints the
tensor, each element as the threads holding it (`T<thread>:<register>`, `B<block>:` first where
there are several blocks, `|` between copies), numbers padded to a common width; from the hardware's
side, each warp's registers one row each, a coordinate tuple per lane. A shared layout maps (block,
offset): its view prints the tensor with each element's coordinates `(r:c)` at the place of the
offset that holds it; from the hardware's side, `Offset: k -> (r,c)` per block.
"""
from __future__ import annotations

from math import prod


def distributed_view(layout, hardware: bool) -> str:
    dims = _require(layout, ("register", "lane", "warp", "block"))
    shape = [size for _, size in layout.out_dims]
    total = prod(shape)
    registers, lanes, warps, blocks = (dims[d] for d in ("register", "lane", "warp", "block"))
    cells = [""] * total
    threads = []  # (block, warp, lane, register) order: each's coordinates
    for block in range(blocks):
        for warp in range(warps):
            for lane in range(lanes):
                for register in range(registers):
                    out = _apply(layout, register=register, lane=lane, warp=warp, block=block)
                    thread = lane + warp * lanes
                    cell = cells[_linear(out, shape)]
                    cell += "|" if cell else ""
                    cell += " " * (_pad(block, blocks) + _pad(thread, warps * lanes) + _pad(register, registers))
                    cell += (f"B{block}:" if blocks > 1 else "") + f"T{thread}:{register}"
                    cells[_linear(out, shape)] = cell
                    threads.append("(" + ",".join(_padded(v, s) for v, s in zip(out, shape)) + ")")
    if not hardware:
        return _as_tensor(cells, shape, ", ")
    text = ""
    for block in range(blocks):
        if blocks > 1:
            text += f"Block{block}:\n"
        for warp in range(warps):
            text += f"Warp{warp}:\n"
            for register in range(registers):
                first = ((block * warps + warp) * lanes) * registers + register
                text += ", ".join(threads[first + lane * registers] for lane in range(lanes)) + "\n"
    return text


def shared_view(layout, hardware: bool) -> str:
    dims = _require(layout, ("block", "offset"))
    shape = [size for _, size in layout.out_dims]
    total = prod(shape)
    blocks = dims["block"]
    cells, offsets = [""] * total, []
    index = 0
    for block in range(blocks):
        for offset in range(total // blocks):
            out = _apply(layout, block=block, offset=offset)
            coordinates = [_padded(v, s) for v, s in zip(out, shape)]
            cells[index] += ("|" if cells[index] else "") + "(" + ":".join(coordinates) + ")"
            offsets.append("(" + ",".join(coordinates) + ")")
            index += 1
    if not hardware:
        return _as_tensor(cells, shape, ",")
    text, index = "", 0
    for block in range(blocks):
        text += f"Block: {block}:\n"
        for offset in range(total // blocks):
            text += f"Offset: {offset} -> {offsets[index]}\n"
            index += 1
    return text


def _require(layout, names) -> dict:
    """The sizes of the in dims a view walks; the layout must have exactly those."""
    have = dict((name, 1 << len(bases)) for name, bases in layout.bases)
    if sorted(have) != sorted(names):
        raise ValueError(f"this view walks the in dims {list(names)}; the layout has {list(have)}")
    return have


def _apply(layout, **inputs) -> list:
    return list(layout.apply(inputs).values())


def _as_tensor(cells, shape, separator: str) -> str:
    """The cells in the tensor's nesting: brackets where an index starts or ends a dimension, a line
    per innermost row, each line indented by the brackets it does not open."""
    rank, text, new_line = len(shape), "", True
    for i, cell in enumerate(cells):
        index, following = _coordinates(i, shape), _coordinates(i + 1, shape)
        opened = 0
        for d in reversed(range(rank)):
            if index[d] % shape[d]:
                break
            text += "["
            opened += 1
        if new_line:
            text += " " * (rank - opened)
            new_line = False
        text += cell
        for d in reversed(range(rank)):
            if following[d] % shape[d]:
                break
            text += "]"
        if following[-1] % shape[-1] == 0:
            text += "\n"
            new_line = True
        else:
            text += separator
    return text


def _coordinates(index: int, shape) -> list:
    out = [0] * len(shape)
    for d in reversed(range(len(shape))):
        out[d] = index % shape[d]
        index //= shape[d]
    return out


def _linear(coordinates, shape) -> int:
    index = 0
    for value, size in zip(coordinates, shape):
        index = index * size + value
    return index


def _pad(value: int, largest: int) -> int:
    return len(str(largest)) - len(str(value))


def _padded(value: int, largest: int) -> str:
    return " " * _pad(value, largest) + str(value)
