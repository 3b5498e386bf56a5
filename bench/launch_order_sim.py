"""How busy a launch of causal attention programs keeps the SMs, in the order the hardware hands CTAs
out (linear index, x fastest: each head's row blocks in turn, its longest last) and in the order
`launch_order` gives them (longest first, a group of heads at a time): greedy list scheduling, each CTA
taking the next free slot of SMs x CTAs per SM, a program's work its key blocks up to the diagonal.
A model, no GPU: what the tail of a launch can cost, not a measurement of it.

    python bench/launch_order_sim.py [--sms 132]
"""
import argparse
import heapq

from kiln.codegen.passes.launch_order import L2_BYTES

# (N_CTX, BLOCK_M, BLOCK_N, HEAD_DIM, CTAs per SM): bench's causal forward picks on the H200 (session 76)
CASES = [(1024, 64, 64, 128, 2), (1024, 128, 64, 128, 1), (4096, 128, 64, 128, 1), (16384, 128, 64, 128, 1),
         (4096, 128, 128, 128, 1), (1024, 64, 64, 64, 4), (4096, 128, 64, 64, 2), (16384, 128, 128, 64, 1)]


def busy(works, slots: int) -> float:
    """The fraction of slot time spent working when `works` go, in order, to the first free slot."""
    free = [0.0] * slots
    end = 0.0
    for w in works:
        start = heapq.heappop(free)
        end = max(end, start + w)
        heapq.heappush(free, start + w)
    return sum(works) / (slots * end)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--heads", type=int, default=128)
    args = ap.parse_args()
    print("| N_CTX | BLOCK_M x BLOCK_N | D | CTAs/SM | heads a group | as launched | longest first |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n, bm, bn, d, per_sm in CASES:
        blocks = n // bm
        work = [-(-(i + 1) * bm // bn) for i in range(blocks)]  # key blocks up to the diagonal
        unit = bm * d * 2 * 2  # K and V bytes a program reads per row block more (fp16)
        group = max(1, min(args.heads, L2_BYTES // unit // blocks))
        as_launched = [w for _ in range(args.heads) for w in work]
        ordered = [work[blocks - 1 - r] for first in range(0, args.heads, group) for r in range(blocks)
                   for _ in range(first, min(first + group, args.heads))]
        slots = args.sms * per_sm
        print(f"| {n} | {bm}x{bn} | {d} | {per_sm} | {group} | {busy(as_launched, slots):.3f} | "
              f"{busy(ordered, slots):.3f} |")


if __name__ == "__main__":
    main()
