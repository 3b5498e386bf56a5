"""A kernel's loops in its SASS listing (`kiln.tools.disasm.get_sass`: an instruction a line after its
scheduling fields, branch targets as `LBB<n>:` labels). Shared by bench/sass_mix.py and the tests'
SASS checks."""
import re

_LABEL = re.compile(r"(LBB\d+):$")


def main_loop(listing: str, marker: str = "GMMA") -> list[str]:
    """The instructions of the shortest loop (a branch back to a label above it; an elected lane's
    `BRA.U.ANY` retries keep their addresses, so they are not loops) holding an instruction that
    contains `marker` (the tensor-core loop's body by default); [] where there is none."""
    lines = listing.splitlines()
    labels = {found.group(1): i for i, line in enumerate(lines) if (found := _LABEL.match(line))}
    bodies = []
    for end, line in enumerate(lines):
        for target in re.findall(r"\bBRA (LBB\d+);", line):
            if labels[target] < end:
                bodies.append([text.split("\t", 1)[1] for text in lines[labels[target] + 1:end + 1] if "\t" in text])
    return min((body for body in bodies if any(marker in text for text in body)), key=len, default=[])


def opcode(text: str) -> str:
    """An instruction's operation without its predicate and modifiers (`@!P0 HGMMA.64x64x16.F32 ...`: HGMMA)."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]
