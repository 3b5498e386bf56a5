"""`triton.backends`: the backends kiln offers in the drop-in mode, their options and drivers.

`backends["nvidia"]` compiles through kiln's codegen and tiers and launches with kiln's CUDA
runtime; `backends["cpu"]` runs kernels in kiln's NumPy interpreter (what Inductor's
`cpu_backend = "triton"` asks of a Triton CPU backend). Each is Triton's pair of a compiler class
(`make_backend(target)` gives one: `parse_options`, `hash`) and a driver class (`is_active()`,
`get_current_target()`, ...), which `triton.runtime.driver.set_active` takes.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from kiln.errors import PTXASError  # noqa: F401  (triton.compiler.compiler's)
from kiln.interpret.device import CPU_DEVICE_PROPERTIES
from kiln.ir import options as options_record
from kiln.runtime import DriverBase, GPUDriver, GPUTarget, _ActiveDriver  # noqa: F401  (triton.backends.driver's)


@functools.lru_cache(maxsize=1)
def triton_key() -> str:
    """What decides the code kiln generates, as one string (Triton's `triton_key`, which Inductor
    folds into its cache keys): kiln's compiler identity and a hash of the frontend's sources."""
    from kiln.proto.key import compiler_identity
    frontend = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(frontend.rglob("*.py")):
        digest.update(path.relative_to(frontend).as_posix().encode() + b"\0" + path.read_bytes())
    return f"kiln-{json.dumps(compiler_identity(), sort_keys=True)}-{digest.hexdigest()}"


@dataclass(frozen=True)
class Options:
    """The compile options a backend knows (Triton's CUDAOptions, the ones that apply to kiln)."""
    num_warps: int = options_record.DEFAULT_NUM_WARPS
    num_stages: int = options_record.DEFAULT_NUM_STAGES
    num_ctas: int = 1
    maxnreg: int | None = None
    debug: bool = False
    enable_fp_fusion: bool = True  # where not given: knobs.language.default_fp_fusion (parse_options)
    enable_reflect_ftz: bool = True
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    clc: bool = False  # Triton 3.9's cluster launch control: sm_100 and later (kiln.target_options)
    sanitize_overflow: bool = True  # a debug build's integer overflow checks (Inductor turns them off)
    extern_libs: tuple | None = None
    cluster_dims: tuple = (1, 1, 1)

    def hash(self) -> str:
        """A digest of every option's value (Triton's `options.hash()`, part of its cache keys)."""
        text = "_".join(f"{name}-{value}" for name, value in sorted(vars(self).items()))
        return hashlib.sha256(text.encode()).hexdigest()


class BaseBackend:
    """A compiler backend for one target (Triton's `BaseBackend`)."""

    binary_target = None  # the codegen target (sm_90a), or None: the interpreter runs the IR

    def __init__(self, target: GPUTarget):
        if not self.supports_target(target):
            raise ValueError(f"{type(self).__name__} cannot compile for {target}")
        self.target = target

    @staticmethod
    def supports_target(target) -> bool:
        raise NotImplementedError

    def hash(self) -> str:
        return f"kiln-{self.target.backend}-{self.target.arch}"

    def parse_options(self, options: dict) -> Options:
        """Options from a dict: unknown names are ignored and None means the default, as in Triton."""
        known = {f.name for f in fields(Options)}
        values = {k: v for k, v in options.items() if k in known and v is not None}
        for name in ("num_warps", "num_stages", "num_ctas"):
            if name in values and (not isinstance(values[name], int) or values[name] < 1):
                raise ValueError(f"{name} must be a positive int, not {values[name]!r}")
        warps = values.get("num_warps", options_record.DEFAULT_NUM_WARPS)
        if warps & (warps - 1):
            raise AssertionError("num_warps must be a power of 2")
        from .knobs import language  # as Triton's CUDA backend: the default, and Triton 3.9's force-off
        values["enable_fp_fusion"] = language.fp_fusion_enabled(values.get("enable_fp_fusion"))
        return Options(**values)

    def launcher(self, kernel, binary, positions, expanders=None):
        raise NotImplementedError

    def function_handle(self, kernel):
        return None

    # How an argument's specialization reads (runtime.jit.native_specialize_impl), as in Triton:
    # "D" is a value or address divisible by 16, which becomes the divisibility hint
    @staticmethod
    def parse_attr(desc: str) -> list:
        if not isinstance(desc, str):
            raise TypeError(f"a specialization is a string such as 'D', not {desc!r}")
        return [["tt.divisibility", 16]] if "D" in desc else []

    @staticmethod
    def get_int_specialization(arg, **kwargs) -> str:
        return "D" if arg % 16 == 0 and kwargs.get("align", False) else ""

    @staticmethod
    def get_tensor_specialization(arg, **kwargs) -> str:
        return "D" if arg.data_ptr() % 16 == 0 and kwargs.get("align", False) else ""

    # What `ASTSource.make_ir` takes besides the options, as Triton's backends give it: kiln's
    # frontend needs no dialects loaded, no codegen functions and no module map of its own.
    def load_dialects(self, context) -> None:
        pass

    def get_codegen_implementation(self, options) -> dict:
        return {}

    def get_module_map(self) -> dict:
        return {}


def _hooked(launch, positions, expanders):
    """Triton's launcher signature around kiln's `launch(grid, values, stream)`; `expanders` maps the
    positions of arguments the kernel takes as several values (host TensorDescriptors, tuples) to
    the function that gives them."""
    def run(grid_x, grid_y, grid_z, stream, function, metadata, launch_metadata, enter_hook, exit_hook, *args):
        if enter_hook is not None:
            enter_hook(launch_metadata)
        if len(args) <= max(positions, default=-1):
            raise TypeError(f"the kernel takes {max(positions) + 1} arguments or more, the launch gave {len(args)}")
        if expanders:
            values = [piece for i in positions for piece in (expanders[i](args[i]) if i in expanders else (args[i],))]
        else:
            values = [args[i] for i in positions]
        launch((grid_x, grid_y, grid_z), values, stream)
        if exit_hook is not None:
            exit_hook(launch_metadata)
    return run


class CUDABackend(BaseBackend):
    def __init__(self, target: GPUTarget, name: str | None = None):
        super().__init__(target)
        self.name = name  # the codegen target when given by name ("sm_100a"), else from the arch

    @staticmethod
    def supports_target(target) -> bool:
        return target.backend == "cuda"

    def parse_options(self, options: dict) -> Options:
        """As every backend's, and the options the target lacks refused as Triton's CUDA backend refuses them."""
        from kiln import target_options
        parsed = super().parse_options(options)
        target_options.check(vars(parsed), int(self.target.arch))
        return parsed

    @property
    def binary_target(self) -> str:
        if self.name is not None:
            return self.name
        from kiln.codegen.target import target_name
        return target_name(int(self.target.arch))

    def launcher(self, kernel, binary, positions, expanders=None):
        kernel.binaries[binary.target] = binary  # loaded as kiln loads its own, no compile again
        kernel.metadata.update(binary.metadata)
        # A kernel of `triton.compile` (Inductor's) runs launches of few programs as written, as Triton
        # does, unless KILN_SPLIT_K=1: max-autotune times each config at its first launch, one after
        # another, and each config's split-K build would be a second compile there (H200, 2026-12-01:
        # timing 21 mm configs at 128x4096x4096 took 4.6 s, 1.0 s without; bench/inductor_mm.py).
        # (@triton.jit kernels launched directly are kiln's JIT's, whose autotuner builds them ahead.)
        kernel.split_k_default = False
        return _hooked(kernel._launch, positions, expanders or {})

    def function_handle(self, kernel):
        """The CUfunction handle (an int) of the kernel loaded on the current device."""
        from kiln.runtime import cuda_driver
        kernel._init_handles()
        return kernel.functions.get(cuda_driver.device_and_stream()[0])


class CPUBackend(BaseBackend):
    @staticmethod
    def supports_target(target) -> bool:
        return target.backend == "cpu"

    def hash(self) -> str:
        return "kiln-cpu-interpreter"

    def launcher(self, kernel, binary, positions, expanders=None):
        from kiln.host_copies import run_on_host
        from kiln.interpret import run

        def launch(grid, values, stream):
            run_on_host(lambda host_values: run(kernel.ir, grid, host_values, name=kernel.name), values)
        return _hooked(launch, positions, expanders or {})


class CudaDriver(_ActiveDriver):
    """kiln's CUDA driver (kiln.runtime.driver's), with `is_active` callable on the class as Triton's."""

    @staticmethod
    def is_active() -> bool:
        """PyTorch's answer where it is loaded, as Triton's: it holds in the workers that
        Inductor forks after CUDA came up in their parent, where a new cuInit fails (and
        they only compile); else the driver's."""
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "cuda"):
            return bool(torch.cuda.is_available()) and getattr(torch.version, "hip", None) is None
        from kiln.runtime import cuda_driver
        return cuda_driver.is_available()


class CPUDriver(DriverBase):
    """The driver of the CPU backend: one device, no streams."""

    def __init__(self):
        self.utils = self

    @staticmethod
    def is_active() -> bool:
        return True

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cpu", 0, 1)

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device) -> None:
        if device not in (0, None):
            raise ValueError(f"the CPU backend has one device, 0, not {device!r}")

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def get_device_interface(self):
        import torch
        return torch.cpu

    def get_device_properties(self, device) -> dict:
        return dict(CPU_DEVICE_PROPERTIES)

    def get_empty_cache_for_benchmark(self):
        import torch
        return torch.empty(0)

    def clear_cache(self, cache) -> None:
        pass


@dataclass(frozen=True)
class Backend:
    """Triton's pair: the compiler class for a target and its driver class."""
    compiler: type
    driver: type


backends = {"nvidia": Backend(CUDABackend, CudaDriver), "cpu": Backend(CPUBackend, CPUDriver)}

# triton.backends.compiler and triton.backends.driver are this module too; as attributes of the
# package `triton.backends` they are found without an import of their own, as Triton's are
compiler = driver = sys.modules[__name__]


def make_backend(target) -> BaseBackend:
    """The backend that compiles for `target`: a GPUTarget, or a codegen target's name ("sm_90a")."""
    if isinstance(target, str):
        arch = re.fullmatch(r"sm_(\d+)[af]?", target)
        if arch is None:
            raise ValueError(f"a target name is sm_XY (sm_80, sm_90a, ...), not {target!r}")
        return CUDABackend(GPUTarget("cuda", int(arch.group(1)), 32), name=target)
    if not isinstance(target, GPUTarget):
        raise TypeError(f"a target is a GPUTarget(backend, arch, warp_size) or a name (sm_90a), not {target!r}")
    for backend in backends.values():
        if backend.compiler.supports_target(target):
            return backend.compiler(target)
    raise RuntimeError(f"no kiln backend for {target}: kiln compiles for 'cuda' and runs 'cpu' in its interpreter")
