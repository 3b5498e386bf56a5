"""The C of one ahead-of-time kernel (kiln.tools.compile): its `.c`, which holds the cubin and the PTX
and loads, unloads and launches the kernel, and its `.h`, which declares those and carries the
kernel's `// kiln-aot:` line for kiln.tools.link. Every name written into the C is checked here or
made here: argument names against `RESERVED`, grid expressions token by token."""
from __future__ import annotations

import re

from kiln.tools.aot import HALF_ROUNDING, HALF_ROUNDING_SOURCE, AotError, AotKernel, stream_prototype

_GRID_TOKEN = re.compile(r"\s*(?:([A-Za-z_]\w*)|(\d+[uUlL]*)|(<<|>>|[-+*/%()<>=!&|?:^~]))")
_DEFAULT_SHARED = 48 * 1024  # what a block gets without opting in
# C's keywords and types, and the launch function's own names: no argument of an ahead-of-time kernel
RESERVED = set("""auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Bool bool stream status params gX gY gZ CUstream CUdeviceptr CUresult int8_t int16_t int32_t int64_t uint8_t
uint16_t uint32_t uint64_t NULL""".split())


def grid_code(grid, args, constants) -> list:
    """The three grid expressions as C, each checked to name only the kernel's arguments and its
    integer constants (constexprs, arguments specialized to 1), which are declared first."""
    known = {a.name for a in args} | {k for k, v in constants.items() if type(v) is int}
    used = []
    for text in grid:
        pos = 0
        while pos < len(text):
            m = _GRID_TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise AotError(f"the grid expression {text!r}: unexpected {text[pos:pos + 10]!r}")
            word = m.group(1)
            if word is not None:
                if word not in known:
                    raise AotError(f"the grid expression {text!r} names {word!r}, which is no argument or integer "
                                   "constexpr of the kernel")
                if word not in used:
                    used.append(word)
            pos = m.end()
        if not text:
            raise AotError("a grid expression is empty")
    lines = [f"    const int64_t {w} = {constants[w]};" for w in used if w in constants]
    return lines + [f"    unsigned int g{axis} = (unsigned int)({text});" for axis, text in zip("XYZ", grid)]


def c_source(aot: AotKernel, entry_name: str, cubin: bytes, ptx: str, shared: int, threads: int, grid: list,
             types: list, doc: list) -> str:
    """The kernel's .c: its cubin and PTX as bytes, load (the cubin, or the PTX through the
    driver's JIT where the driver cannot take the cubin), unload and the launch."""
    f = aot.function
    passed = aot.passed
    slots, converts = [], []
    for a, ty in zip(passed, types):
        if ty in HALF_ROUNDING:
            converts.append(f"    uint16_t {a.name}_bits = {HALF_ROUNDING[ty]}({a.name});")
            slots.append(f"&{a.name}_bits")
        else:
            slots.append(f"&{a.name}")
    params = (f"    void *params[{len(slots)}] = {{{', '.join(slots)}}};" if slots else "    void **params = NULL;")
    rounding = "".join(HALF_ROUNDING_SOURCE[HALF_ROUNDING[ty]] for ty in dict.fromkeys(types) if ty in HALF_ROUNDING)
    ptx_bytes = ptx.encode() + b"\0"  # cuModuleLoadData reads PTX as a C string
    return f"""/* {f}: kernel {entry_name}, compiled ahead of time by kiln.tools.compile
   {', '.join(doc)} */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const unsigned char {f}_cubin[{len(cubin)}] = {{
{_byte_rows(cubin)}
}};
static const unsigned char {f}_ptx[{len(ptx_bytes)}] = {{
{_byte_rows(ptx_bytes)}
}};
static CUmodule {f}_module = NULL;
static CUfunction {f}_function = NULL;
{rounding}
/* The module from the cubin, or from the PTX where this driver takes no cubin of its linker's (older). */
static CUresult {f}_load(void) {{
    CUresult status;
    int device_id = 0, optin = 0;
    CUdevice device;
    if ({f}_function != NULL) return CUDA_SUCCESS;
    status = cuModuleLoadData(&{f}_module, {f}_cubin);
    if (status == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || status == CUDA_ERROR_NO_BINARY_FOR_GPU ||
        status == CUDA_ERROR_INVALID_IMAGE)
        status = cuModuleLoadData(&{f}_module, {f}_ptx);
    if (status != CUDA_SUCCESS) return status;
    status = cuModuleGetFunction(&{f}_function, {f}_module, "{entry_name}");
    if (status == CUDA_SUCCESS && {shared} > {_DEFAULT_SHARED}) {{
        status = cuCtxGetDevice(&device);
        if (status == CUDA_SUCCESS) device_id = (int)device;
        if (status == CUDA_SUCCESS)
            status = cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device_id);
        if (status == CUDA_SUCCESS && optin < {shared}) status = CUDA_ERROR_OUT_OF_MEMORY;
        if (status == CUDA_SUCCESS)
            status = cuFuncSetAttribute({f}_function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, {shared});
    }}
    if (status != CUDA_SUCCESS) {{
        cuModuleUnload({f}_module);
        {f}_module = NULL;
        {f}_function = NULL;
    }}
    return status;
}}

void load_{f}(void) {{
    CUresult status = {f}_load();
    if (status != CUDA_SUCCESS) {{
        const char *text = NULL;
        cuGetErrorString(status, &text);
        fprintf(stderr, "kiln: cannot load {f}: %s\\n", text ? text : "unknown CUDA error");
    }}
}}

void unload_{f}(void) {{
    if ({f}_module != NULL) cuModuleUnload({f}_module);
    {f}_module = NULL;
    {f}_function = NULL;
}}

CUresult {f}({stream_prototype(passed)}) {{
    CUresult status = {f}_load();
{chr(10).join(grid)}
{chr(10).join(converts)}
{params}
    if (status != CUDA_SUCCESS) return status;
    if ((uint64_t)gX * gY * gZ == 0) return CUDA_SUCCESS;
    return cuLaunchKernel({f}_function, gX, gY, gZ, {threads}, 1, 1, {shared}, stream, params, NULL);
}}
"""


def c_header(aot: AotKernel, doc: list) -> str:
    f = aot.function
    return f"""/* {f}: {', '.join(doc)} */
#include <cuda.h>
#include <stdint.h>

void load_{f}(void);
void unload_{f}(void);
{aot.line()}
CUresult {f}({stream_prototype(aot.passed)});
"""


def _byte_rows(data: bytes) -> str:
    return ",\n".join(", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16))
