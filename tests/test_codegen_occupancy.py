"""The occupancy register cap: CTAs per SM, the caps worth trying, and where compile applies it."""
import pathlib

import pytest

from kiln.codegen import compile, occupancy
from kiln.ir import parse_function

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"


def kernel(name):
    return parse_function((CORPUS / f"{name}.kir").read_text())


@pytest.mark.parametrize("regs, threads, shared, capability, ctas", [
    (47, 256, 0, 90, 5),      # 48 registers x 256 threads: 12288 of 65536
    (32, 256, 0, 90, 8),      # full: 64 warps
    (31, 256, 0, 90, 8),      # granted in steps of 8: as 32
    (33, 128, 0, 90, 12),     # 40 x 128 = 5120 -> 12; 16 by warps
    (16, 32, 0, 90, 32),      # the CTA limit
    (16, 256, 0, 86, 6),      # 48 warps on sm_86
    (32, 128, 60 * 1024, 90, 3),  # shared memory: 228 KB / 61 KB
])
def test_ctas_per_sm(regs, threads, shared, capability, ctas):
    assert occupancy.ctas_per_sm(regs, threads, shared, capability) == ctas


def test_tighter_caps_are_the_steps_to_more_ctas():
    assert occupancy.tighter_caps(47, 256, 0, 90) == [32, 40]            # 8 and 6 CTAs (7 needs 32 too)
    assert occupancy.tighter_caps(80, 256, 0, 90) == [32, 40, 48, 64]
    assert occupancy.tighter_caps(32, 256, 0, 90) == []                  # already at 64 warps
    assert occupancy.tighter_caps(40, 128, 100 * 1024, 90) == []         # shared memory is what limits it


def test_register_cap_goes_beside_maxntid():
    ptx = ".visible .entry k(\n.param .u64 p\n)\n.maxntid 256, 1, 1\n{\nret;\n}\n"
    assert ".maxntid 256, 1, 1\n.maxnreg 40\n{" in occupancy.with_register_cap(ptx, 40)
    with pytest.raises(ValueError, match="maxntid"):
        occupancy.with_register_cap(".entry k()\n{\nret;\n}\n", 40)


@pytest.mark.parametrize("spills_below, expected", [(0, 32), (40, 40), (48, 48), (64, 64), (65, None)])
def test_search_keeps_the_fewest_registers_that_do_not_spill(spills_below, expected):
    tried = []

    def link(cap):
        tried.append(cap)
        return cap, (cap < spills_below)
    assert occupancy.best_capped_link(link, [32, 40, 48, 64]) == expected
    assert len(tried) <= 3
    tried.clear()
    assert occupancy.best_capped_link(link, [32, 40, 48, 64], highest_first=True) == expected
    assert tried[0] == 64 and len(tried) <= 4
    if expected is None:
        assert tried == [64]  # the highest spilled: no lower cap is linked


def test_memory_bound_kernel_is_capped_for_occupancy():
    free = compile(kernel("layer_norm"), "sm_90a", {"num_warps": 4, "maxnreg": 255})
    auto = compile(kernel("layer_norm"), "sm_90a", {"num_warps": 4})
    before = occupancy.ctas_per_sm(free.n_regs, 128, free.shared, 90)
    after = occupancy.ctas_per_sm(auto.n_regs, 128, auto.shared, 90)
    assert before < 16 and ".maxnreg" in auto.ptx  # ptxas takes more than 32 registers when free
    assert after > before and auto.n_spills == 0
    # the fewest-register cap, linked first, fits: no link without a cap, no search
    assert free.metadata["links"] == 1 and auto.metadata["links"] == 1 and auto.n_regs <= 32


def test_where_the_fewest_register_cap_spills_the_search_takes_the_caps_above_it():
    k = compile(kernel("lang/seeded_dropout"), "sm_90a")  # 48 registers free; 32 spill, 40 do not
    assert k.n_regs == 40 and ".maxnreg 40" in k.ptx and k.n_spills == 0
    assert k.metadata["links"] == 3  # the cap of 32, the link without a cap, then 40


def test_a_kernel_that_keeps_a_stack_links_without_a_cap_first():
    k = compile(kernel("lang/unary_12"), "sm_90a")  # libdevice's trig reduction keeps a local array
    assert ".local" in k.ptx and ".maxnreg" not in k.ptx and k.metadata["links"] == 1


def test_a_tensor_core_kernel_is_capped_only_to_give_a_lone_cta_a_second():
    assert occupancy.second_cta_cap(147, 256, 108544, 90) == [128]       # W8A16 128x128 over 8 warps
    assert occupancy.second_cta_cap(180, 128, 66560, 90) == []           # 2 CTAs already: ILP first
    assert occupancy.second_cta_cap(155, 256, 198656, 90) == []          # shared memory holds one only
    assert occupancy.second_cta_cap(200, 256, 0, 90) == [128]            # not [80, 96]: 3 or 4 CTAs


def test_dot_kernel_with_company_keeps_the_assemblers_choice():
    k = compile(kernel("dot_f16"), "sm_90a", {"num_warps": 4})
    assert occupancy.ctas_per_sm(k.n_regs, 128, k.shared, 90) > 1 and ".maxnreg" not in k.ptx


def test_a_cap_ptxas_refuses_counts_as_one_that_spills():
    """ptxas refuses (C7602) a cap below what one instruction needs (a wide wgmma's
    accumulator): the search then moves up to a cap it takes."""
    from kiln.codegen import compiler, nvjitlink
    tried = []

    def link_cubin(ptx):
        cap = int(ptx.split(".maxnreg ")[1].split()[0])
        tried.append(cap)
        if cap < 64:
            raise nvjitlink.PTXAssembleError("ptxas fatal   : (C7602) Insufficient registers")
        return b"cubin", f"info    : used {cap} registers, used 1 barriers, 0 stack, 0 bytes smem, 0 bytes lmem\n"
    ptx = ".visible .entry k(\n)\n.maxntid 128, 1, 1\n{\nret;\n}\n"
    got = compiler._occupancy_link(ptx, occupancy.tighter_caps(200, 128, 0, 90), link_cubin)
    assert got is not None and got[2] == 64 and ".maxnreg 64" in got[0]
    assert min(tried) < 64


@pytest.mark.parametrize("log, usage", [
    ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\nptxas info    : Function properties for k\n"
     "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
     "ptxas info    : Used 40 registers, used 1 barriers, 8 bytes cumulative stack size", (40, 8)),
    ("info    : 0 bytes gmem\ninfo    : Function properties for 'layer_norm_kernel':\n"
     "info    : used 48 registers, used 1 barriers, 0 stack, 1024 bytes smem, 588 bytes cmem[0], 0 bytes lmem\n",
     (48, 0)),
    ("info    : used 32 registers, used 1 barriers, 16 stack, 0 bytes smem, 588 bytes cmem[0], 16 bytes lmem\n",
     (32, 16)),
    # softmax N=16384 under a cap of 32 on the H200: spilled, though lmem says 0
    ("info    : used 32 registers, used 1 barriers, 152 stack, 1024 bytes smem, 588 bytes cmem[0], 0 bytes lmem\n",
     (32, 152)),
    ("ptxas info    : Function properties for k\n    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
     "ptxas info    : Used 32 registers, used 1 barriers, 24 bytes cumulative stack size", (32, 24)),
])
def test_both_wordings_of_the_ptxas_report(log, usage):
    """A fresh link prints ptxas's `Used N registers`; a link from CUDA's compute cache (on a machine with
    a driver, where an nvJitLink without `-no-cache` keeps one) prints only `used N registers ... N
    bytes lmem`. Missing the count once left kernels uncapped there."""
    from kiln.codegen import nvjitlink
    assert nvjitlink.resource_usage(log) == usage
    with pytest.raises(nvjitlink.PTXAssembleError, match="register count"):
        nvjitlink.resource_usage("info    : 0 bytes gmem\n")


class _FakeNvJitLink:
    """cuda.bindings.nvjitlink's `create`, of an nvJitLink that refuses options it does not know."""
    class nvJitLinkError(Exception):
        pass

    def __init__(self, known):
        self.known, self.calls = known, []

    def create(self, count, options):
        assert count == len(options)
        self.calls.append(options)
        if not set(options) <= self.known:
            raise self.nvJitLinkError("NVJITLINK_ERROR_UNRECOGNIZED_OPTION")
        return len(self.calls)


def test_links_keep_out_of_cudas_compute_cache_where_nvjitlink_can(monkeypatch):
    """Every link asks for `-no-cache` (a cached link's report lacks ptxas's spills and advice); an
    nvJitLink that does not know the option is asked once, then links without it. A target it refuses
    is that error, and the next link still asks."""
    from kiln.codegen import nvjitlink
    monkeypatch.setattr(nvjitlink, "_NO_CACHE", ["-no-cache"])
    fake = _FakeNvJitLink({"-arch=sm_90a", "-O3", "-no-cache"})
    with pytest.raises(fake.nvJitLinkError):
        nvjitlink._create(fake, ["-arch=sm_99", "-O3"])
    assert nvjitlink._NO_CACHE == ["-no-cache"]
    fake.calls.clear()
    assert nvjitlink._create(fake, ["-arch=sm_90a", "-O3"]) == 1 and fake.calls == [["-arch=sm_90a", "-O3", "-no-cache"]]
    old = _FakeNvJitLink({"-arch=sm_90a", "-O3"})
    assert nvjitlink._create(old, ["-arch=sm_90a", "-O3"]) == 2 and nvjitlink._create(old, ["-O3"]) == 3
    assert old.calls == [["-arch=sm_90a", "-O3", "-no-cache"], ["-arch=sm_90a", "-O3"], ["-O3"]]


@pytest.mark.gpu
def test_a_second_link_of_a_kernel_reports_what_the_first_did():
    """Where the driver keeps CUDA's compute cache, the second link of a PTX came from it and reported
    nvJitLink's short lines only (no spill stores, no C751x advice), so kiln decided otherwise there
    (tutorial 06's D128 backward stayed on 4 warps, 2.6x slower): every link is ptxas's."""
    from kiln.codegen import nvjitlink
    from kiln.codegen.target import parse_target
    ptx = compile(kernel("layer_norm"), "sm_90a", {"num_warps": 8}, link=False).ptx
    first, second = (nvjitlink.link_cubin(ptx, parse_target("sm_90a"))[1] for _ in range(2))
    assert "bytes spill stores" in first and "bytes spill stores" in second


def test_the_cap_is_the_same_in_a_worker_process_as_here():
    """The daemon's worker and this process link the same kernel to the same cubin: the cap
    chosen cannot depend on the tier that compiled it."""
    from kiln.daemon.pool import WorkerPool
    from kiln.proto import canonical_bytes
    fn, options = kernel("layer_norm"), {"num_warps": 8}
    here = compile(fn, "sm_90a", options)
    pool = WorkerPool("kiln.codegen:compile", 1)
    try:
        there = pool.submit(canonical_bytes(fn), "sm_90a", options).result(timeout=300).kernel
    finally:
        pool.close()
    assert there.n_regs == here.n_regs and there.n_spills == here.n_spills
    assert there.cubin == here.cubin


def test_the_metadata_counts_the_pass_runs_and_links_a_compile_took():
    plain = compile(kernel("dot_f16"), "sm_90a", {"num_warps": 4})
    assert plain.metadata["pass_runs"] == 1 and plain.metadata["links"] == 1
    assert compile(kernel("dot_f16"), "sm_90a", {"num_warps": 4}, link=False).metadata["links"] == 0


def _timed_links(monkeypatch):
    """The nvJitLink links a compile makes: (start, end, register cap or None, thread name)."""
    import re
    import threading
    import time

    from kiln.codegen import nvjitlink
    link, calls = nvjitlink.link_cubin, []

    def timed(ptx, target):
        start = time.perf_counter()
        try:
            return link(ptx, target)
        finally:
            cap = re.search(r"^\.maxnreg (\d+)", ptx, re.M)
            calls.append((start, time.perf_counter(), cap and int(cap.group(1)), threading.current_thread().name))
    monkeypatch.setattr(nvjitlink, "link_cubin", timed)
    return calls


@pytest.mark.parametrize("guess", ["right", "wrong"])
def test_a_big_kernels_first_cap_probe_links_beside_the_first_link(monkeypatch, guess):
    """math_more (36 KB of PTX, capped without spilling): the probe of the cap its first link calls
    for starts with that link, on the last big kernel's first probe as the guess; a wrong guess is
    dropped and the probe links after, as without the guess. Same PTX and cubin either way."""
    from kiln.codegen import compiler
    fn = kernel("math_more")
    with monkeypatch.context() as alone_patch:
        alone_patch.setattr(compiler, "_probe_ahead", lambda *args: None)
        sequential = _timed_links(alone_patch)
        alone = compile(fn, "sm_90a", {"num_warps": 4})
    first = sequential[1][2]  # the search's first probe (highest first, for a big kernel)
    assert sequential[0][2] is None and first is not None and ".maxnreg" in alone.ptx
    monkeypatch.setitem(compiler._first_probes, 128, first if guess == "right" else first + 8)
    calls = _timed_links(monkeypatch)
    ahead = compile(fn, "sm_90a", {"num_warps": 4})
    assert (ahead.ptx, ahead.cubin) == (alone.ptx, alone.cubin)
    plain = [c for c in calls if c[2] is None]
    speculative = [c for c in calls if c[3] == "kiln-probe-link"]
    assert len(plain) == 1 and len(speculative) == 1 and speculative[0][0] < plain[0][1]  # beside the first link
    assert ahead.metadata["links"] == len(calls) == len(sequential) + (guess == "wrong")
    assert compiler._first_probes[128] == first  # the next big kernel's guess


# An optimizer step's shape: per element an IEEE square root and division (Inductor's AdamW writes
# tl.sqrt_rn and div_rn), 16 elements per thread at 4 warps
IEEE_STEP = """\
kernel @ieee_step(%0: ptr<fp32> {divisibility = 16, name = "p"}, %1: ptr<fp32> {divisibility = 16, name = "g"}, %2: ptr<fp32> {divisibility = 16, name = "v"}, %3: int32 {divisibility = 16, name = "n"}) {
  %4 = program_id {axis = 0} : int32
  %5 = constant {value = 2048} : int32
  %6 = mul %4, %5 : int32
  %7 = arange {end = 2048, start = 0} : <2048xint32>
  %8 = splat %6 : <2048xint32>
  %9 = add %8, %7 : <2048xint32>
  %10 = splat %3 : <2048xint32>
  %11 = cmp %9, %10 {pred = "lt"} : <2048xint1>
  %12 = splat %0 : <2048xptr<fp32>>
  %13 = addptr %12, %9 : <2048xptr<fp32>>
  %14 = load %13, %11 : <2048xfp32>
  %15 = splat %1 : <2048xptr<fp32>>
  %16 = addptr %15, %9 : <2048xptr<fp32>>
  %17 = load %16, %11 : <2048xfp32>
  %18 = splat %2 : <2048xptr<fp32>>
  %19 = addptr %18, %9 : <2048xptr<fp32>>
  %20 = load %19, %11 : <2048xfp32>
  %21 = mul %17, %17 : <2048xfp32>
  %22 = add %20, %21 : <2048xfp32>
  %23 = sqrt_rn %22 : <2048xfp32>
  %24 = constant {value = 1.0e-08} : fp32
  %25 = splat %24 : <2048xfp32>
  %26 = add %23, %25 : <2048xfp32>
  %27 = div_rn %17, %26 : <2048xfp32>
  %28 = sub %14, %27 : <2048xfp32>
  store %13, %28, %11
  store %19, %22, %11
  return
}
"""


def test_ieee_slow_paths_skip_the_cap_search_that_never_pays(monkeypatch):
    """ptxas holds registers for sqrt.rn / div.rn slow paths: every cap spills (the search links 3
    more times for nothing), so a kernel of 4 warps with 4 of them or more links once."""
    fn = parse_function(IEEE_STEP)
    pinned = compile(fn, "sm_90a", {"num_warps": 4})
    assert pinned.metadata["links"] == 1 and ".maxnreg" not in pinned.ptx
    assert occupancy.registers_pinned(pinned.ptx, 128) and not occupancy.registers_pinned(pinned.ptx, 64)
    monkeypatch.setattr(occupancy, "registers_pinned", lambda ptx, threads: False)
    searched = compile(fn, "sm_90a", {"num_warps": 4})
    assert searched.metadata["links"] >= 2 and (searched.cubin, searched.n_regs) == (pinned.cubin, pinned.n_regs)
