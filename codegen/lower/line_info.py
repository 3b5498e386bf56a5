"""Line tables: each instruction of the kernel's LLVM IR carries the Python line it came from (DWARF line
tables only), so that its PTX has `.loc` directives and a profiler maps the SASS back to the kernel's
source (Nsight Compute's source view), as Triton's kernels do. Off with the `line_info = 0` option
(Triton's TRITON_DISABLE_LINE_INFO=1).

A location names its file through the subprogram's scope where the file is the kernel's, else through a
lexical block file of that file (a @jit function inlined from another module)."""
from __future__ import annotations

import os
import re

import llvmlite.ir as ir

I32 = ir.IntType(32)
# the lines the line tables add to the PTX: directives, the function's and each location's labels, an
# empty DWARF section
LINE_TABLE = re.compile(r"^[ \t]*(\.loc|\.file|\$L__(func_begin|func_end|tmp)\d+:|\.section\s+\.debug_)[^\n]*\n?", re.M)


def without_line_tables(ptx: str) -> str:
    """`ptx` as it would be without line tables: what its size and its stack are judged by (the same
    decisions with them or without: kiln.codegen.compiler), and what a comparison of code reads."""
    return LINE_TABLE.sub("", ptx)


class LineInfo:
    """The debug metadata of one kernel: its compile unit and subprogram, and a location per op."""

    def __init__(self, module: ir.Module, llfn: ir.Function, name: str, first):
        self.module = module
        self.files: dict = {}
        self.scopes: dict = {}
        self.locations: dict = {}
        path = first.file if first is not None else "<kiln>"
        line = first.line if first is not None else 0
        unit = module.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_C"), "file": self._file(path), "producer": "kiln", "isOptimized": True,
            "runtimeVersion": 0, "emissionKind": ir.DIToken("DebugDirectivesOnly")}, is_distinct=True)
        kind = module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])})
        self.subprogram = module.add_debug_info("DISubprogram", {
            "name": name, "linkageName": name, "scope": self._file(path), "file": self._file(path), "line": line,
            "type": kind, "scopeLine": line, "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
            "unit": unit}, is_distinct=True)
        self.scopes[path] = self.subprogram
        llfn.set_metadata("dbg", self.subprogram)
        module.add_named_metadata("llvm.dbg.cu", unit)
        module.add_named_metadata("llvm.module.flags", [ir.Constant(I32, 2), "Debug Info Version", ir.Constant(I32, 3)])
        self.entry = self.location(first)

    def _file(self, path: str):
        if path not in self.files:
            self.files[path] = self.module.add_debug_info("DIFile", {
                "filename": os.path.basename(path), "directory": os.path.dirname(path)})
        return self.files[path]

    def _scope(self, path: str):
        if path not in self.scopes:
            self.scopes[path] = self.module.add_debug_info("DILexicalBlockFile", {
                "scope": self.subprogram, "file": self._file(path), "discriminator": 0})
        return self.scopes[path]

    def location(self, loc):
        """The DILocation of `loc` (an op's `loc`), or the kernel's first line where it has none."""
        if loc is None:
            return getattr(self, "entry", None) or self.module.add_debug_info(
                "DILocation", {"line": 0, "column": 0, "scope": self.subprogram})
        key = (loc.file, loc.line, loc.col)
        if key not in self.locations:
            self.locations[key] = self.module.add_debug_info(
                "DILocation", {"line": loc.line, "column": loc.col, "scope": self._scope(loc.file)})
        return self.locations[key]
