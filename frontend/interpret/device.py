"""The interpreter as a device: one multiprocessor that runs one program at a time. Its register
file, warp and shared memory are an sm_80's (kiln's oldest target), and an interpreted kernel
reports that it takes all of them (`interpreted_resources`), so that occupancy arithmetic on these
numbers (Triton's tutorial 02) finds room for one program per multiprocessor, as the interpreter
runs them. The drop-in's CPU driver reports these properties; `kiln.compiler` the resources."""
from __future__ import annotations

CPU_DEVICE_PROPERTIES = {"multiprocessor_count": 1, "max_num_regs": 65536, "warpSize": 32,
                         "max_shared_mem": 166912, "max_threads_per_sm": 2048}


def interpreted_resources(num_warps: int) -> dict:
    """`n_regs`, `n_spills` and `shared` of an interpreted kernel of `num_warps` warps: the whole
    multiprocessor of the CPU device (registers split over the program's threads, at most 255 each)."""
    props = CPU_DEVICE_PROPERTIES
    threads = props["warpSize"] * max(int(num_warps), 1)
    return {"n_regs": max(1, min(255, props["max_num_regs"] // threads)), "n_spills": 0,
            "shared": props["max_shared_mem"]}
