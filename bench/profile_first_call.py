"""Where the first call of a fresh process spends its time (run twice: cold, then warm cache).

    KILN_CACHE_DIR=/tmp/c python bench/profile_first_call.py
"""
import cProfile
import os
import pstats
import sys
import time

import torch

torch.zeros(1, device="cuda")
torch.cuda.synchronize()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels  # noqa: E402

x = torch.rand(4096, device="cuda")
y = torch.empty_like(x)
profile = cProfile.Profile()
t0 = time.perf_counter()
profile.enable()
kernels.add_kernel[(4,)](x, x, y, 4096, BLOCK=1024)
torch.cuda.synchronize()
profile.disable()
print(f"first call: {time.perf_counter() - t0:.4f} s")
pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
