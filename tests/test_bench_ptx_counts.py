"""bench/ptx_counts.py: a kept kernel's sm_90a build counted, whole and per loop (a label and the branch back
to it), on the CPU."""
import json
import subprocess
import sys

import numpy as np

import kiln
import kiln.language as tl

from bench_support import BENCH


@kiln.jit
def row_sums_of_products(a_ptr, b_ptr, out_ptr, n, B: tl.constexpr):
    r = tl.arange(0, B)
    acc = tl.zeros((B, B), dtype=tl.float32)
    for i in range(n):
        acc = tl.dot(tl.load(a_ptr + i * B * B + r[:, None] * B + r[None, :]), tl.load(b_ptr + r[:, None] * B + r[None, :]),
                     acc)
    tl.store(out_ptr + r, tl.sum(acc, axis=1))


def test_a_kept_kernel_is_built_and_counted_per_loop(tmp_path):
    a = np.zeros((4, 32, 32), np.float16)
    warm = row_sums_of_products.warmup(a, a[0], np.zeros(32, np.float32), 4, B=32, grid=(1,), target="sm_90a")
    (tmp_path / "k.kir").write_text(warm.asm["kir"])
    (tmp_path / "k.json").write_text(json.dumps({"num_warps": 2, "num_stages": 1}))
    out = subprocess.run([sys.executable, str(BENCH / "ptx_counts.py"), str(tmp_path / "k.kir"), "--ptx",
                          str(tmp_path / "k.ptx")], capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("row_sums_of_products: {'num_warps': 2, 'num_stages': 1}")
    kernel = json.loads(lines[1].split(": ", 1)[1])
    loop = [json.loads(line.split(": ", 1)[1]) for line in lines[2:] if line.startswith("loop")]
    ptx = (tmp_path / "k.ptx").read_text()
    assert kernel["mma.sync"] == ptx.count("mma.sync") > 0 and kernel["shfl.sync"] == ptx.count("shfl.sync")
    assert len(loop) == 1 and loop[0]["mma.sync"] == kernel["mma.sync"]  # every product in the loop
    assert "shfl.sync" not in loop[0]  # the row sums after it
