"""A register cap that lets more CTAs share an SM.

ptxas (as nvJitLink 13 carries it) spends registers on instruction-level parallelism: the
layer norm of bench/kernels.py gets 47 registers per thread where Triton's bundled ptxas
12.8 gives 32, so 5 CTAs of 256 threads fit on an H200 SM instead of 8. A memory-bound
kernel hides latency with resident warps, and on the H200 capping that kernel to reach
more CTAs per SM gained 3-8% (bench/occupancy_probe.py). So a kernel gets the smallest cap
that raises its CTAs per SM (as far as its shared memory allows) and neither spills nor makes
ptxas serialize wgmmas: a memory-bound one links under the fewest-register cap first, and only
where that spills links without a cap and searches the caps above it (compiler._cap_first);
others are relinked after their first link. Spilling is not monotone in the cap (the rotary
kernel of bench/kernels.py: none at 32 or 48 registers, 16 bytes at 40), which the search
assumes. A tensor-core kernel is capped only where that gives a lone CTA a second one: the
W8A16 matmul at 128x128 tiles over 8 warps went from 147 registers to 128 and from one CTA per
SM to two, 1.25x, while attention's backward dQ kernel capped from 2 CTAs to 3 ran ~1% slower
(H200, 2026-11-24). A kernel given `maxnreg` keeps it.
"""
from __future__ import annotations

import re

REGISTERS_PER_SM = 65536
ALLOCATION_UNIT = 8  # registers per thread are granted in steps of 8 (256 per warp)
MIN_CAP = 24  # below this ptxas spills nearly anything
MAX_REGISTERS = 255  # a thread's most

# capability -> (resident warps, resident CTAs, shared memory bytes) per SM, as the CUDA
# programming guide's table of compute capabilities gives them.
_SM_LIMITS = {
    80: (64, 32, 164 * 1024), 86: (48, 16, 100 * 1024), 87: (48, 16, 164 * 1024), 89: (48, 24, 100 * 1024),
    90: (64, 32, 228 * 1024), 100: (64, 32, 228 * 1024), 101: (48, 24, 228 * 1024), 103: (64, 32, 228 * 1024),
    120: (48, 24, 100 * 1024), 121: (48, 24, 100 * 1024),
}
_RESERVED_SHARED_PER_CTA = 1024  # the driver's own shared memory per CTA (sm_80 and newer)


def ctas_per_sm(registers: int, threads: int, shared: int, capability: int) -> int:
    """How many CTAs of this kernel an SM holds at once (registers, warps, CTAs, shared memory)."""
    max_warps, max_ctas, max_shared = _SM_LIMITS[capability]
    warps = -(-threads // 32)
    per_thread = -(-max(registers, 1) // ALLOCATION_UNIT) * ALLOCATION_UNIT
    by_registers = REGISTERS_PER_SM // (per_thread * 32 * warps)
    by_shared = ctas_by_shared(shared, capability)
    return min(by_registers, max_warps // warps, max_ctas, by_shared)


def ctas_by_shared(shared: int, capability: int) -> int:
    """How many CTAs asking for `shared` bytes an SM's shared memory holds."""
    return _SM_LIMITS[capability][2] // (shared + _RESERVED_SHARED_PER_CTA)


def max_shared_per_cta(capability: int) -> int:
    """The most shared memory one CTA may ask for (the SM's less the driver's reserve)."""
    return _SM_LIMITS[capability][2] - _RESERVED_SHARED_PER_CTA


def tighter_caps(registers: int, threads: int, shared: int, capability: int) -> list[int]:
    """The register caps, fewest registers first, that each hold more CTAs per SM than
    `registers` does; empty when registers are not what limits the kernel."""
    now = ctas_per_sm(registers, threads, shared, capability)
    warps = -(-threads // 32)
    caps = set()
    for ctas in range(now + 1, 1 + ctas_per_sm(MIN_CAP, threads, shared, capability)):
        cap = REGISTERS_PER_SM // (ctas * 32 * warps) // ALLOCATION_UNIT * ALLOCATION_UNIT
        if MIN_CAP <= cap < registers:
            caps.add(cap)
    return sorted(caps)


def second_cta_cap(registers: int, threads: int, shared: int, capability: int) -> list[int]:
    """[the cap that lets a second CTA join a lone one], or [] where the kernel already has
    company or shared memory leaves no room."""
    if ctas_per_sm(registers, threads, shared, capability) != 1:
        return []
    return [cap for cap in tighter_caps(registers, threads, shared, capability)
            if ctas_per_sm(cap, threads, shared, capability) == 2][-1:]


# ptxas keeps registers for the slow paths of IEEE-rounded fp32 square roots and divisions
# (`sqrt.rn.f32`, `div.rn.f32`: tl.sqrt, sqrt_rn, div_rn). Over 728 memory-bound kernels compiled
# for sm_90a (2026-11-29), no cap gained a CTA for a kernel of 4 warps or more with 4 of them or more:
# 57 such kernels (Inductor's foreach AdamW among them), 97 relinks, every one spilling; the same
# bodies with `sqrt.approx` capped from 60 registers to 40 without a spill. At 2 warps some did gain.
_IEEE_SLOW_PATH = re.compile(r"\b(?:sqrt|div)\.rn(?:\.ftz)?\.f32\b")
IEEE_SLOW_PATHS_THAT_PIN = 4


def registers_pinned(ptx: str, threads: int) -> bool:
    """Would no register cap fit without spilling (IEEE fp32 sqrt / div slow paths, above)? Then the
    relinks that search for one are skipped: each is as long as the first link."""
    return threads >= 128 and len(_IEEE_SLOW_PATH.findall(ptx)) >= IEEE_SLOW_PATHS_THAT_PIN


def with_register_cap(ptx: str, cap: int) -> str:
    """`ptx` with `.maxnreg cap` on its kernel entry (the PTX form of Triton's `maxnreg`)."""
    text, count = re.subn(r"^(\.maxntid [^\n]*)$", rf"\1\n.maxnreg {cap}", ptx, count=1, flags=re.M)
    if count != 1:
        raise ValueError("the PTX has no .maxntid directive to put a register cap beside")
    return text


def best_capped_link(link, caps: list[int], highest_first: bool = False):
    """The link of the fewest-register cap among `caps` (ascending) that does not spill, or None.

    `link(cap)` -> (result, spilled bytes). Spilling grows as the cap shrinks, so the
    search halves the list: about log2(len(caps)) + 1 links. `highest_first` links the
    highest cap first and stops if it spills, as every lower one would: one link for a
    kernel that needs nearly all its registers, one more than the halving where a cap fits.
    """
    best, lo, hi = None, 0, len(caps) - 1
    if highest_first and caps:
        result, spilled = link(caps[hi])
        if spilled:
            return None
        best, hi = result, hi - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        result, spilled = link(caps[mid])
        if spilled:
            lo = mid + 1
        else:
            best, hi = result, mid - 1
    return best
