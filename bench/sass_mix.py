"""SASS instruction mix of the tutorial-03 matmul that bench/matmul.py's autotuning picks on
the H200 (128x256x64, 3 stages, 8 warps, fp16), from kiln's cubin via cuobjdump.

    python bench/sass_mix.py [--out DIR]      # needs cuobjdump (the GPU machine has it)
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import matmul_kernel  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    s = 4096
    x = np.zeros((16, 16), np.float16)  # only dtypes and alignment reach the compile key
    k = matmul_kernel.warmup(x, x, x, s, s, s, s, 1, s, 1, s, 1, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64,
                             GROUP_M=8, num_warps=8, num_stages=3, target="sm_90a")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    sass = subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True, check=True).stdout
    ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
    lines = [f"registers {k.metadata['n_regs']}, spills {k.metadata['n_spills']}, shared {k.metadata['shared']} bytes",
             "instruction mix: " + ", ".join(f"{op} {n}" for op, n in ops.most_common())]
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "matmul-sass.txt"), "w") as f:
            f.write(text + "\n\n" + sass)


if __name__ == "__main__":
    main()
