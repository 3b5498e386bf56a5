"""From a specialization to something that can be launched."""
from __future__ import annotations

from kiln.ir import Function, print_function

from . import config
from .ast_to_ir import build_kernel


class CompiledKernel:
    """One specialization of a kernel: its block IR and, on a GPU, its binary.

    `asm` holds the compiler's outputs by name (`'kir'` is block IR text), as on
    Triton's compiled kernels.
    """

    def __init__(self, name: str, ir: Function, options: dict):
        self.name = name
        self.ir = ir
        self.options = options
        self.asm = {"kir": print_function(ir)}
        self.metadata = {"name": name, "num_warps": options.get("num_warps", config.DEFAULT_NUM_WARPS),
                         "num_stages": options.get("num_stages", config.DEFAULT_NUM_STAGES)}

    @property
    def num_warps(self):
        return self.metadata["num_warps"]

    def launch(self, grid, args):
        if config.interpret():
            from kiln.interpret import run
            run(self.ir, grid, args, name=self.name)
            return
        raise RuntimeError(f"kernel {self.name}: kiln has no GPU runtime in this build yet; "
                           "set KILN_INTERPRET=1 to run kernels in the NumPy interpreter")


# The launch options that change the generated code; the rest only affect the launch.
CODEGEN_OPTIONS = ("num_warps", "num_stages")


def codegen_options(options: dict) -> dict:
    out = {"num_warps": config.DEFAULT_NUM_WARPS, "num_stages": config.DEFAULT_NUM_STAGES}
    out.update({k: int(v) for k, v in options.items() if k in CODEGEN_OPTIONS and v is not None})
    return out


def compile_binary(ir: Function, target: str, options: dict):
    """PTX and cubin of `ir` for `target` (e.g. "sm_90a"); needs no GPU."""
    from kiln.codegen import compile as compile_ir
    return compile_ir(ir, target, codegen_options(options))


def compile_kernel(jitfn, params, options) -> CompiledKernel:
    ir = build_kernel(jitfn, params)
    return CompiledKernel(jitfn.__name__, ir, options)
