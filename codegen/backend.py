"""LLVM IR text -> optimized module -> PTX, with libdevice linked when the kernel uses it
(kiln.codegen.libdevice finds it).

llvmlite's targets are initialized once per process (a warm worker pays it once); a
parsed libdevice is kept as bitcode bytes and re-parsed per compile because `link_in`
consumes the module it links.
"""
from __future__ import annotations

import collections
import functools
import hashlib
import json
import re

from . import toolchain

toolchain.warn_if_too_old()  # before an old llvmlite fails here, or drops launch bounds from the PTX

import llvmlite.binding as llvm  # noqa: E402

from .libdevice import libdevice_bytes
from .target import Target

# Shared (3), constant (4) and local (5) pointers are 32 bits, as the hardware addresses
# them: with -nvptx-short-ptr a shared address takes one register, not two.
DATA_LAYOUT = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
TRIPLE = "nvptx64-nvidia-cuda"


@functools.lru_cache(maxsize=None)
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.set_option("", "-nvptx-short-ptr")


@functools.lru_cache(maxsize=None)
def _target_machine(target: Target, opt: int = 3):
    _init_llvm()
    tgt = llvm.Target.from_triple(TRIPLE)
    return tgt.create_target_machine(cpu=target.name, features=target.llvm_features, opt=opt)


# libdevice's own float arithmetic carries no fast-math flags; Triton compiles it with fp-contract=fast
# (its enable_fp_fusion), so its adds and multiplies may fuse into fma, in LLVM and in ptxas
# (`mul.f32`, not `mul.rn.f32`). The flag on each gives kiln's the same instructions.
_CONTRACTIBLE = re.compile(r"(= f(?:add|sub|mul)) ")


# Where libdevice subsets outlive the process: an object with get(key) -> bytes | None and
# put(key, bytes), installed by a layer above (kiln.daemon.tiers: the node cache); None: this
# process's memory only. What it gives back is checked, never trusted (_stored_subset).
subset_store = None
_SUBSET_FORMAT = 1  # bumped when what a subset holds changes


@functools.lru_cache(maxsize=256)
def _libdevice_subset(names: frozenset[str], target: Target, contract: bool = True) -> bytes:
    """The bitcode of libdevice's functions `names` and of what they use, nothing else. Linking
    all of libdevice (575 functions) and letting O3 drop the rest cost a pointwise kernel that
    calls erf and tanh 130 of its 250 ms; a process (a daemon worker) meets the same few sets again,
    and the node's other processes too: making one (parsing all of libdevice) costs 70-130 ms, so
    each is kept in `subset_store` where there is one. `contract`: their float adds and multiplies
    may fuse (above)."""
    store = subset_store
    if store is None:
        return _extract_subset(names, target, contract)
    key = subset_key(names, target, contract)
    try:
        found = _stored_subset(store.get(key), names)
    except Exception:  # noqa: BLE001 - a store that fails is a miss
        found = None
    if found is not None:
        return found
    data = _extract_subset(names, target, contract)
    try:
        store.put(key, data)
    except Exception:  # noqa: BLE001 - a subset not kept is made again by the next process
        pass
    return data


def subset_key(names: frozenset[str], target: Target, contract: bool) -> str:
    """What a libdevice subset depends on, as a SHA-256: which libdevice is found and its contents
    (by the compile key's fingerprint: reading and hashing it would cost a hit most of a miss), the
    functions, the target, the fusion flag and the LLVM that wrote it (an older one may not read it)."""
    from .libdevice import libdevice_fingerprint
    what = ["kiln libdevice subset", _SUBSET_FORMAT, libdevice_fingerprint(), sorted(names), target.name,
            target.llvm_features, contract, list(llvm.llvm_version_info)]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()


def _stored_subset(data, names: frozenset[str]) -> bytes | None:
    """`data` where it is bitcode LLVM reads that defines every one of `names`, else None (a miss)."""
    if type(data) is not bytes:
        return None
    try:
        lib = llvm.parse_bitcode(data)
    except RuntimeError:
        return None
    defined = {f.name for f in lib.functions if not f.is_declaration}
    return data if names <= defined else None


def _extract_subset(names: frozenset[str], target: Target, contract: bool) -> bytes:
    lib = llvm.parse_bitcode(libdevice_bytes())
    for f in lib.functions:
        if not f.is_declaration and f.name not in names:
            f.linkage = llvm.Linkage.internal
    for g in lib.global_variables:
        if not g.is_declaration:
            g.linkage = llvm.Linkage.internal
    pb = llvm.create_pass_builder(_target_machine(target), llvm.create_pipeline_tuning_options())
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(lib, pb)
    if contract:
        lib = llvm.parse_assembly(_CONTRACTIBLE.sub(r"\1 contract ", str(lib)))
    return lib.as_bitcode()


def optimize(llir: str, target: Target, kernel_name: str, fp_fusion: bool = True) -> llvm.ModuleRef:
    """Parse `llir`, link the libdevice functions it calls (`__nv_*`), internalize, run O3.
    `fp_fusion`: libdevice's adds and multiplies may fuse into fma, as the kernel's own do."""
    _init_llvm()
    mod = llvm.parse_assembly(llir)
    mod.verify()
    called = frozenset(f.name for f in mod.functions if f.is_declaration and f.name.startswith("__nv_"))
    if called:
        lib = llvm.parse_bitcode(_libdevice_subset(called, target, fp_fusion))
        lib.triple, lib.data_layout = mod.triple, mod.data_layout
        mod.link_in(lib)
        # Everything but the kernel becomes internal so O3 drops the unused libdevice.
        for f in mod.functions:
            if not f.is_declaration and f.name != kernel_name:
                f.linkage = llvm.Linkage.internal
        for g in mod.global_variables:
            if not g.is_declaration and g.linkage != llvm.Linkage.internal and g.name.startswith("__nv"):
                g.linkage = llvm.Linkage.internal
    tm = _target_machine(target)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return mod


# InstCombine writes an add of operands with no common bits as `or disjoint`. LLVM 22's
# straight-line strength reduction then spends most of NVPTX's emission on them (its poison-reuse
# guard, per basis and candidate: 118 of 175 ms for tutorial 03's 128x256 matmul). Written back as
# `add nuw nsw` (equal wherever the `or` is not poison, so a refinement) they emit in 57 ms instead
# of 123, and SLSR strength-reduces the epilogue's row offsets (mul.lo.s32 20 -> 5) as LLVM 21 did.
_DISJOINT_OR = re.compile(r"= or disjoint (i\d+|<\d+ x i\d+>) ")


def for_emission(mod: llvm.ModuleRef) -> tuple[llvm.ModuleRef, str]:
    """(module to emit, its text) for an optimized `mod`: its `or disjoint`s as adds (above)."""
    text = str(mod)
    if "= or disjoint " not in text:
        return mod, text
    text = _DISJOINT_OR.sub(r"= add nuw nsw \1 ", text)
    return llvm.parse_assembly(text), text


def emit_ptx(mod: llvm.ModuleRef, target: Target, text: str | None = None) -> str:
    """PTX of `mod` (`text`: its text, where the caller has it)."""
    # At LLVM's default codegen level (opt=2), not the aggressive one: there NVPTX runs GVN twice more
    # on IR that O3 already went through (39 of 144 ms of the 128x256 matmul's emission, session 43),
    # where the default runs EarlyCSE: that emission 174 -> 124 ms CPU. The PTX of every bench kernel
    # and of 966 of the corpus's 970 builds is the same byte for byte; four scalar loops of the language
    # tests differ in register numbering and the order of a few instructions.
    opt = 0 if slsr_quadratic(str(mod) if text is None else text) else 2
    return _target_machine(target, opt=opt).emit_assembly(mod)


# LLVM 22's straight-line strength reduction, one of the IR passes NVPTX's code generator runs at every
# level but None, looks for each add's, multiply's and GEP's basis among all the earlier ones of its key,
# without a bound: quadratic in the elements a thread's unrolled code handles. Its pairs are counted here
# as the sum over base pointers of the square of the GEPs by a variable off each: a 1-warp strided copy at
# 128 elements a thread 7,946 (its emission 0.08 s), at 512 64,548 (0.55 s), at 1,024 260,132 (2.0 s);
# triton_kernels' 1-warp 16x256x128 fp8 matmul with unaligned strides (a 128x256 tile loaded element by
# element) 1,092,015: 27 of its 27.4 s of emission. The corpus's and bench's kernels: 6,171 at most (the
# slowest emits in 0.1 s). Past SLSR_PAIRS, the level None: that matmul emits in 0.2 s, its PTX twice as
# long, and ptxas builds it in 10.7 s, not 16.7 (66,664 bytes of spills, not 59,046).
SLSR_PAIRS = 100_000
# (a GEP by a constant folds into the address: no candidate)
_GEP_BASE = re.compile(r"= getelementptr (?:inbounds |nuw |nusw )*[^,]+, ptr(?: addrspace\(\d+\))? (%[\w.]+), i\d+ %")


def slsr_quadratic(text: str) -> bool:
    """Would LLVM's straight-line strength reduction take quadratic time on the module `text`?"""
    counts = collections.Counter(_GEP_BASE.findall(text))
    return sum(n * n for n in counts.values()) > SLSR_PAIRS
