"""A prepacked launch for one specialization: argument slots built once, filled per call.

The launch itself calls `cuLaunchKernel` in libcuda through ctypes: the same driver
entry point cuda-python wraps, without the wrapper's per-call argument conversion, which
costs microseconds on every launch. A programmatic dependent launch (`launch_pdl=True`)
calls `cuLaunchKernelEx` instead, with a `CUlaunchConfig` built once and the
programmatic-stream-serialization attribute set.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import operator

from kiln.ir.types import half_float_bits, tensormap

from .cuda_driver import CudaError, _error_text
from .scratch import give_back as scratch_give_back, take as scratch_take
from .tensormap import MAX_RANK, NBYTES, DerivedMapUnusable, derived_encoder, encoder

_CTYPES = {
    "int1": ctypes.c_uint8, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
    "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64,
    "uint64": ctypes.c_uint64, "fp32": ctypes.c_float, "fp64": ctypes.c_double,
    "fp16": ctypes.c_uint16, "bf16": ctypes.c_uint16,  # their bits, packed as Triton packs them
}


def _pointer_value(arg) -> int:
    try:
        return arg.data_ptr()  # the common case: a torch tensor
    except AttributeError:
        pass
    if arg is None:
        return 0
    if isinstance(arg, int):
        return arg
    iface = getattr(arg, "__cuda_array_interface__", None)
    if iface is not None:
        return iface["data"][0]
    from .dlpack import dlpack_info, is_dlpack
    if is_dlpack(arg):
        return dlpack_info(arg)[1]
    raise TypeError(f"cannot pass {type(arg).__name__} as a GPU pointer")


def launcher_for(loaded, arg_types, metadata: dict, name: str, device: int, pdl: bool = False):
    """make_launcher for a kernel loaded on `device` from a binary with `metadata` (checked,
    kiln.cache.metadata): its TMA boxes, and what the compiler appended after the kernel's
    own `arg_types` (derived maps, grid sizes), with the CTAs a persistent kernel takes;
    `pdl`: every launch is a programmatic dependent launch (the `launch_pdl` option)."""
    from kiln.cache.metadata import launched_warps, parse_global_scratch, parse_tma_box, parse_tma_of
    from .cuda_driver import sm_count
    args, own = metadata.get("args", ()), len(arg_types)
    boxes = {i: parse_tma_box(arg.get("tma_box")) for i, arg in enumerate(args)}
    derived = []
    for i, arg in enumerate(args[own:], own):
        if arg.get("launch_grid") is not None:
            derived.append(("grid", int(arg["launch_grid"])))
        elif boxes[i] is not None and (of := parse_tma_of(arg.get("tma_of"))) is not None:
            derived.append(("map", boxes[i], of))
        elif (scratch := parse_global_scratch(arg.get("global_scratch"))) is not None:
            derived.append(("scratch", scratch))
        elif arg.get("split_k") is not None:
            derived.append(("split", metadata.get("split_trips")))
        else:
            raise ValueError(f"kernel {name}: its binary's argument {i} is no derived map, grid size or scratch")
    warps = launched_warps(metadata)
    resident = None
    if any(entry[0] in ("grid", "split") for entry in derived):
        resident = loaded.resident_ctas(32 * warps, metadata["shared"]) * sm_count(device)
    map_strides = [i for i, arg in enumerate(args[:own]) if arg.get("tma_stride") == "1"]
    return make_launcher(loaded, arg_types, warps, metadata["shared"], name,
                         {i: box for i, box in boxes.items() if box is not None and i < own}, derived, resident,
                         pdl, map_strides)


def _descriptor_base(arg_types, i: int) -> int | None:
    """The index of the base pointer of the host descriptor whose TMA map is argument `i`: its pieces
    are the base, then its 2 to 5 sizes and as many strides (integers), then the map; None where the
    arguments before `i` are not such pieces."""
    for dims in range(2, MAX_RANK + 1):
        base = i - 1 - 2 * dims
        if base >= 0 and arg_types[base].is_ptr() and \
                all(not t.is_ptr() and t != tensormap for t in arg_types[base + 1:i]):
            return base
    return None


def make_launcher(kernel, arg_types, num_warps: int, shared: int, name: str, tma_boxes=None, derived=(),
                  resident=None, pdl: bool = False, map_strides=()):
    """launch(grid, args, stream) for one loaded kernel; `args` are its runtime arguments in order.

    The function is generated for the kernel's argument list, so a launch is a few slot
    assignments and one foreign call: no loop, no per-argument dispatch. The generated text
    holds only names made here; every value (block size, shared bytes) is bound in its
    namespace, never written into the source, since metadata comes from the cache or a daemon.
    `tma_boxes` maps the index of a tensormap argument the kernel reads to its TMA box
    (kiln.runtime.tensormap); the launch encodes that descriptor's map (zeros for the others).
    `derived` lists the arguments the compiler appended after the kernel's own, in order:
    ("map", box, (base, inner, outer, stride)), a TMA map encoded from those arguments at
    each launch (DerivedMapUnusable where they make none), ("grid", axis), the launch
    grid's size along that axis, or ("scratch", bytes), global scratch of `bytes` per CTA
    (kiln.runtime.scratch). A kernel with grid arguments is persistent: it is launched
    on min(programs, `resident`) CTAs, which loop over the programs. With `pdl` the launch
    lets this kernel start before the one before it on the stream has finished (Hopper's
    programmatic dependent launch: the kernel's `gdc_wait` waits for that one). `map_strides`:
    the int arguments that are row strides of TMA maps the kernel makes; a launch where one is
    not positive raises DerivedMapUnusable (TMA takes no such stride; the pointers do).
    """
    if type(num_warps) is not int or not 1 <= num_warps <= 32:
        raise ValueError(f"kernel {name}: num_warps must be an int from 1 to 32, not {num_warps!r:.40}")
    if type(shared) is not int or not 0 <= shared < 1 << 31:
        raise ValueError(f"kernel {name}: shared memory must be a non-negative int, not {shared!r:.40}")
    slots, pointer_args, fills, bases = [], [], {}, {}  # bases: a host map's index -> its descriptor's base
    tma_boxes = tma_boxes or {}
    for i, t in enumerate(arg_types):
        if t == tensormap:
            slots.append((ctypes.c_ubyte * NBYTES)())
            if i in tma_boxes:
                bases[i] = _descriptor_base(arg_types, i)
                if bases[i] is None:
                    raise ValueError(f"kernel {name}: argument {i} is a TMA map without its descriptor's pieces")
                fills[i] = encoder(tma_boxes[i])
        elif t.is_ptr():
            slots.append(ctypes.c_uint64())
            pointer_args.append(i)
        elif t.name in _CTYPES:
            slots.append(_CTYPES[t.name]())
        else:
            raise TypeError(f"kernel {name}: cannot pass an argument of type {t}")
    grid_slots, scratch, split, split_spec = {}, None, None, None
    for kind, *what in derived:
        if kind == "split":
            split, split_spec = len(slots), what[0] if what else None
            slots.append(ctypes.c_int32())
            continue
        if kind == "grid":
            grid_slots[len(slots)] = what[0]
            slots.append(ctypes.c_int32())
            continue
        if kind == "scratch":
            if scratch is not None or type(what[0]) is not int or what[0] < 1:
                raise ValueError(f"kernel {name}: one global scratch argument of a positive size, not {what!r:.40}")
            scratch = (len(slots), what[0])
            slots.append(ctypes.c_uint64())
            continue
        box, (base, inner, outer, stride) = what
        if not (max(base, inner, outer, stride) < len(arg_types) and arg_types[base].is_ptr()
                and all(arg_types[j].name == "int32" for j in (inner, outer))
                and arg_types[stride].name in ("int32", "int64")):  # a host descriptor's strides are int64
            raise ValueError(f"kernel {name}: a derived TMA map's arguments are not a pointer, two int32 extents "
                             f"and an int32 or int64 stride")
        fills[len(slots)] = derived_encoder(box, arg_types[base].element_ty)
        slots.append((ctypes.c_ubyte * NBYTES)())
    if grid_slots and (sorted(grid_slots.values()) != [0, 1, 2] or not resident or resident < 1):
        raise ValueError(f"kernel {name}: a persistent kernel needs all three grid sizes and a CTA count")
    params = (ctypes.c_void_p * max(1, len(slots)))(*[ctypes.addressof(s) for s in slots])
    namespace = {"cu_launch": _cu_launch_kernel(), "handle": kernel.handle, "params": ctypes.addressof(params),
                 "keep_alive": (slots, params), "pointer_value": _pointer_value, "fail": _failure(name),
                 "half_float_bits": half_float_bits,
                 "block_x": 32 * num_warps, "shared_bytes": shared, "resident": resident,
                 "unusable": DerivedMapUnusable, "take_scratch": scratch_take, "give_back": scratch_give_back}
    namespace.update((f"s{i}", slot) for i, slot in enumerate(slots))
    namespace.update((f"fill{i}", fill) for i, fill in fills.items())
    names = [f"a{i}" for i in range(len(arg_types))]
    fast = [f"        s{i}.value = a{i}.data_ptr()" for i in pointer_args] or ["        pass"]
    slow = [f"        s{i}.value = pointer_value(a{i})" for i in pointer_args] or ["        pass"]
    scalars = [f"    s{i}.value = half_float_bits(a{i}, '{t.name}')" if t.name in ("fp16", "bf16") else
               f"    s{i}.value = a{i}" for i, t in enumerate(arg_types) if i not in pointer_args and t != tensormap]
    # a map reads the address its descriptor's base slot holds (the first of its pieces: base, its
    # sizes, its strides, map), filled above from whatever array the caller passed
    scalars += [f"    fill{i}(s{i}, s{bases[i]}.value, a{i})" for i in fills if i < len(arg_types)]
    # derived maps only for a launch that runs: an empty grid's sizes may make no map
    derived_fills = [f"    fill{i}(s{i}, " + ", ".join(f"s{j}.value" for j in entry[2]) + ")"
                     for i, entry in enumerate(derived, len(arg_types)) if entry[0] == "map"]
    if any(type(i) is not int or not 0 <= i < len(arg_types) or arg_types[i].name not in ("int32", "int64")
           for i in map_strides):
        raise ValueError(f"kernel {name}: a TMA map's row stride to check is no integer argument of its own")
    checks = [line for i in map_strides
              for line in (f"    if a{i} <= 0:", f"        raise unusable(f'a row stride of {{a{i}}} for a TMA map')")]
    derived_fills = checks + derived_fills
    launch_grid = [*derived_fills, "    ctas = gx"]
    if grid_slots:
        by_axis = {axis: i for i, axis in grid_slots.items()}
        launch_grid = [*derived_fills,
                       f"    s{by_axis[0]}.value, s{by_axis[1]}.value, s{by_axis[2]}.value = gx, gy, gz",
                       "    programs = gx * gy * gz",
                       "    if programs >= 2147483648:",
                       "        raise unusable('more programs than a persistent loop counts in int32')",
                       "    ctas, gy, gz = min(programs, resident), 1, 1"]
    launch_call = ["err = cu_launch(handle, ctas, gy, gz, block_x, 1, 1, shared_bytes, stream, params, None)"]
    if split is not None:  # each program a cluster of as many CTAs as fit beside the others (split-K)
        if grid_slots or pdl or not resident or resident < 1:
            raise ValueError(f"kernel {name}: a split-K kernel is launched in clusters alone, with a CTA count")
        config, attrs = cluster_config(32 * num_warps, shared)
        if split_spec is not None and (split_spec[0] >= len(arg_types) or
                                       split_spec[0] >= 0 and arg_types[split_spec[0]].name != "int32"):
            raise ValueError(f"kernel {name}: its K loop's trip count is of no int32 argument of its own")
        trips_arg = f"a{split_spec[0]}" if split_spec is not None and split_spec[0] >= 0 else "0"
        namespace.update(cu_launch_ex=_cu_launch_kernel_ex(), config=config, config_ptr=ctypes.addressof(config),
                         attrs=attrs, cluster_ctas=cluster_ctas,
                         trips_of=functools.partial(loop_trips, split_spec) if split_spec else lambda value: None)
        namespace["keep_alive"] += (config, attrs)
        launch_grid = [*derived_fills,
                       f"    per = s{split}.value = cluster_ctas(gx * gy * gz, resident, trips_of({trips_arg}))",
                       "    attrs[0].value.clusterDim[0] = per",
                       "    ctas = gx * per",
                       "    config.gridDimX, config.gridDimY, config.gridDimZ = ctas, gy, gz",
                       "    config.hStream = stream"]
        launch_call = ["err = cu_launch_ex(config_ptr, handle, params, None)"]
    if pdl:
        config, attrs = pdl_config(32 * num_warps, shared)
        namespace.update(cu_launch_ex=_cu_launch_kernel_ex(), config=config, config_ptr=ctypes.addressof(config))
        namespace["keep_alive"] += (config, attrs)
        launch_grid.append("    config.gridDimX, config.gridDimY, config.gridDimZ = ctas, gy, gz")
        launch_grid.append("    config.hStream = stream")
        launch_call = ["err = cu_launch_ex(config_ptr, handle, params, None)"]
    if scratch is not None:  # the maps the kernel makes: 128 bytes each per CTA, only for this launch
        namespace["scratch_bytes"] = scratch[1]
        launch_call = [f"s{scratch[0]}.value, held = take_scratch(ctas * gy * gz * scratch_bytes, stream)",
                       "try:", "    " + launch_call[0], "finally:", "    give_back(held, stream)"]
    src = "\n".join([
        "def launch(grid, args, stream):",
        f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args" if names else "    pass",
        "    try:", *fast, "    except AttributeError:", *slow, *scalars,
        "    gx, gy, gz = grid",
        "    if gx and gy and gz:",
        *["    " + line for line in launch_grid],
        *["        " + line for line in launch_call],
        "        if err:",
        "            fail(err)",
    ]) + "\n"
    exec(compile(src, f"<kiln launcher for {name}>", "exec"), namespace)
    return namespace["launch"]


def _failure(name):
    def fail(err):
        raise CudaError(f"launching kernel {name} failed: {_error_text(err)}", int(err))
    return fail


@functools.lru_cache(maxsize=None)
def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:  # an unusual install: let the loader's search find it
        return ctypes.CDLL(ctypes.util.find_library("cuda"))


@functools.lru_cache(maxsize=None)
def _cu_launch_kernel():
    fn = _libcuda().cuLaunchKernel
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    fn.restype = ctypes.c_int
    return fn


@functools.lru_cache(maxsize=None)
def _cu_launch_kernel_ex():
    fn = _libcuda().cuLaunchKernelEx
    fn.argtypes = [ctypes.c_void_p] * 4  # config, function, kernelParams, extra
    fn.restype = ctypes.c_int
    return fn


# cuda.h's launch attribute and configuration (CUlaunchAttribute, CUlaunchConfig), as ctypes lays
# them out: the attribute's value is a 64-byte union, 8-aligned (it holds pointers), after the id.
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("programmaticStreamSerializationAllowed", ctypes.c_int),
                ("clusterDim", ctypes.c_uint * 3), ("_align", ctypes.c_void_p)]


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
# what the driver answers a cluster launch it cannot place (a GPU partition or MPS share with too
# few SMs per cluster, say): LAUNCH_OUT_OF_RESOURCES, NOT_SUPPORTED, INVALID_CLUSTER_SIZE. The launch
# did not run, and nothing is left sticky.
CLUSTER_REFUSALS = frozenset({701, 801, 912})
CLUSTER_CTAS = (4, 2)  # the cluster sizes split-K launches take (kiln.ir.ops.CLUSTER_SUM_MAX at most)


# K-loop iterations each CTA of a cluster of that size must get for the split to pay: a CTA's
# fill of its ring and rank 0's sum of the partials cost what a short share saves (tutorial 03's
# fp16 kernel, H200, 2026-12-04: 64 iterations over 4 CTAs ran 0.77x the same over 2, and 128 over
# 4 0.81x; 256 over 4 1.12x the same over 2; 64 over 2 1.16x the kernel as written, 16 over 2 0.70x)
CLUSTER_SHARE = {4: 64, 2: 32}


def cluster_ctas(programs: int, resident: int, trips: int | None = None) -> int:
    """CTAs per program of a split-K launch whose K loop runs `trips` times (None: not known from the
    arguments): the most that keep every CTA resident at once and give each its CLUSTER_SHARE
    (unknown trips: 2 at most); 1 where no split pays."""
    for ctas in CLUSTER_CTAS:
        enough = trips >= ctas * CLUSTER_SHARE[ctas] if trips is not None else ctas == 2
        if programs * ctas <= resident and enough:
            return ctas
    return 1


def split_trips(spec, args) -> int | None:
    """The K loop's trip count of a split_k kernel launched with `args` (its runtime arguments), from
    the binary's `split_trips` [arg, add, div, lb, step] (kiln.codegen.passes.split_k.trip_spec;
    checked by kiln.cache.metadata): None without one or where the argument is no int."""
    if spec is None or spec[0] >= len(args):
        return None
    return loop_trips(spec, args[spec[0]] if spec[0] >= 0 else 0)


def loop_trips(spec, value) -> int | None:
    """split_trips with the value of the spec's argument (any where it has none)."""
    arg, add, div, lb, step = spec
    try:
        value = 0 if arg < 0 else operator.index(value)
    except TypeError:
        return None
    bound = _c_div(value + add, div)
    return max(_c_div(bound - lb + step - 1, step), 0)


def _c_div(a: int, b: int) -> int:
    """C's (and the kernel's int32) division: toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def cluster_config(block_x: int, shared: int):
    """(config, attributes) of a launch in clusters along x; a launch fills in the cluster's
    size, the grid and the stream. Keep both alive."""
    attrs = (LaunchAttribute * 1)()
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attrs[0].value.clusterDim[0], attrs[0].value.clusterDim[1], attrs[0].value.clusterDim[2] = 1, 1, 1
    config = LaunchConfig(blockDimX=block_x, blockDimY=1, blockDimZ=1, sharedMemBytes=shared,
                          attrs=ctypes.cast(attrs, ctypes.POINTER(LaunchAttribute)), numAttrs=1)
    return config, attrs


def pdl_config(block_x: int, shared: int):
    """(config, attributes) of a programmatic dependent launch of `block_x` threads and `shared`
    bytes of dynamic shared memory; a launch fills in the grid and the stream. Keep both alive."""
    attrs = (LaunchAttribute * 1)()
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attrs[0].value.programmaticStreamSerializationAllowed = 1
    config = LaunchConfig(blockDimX=block_x, blockDimY=1, blockDimZ=1, sharedMemBytes=shared,
                          attrs=ctypes.cast(attrs, ctypes.POINTER(LaunchAttribute)), numAttrs=1)
    return config, attrs
