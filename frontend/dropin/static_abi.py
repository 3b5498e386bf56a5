"""Whether PyTorch Inductor's static launcher may launch a kiln cubin: the gate in front of
kiln.dropin.triton_files, which leaves the cubin where Inductor looks for it.

Inductor's static launcher (`StaticallyLaunchedCudaKernel`, torch/_inductor/runtime/
static_triton_launcher.py) does not ask kiln how to launch: it loads `<name>.cubin`, takes the
function named `src.fn.__name__`, and launches `32 * metadata.num_warps` threads with
`metadata.shared` bytes of dynamic shared memory, passing one value per entry of `src.signature`
that is neither `constexpr` nor in `src.constants`, in parameter order, each written as the C type
its Triton type names, then one null pointer per scratch field the metadata has. kiln's ABI is its
own (`runtime_positions`, its scalar widths, a host TensorDescriptor as a 128-byte tensormap
filled at launch), so a cubin is offered only when `refusal(kernel)` finds nothing that differs:
the list the launcher would pass is computed from `kernel.src` and compared, entry by entry, with
the `.param` list of the kernel's `.entry` in its PTX, and with what kiln's own launcher does.
"""
from __future__ import annotations

import ctypes
import functools
import re

from kiln.cache.metadata import launched_warps

# What the static launcher writes for each Triton scalar type of a signature: (kind, bytes).
# Read from its type table and its C++ argument packer; a type missing here is refused.
LAUNCHER_VALUES = {
    "i1": ("int", 4), "i8": ("int", 1), "i16": ("int", 2), "i32": ("int", 4), "i64": ("int", 8),
    "u1": ("int", 4), "u8": ("int", 1), "u16": ("int", 2), "u32": ("int", 4), "u64": ("int", 8),
    "fp16": ("float", 4), "bf16": ("float", 4), "fp32": ("float", 4), "f32": ("float", 4), "fp64": ("float", 8),
}
POINTER = ("ptr", 8)  # a `*T` entry: the tensor's device address
# Metadata fields for each of which the launcher appends a null pointer argument (Triton's
# scratch buffers). kiln's kernels declare no such parameter; the driver takes a kernel's
# parameter count from its image, so these trailing entries are never read. Nonzero sizes are
# refused (the launcher refuses them too).
SCRATCH_FIELDS = ("global_scratch_size", "profile_scratch_size")

# CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN by compute capability: the launcher
# refuses a kernel whose dynamic shared memory is not below it; kiln's launcher takes up to it.
# An architecture not listed is held to the 48 KB every GPU has.
_SHARED_OPTIN = {70: 98304, 72: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376,
                 90: 232448, 100: 232448, 103: 232448, 120: 101376, 121: 101376}
_SHARED_DEFAULT = 49152

_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*\(([^)]*)\)([^{]*)\{")
_CLUSTER = (".reqnctapercluster", ".explicitcluster", ".maxclusterrank")


def refusal(kernel) -> str | None:
    """None when Inductor's static launcher would launch `kernel` (kiln.dropin.compile's
    CompiledKernel, CUDA) exactly as kiln's own launcher does; otherwise the first difference."""
    binary = kernel.binary
    if binary is None or not binary.cubin or not binary.ptx:
        return "no cubin"
    fn = kernel.src.fn
    for attr in ("arg_names", "params", "__name__"):
        if not hasattr(fn, attr):
            return f"the kernel's function has no {attr}"
    reason = _launch_refusal(kernel, binary)
    if reason is not None:
        return reason
    passed = launcher_arguments(kernel.src)
    if isinstance(passed, str):
        return passed
    positions, types, values = passed
    if list(positions) != list(kernel.runtime_positions):
        return f"the launcher passes parameters {list(positions)}, kiln's kernel takes {list(kernel.runtime_positions)}"
    if len(kernel.arg_types) != len(positions) or any(t == "tensormap" for t in kernel.arg_types):
        return f"kiln passes {list(kernel.arg_types)} for parameters {list(positions)}"
    entry = ptx_entry(binary.ptx)
    if isinstance(entry, str):
        return entry
    name, params, directives = entry
    if name != fn.__name__:
        return f"the cubin's kernel is {name!r}, the launcher looks for {fn.__name__!r}"
    if len(params) != len(values):
        return f"the launcher passes {len(values)} arguments, the kernel declares {len(params)} parameters"
    for i, (ty, value, param) in enumerate(zip(types, values, params)):
        if not _reads_the_same(ty, value, param):
            return f"argument {i} ({ty}): the launcher writes {value}, the kernel reads {param}"
    return _directive_refusal(directives, kernel.metadata.num_warps) or driver_refusal()


def launcher_arguments(src):
    """What the static launcher passes for `src` (an ASTSource): (the parameter positions, their
    signature types, each one's (kind, bytes) as written), or why it cannot be told. The values Inductor's generated launcher
    hands it are the parameters not in `src.constants`; the types are the signature's entries
    that are neither constexpr nor constant: both lists must be the same."""
    names = list(src.fn.arg_names)
    signature = {}
    for key, ty in src.signature.items():
        index = _index(key, names)
        if index is None:
            return f"signature entry {key!r} is not a parameter"
        signature[index] = ty
    constants = set()
    for key in getattr(src, "constants", {}):
        index = _index(key, names)
        if index is None:
            return f"constant {key!r} is not a parameter"
        constants.add(index)
    typed = [i for i in sorted(signature) if signature[i] != "constexpr" and i not in constants]
    given = [i for i in range(len(names)) if i not in constants]
    if typed != given:
        return f"the launcher is given parameters {given} but types {typed}"
    types = [signature[i] for i in typed]
    values = []
    for ty in types:
        value = None if not isinstance(ty, str) else POINTER if ty.startswith("*") else LAUNCHER_VALUES.get(ty)
        if value is None:
            return f"the launcher has no C type for {ty!r}"
        values.append(value)
    return typed, types, values


def _index(key, names):
    """A signature or constants key as the launcher reads it: a name, an (index, ...) tuple or an index."""
    if isinstance(key, str):
        return names.index(key) if key in names else None
    if isinstance(key, tuple):
        key = key[0] if key else None
    return key if isinstance(key, int) and 0 <= key < len(names) else None


def ptx_entry(ptx: str):
    """(name, [(kind, bytes) per .param], the directives between the parameter list and the
    body) of the one `.entry` in `ptx`, or why not. A parameter that is not one scalar (an
    aligned byte array: a tensormap) is ("bytes", size)."""
    entries = _ENTRY.findall(ptx)
    if len(entries) != 1:
        return f"the PTX has {len(entries)} kernel entries"
    name, param_text, directives = entries[0]
    params = []
    for text in filter(None, (p.strip() for p in param_text.split(","))):
        param = _param(text)
        if param is None:
            return f"unreadable parameter {text!r}"
        params.append(param)
    return name, params, directives


def _param(text: str):
    tokens = text.split()
    if not tokens or tokens[0] != ".param" or len(tokens) < 3:
        return None
    array = re.fullmatch(r"[\w$]+\[(\d+)\]", tokens[-1])
    scalar = re.fullmatch(r"\.([usbf])(8|16|32|64)", tokens[1])
    if array is not None or scalar is None:
        return ("bytes", int(array.group(1)) if array else 0)
    kind = "float" if scalar.group(1) == "f" else ("ptr" if ".ptr" in tokens else "int")
    return kind, int(scalar.group(2)) // 8


def _reads_the_same(ty: str, value, param) -> bool:
    """Whether the kernel reads from the launcher's slot the value kiln's launcher would pass.
    Same kind and width; or an i1, which the launcher writes as a 4-byte int and kiln's kernel
    reads as one byte: a slot is zeroed and little-endian, so the byte read is the low byte, as
    kiln's launcher truncates to it."""
    if value == param:
        return True
    return ty == "i1" and value == ("int", 4) and param == ("int", 1)


def _launch_refusal(kernel, binary) -> str | None:
    """What kiln's launcher does that the static launcher would not do the same way."""
    meta = kernel.metadata
    warps = launched_warps(binary.metadata)
    if meta.num_warps != warps:
        return f"num_warps {meta.num_warps}, the binary's {warps}"
    shared = binary.metadata.get("shared")
    if meta.shared != shared or kernel.shared != shared:
        return f"shared {meta.shared}, the binary's {shared}"
    if not isinstance(shared, int) or not 0 <= shared < _shared_optin(binary.target):
        return f"{shared} bytes of shared memory: the launcher's limit on {binary.target} is lower"
    if getattr(meta, "num_ctas", 1) != 1 or tuple(getattr(meta, "cluster_dims", (1, 1, 1))) != (1, 1, 1):
        return "a cluster launch"
    if getattr(meta, "launch_pdl", False) or getattr(meta, "launch_cooperative_grid", False):
        return "a launch attribute"
    if any(getattr(meta, field, 0) for field in SCRATCH_FIELDS):
        return "scratch memory"
    if any(arg.get("tma_box") for arg in binary.metadata.get("args", ()) if isinstance(arg, dict)):
        return "a tensormap encoded at launch"
    if any(arg.get("launch_grid") is not None for arg in binary.metadata.get("args", ()) if isinstance(arg, dict)):
        return "a persistent kernel (its grid sizes are arguments, its CTAs fewer than its programs)"
    if any(arg.get("global_scratch") for arg in binary.metadata.get("args", ()) if isinstance(arg, dict)):
        return "global scratch for the TMA maps the kernel makes"
    return None


def _shared_optin(target: str) -> int:
    arch = re.fullmatch(r"sm_(\d+)[af]?", target or "")
    return _SHARED_OPTIN.get(int(arch.group(1)), _SHARED_DEFAULT) if arch else _SHARED_DEFAULT


def _directive_refusal(directives: str, num_warps: int) -> str | None:
    """The entry's launch bounds must take the launcher's block; a cluster kernel is refused."""
    threads = 32 * num_warps
    if any(word in directives for word in _CLUSTER):
        return "a cluster kernel"
    for name, dims in re.findall(r"\.(maxntid|reqntid)\s+([\d,\s]+)", directives):
        size = 1
        for d in filter(None, (x.strip() for x in dims.split(","))):
            size *= int(d)
        if (name == "reqntid" and size != threads) or size < threads:
            return f".{name} {size}: the launcher launches {threads} threads"
    return None


def driver_refusal() -> str | None:
    """kiln loads the PTX when the driver cannot load the cubin (older than the nvJitLink that
    linked it); the static launcher loads the cubin only. Unknown on either side: no refusal."""
    driver = driver_version()
    linker = _nvjitlink_major()
    if driver is not None and linker is not None and driver // 1000 < linker:
        return f"CUDA driver {driver} is older than nvJitLink {linker}"
    return None


@functools.lru_cache(maxsize=1)
def driver_version() -> int | None:
    """cuDriverGetVersion through libcuda (no context, no cuInit), or None without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        return version.value if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 else None
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=1)
def _nvjitlink_major() -> int | None:
    try:
        from kiln.proto.key import compiler_identity
        return int(str(compiler_identity()["nvjitlink"]).split(".")[0])
    except Exception:  # noqa: BLE001  (no version recorded: nothing to compare)
        return None
