"""kiln's cubins in Triton's cache layout, for PyTorch Inductor's static launcher and Triton bundler
(kiln.dropin.triton_files, gated by kiln.dropin.static_abi).

A CUDA `triton.compile` leaves `<name>.cubin`, `<name>.json` and `__grp__<name>.json` in
`$TRITON_CACHE_DIR/<key>/` — the path Inductor computes — only when the static launcher would pass
exactly what kiln's cubin reads; a kernel whose ABI differs gets no cubin there. On the CPU the
checks run against Inductor's own code: its path functions, `can_statically_launch`, the launcher's
argument list and its `run` (up to the driver call), and the bundler's save and restore; the bytes
the kernel would read from the launcher's argument slots are compared with those kiln's launcher
passes. The GPU test runs torch.compile cold and warm with the static launcher."""
import ctypes
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln.language as tl
from kiln.daemon import tiers
from kiln.dropin import compile as dropin_compile
from kiln.dropin import static_abi, triton_files
from kiln.dropin.compile import ASTSource, compile
from kiln.dropin.file_cache import _base32
from kiln.dropin.jit import jit
from kiln.runtime import GPUTarget

CUDA = GPUTarget("cuda", 90, 32)


@jit
def scaled(x_ptr, out_ptr, n, scale, flag, offset, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x_ptr + offs, mask=mask) * scale + offset.to(tl.float32)
    tl.store(out_ptr + offs, tl.where(flag, value, 0.0), mask=mask)


SCALED = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "scale": "fp32", "flag": "i1", "offset": "i64",
          "BLOCK": "constexpr"}


@jit
def narrow(x_ptr, a, b, c, d, e, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, (a.to(tl.float64) + b + c + d + e).to(tl.float32))


NARROW = {"x_ptr": "*fp32", "a": "i8", "b": "u16", "c": "u32", "d": "u64", "e": "fp64", "BLOCK": "constexpr"}


@jit
def with_default(x_ptr, n, extra=3, BLOCK: tl.constexpr = 64):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, extra + n, mask=offs < n)


@jit
def from_descriptor(desc, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    tile = desc.load([0, 0])
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offs, tile)


def compile_scaled(num_warps=4):
    return compile(ASTSource(scaled, SCALED, {"BLOCK": 64}), target=CUDA, options={"num_warps": num_warps})


def compile_cases() -> dict:
    """The kernels the torch-side test compiles in a drop-in process: name -> CompiledKernel."""
    return {"scaled": compile_scaled(),
            "narrow": compile(ASTSource(narrow, NARROW, {"BLOCK": 32}), target=CUDA),
            # `extra` is left to its default: kiln takes it at run time, the launcher would not pass it
            "with_default": compile(ASTSource(with_default, {"x_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"},
                                              {"BLOCK": 64}), target=CUDA),
            "descriptor": descriptor_kernel()}


def descriptor_kernel():
    """A host TensorDescriptor kernel as Inductor would declare it: kiln takes the descriptor as
    its 2-D pieces and a 128-byte tensormap it encodes at launch."""
    from kiln.tools.tensor_descriptor import TensorDescriptor
    x, out = np.zeros((64, 64), np.float16), np.zeros((32, 32), np.float16)
    built = from_descriptor.warmup(TensorDescriptor(x, [64, 64], [64, 1], [32, 32]), out, BM=32, BN=32, grid=(1,),
                                   target="sm_90a")
    src = ASTSource(from_descriptor, {"desc": "tensordesc<fp16[32, 32]>", "out_ptr": "*fp16", "BM": "constexpr",
                                      "BN": "constexpr"}, {"BM": 32, "BN": 32})
    options = dropin_compile.make_backend(CUDA).parse_options({})
    kernel = dropin_compile._compiled(src, CUDA, options, built.asm["kir"], built.binaries["sm_90a"], [0, 1], False,
                                      [str(t) for t in built.arg_types], 4, 3, None)
    return dropin_compile._published(kernel)


@pytest.fixture
def triton_dir(tmp_path, monkeypatch):
    """TRITON_CACHE_DIR (Inductor sets it before compiling) and a fresh node cache."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln"))
    monkeypatch.setattr(tiers, "_state", tiers._State())
    monkeypatch.setattr(static_abi, "driver_version", lambda: None)  # a CPU machine: no driver to compare
    return tmp_path / "triton"


def layout(kernel, root):
    return root / _base32(kernel.hash)


def test_a_kernel_the_launcher_takes_leaves_tritons_layout(triton_dir):
    kernel = compile_scaled()
    assert static_abi.refusal(kernel) is None
    directory = layout(kernel, triton_dir)
    assert sorted(os.listdir(directory)) == ["__grp__scaled.json", "scaled.cubin", "scaled.json"]
    assert (directory / "scaled.cubin").read_bytes() == kernel.asm["cubin"]
    group = json.loads((directory / "__grp__scaled.json").read_text())
    assert group == {"child_paths": {"scaled.cubin": str(directory / "scaled.cubin"),
                                     "scaled.json": str(directory / "scaled.json")}}
    meta = json.loads((directory / "scaled.json").read_text())
    assert (meta["name"], meta["hash"], meta["num_warps"], meta["shared"]) == ("scaled", kernel.hash, 4, kernel.shared)
    assert not [f for f in os.listdir(directory) if ".tmp." in f]


def test_each_config_gets_its_own_directory(triton_dir):
    # Triton's hash covers the options; a shared directory would launch one config's cubin for another's
    two, four = compile_scaled(num_warps=2), compile_scaled(num_warps=4)
    assert two.hash != four.hash
    assert (layout(two, triton_dir) / "scaled.cubin").read_bytes() == two.asm["cubin"]
    assert (layout(four, triton_dir) / "scaled.cubin").read_bytes() == four.asm["cubin"]
    assert two.asm["cubin"] != four.asm["cubin"]


def test_a_warm_hit_rewrites_missing_or_changed_files(triton_dir, monkeypatch):
    import kiln.compiler
    cold = compile_scaled()
    cubin = layout(cold, triton_dir) / "scaled.cubin"
    cubin.unlink()
    (layout(cold, triton_dir) / "scaled.json").unlink()
    built = []
    monkeypatch.setattr(kiln.compiler, "build_kernel", lambda *a, **k: built.append(a) or None)
    warm = compile_scaled()  # from its source key: no IR built
    assert built == [] and warm.hash == cold.hash
    assert cubin.read_bytes() == cold.asm["cubin"] and (layout(cold, triton_dir) / "scaled.json").exists()
    cubin.write_bytes(b"not this kernel")
    compile_scaled()
    assert cubin.read_bytes() == cold.asm["cubin"]


def test_no_triton_cache_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln"))
    monkeypatch.setattr(tiers, "_state", tiers._State())
    assert triton_files.kernel_dir(compile_scaled()) is None


def test_an_unwritable_directory_never_fails_the_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(blocker))  # a file: no directory can be made under it
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln"))
    monkeypatch.setattr(tiers, "_state", tiers._State())
    kernel = compile_scaled()
    assert kernel.asm["cubin"] and triton_files.publish(kernel) is None


def test_a_parameter_kiln_takes_but_the_launcher_would_not_pass_gets_no_cubin(triton_dir):
    kernel = compile_cases()["with_default"]
    assert kernel.runtime_positions == (0, 1, 2)
    assert "given parameters [0, 1, 2] but types [0, 1]" in static_abi.refusal(kernel)
    assert not layout(kernel, triton_dir).exists()


def test_a_host_tensor_descriptor_kernel_gets_no_cubin(triton_dir):
    kernel = descriptor_kernel()
    assert "tensordesc" in static_abi.refusal(kernel)
    assert not layout(kernel, triton_dir).exists()
    # declared as a plain pointer, the launcher would pass one value; kiln's cubin reads six
    kernel.src.signature["desc"] = "*fp16"
    assert "kiln passes" in static_abi.refusal(kernel)
    name, params, _ = static_abi.ptx_entry(kernel.asm["ptx"])
    assert name == "from_descriptor" and ("bytes", 128) in params and len(params) == 7


def _replace_ptx(kernel, old, new):
    assert old in kernel.binary.ptx
    kernel.binary.ptx = kernel.binary.ptx.replace(old, new)


DIFFERENCES = {
    "a wider scalar": lambda k: _replace_ptx(k, ".param .u32 scaled_param_2", ".param .u64 scaled_param_2"),
    "an int read as a float": lambda k: _replace_ptx(k, ".param .u32 scaled_param_2", ".param .f32 scaled_param_2"),
    "a tensormap parameter": lambda k: _replace_ptx(k, ".param .u32 scaled_param_2",
                                                    ".param .align 64 .b8 scaled_param_2[128]"),
    "one parameter more": lambda k: _replace_ptx(k, ".param .u64 scaled_param_5", ".param .u64 scaled_param_5,\n\t"
                                                 ".param .u64 scaled_param_6"),
    "another entry name": lambda k: _replace_ptx(k, ".entry scaled(", ".entry scaled_1("),
    "a smaller block": lambda k: _replace_ptx(k, ".maxntid 128", ".maxntid 64"),
    "a cluster kernel": lambda k: _replace_ptx(k, ".maxntid 128", ".maxntid 128\n.reqnctapercluster 2, 1, 1"),
    "other runtime positions": lambda k: setattr(k, "runtime_positions", (0, 1, 2, 3, 5, 4)),
    "a tuple parameter kiln expands": lambda k: setattr(k, "arg_types", k.arg_types + ("int32",)),
    "a type the launcher lacks": lambda k: k.src.signature.update(n="nvTmaDesc"),
    "more shared memory than the launcher allows": lambda k: _set_shared(k, 232448),
    "shared memory the launcher would not pass": lambda k: setattr(k, "metadata", k.metadata._replace(shared=1024)),
    "other num_warps": lambda k: setattr(k, "metadata", k.metadata._replace(num_warps=8)),
    "programmatic dependent launch": lambda k: setattr(k, "metadata", k.metadata._replace(launch_pdl=True)),
    "scratch memory": lambda k: setattr(k, "metadata", k.metadata._replace(global_scratch_size=64)),
    "two CTAs": lambda k: setattr(k, "metadata", k.metadata._replace(num_ctas=2)),
    "global scratch for maps the kernel makes": lambda k: k.binary.metadata.update(
        args=[*k.binary.metadata["args"][:-1], dict(k.binary.metadata["args"][-1], global_scratch="128")]),
    "a driver older than nvJitLink": lambda k: setattr(static_abi, "driver_version", lambda: 12080),
}


def _set_shared(kernel, shared):
    kernel.binary.metadata["shared"] = shared
    kernel.metadata = kernel.metadata._replace(shared=shared)
    kernel.shared = shared


@pytest.mark.parametrize("difference", list(DIFFERENCES))
def test_any_difference_from_kilns_launch_refuses_and_removes_the_cubin(triton_dir, monkeypatch, difference):
    import copy
    kernel = compile_scaled()
    cubin = layout(kernel, triton_dir) / "scaled.cubin"
    assert cubin.exists()
    kernel.binary = copy.deepcopy(kernel.binary)  # the memory tier's object stays as it was
    kernel.src = copy.copy(kernel.src)
    kernel.src.signature = dict(kernel.src.signature)
    monkeypatch.setattr(static_abi, "_nvjitlink_major", lambda: 13)
    DIFFERENCES[difference](kernel)
    assert static_abi.refusal(kernel) is not None
    assert triton_files.publish(kernel) is None
    assert not cubin.exists()  # Inductor must not find a cubin for a kernel it would launch wrongly


def test_the_i1_relaxation_is_only_for_i1():
    assert static_abi._reads_the_same("i1", ("int", 4), ("int", 1))
    assert not static_abi._reads_the_same("i32", ("int", 4), ("int", 1))
    assert not static_abi._reads_the_same("i1", ("int", 4), ("int", 2))


# --- against Inductor's own code (PyTorch's CPU build, in a drop-in process) --------------------

JOB = textwrap.dedent("""
    import importlib.util, json, os, shutil, sys
    import torch
    import triton
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config
    from torch._inductor.runtime.hints import HeuristicType
    from torch._inductor.runtime.runtime_utils import triton_cache_dir, triton_hash_to_path_key
    from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
    from torch._inductor.runtime.triton_heuristics import StaticTritonCompileResult
    from torch._inductor.triton_bundler import TritonBundler
    from kiln.dropin import static_abi, triton_files

    spec = importlib.util.spec_from_file_location("cases", sys.argv[1])
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    values = json.loads(sys.argv[2])


    class Driverless:  # what the launcher hands the driver, instead of launching
        launches = []

        @staticmethod
        def _launch_kernel(function, gx, gy, gz, num_warps, shared, arg_tys, args, stream):
            Driverless.launches.append({"num_warps": num_warps, "shared": shared, "arg_tys": arg_tys,
                                        "args": list(args)})


    out = {"triton": triton.__name__, "type_mappings": StaticallyLaunchedCudaKernel.type_mappings()}
    kernels = cases.compile_cases()
    for name, kernel in kernels.items():
        cubin = os.path.join(triton_cache_dir(0), triton_hash_to_path_key(kernel.hash), kernel.src.fn.__name__ + ".cubin")
        static = StaticTritonCompileResult.can_statically_launch(
            kernel, {}, {"device_type": "cuda", "device": 0}, HeuristicType.POINTWISE)
        found = {"cubin": cubin, "exists": os.path.exists(cubin), "kiln_dir": triton_files.kernel_dir(kernel),
                 "hash": kernel.hash, "static": static is not None}
        if static is not None:
            static.__dict__["C_impl"] = Driverless
            static.function = 1
            static.run(1, 1, 1, 0, *values[name])
            found.update(launch=Driverless.launches.pop(), cubin_raw_is_kilns=static.cubin_raw == kernel.asm["cubin"],
                         name=static.name, params=static_abi.ptx_entry(kernel.asm["ptx"])[1],
                         arg_types=list(kernel.arg_types), kiln_launch=[kernel.binary.metadata["num_warps"],
                                                                         kernel.binary.metadata["shared"]])
        out[name] = found

    inductor_config.bundle_triton_into_fx_graph_cache = True
    TritonBundler.begin_compile()
    TritonBundler.put(triton_hash_to_path_key(kernels["scaled"].hash), 0)
    bundle, meta = TritonBundler.collect()
    directory = os.path.dirname(out["scaled"]["cubin"])
    before = {f: open(os.path.join(directory, f), "rb").read() for f in os.listdir(directory)}
    shutil.rmtree(directory)
    TritonBundler.read_and_emit(bundle)
    after = {f: open(os.path.join(directory, f), "rb").read() for f in os.listdir(directory)}
    out["bundle"] = {"saved": counters["inductor"]["triton_bundler_save_kernel"], "names": meta.cached_kernel_names,
                     "restored_same": before == after, "files": sorted(after)}
    print(json.dumps(out))
""")

# the launcher's C++ packer: what it writes for each of its type letters (kind, bytes, struct format)
PACKED = {"b": ("int", 1, "<b"), "h": ("int", 2, "<h"), "i": ("int", 4, "<i"), "l": ("int", 8, "<q"),
          "B": ("int", 1, "<B"), "H": ("int", 2, "<H"), "I": ("int", 4, "<I"), "K": ("int", 8, "<Q"),
          "f": ("float", 4, "<f"), "d": ("float", 8, "<d"), "O": ("ptr", 8, "<Q")}
VALUES = {"scaled": [0x7F0012345600, 0x7F0012349A00, 1000, 0.5, True, -3],
          "narrow": [0x7F00ABCD0000, -5, 65535, 4000000000, 2 ** 63 + 7, 1.25]}


@pytest.fixture(scope="module")
def inductor_view(tmp_path_factory):
    """What Inductor's code makes of the test's kernels, in a drop-in process."""
    pytest.importorskip("torch")
    from kiln.dropin import doctor, hook
    if doctor.installed_hook() is None:
        pytest.skip("kiln's drop-in hook is not installed here: reinstall with pip install -e .")
    tmp = tmp_path_factory.mktemp("inductor")
    script = tmp / "job.py"
    script.write_text(JOB)
    env = {**os.environ, hook.ENV: "1", "TRITON_CACHE_DIR": str(tmp / "triton"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "KILN_CACHE_DIR": str(tmp / "kiln")}
    out = subprocess.run([sys.executable, str(script), __file__, json.dumps(VALUES)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_inductor_finds_the_cubin_where_kiln_left_it(inductor_view):
    assert inductor_view["triton"] == "kiln.dropin.facade"
    for name in ("scaled", "narrow"):
        found = inductor_view[name]
        assert found["exists"] and found["static"], found
        assert os.path.dirname(found["cubin"]) == found["kiln_dir"]
        assert found["cubin_raw_is_kilns"] and found["name"] == name


def test_inductor_bypasses_the_static_launcher_for_kernels_kiln_refuses(inductor_view):
    for name in ("with_default", "descriptor"):
        found = inductor_view[name]
        assert not found["exists"] and not found["static"], found  # "Cubin path not found": kiln's launcher


def test_kilns_launcher_value_table_is_the_launchers(inductor_view):
    mappings = inductor_view["type_mappings"]
    assert set(mappings) == set(static_abi.LAUNCHER_VALUES)
    for ty, letter in mappings.items():
        assert PACKED[letter][:2] == static_abi.LAUNCHER_VALUES[ty], ty


@pytest.mark.parametrize("name", ["scaled", "narrow"])
def test_the_kernel_reads_the_same_bytes_from_either_launcher(inductor_view, monkeypatch, name):
    """The launcher's argument slots (as its C++ packer fills them, from the letters and values its
    `run` hands the driver) and kiln's launcher's, read at the widths of the kernel's .param list."""
    from kiln.ir.types import parse_type
    from kiln.runtime import launcher as kiln_launcher
    found = inductor_view[name]
    launch, params, (num_warps, shared) = found["launch"], [tuple(p) for p in found["params"]], found["kiln_launch"]
    assert (launch["num_warps"], launch["shared"]) == (num_warps, shared)

    slots = []
    for letter, value in zip(launch["arg_tys"], launch["args"]):
        slots.append(struct.pack(PACKED[letter][2], 0 if value is None else value).ljust(8, b"\0"))
    # past the kernel's parameters: the scratch pointers, null, which the driver does not read
    assert len(slots) == len(params) + 2 and launch["args"][len(params):] == [None, None]
    launcher_reads = [slot[:size] for slot, (_, size) in zip(slots, params)]

    seen = []

    def cu_launch(handle, gx, gy, gz, bx, by, bz, shared, stream, param_array, extra):
        pointers = (ctypes.c_void_p * len(params)).from_address(param_array)
        seen.append((bx, shared, [ctypes.string_at(pointers[i], size) for i, (_, size) in enumerate(params)]))
        return 0
    monkeypatch.setattr(kiln_launcher, "_cu_launch_kernel", lambda: cu_launch)
    run = kiln_launcher.make_launcher(type("Loaded", (), {"handle": 1})(), [parse_type(t) for t in found["arg_types"]],
                                      num_warps, shared, name)
    run((1, 1, 1), VALUES[name], 0)
    assert seen[0][:2] == (32 * launch["num_warps"], launch["shared"])
    assert seen[0][2] == launcher_reads


def test_the_bundler_saves_and_restores_kilns_files(inductor_view):
    bundle = inductor_view["bundle"]
    assert bundle["saved"] == 3 and bundle["names"] == ["scaled"]
    assert bundle["restored_same"] and bundle["files"] == ["__grp__scaled.json", "scaled.cubin", "scaled.json"]


# --- on a GPU: torch.compile with the static launcher, cold and warm ----------------------------

GPU_PREAMBLE = textwrap.dedent("""
    import json
    import torch
    import triton
    from torch._dynamo.utils import counters

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
""")
GPU_RUN = textwrap.dedent("""
    model = MLP(256, 1024).cuda()
    x = torch.randn(512, 256, device="cuda")
    eager = step(model, x)
    compiled = step(torch.compile(model), x)
    torch.cuda.synchronize()
    gap = max(float((a - b).abs().max() / max(1.0, float(b.abs().max()))) for a, b in zip(compiled, eager))
    print(json.dumps({"triton": triton.__name__, "gap": gap, "counters": dict(counters["inductor"])}))
""")


@pytest.mark.gpu
def test_torch_compile_launches_kilns_cubins_statically_cold_and_warm(tmp_path):
    from dropin_jobs import MLP_AND_STEP, run_on_gpu  # here: this file's CPU job scripts import it without tests/
    runs = run_on_gpu(tmp_path, GPU_PREAMBLE + MLP_AND_STEP + GPU_RUN, runs=2, timeout=600)  # cold, then warm
    cold, warm = runs
    assert cold["triton"] == "kiln.dropin.facade"
    assert cold["gap"] <= 1e-4 and warm["gap"] <= 1e-4, (cold["gap"], warm["gap"])
    assert cold["counters"].get("triton_bundler_save_kernel", 0) > 0, cold["counters"]
    assert warm["counters"].get("triton_bundler_load_static_autotuner", 0) > 0, warm["counters"]
