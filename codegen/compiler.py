"""`compile`: the whole path from a block IR function to a cubin, in one process.

It is a pure function of (IR text, target, options), so a daemon can run it in a worker
process and ship back `CompiledKernel.to_dict()`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
import time
from concurrent.futures import Future

from kiln.ir import copy_function, print_function, verify
from kiln.ir import options as options_record

from . import backend, nvjitlink, occupancy, ptxas
from .artifact import CompiledKernel  # noqa: F401  (kiln.codegen.CompiledKernel)
from .lower import LoweringError, lower_function
from .lower.line_info import without_line_tables
from .passes import tile_overlap
from .analysis.dots import on_tensor_cores
from .analysis.shared_buffers import allocated_bytes
from .analysis.partitions import cta_warps
from .pipeline import PassContext, run_passes
from .target import parse_target

DEFAULT_OPTIONS = options_record.DEFAULTS  # num_warps, num_stages
# absent unless asked for: no default value enters the compile key (enable_fp_fusion: 0 turns it off)
OPTIONAL_OPTIONS = options_record.OPTIONAL


class CompileError(RuntimeError):
    pass


def _options(options: dict | None) -> dict:
    opts = dict(DEFAULT_OPTIONS)
    for key, value in (options or {}).items():
        if key not in DEFAULT_OPTIONS and key not in OPTIONAL_OPTIONS:
            known = sorted([*DEFAULT_OPTIONS, *OPTIONAL_OPTIONS])
            raise CompileError(f"unknown compile option {key!r}; kiln knows {known}")
        if value is not None:
            opts[key] = int(value)
    ranges = options_record.RANGES
    nw = opts["num_warps"]
    if not options_record.in_range("num_warps", nw):
        raise CompileError("num_warps must be a power of two from {} to {}, not {}".format(*ranges["num_warps"], nw))
    if "maxnreg" in opts and not options_record.in_range("maxnreg", opts["maxnreg"]):
        raise CompileError("maxnreg must be from {} to {} registers, not {}".format(*ranges["maxnreg"], opts["maxnreg"]))
    for flag in ("enable_fp_fusion", "enable_reflect_ftz", "line_info"):
        if not options_record.in_range(flag, opts.get(flag, 1)):
            raise CompileError(f"{flag} must be 0 or 1, not {opts[flag]}")
    return opts


@contextlib.contextmanager
def _gc_paused():
    """Passes and lowering make 10^4-10^5 objects that live until the LLVM IR is printed,
    and the cycle collector's full passes meanwhile walk them and the whole heap: in a
    process with PyTorch's heap that was 0.14 s of a tutorial-09 matmul compile (~1.4 s)
    on average. What they leave behind is collected after, once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:  # a caller that turned it off keeps it off
            gc.enable()


class _Wider(Exception):
    """The passes weighed the kernel's registers on more warps than asked (`wants_warps`): its build as asked
    would spill and be built again on those, so it is not lowered."""


def lower_to_llvm(fn, tgt, opts: dict, check: bool = False, portable: bool = False, counts: dict | None = None,
                  facts: dict | None = None, widen_early: bool = False):
    """Passes and lowering: (optimized block IR text, LLVM IR text, arg layout, shared bytes).
    `counts["pass_runs"]` and `counts["lowerings"]` (when given) count the runs of each;
    `facts["warps"]` (when given) is the warps a CTA runs (a warp_specialize partition's too),
    `facts["tensor_cores"]` whether a dot runs on tensor cores. `widen_early`: raise _Wider, before
    lowering, where the passes want more warps and the build may be widened (`_widenable`)."""
    with _gc_paused():
        return _lower_to_llvm(fn, tgt, opts, check, portable, counts if counts is not None else {},
                              facts if facts is not None else {}, widen_early)


def _lower_to_llvm(fn, tgt, opts: dict, check: bool, portable: bool, counts: dict, facts: dict,
                   widen_early: bool = False):
    verify(fn)
    limit = occupancy.max_shared_per_cta(tgt.capability)
    reserve, overlap = 0, True
    ctx = PassContext(tgt, opts["num_warps"], opts["num_stages"], maxnreg=opts.get("maxnreg"),
                      line_info=bool(opts.get("line_info", 1)),
                      fp_fusion=bool(opts.get("enable_fp_fusion", 1)),
                      reflect_ftz=bool(opts.get("enable_reflect_ftz", 1)), portable=portable)
    for _ in range(4):
        work = copy_function(fn)  # a private copy for the passes to rewrite (as its text would parse)
        _choose_variant(work, reserve, overlap)
        run_passes(work, ctx, check=check)  # (tile_overlap weighs its variant by the passes' plan itself)
        counts["pass_runs"] = counts.get("pass_runs", 0) + 1
        if widen_early and work.attrs.get("wants_warps", 0) > opts["num_warps"]:
            _note_facts(work, opts, facts)
            if _widenable(fn, opts, tgt, facts):
                raise _Wider
        counts["lowerings"] = counts.get("lowerings", 0) + 1
        try:
            llir, arg_layout, shared = lower_function(work, ctx)
        except LoweringError as e:
            raise CompileError(f"{fn.name}: {e}") from None
        if tile_overlap.overlapped(work) and tile_overlap.costs(shared, allocated_bytes(work), tgt):
            overlap = False  # lowering took more than the plan (its unplanned uses): the plain variant after all
            continue
        if portable or shared <= limit or not allocated_bytes(work):
            break
        # the rings were planned without the transient scratch (layout conversions), which
        # lowering sized: plan them again with that much less room (fewer stages, a tight ring),
        # and at least the scratch's own bytes (where the rings are at their fewest stages already
        # the overflow alone would not shrink them: no plan then, a loop without rings; and a
        # warp-specialized kernel's scratch follows its rings, live throughout, taking none of theirs)
        reserve = max(reserve + shared - limit, shared - allocated_bytes(work))
    _note_facts(work, opts, facts)
    return print_function(work), llir, arg_layout, shared


def _note_facts(work, opts: dict, facts: dict) -> None:
    """What the compile needs to know of the kernel its passes built (`lower_to_llvm`)."""
    facts["warps"] = cta_warps(work, opts["num_warps"])
    facts["tensor_cores"] = on_tensor_cores(work)
    facts["splittable"] = work.attrs.get("splittable") == 1  # a split_k build applies (kiln.codegen.passes.split_k)
    facts["split_trips"] = work.attrs.get("split_trips")  # its K loop's trip count from the arguments (trip_spec)
    facts["coarsened"] = work.attrs.get("coarsen") == 1  # kiln.codegen.passes.coarsen took some loops' steps together
    facts["company"] = work.attrs.get("company", 0)  # shared bytes smem_plan freed for another CTA (`_company`)
    facts["staging"] = work.attrs.get("dot_staging", 0)  # bytes of the mma dots' own buffers (passes.dot_staging)


def _widened(fn, target: str, opts: dict, check: bool, link: bool, counts: dict):
    """The kernel built on 8 warps where that build spills less than would widen it, else None
    (tutorial 06's D128 causal backward at 64-row query blocks: 5736 bytes on 4 warps, 76 on 8, and 2.7x as
    fast there). It is launched on its `threads`; its num_warps stays as asked."""
    wide = _compile(fn, target, {**opts, "num_warps": 8}, check, link, counts)
    if wide.n_spills >= WIDEN_SPILL_BYTES:
        return None
    wide.metadata["num_warps"] = opts["num_warps"]
    return wide


def _staging_dropped_first(fn, target: str, options, check: bool, link: bool, counts: dict, tgt, opts: dict,
                           shared: int, facts: dict):
    """The kernel built without its dots' own staging buffers, before the build with them is linked, where
    that one's shared memory alone holds fewer CTAs per SM than the plain build would at the most registers a
    thread takes (so the comparison after the link would keep the plain build): a 1-warp fp8 matmul of
    triton_kernels staged 72 KB twice over (one CTA per SM, the plain build three) and was built twice, 25 s.
    Gives (that build, whether it holds more threads an SM than the staged build could: then it is the kernel;
    else the comparison reuses it), or (None, False). Up to 4 warps; at 4, a staged build that spills is built
    again on 8 (`_widened`) before any comparison, so the plain build is the kernel ahead of it only where it
    spills nothing itself (triton_kernels' persistent 16x256 matmuls on 4 warps: 8 of 113 builds, 1 s -> 0.5 s)."""
    staging = facts["staging"]
    if not (link and staging and opts["num_warps"] <= 4 and facts["warps"] == opts["num_warps"]
            and not facts["company"]):
        return None, False
    threads, cap = 32 * opts["num_warps"], tgt.capability
    bound = occupancy.ctas_by_shared(shared, cap) * threads  # the staged build's threads an SM, at best
    if occupancy.ctas_per_sm(occupancy.MAX_REGISTERS, threads, shared - staging, cap) * threads <= bound:
        return None, False
    plain = _compile(_without(fn, "dot_staging"), target, options, check, link, counts)
    return plain, _resident_threads(plain, tgt) > bound and (opts["num_warps"] < 4 or not plain.n_spills)


def _choose_variant(work, reserve: int, overlap: bool) -> None:
    """Mark on the kernel which variant its passes build (kiln.codegen.pipeline): the shared memory
    its rings leave free, and whether a persistent GEMM keeps them live through its epilogue."""
    if reserve:
        work.attrs["shared_reserve"] = reserve
    if not overlap:
        work.attrs["tile_overlap"] = 0


def _without(fn, variant: str):
    """A copy of `fn` marked to be built without `variant` (`persistent`, `coarsen`: kiln.codegen.pipeline)."""
    plain = copy_function(fn)
    plain.attrs[variant] = 0
    return plain


def _ctas(kernel, tgt) -> int:
    """How many CTAs of a compiled kernel an SM holds at once."""
    md = kernel.metadata
    return occupancy.ctas_per_sm(md["n_regs"], md["threads"], md["shared"], tgt.capability)


def _resident_threads(kernel, tgt) -> int:
    """How many threads of a compiled kernel an SM holds at once (a build widened to 8 warps holds
    as many in one CTA as one of 4 warps in two)."""
    return _ctas(kernel, tgt) * kernel.metadata["threads"]


def _persistent(arg_layout) -> bool:
    """Did the persistent pass rewrite the kernel (it adds the launch grid's arguments)?"""
    return any("launch_grid" in a for a in arg_layout)


def _has_dot(fn) -> bool:
    return any(op.name in ("dot", "dot_scaled") for op in fn.walk())


# Spilled bytes from which a 4-warp build is tried on 8 (tutorial 06's backward on the H200, 2026-12-02:
# at its own config its D128 builds spill 2456 / 4764 bytes (causal) and ran 2.6x / 3.2x faster on 8
# warps, its D64 causal build spills 136 and ran 0.78-0.82x as fast there, its 32-row dots split over two
# warpgroups; at 64-row query blocks its D64 build spills 952 (400 stored, 552 loaded) and ran at
# 116-121 TFLOP/s on 4 warps, 332-353 on 8). A wrong widening costs a fifth, a wrong keep two thirds.
WIDEN_SPILL_BYTES = 256


def _widenable(fn, opts: dict, tgt, facts: dict) -> bool:
    """May a build that spills be built again on 8 warps, and that build kept where it spills less?
    num_warps changes no result of a program (its ops see blocks, never threads), so the 8-warp build
    computes the same; it spreads the tensor-core dots' accumulators over twice the threads (bench's
    attention dK/dV backward at D128, BLOCK 32/128, two 128x128 fp32 blocks: 255 registers and 2,060
    bytes of spills on 4 warps, 196 and none on 8). For sm_90 on and 4 warps only; not where the
    kernel may see its threads (inline asm reading %tid or %laneid, device prints), under a register
    cap the user set, nor for a warp-specialized build (its partitions are fixed warpgroups)."""
    return tgt.capability >= 90 and opts["num_warps"] == 4 and "maxnreg" not in opts \
        and facts["warps"] == opts["num_warps"] and facts["tensor_cores"] \
        and not any(op.name in ("inline_asm", "print") for op in fn.walk())


def _caps(fn, ptx: str, tgt, n_regs: int, threads: int, shared: int) -> list[int]:
    """The register caps worth a relink (kiln.codegen.occupancy)."""
    if _has_dot(fn):
        return occupancy.second_cta_cap(n_regs, threads, shared, tgt.capability)
    if occupancy.registers_pinned(ptx, threads):  # measured on memory-bound kernels only
        return []
    return occupancy.tighter_caps(n_regs, threads, shared, tgt.capability)


# PTX this long takes nvJitLink ~0.1 s, and kernels this big are the ones that need
# their registers: Inductor's foreach AdamW step (48 KB, 60 registers at 4 warps) spilled at every
# cap, 4 links and 0.45 s where Triton links once (now none: occupancy.registers_pinned). Their cap
# search starts at the highest cap.
BIG_KERNEL_PTX = 32 * 1024

# A big kernel's first cap probe is a link as long as the first one (0.8 s for a foreach AdamW step
# of 24 parameters, on a job's critical path), and which cap it tries depends on the registers the
# first link reports. So it starts beside the first link, on a guess: the cap the last big kernel
# of as many threads probed first (at first, the one for 64 registers). Where the guess is the cap
# the first link calls for, its link is that probe (the same link: the same cubin); otherwise it is
# dropped and the probe links as before. One link's latency instead of two, for a link's CPU on a miss.
_first_probes: dict[int, int] = {}  # threads -> the cap a big kernel's search tried first


def _cap_first(fn, code: str, opts: dict, threads: int, shared: int, tgt) -> int | None:
    """The cap a memory-bound kernel links under first, or None: the fewest registers that reach
    the most CTAs per SM its shared memory allows. Where it fits, the search could do no better, so
    that link is the only one; where it spills, the search runs as before on the caps above it.
    Most such kernels fit (Inductor's pointwise ones, softmax, layer norm): one link where there
    were two or three. Not for kernels that keep a stack (`.local`: a link under any cap reports
    it, as the search's first link does) or whose IEEE slow paths pin their registers, nor for
    big kernels (their search starts at the highest cap). Below the cap ptxas mostly emits what it
    emits without one. Against the search (2026-12-01): the corpus (tests/codegen_corpus, sm_90a
    and sm_80) linked 966 times instead of 973, its SASS the same but for 13 of 942 builds, none with
    more registers; Inductor's pointwise, looped-reduction and rotary kernels of bench/compile_speed.py
    linked once instead of twice; bench/'s layer norm kept its 32 registers in other code, and its
    rotary kernel went from 48 registers to 32 (the search's halving had met a spill at 40). `code`: the
    PTX without its line tables (a file path of `.../.local/...` is no stack)."""
    if "maxnreg" in opts or _has_dot(fn) or len(code) > BIG_KERNEL_PTX or ".local" in code \
            or occupancy.registers_pinned(code, threads):
        return None
    caps = occupancy.tighter_caps(occupancy.MAX_REGISTERS, threads, shared, tgt.capability)
    return caps[0] if caps else None


def _capped_link(ptx: str, cap: int, link_cubin):
    """((capped ptx, cubin, regs, spills), too tight?) of `ptx` linked under register cap `cap`."""
    capped = occupancy.with_register_cap(ptx, cap)
    try:
        cubin, info = link_cubin(capped)
    except nvjitlink.PTXAssembleError:  # too few registers for one instruction (a wide wgmma)
        return None, True
    regs, spills = nvjitlink.resource_usage(info)
    return (capped, cubin, regs, spills), spills or nvjitlink.wgmma_serialized(info)


def _probe_ahead(fn, ptx: str, code: str, opts: dict, threads: int, shared: int, tgt, link_cubin):
    """(cap, future of its `_capped_link`) started now for a big kernel whose caps are searched
    highest first, or None. `code`: `ptx` without its line tables, what its size is judged by."""
    if "maxnreg" in opts or len(code) <= BIG_KERNEL_PTX or _has_dot(fn) or occupancy.registers_pinned(code, threads):
        return None
    guess = _first_probes.get(threads)
    if guess is None:
        caps = occupancy.tighter_caps(64, threads, shared, tgt.capability)
        guess = caps[-1] if caps else None
    return None if guess is None else (guess, _in_thread(_capped_link, ptx, guess, link_cubin))


def _in_thread(fn, *args) -> Future:
    """`fn(*args)` on a thread of its own (nvJitLink lets go of the GIL); a thread per call, not a
    pool, as the daemon's workers and the emulator fork."""
    future = Future()

    def run():
        try:
            future.set_result(fn(*args))
        except BaseException as error:  # noqa: BLE001 - the caller's .result() raises it
            future.set_exception(error)
    threading.Thread(target=run, name="kiln-probe-link", daemon=True).start()
    return future


def _occupancy_link(ptx: str, caps: list[int], link_cubin, ahead=None, threads: int = 0, highest_first=False):
    """(ptx, cubin, regs, spills) relinked (`link_cubin(ptx)`) under the fewest-register cap of
    `caps` that neither spills nor serializes wgmmas, or None when none does. `ahead`: a link
    under one cap started before the caps were known (`_probe_ahead`); `highest_first`: a big
    kernel's, whose caps are searched from the highest."""
    if highest_first and caps:
        _first_probes[threads] = caps[-1]

    def link(cap):
        if ahead is not None and ahead[0] == cap:
            return ahead[1].result()
        return _capped_link(ptx, cap, link_cubin)
    return occupancy.best_capped_link(link, caps, highest_first=highest_first) if caps else None


# wall ms of each stage of this thread's last compile (`last_stage_ms`): a daemon's log says
# where a slow compile went without a profiler; kept out of the metadata, which is deterministic
_stages = threading.local()


def last_stage_ms() -> dict[str, float]:
    """{stage: wall ms} of this thread's last `compile`: lower (passes and lowering), llvm (O3),
    ptx (NVPTX's emission) and link (nvJitLink, register-cap relinks included)."""
    return dict(getattr(_stages, "ms", {}))


def _stage_done(name: str, started: float) -> float:
    """Adds the ms since `started` to stage `name`; the time now, for the next stage."""
    now = time.perf_counter()
    ms = _stages.ms  # set by `compile`, the only caller of `_compile`
    ms[name] = ms.get(name, 0.0) + (now - started) * 1e3
    return now


def compile(fn, target: str = "sm_90a", options: dict | None = None, check: bool = False,
            link: bool = True) -> CompiledKernel:
    """Compile block IR `fn` for `target`; `fn` itself is not modified.

    `check=True` verifies the IR after every rewriting pass (tests); `link=False` stops at
    PTX (no cubin, no register counts). `metadata["pass_runs"]`, `["lowerings"]` and `["links"]`
    count the runs of the pass list, of lowering and of nvJitLink the compile took, retries included."""
    _stages.ms = {}
    return _compile(fn, target, options, check, link, {"pass_runs": 0, "lowerings": 0, "links": 0})


def _assemble(ptx: str, tgt, counts: dict) -> tuple[bytes, str]:
    """(cubin, info log) of `ptx`: through a standalone ptxas where the kernel sets its warps'
    registers (`setmaxnreg`, which nvJitLink drops) and one is found (`counts["assembler"]` then
    says so), else, and where that ptxas refuses the PTX (older than its ISA), through nvJitLink."""
    if ptxas.wanted(ptx) and ptxas.find() is not None:
        try:
            got = ptxas.assemble(ptx, tgt)
        except nvjitlink.PTXAssembleError:
            pass  # (a ptxas older than the PTX's ISA: nvJitLink's cubin, without setmaxnreg)
        else:
            counts["assembler"] = "ptxas"
            return got
    counts.pop("assembler", None)
    return nvjitlink.link_cubin(ptx, tgt)


def _compile(fn, target: str, options: dict | None, check: bool, link: bool, counts: dict,
             may_widen: bool = True) -> CompiledKernel:
    """`may_widen=False`: the 8-warp build was tried and spilled; this is the build as asked."""
    tgt = parse_target(target)
    opts = _options(options)
    started = time.perf_counter()
    facts = {}
    try:
        kir, llir, arg_layout, shared = lower_to_llvm(fn, tgt, opts, check=check, counts=counts, facts=facts,
                                                      widen_early=may_widen and link)
    except _Wider:
        wide = _widened(fn, target, opts, check, link, counts)
        if wide is not None:
            return wide
        return _compile(fn, target, options, check, link, counts, may_widen=False)
    warps = facts["warps"]  # a warp-specialized kernel fixes its registers itself (setmaxnreg): no cap search
    started = _stage_done("lower", started)
    plain_first, ahead = _staging_dropped_first(fn, target, options, check, link, counts, tgt, opts, shared, facts)
    if ahead:
        return plain_first
    if any("global_scratch" in a for a in arg_layout):  # tensormap.replace came with PTX ISA 8.3
        tgt = dataclasses.replace(tgt, ptx_version=max(tgt.ptx_version, 83))
    mod = backend.optimize(llir, tgt, fn.name, fp_fusion=bool(opts.get("enable_fp_fusion", 1)))
    mod, llir = backend.for_emission(mod)
    started = _stage_done("llvm", started)
    ptx = backend.emit_ptx(mod, tgt, llir)
    started = _stage_done("ptx", started)
    cubin, n_regs, n_spills = b"", 0, 0

    def link_cubin(text: str):
        counts["links"] += 1
        return _assemble(text, tgt, counts)
    if link:
        threads = 32 * warps
        capped_here = warps == opts["num_warps"]  # (a warp-specialized kernel sets its own registers)
        code = without_line_tables(ptx)  # what the link decisions read: the same with line tables or without
        first = _cap_first(fn, code, opts, threads, shared, tgt) if capped_here else None
        fits, too_tight = _capped_link(ptx, first, link_cubin) if first is not None else (None, True)
        if not too_tight:  # the fewest-register cap there is: no other link can do better
            ptx, cubin, n_regs, n_spills = fits
            _stage_done("link", started)
        else:
            ahead = _probe_ahead(fn, ptx, code, opts, threads, shared, tgt, link_cubin) if capped_here else None
            cubin, info = link_cubin(ptx)
            started = _stage_done("link", started)
            if nvjitlink.wgmma_serialized(info) and _persistent(arg_layout):
                # ptxas serialized the wgmmas of the persistent form (seen with an fp16 result
                # stored to a bf16 tensor: 0.8x); the tile kernel as written keeps them async
                return _compile(_without(fn, "persistent"), target, options, check, link, counts)
            n_regs, n_spills = nvjitlink.resource_usage(info)
            if "maxnreg" not in opts and not n_spills and capped_here:
                caps = [cap for cap in _caps(fn, ptx, tgt, n_regs, threads, shared) if first is None or cap > first]
                capped = _occupancy_link(ptx, caps, link_cubin, ahead, threads, len(code) > BIG_KERNEL_PTX)
                if capped is not None:
                    ptx, cubin, n_regs, n_spills = capped
                _stage_done("link", started)  # the relinks under register caps, after the first link
                if capped is None and caps and _persistent(arg_layout):
                    # no cap fits another CTA without spilling: the tile loop of the persistent
                    # form keeps registers live that the tile kernel as written may not need
                    plain = _compile(_without(fn, "persistent"), target, options, check, link, counts)
                    if occupancy.ctas_per_sm(plain.n_regs, threads, plain.metadata["shared"], tgt.capability) > \
                            occupancy.ctas_per_sm(n_regs, threads, shared, tgt.capability):
                        return plain
            if facts["company"] and occupancy.ctas_per_sm(n_regs, threads, shared, tgt.capability) <= \
                    occupancy.ctas_by_shared(shared + facts["company"], tgt.capability):
                # the registers keep off the CTA the freed shared memory made room for (smem_plan._company)
                return _compile(_without(fn, "company"), target, options, check, link, counts)
            if n_spills >= WIDEN_SPILL_BYTES and may_widen and _widenable(fn, opts, tgt, facts):
                wide = _widened(fn, target, opts, check, link, counts)
                if wide is not None:
                    return wide
            if n_spills >= WIDEN_SPILL_BYTES and facts["coarsened"]:
                # the coarse loop's 64-wide blocks keep more live than kiln.codegen.passes.coarsen counted: the
                # loops as written, where they spill less
                plain = _compile(_without(fn, "coarsen"), target, options, check, link, counts)
                if plain.n_spills < n_spills:
                    return plain
        held = occupancy.ctas_per_sm(n_regs, threads, shared, tgt.capability)
        if facts["staging"] and \
                held < occupancy.ctas_per_sm(n_regs, threads, shared - facts["staging"], tgt.capability):
            # the dots' buffers of their own may cost a CTA per SM: each dot staging in the scratch area
            plain = plain_first or _compile(_without(fn, "dot_staging"), target, options, check, link, counts)
            # more threads a SM, or as many and fewer spills (the plain build may come widened: _widened)
            if (_resident_threads(plain, tgt), -plain.n_spills) > (held * threads, -n_spills):
                return plain
    metadata = {
        "name": fn.name, "target": tgt.name, "num_warps": opts["num_warps"], "num_stages": opts["num_stages"],
        "threads": 32 * warps, "shared": shared, "n_regs": n_regs, "n_spills": n_spills,
        "args": arg_layout, "ptx_version": tgt.ptx_version, **counts,
    }
    if facts["splittable"]:
        metadata["splittable"] = True
    if facts["split_trips"] is not None:
        metadata["split_trips"] = list(facts["split_trips"])
    # `llir` is the optimized module (as Triton's asm["llir"]), as emitted; lower_to_llvm gives the raw one
    return CompiledKernel(fn.name, tgt.name, kir, llir, ptx, cubin, metadata)
