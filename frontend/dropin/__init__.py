"""kiln's drop-in mode: `import triton` is kiln (KILN_DROPIN=1 or `kiln run -- CMD`).

`hook` is the switch (an import finder that `kiln-dropin.pth` installs at interpreter start when
asked); the other modules are the parts of Triton's host API that have no kiln counterpart of the
same shape: `compile` (`triton.compile`, `ASTSource`, `CompiledKernel`), `backends` (targets,
backends and their drivers, the CPU one running kernels in kiln's interpreter), `jit` (the
`JITFunction` attributes Inductor reads), `knobs`, `runtime`, `warm` (a compiled kernel found again from
its source key, with no IR built), `triton_files` (a cubin left in Triton's cache layout for Inductor's
static launcher, when `static_abi` finds that launcher would launch it as kiln does) and `facade` (the
`triton` module).
"""
from . import hook  # noqa: F401,E402  (boot.py may have loaded it already, before kiln: bind it here)
