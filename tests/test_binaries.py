"""A kernel's binary on a first call: compiled once, then read from the node cache."""
import numpy as np

import kiln
import kiln.language as tl
from kiln.compiler import compile_binary


@kiln.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def test_a_second_build_reads_the_node_cache(tmp_path, monkeypatch):
    import kiln.daemon.tiers as tiers
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiers, "_state", tiers._State())  # a fresh process's view of the cache
    x = np.zeros(64, np.float32)
    kernel = copy_kernel.warmup(x, x, 64, BLOCK=64)
    first = compile_binary(kernel.ir, "sm_80", kernel.options)
    second = compile_binary(kernel.ir, "sm_80", kernel.options)
    assert (first.source, second.source) == ("local", "cache")
    assert first.cubin == second.cubin and first.ptx == second.ptx
    assert second.metadata["num_warps"] == 4
    assert compile_binary(kernel.ir, "sm_80", dict(kernel.options, num_warps=8)).source == "local"


def test_build_fills_asm_and_metadata(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    x = np.zeros(64, np.float32)
    kernel = copy_kernel.warmup(x, x, 64, BLOCK=64, num_warps=2)
    kernel.build("sm_90a")
    assert set(kernel.asm) >= {"kir", "llir", "ptx", "cubin"}
    assert ".target sm_90a" in kernel.asm["ptx"] and kernel.metadata.num_warps == 2
    assert kernel.n_spills == 0 and kernel.shared >= 0


def test_warmup_with_a_target_builds_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    x = np.zeros(64, np.float32)
    kernel = copy_kernel.warmup(x, x, 64, BLOCK=64, target="sm_80")
    assert ".target sm_80" in kernel.asm["ptx"] and kernel.asm["cubin"]


def test_warmup_for_a_target_built_before_shows_that_targets_code(tmp_path, monkeypatch):
    """One kernel object per specialization holds a binary per target: asking again for a
    target built earlier shows its code, not the last one built."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    x = np.zeros(64, np.float32)
    copy_kernel.warmup(x, x, 64, BLOCK=64, target="sm_90a")
    copy_kernel.warmup(x, x, 64, BLOCK=64, target="sm_80")
    kernel = copy_kernel.warmup(x, x, 64, BLOCK=64, target="sm_90a")
    assert ".target sm_90a" in kernel.asm["ptx"] and kernel.metadata["target"] == "sm_90a"


def test_autotuned_and_heuristic_warmup_build_every_config(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    tuned = kiln.autotune([kiln.Config({"BLOCK": 32}), kiln.Config({"BLOCK": 64}, num_warps=2)], key=["n"])(
        copy_kernel)
    x = np.zeros(64, np.float32)
    kernels = tuned.warmup(x, x, 64, target="sm_90a")
    assert [k.metadata.num_warps for k in kernels] == [4, 2]
    capped = kiln.autotune([kiln.Config({"BLOCK": 64}, maxnreg=32)], key=["n"])(copy_kernel)
    assert ".maxnreg 32" in capped.warmup(x, x, 64, target="sm_90a")[0].asm["ptx"]
    assert all(".target sm_90a" in k.asm["ptx"] for k in kernels)
    sized = kiln.heuristics({"BLOCK": lambda args: kiln.next_power_of_2(args["n"])})(copy_kernel)
    assert "arange {end = 64" in sized.warmup(x, x, 50, target="sm_80").asm["kir"]
