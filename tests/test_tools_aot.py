"""kiln.tools.compile and kiln.tools.link (Triton's `triton/tools/compile.py` and `link.py`): kernels
compiled ahead of time to C, linked into dispatchers, built with the machine's C compiler. On the
CPU the C program runs against a stand-in for libcuda that reports each module load (a checksum
of the image) and each launch (grid, block, shared memory, the parameters' bytes); on a GPU it
runs the kernels and checks their results against NumPy."""
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kiln.tools import aot, compile as aot_compile, link as aot_link
from kiln.tools.cuda_paths import include_dirs, library_dirs

CC = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
needs_c = pytest.mark.skipif(CC is None or not include_dirs(),
                             reason="no C compiler, or no cuda.h (the nvidia-cuda-runtime wheel brings one)")

MATMUL = '''
import triton
import triton.language as tl
import kernel_utils


@triton.jit
def kernel(C, A, B, M, N, K, stride_cm, stride_cn, stride_am, stride_ak, stride_bk, stride_bn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = A + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = B + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=ks[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < K - k * BLOCK_K, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    out_rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(C + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn, kernel_utils.square(acc))
'''
UTILS = '''
import triton


@triton.jit
def square(x):
    return x * x
'''
SCALE = '''
import triton
import triton.language as tl


@triton.jit
def scale(X, Y, alpha, beta, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, x * alpha + beta.to(tl.float32), mask=offs < n)
'''

# libcuda as far as the generated C calls it: loads are numbered and report the image's FNV-1a
# checksum (an ELF's size from its header), launches print what they were given
STUB = r'''
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const char *stub_sizes = "";  /* each parameter's bytes, as the program under test says: "8844" */
static int loads = 0;

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    const unsigned char *p = image;
    uint64_t shoff;
    uint16_t shentsize, shnum;
    if (memcmp(p, "\x7f" "ELF", 4) != 0) return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&shoff, p + 0x28, 8); memcpy(&shentsize, p + 0x3a, 2); memcpy(&shnum, p + 0x3c, 2);
    *module = (CUmodule)(intptr_t)(++loads);
    printf("load %d %016llx\n", loads, (unsigned long long)fnv(p, shoff + (uint64_t)shentsize * shnum));
    return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    printf("function %d %s\n", (int)(intptr_t)m, name);
    *f = (CUfunction)m;
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) { printf("unload %d\n", (int)(intptr_t)m); return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) { (void)a; (void)d; *v = 232448; return CUDA_SUCCESS; }
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    printf("shared optin %d %d %d\n", (int)(intptr_t)f, (int)a, v);
    return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "stub error"; return CUDA_SUCCESS; }
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
    (void)s; (void)extra;
    printf("launch %d grid %u %u %u block %u %u %u shared %u params", (int)(intptr_t)f, gx, gy, gz, bx, by, bz, shared);
    for (int i = 0; stub_sizes[i]; i++) {
        uint64_t v = 0;
        memcpy(&v, params[i], (size_t)(stub_sizes[i] - '0'));
        printf(" %llx", (unsigned long long)v);
    }
    printf("\n");
    return CUDA_SUCCESS;
}
'''


def _write(folder: Path, files: dict) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


def _compile(folder: Path, *argv) -> None:
    """kiln.tools.compile run as upstream's test runs Triton's: its file as a script, in `folder`."""
    script = Path(aot_compile.__file__)
    run = subprocess.run([sys.executable, str(script), *argv], cwd=folder, capture_output=True, text=True,
                         env={**os.environ, "KILN_DAEMON": "off"})
    assert run.returncode == 0, run.stderr


def _cubins(folder: Path, pattern: str) -> dict:
    """function name -> the checksum the stub prints for its cubin, read from the generated .c."""
    out = {}
    for path in folder.glob(pattern):
        text = path.read_text()
        name = re.search(r"static const unsigned char (\w+)_cubin\[", text).group(1)
        body = text.split(f"{name}_cubin[", 1)[1].split("};", 1)[0].split("{", 1)[1]
        data = bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", body))
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3a)
        data = data[:shoff + shentsize * shnum]  # what the stub reads of the image: the ELF its header spans
        h = 1469598103934665603
        for b in data:
            h = ((h ^ b) * 1099511628211) % (1 << 64)
        out[name] = f"{h:016x}"
    return out


def _build_and_run(folder: Path, main: str, libcuda: str = "stub") -> str:
    """The .c files in `folder` and `main` built into one program (against the stub or the real
    libcuda) and run; its output."""
    _write(folder, {"main.c": main})
    sources = [str(p) for p in folder.glob("*.c") if p.name != "stub.c"]
    command = [CC, "-Wall", "-Wextra", "-Werror", "-I", include_dirs()[0], *sources, "-o", "program"]
    if libcuda == "stub":
        _write(folder, {"stub.c": STUB})
        command.insert(-2, str(folder / "stub.c"))
    else:
        command[-2:-2] = [flag for d in library_dirs() for flag in ("-L", d)] + ["-lcuda"]
    built = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run(["./program"], cwd=folder, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout


def _matmul_signature(block, hints):
    ha, hb = hints
    return (f"*fp32:16, *fp16:16, *fp16:16, i32, i32, i32, i32:16, i32:1, i32{ha}, i32:1, i32{hb}, i32:1, "
            f"{block[0]}, {block[1]}, {block[2]}")


def _compile_matmuls(folder, blocks, hints, target="cuda:90:32"):
    _write(folder, {"kernel.py": MATMUL, "kernel_utils.py": UTILS})
    for block in blocks:
        for hint in hints:
            argv = ["kernel.py", "-n", "kernel", "-s", _matmul_signature(block, hint), "-on", "matmul_fp16",
                    "-o", "matmul_fp16", "-w", "4", "-g", f"M/{block[0]}, N/BLOCK_N, 1"]
            _compile(folder, *argv, *(["-t", target] if target else []))
    aot_link.main([str(p) for p in sorted(folder.glob("matmul_fp16.*.h"))] + ["-o", str(folder / "kernel")])


MATMUL_MAIN = r'''
#include <stdio.h>
#include "kernel.h"
extern const char *stub_sizes;

int main(void) {
    stub_sizes = "888444444";
    printf("algos %d\n", matmul_fp16_get_num_algos());
    printf("result %d\n", (int)matmul_fp16_default(NULL, 0x1000, 0x2000, 0x3000, 64, 128, 32, 128, 1, 32, 1, 128, 1));
    printf("result %d\n", (int)matmul_fp16(NULL, 0x1000, 0x2000, 0x3000, 64, 128, 32, 128, 1, 32, 1, 128, 1, 1));
    /* A's rows not a multiple of 16 apart; C's columns strided; C unaligned; no algorithm 2; an empty grid */
    printf("result %d\n", (int)matmul_fp16(NULL, 0x1000, 0x2000, 0x3000, 64, 128, 32, 128, 1, 33, 1, 128, 1, 1));
    printf("result %d\n", (int)matmul_fp16(NULL, 0x1000, 0x2000, 0x3000, 64, 128, 32, 128, 2, 32, 1, 128, 1, 1));
    printf("result %d\n", (int)matmul_fp16(NULL, 0x1008, 0x2000, 0x3000, 64, 128, 32, 128, 1, 32, 1, 128, 1, 0));
    printf("result %d\n", (int)matmul_fp16(NULL, 0x1000, 0x2000, 0x3000, 64, 128, 32, 128, 1, 32, 1, 128, 1, 2));
    printf("result %d\n", (int)matmul_fp16(NULL, 0x1000, 0x2000, 0x3000, 0, 128, 32, 128, 1, 32, 1, 128, 1, 0));
    unload_matmul_fp16();
    return 0;
}
'''


@needs_c
def test_compiled_and_linked_kernels_dispatch_by_their_hints_and_launch_with_their_own_arguments(tmp_path):
    blocks = [(64, 64, 32), (32, 64, 32)]
    _compile_matmuls(tmp_path, blocks, [(":16", ":16"), ("", ":16")])
    cubins = _cubins(tmp_path, "matmul_fp16.*.c")
    assert len(cubins) == 4
    out = _build_and_run(tmp_path, MATMUL_MAIN).splitlines()
    assert out[0] == "algos 2"
    functions = {}  # module number -> function name, from the checksums
    for line in out:
        if line.startswith("load "):
            _, number, checksum = line.split()
            [name] = [n for n, h in cubins.items() if h == checksum]
            functions[number] = name
    launches = [line for line in out if line.startswith(("launch", "result"))]
    header = (tmp_path / "kernel.h").read_text()
    first_m = int(re.search(r"CUresult matmul_fp16_(\d+)x", header).group(1))  # the headers' order: their hashes
    params = "params 1000 2000 3000 40 80 20 80 20 80"  # C, A, B, M, N, K and the strides not specialized to 1
    assert launches[:2] == [f"launch 1 grid {64 // first_m} 2 1 block 128 1 1 shared "
                            f"{_shared(tmp_path, functions['1'])} {params}", "result 0"]
    assert functions["1"].endswith("_0d1d2d6d7c8d9c10d11c")  # every hint holds: the most specialized compile
    assert launches[2].startswith(f"launch 2 grid {64 // (96 - first_m)} 2 1 block 128 1 1")  # 64 + 32 = 96
    assert functions["2"].endswith("_0d1d2d6d7c8d9c10d11c")
    assert launches[4].endswith("params 1000 2000 3000 40 80 20 80 21 80")
    assert functions["3"].endswith("_0d1d2d6d7c9c10d11c")  # A's row stride 33: the compile without its hint
    assert launches[3] == launches[5] == "result 0"
    assert launches[6:] == ["result 1", "result 1", "result 1", "result 0"]
    assert out[-3:] == ["unload 1", "unload 2", "unload 3"]  # the algorithms in order, each's compiles


def _shared(folder: Path, function: str) -> int:
    text = (folder / f"{function.replace('matmul_fp16_', 'matmul_fp16.', 1)}.c").read_text()
    return int(re.search(r"cuLaunchKernel\(\w+, gX, gY, gZ, \d+, 1, 1, (\d+),", text).group(1))


SCALE_MAIN = r'''
#include <stdio.h>
#include "scale.h"
extern const char *stub_sizes;

int main(void) {
    stub_sizes = "88424";
    printf("result %d\n", (int)scale_default(NULL, 0x1000, 0x2000, 1.5f, 0.1f, 1000));
    return 0;
}
'''


@needs_c
def test_float_scalars_reach_the_kernel_as_it_reads_them(tmp_path):
    _write(tmp_path, {"k.py": SCALE})
    _compile(tmp_path, "k.py", "-n", "scale", "-s", "*fp32:16, *fp32:16, fp32, fp16, i32, 256", "-g",
             "(n + BLOCK - 1) / BLOCK, 1, 1", "-w", "4", "-t", "sm_80")
    aot_link.main([str(p) for p in tmp_path.glob("scale.*.h")] + ["-o", str(tmp_path / "scale")])
    source = next(tmp_path.glob("scale.*.c")).read_text()
    assert "float alpha, float beta, int32_t n" in source
    out = _build_and_run(tmp_path, SCALE_MAIN)
    beta = int(np.float32(0.1).astype(np.float16).view(np.uint16))  # rounded to nearest: 0x2e66
    alpha = int(np.float32(1.5).view(np.uint32))
    assert f"launch 1 grid 4 1 1 block 128 1 1 shared 0 params 1000 2000 {alpha:x} {beta:x} 3e8\nresult 0" in out


ROUNDING_MAIN = r'''
#include <stdint.h>
#include <stdio.h>
#include <string.h>
''' + "".join(aot.HALF_ROUNDING_SOURCE.values()) + r'''
int main(void) {
    uint32_t bits;
    float value;
    while (scanf("%x", &bits) == 1) {
        memcpy(&value, &bits, sizeof value);
        printf("%04x %04x\n", kiln_fp16_bits(value), kiln_bf16_bits(value));
    }
    return 0;
}
'''


@needs_c
def test_half_rounding_matches_numpy_and_torch(tmp_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    special = [0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0x477fe000, 0x477ff000, 0x477fefff,
               0x47800000, 0x38800000, 0x387fffff, 0x33000000, 0x33000001, 0x337fffff, 0x32ffffff, 0x3f801000,
               0x3f803000, 0x3f808000, 0x3f818000, 0x00000001, 0x7f7fffff]
    bits = np.concatenate([np.array(special, dtype=np.uint32), rng.integers(0, 1 << 32, 4000, dtype=np.uint32),
                           (rng.integers(0x33000000, 0x47900000, 4000, dtype=np.uint32))])
    _write(tmp_path, {"r.c": ROUNDING_MAIN})
    built = subprocess.run([CC, "-Wall", "-Werror", "r.c", "-o", "r"], cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run(["./r"], cwd=tmp_path, input="\n".join(f"{b:x}" for b in bits), capture_output=True,
                         text=True)
    got = np.array([[int(x, 16) for x in line.split()] for line in ran.stdout.splitlines()], dtype=np.uint16)
    values = bits.view(np.float32)
    with np.errstate(over="ignore"):
        fp16 = values.astype(np.float16).view(np.uint16)
    bf16 = torch.from_numpy(values.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(values)
    assert np.array_equal(got[~nan, 0], fp16[~nan])
    assert np.array_equal(got[~nan, 1], bf16[~nan])
    assert np.isnan(got[nan, 0].view(np.float16)).all()
    assert np.isnan(torch.from_numpy(got[nan, 1].view(np.int16)).view(torch.bfloat16).float().numpy()).all()


def test_the_linker_refuses_a_header_it_did_not_write(tmp_path):
    good = aot.AotKernel("k", "0123abcd", "0d", "16_warps4xstages3", (aot.AotArg("CUdeviceptr", "X", 16),)).line()
    assert aot.read_header(good)[0].function == "k_0123abcd_0d"
    bad = [good.replace('"CUdeviceptr"', '"char *"'), good.replace('"X"', '"X; exit(1)"'),
           good.replace("16]]", "8]]"), good.replace('"0123abcd"', '"zz"'), good[:-3], aot.MARK + "[]"]
    for line in bad:
        (tmp_path / "k.h").write_text(line + "\n")
        with pytest.raises(aot.AotError, match="k.h:1"):
            aot_link.link([tmp_path / "k.h"], tmp_path / "out")
    (tmp_path / "k.h").write_text("// no line of kiln's\n")
    with pytest.raises(aot.AotError, match="no kiln-aot line"):
        aot_link.link([tmp_path / "k.h"], tmp_path / "out")
    other = aot.AotKernel("k", "0123abce", "", "32_warps4xstages3", (aot.AotArg("int32_t", "X"),)).line()
    (tmp_path / "k.h").write_text(good + "\n" + other + "\n")
    with pytest.raises(aot.AotError, match="differ in their arguments"):
        aot_link.link([tmp_path / "k.h"], tmp_path / "out")


@pytest.mark.parametrize("signature, grid, message", [
    ("*fp32:8, *fp32, fp32, fp16, i32, 256", "1, 1, 1", "the hints are 1 and 16"),
    ("*fp32:1, *fp32, fp32, fp16, i32, 256", "1, 1, 1", "only an integer"),
    ("*fp32, *fp32, fp32:16, fp16, i32, 256", "1, 1, 1", "a float has no divisibility"),
    ("*fp32, *fp32, float, fp16, i32, 256", "1, 1, 1", "neither a type"),
    ("*fp32, *fp32, fp32, fp16, i32, 256, 7", "1, 1, 1", "7 entries"),
    ("*fp32, *fp32, fp32, fp16, i32, 256", "n / 256, 1", "not three"),
    ("*fp32, *fp32, fp32, fp16, i32, 256", "m / 256, 1, 1", "names 'm'"),
    ("*fp32, *fp32, fp32, fp16, i32, 256", "n; exit(1), 1, 1", "unexpected"),
])
def test_a_signature_or_grid_it_cannot_take_is_a_clear_error(tmp_path, signature, grid, message):
    _write(tmp_path, {"k.py": SCALE})
    run = subprocess.run([sys.executable, "-m", "kiln.tools.compile", "k.py", "-n", "scale", "-s", signature, "-g", grid,
                          "-t", "sm_90a"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "KILN_DAEMON": "off"})
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and not list(tmp_path.glob("scale.*"))


def test_a_file_without_the_kernel_and_a_target_it_does_not_know_are_errors(tmp_path):
    # in this process `import triton` is not kiln (the command line makes it so): the file imports kiln
    _write(tmp_path, {"k.py": SCALE.replace("import triton\n", "import kiln as triton\n")
                      .replace("import triton.language as tl", "import kiln.language as tl")})
    for name, target, message in (("nothing", "sm_90a", "no kiln @jit function 'nothing'"),
                                  ("scale", "hip:gfx942:64", "kiln compiles for cuda")):
        with pytest.raises(aot.AotError, match=message):
            aot_compile.compile_kernel(aot_compile.CompileArgs(
                path=str(tmp_path / "k.py"), kernel_name=name, signature="*fp32, *fp32, fp32, fp16, i32, 256",
                grid="1, 1, 1", target=target, out_path=tmp_path / "scale"))


def test_the_drop_in_offers_the_tools_where_upstream_looks_for_them():
    code = ("import os, triton, triton.tools\n"
            "from triton.backends.nvidia.driver import CudaDriver, include_dirs, library_dirs\n"
            "folder = triton.tools.__path__[0]\n"
            "print(os.path.isfile(os.path.join(folder, 'compile.py')), os.path.isfile(os.path.join(folder, 'link.py')))\n"
            "print(isinstance(include_dirs, list), isinstance(library_dirs(), list))\n"
            "print(CudaDriver.map_python_to_cpp_type('*fp16'), CudaDriver.map_python_to_cpp_type('fp32'))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "KILN_DROPIN": "1"})
    assert run.stdout.split() == ["True", "True", "True", "True", "CUdeviceptr", "float"], run.stderr


def test_cuda_h_is_looked_for_in_cuda_home_first(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda.h").write_text("")
    assert include_dirs([], {"CUDA_HOME": str(tmp_path)})[0] == str(tmp_path / "include")
    (tmp_path / "stubs").mkdir()
    (tmp_path / "stubs" / "libcuda.so").write_text("")
    assert str(tmp_path / "stubs") in library_dirs({"TRITON_LIBCUDA_PATH": str(tmp_path / "stubs")})


GPU_MAIN = r'''
#include <stdio.h>
#include <stdlib.h>
#include "kernel.h"

int main(void) {{
    enum {{ M = {m}, N = {n}, K = {k} }};
    static uint16_t a[M * K], b[K * N];
    static float c[M * N];
    CUdevice device;
    CUcontext context;
    CUdeviceptr da, db, dc;
    FILE *f = fopen("inputs.bin", "rb");
    if (!f || fread(a, 2, M * K, f) != (size_t)(M * K) || fread(b, 2, K * N, f) != (size_t)(K * N)) return 3;
    fclose(f);
    if (cuInit(0) || cuDeviceGet(&device, 0) || cuDevicePrimaryCtxRetain(&context, device) || cuCtxSetCurrent(context))
        return 4;
    cuMemAlloc(&da, sizeof a); cuMemAlloc(&db, sizeof b); cuMemAlloc(&dc, sizeof c);
    cuMemcpyHtoD(da, a, sizeof a); cuMemcpyHtoD(db, b, sizeof b);
    for (int algo = 0; algo < matmul_fp16_get_num_algos(); algo++) {{
        char name[32];
        CUresult r = matmul_fp16(NULL, dc, da, db, M, N, K, N, 1, K, 1, N, 1, algo);
        if (r || cuCtxSynchronize()) {{ fprintf(stderr, "algo %d: %d\n", algo, (int)r); return 5; }}
        cuMemcpyDtoH(c, dc, sizeof c);
        snprintf(name, sizeof name, "out%d.bin", algo);
        f = fopen(name, "wb");
        fwrite(c, 4, M * N, f);
        fclose(f);
    }}
    printf("unaligned %d\n", (int)matmul_fp16(NULL, dc, da, db, M, N, K, N, 1, K + 1, 1, N, 1, 0));
    unload_matmul_fp16();
    return 0;
}}
'''


@needs_c
def test_the_gpu_tests_program_compiles(tmp_path):
    """The C of the GPU test below, compiled here (no libcuda to link or GPU to run it on)."""
    _compile_matmuls(tmp_path, [(64, 64, 32)], [(":16", ":16")])
    _write(tmp_path, {"main.c": GPU_MAIN.format(m=64, n=128, k=96)})
    sources = [str(p) for p in tmp_path.glob("*.c")]
    built = subprocess.run([CC, "-Wall", "-Wextra", "-Werror", "-I", include_dirs()[0], "-c", *sources],
                           cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


@pytest.mark.gpu
@needs_c
def test_ahead_of_time_matmuls_run_on_the_gpu(tmp_path, cuda_torch):
    if not library_dirs():
        pytest.skip("no libcuda to link against")
    m, n, k = 64, 128, 96
    _compile_matmuls(tmp_path, [(64, 64, 32), (32, 64, 32)], [(":16", ":16")], target=None)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    (tmp_path / "inputs.bin").write_bytes(a.tobytes() + b.tobytes())
    out = _build_and_run(tmp_path, GPU_MAIN.format(m=m, n=n, k=k), libcuda="real")
    assert "unaligned 1" in out  # K + 1 is no multiple of 16: no compile takes it
    expected = a.astype(np.float32) @ b.astype(np.float32)
    for algo in (0, 1):
        got = np.frombuffer((tmp_path / f"out{algo}.bin").read_bytes(), dtype=np.float32).reshape(m, n)
        np.testing.assert_allclose(got, expected * expected, rtol=2e-3, atol=1e-2)
