"""`triton.tools.disasm`: a cubin's SASS as Triton lists it, from cuobjdump (`knobs.nvidia.cuobjdump`).

One function's listing (the first, or the one named): `Function:<name>`, then one instruction a
line after its scheduling fields (`wait:read:write:yield:stall`, as Triton prints them), with each
branch target a label `LBB<n>` and its address replaced by that label. kiln itself never runs
cuobjdump: `CompiledKernel.asm["sass"]` does, when asked.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile

_FUNCTION = re.compile(r"\s*Function : (\w+)")
# an instruction: its address, its text, the low 64 bits of its encoding; the next line, the high 64
_INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*([^;]*;)\s*/\* 0x([0-9a-f]{16}) \*/")
_HIGH_WORD = re.compile(r"\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
_BRANCH = re.compile(r"(.*BRA(?:\.U)? )(0x[0-9a-f]+);")


@functools.lru_cache
def get_sass(cubin_asm: bytes, fun: str | None = None) -> str | None:
    """The SASS listing of `cubin_asm`'s first function, or of the function named `fun`."""
    fd, path = tempfile.mkstemp(suffix=".cubin")
    try:
        with open(fd, "wb") as f:
            f.write(cubin_asm)
        return extract(path, fun)
    finally:
        os.remove(path)


def path_to_cuobjdump() -> str:
    from kiln.dropin import knobs
    return knobs.nvidia.cuobjdump.path


def extract(file_path: str, fun: str | None) -> str | None:
    """The listing (`get_sass`'s) of a cubin file; None where cuobjdump shows no function."""
    command = [path_to_cuobjdump(), *(["-fun", fun] if fun is not None else []), "-sass", file_path]
    lines = subprocess.check_output(command).decode().splitlines()
    start = next((i for i, line in enumerate(lines) if _FUNCTION.match(line)), None)
    if start is None:
        return None
    instructions = []  # (address, scheduling fields, text)
    for line, following in zip(lines[start + 1:], lines[start + 2:] + [""]):
        found = _INSTRUCTION.match(line)
        if found is None:
            if instructions and not _HIGH_WORD.match(line):  # the function's listing has ended
                break
            continue
        high = _HIGH_WORD.match(following)
        instructions.append((int(found.group(1), 16), scheduling(int(high.group(1), 16)) if high else "",
                             _tidy(found.group(2))))
    return f"Function:{_FUNCTION.match(lines[start]).group(1)}\n{_listing(instructions)}\n"


def scheduling(high_word: int) -> str:
    """The scheduling fields that an instruction's high 64 bits carry (sm_70 on): the barriers it waits
    on (a 6-bit mask), the barriers its reads and its write set (7: none), yield, and its stall cycles."""
    stall, no_yield = (high_word >> 41) & 0xF, (high_word >> 45) & 1
    write, read, wait = (high_word >> 46) & 0x7, (high_word >> 49) & 0x7, (high_word >> 52) & 0x3F
    return ":".join([f"{wait:02d}" if wait else "--", "-" if read == 7 else str(read),
                     "-" if write == 7 else str(write), "-" if no_yield else "Y", f"{stall:x}"])


def _tidy(text: str) -> str:
    return text[:-2] + ";" if text.endswith(" ;") else text


def _listing(instructions) -> str:
    """Instructions a line each, branch targets as labels numbered in order of use."""
    labels: dict[int, str] = {}
    for _, _, text in instructions:
        if branch := _BRANCH.match(text):
            labels.setdefault(int(branch.group(2), 16), f"LBB{len(labels)}")
    out = []
    for address, fields, text in instructions:
        if address in labels:
            out.append(f"{labels[address]}:")
        if (branch := _BRANCH.match(text)) and int(branch.group(2), 16) in labels:
            text = f"{branch.group(1)}{labels[int(branch.group(2), 16)]};"
        out.append(f"{fields}\t{text}")
    return "\n".join(out) + "\n"
