"""`triton.backends.nvidia` (and its `compiler` and `driver`, which are this module too): the names of
Triton's CUDA backend that code outside Triton imports, each kiln's own. Autotuners catch `PTXASError`,
tools read `CUDAOptions`' fields or make a `CUDABackend(GPUTarget(...))` to parse options, setup scripts
call `CudaUtils()` to see the driver load, and template code asks `min_dot_size` which dots a target
takes, and ahead-of-time builds (upstream's test_aot.py) compile C against `include_dirs` and link
with `library_dirs()` (kiln.tools.cuda_paths). kiln compiles through nvJitLink (`kiln.codegen`), so
Triton's ptxas helpers have no counterpart.
"""
from __future__ import annotations

import sys

from kiln.language.semantic import mma_min_k
from kiln.tools.cuda_paths import library_dirs  # noqa: F401

from .backends import BaseBackend, CUDABackend, CudaDriver, GPUTarget, PTXASError  # noqa: F401
from .backends import Options as CUDAOptions  # noqa: F401


def min_dot_size(target: GPUTarget):
    """For `target`, a function of a dot's operand types giving the smallest (M, N, K) it takes: any M
    and N (kiln runs a small dot on one tile of repeated operands) and the K of one tensor-core
    instruction (a dot of fewer is padded along K)."""
    def smallest(lhs_type, rhs_type) -> tuple[int, int, int]:
        bits = lhs_type.scalar.primitive_bitwidth
        if bits != rhs_type.scalar.primitive_bitwidth:
            raise ValueError(f"a dot's operands have one width, not {bits} and "
                             f"{rhs_type.scalar.primitive_bitwidth} bits")
        return 1, 1, mma_min_k(bits)
    return smallest


def ptx_get_version(cuda_version: str) -> int:
    """The highest PTX ISA version (83 for 8.3) the driver of CUDA `cuda_version` ("12.4") takes: CUDA
    10.x takes 6.3 + minor, 11.x 7.x, 12.0-12.5 8.0-8.5, 12.6 on one behind its minor (12.8: 8.7), and
    13.x 9.x."""
    if not isinstance(cuda_version, str):
        raise TypeError(f"a CUDA version is a string such as '12.4', not {cuda_version!r}")
    major, minor = (int(part) for part in cuda_version.split(".")[:2])
    if major >= 13:
        return 90 + 10 * (major - 13) + minor
    if major == 12:
        return 80 + minor - (minor >= 6)
    if major in (10, 11):
        return {10: 63, 11: 70}[major] + minor
    raise RuntimeError(f"CUDA {cuda_version}: kiln's PTX needs CUDA 10.0 or later")


def sm_arch_from_capability(capability: int) -> str:
    """The PTX target of compute capability `capability` (90 -> sm_90a): the codegen's own name for it."""
    from kiln.codegen.target import target_name  # (the codegen is imported when first needed, as backends does)
    return target_name(capability)


class CudaUtils:
    """Triton's compiled helper of the CUDA driver, one object a process: here the driver's own
    `utils` (device properties), which needs no compiler to build."""

    def __new__(cls):
        return CudaDriver.utils


def __getattr__(name: str):
    """`include_dirs`, a list as Triton's (whose first entry holds the cuda.h it bundles), looked for when
    first read: the search costs tens of milliseconds, which an import should not."""
    if name == "include_dirs":
        from kiln.tools.cuda_paths import include_dirs
        value = globals()["include_dirs"] = include_dirs()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# triton.backends.nvidia.compiler and .driver are this module too, found as the package's attributes
compiler = driver = sys.modules[__name__]
