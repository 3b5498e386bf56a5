"""A linear-attention backward's state gradient (bench/kernels.py's `chunk_state_grad_kernel`, the loop of fla's
chunk_bwd_kernel_dh without gates): each program walks its sequence's chunks last to first, storing the running
sum and adding `(q^T * scale) @ do` of the chunk, its A read M-major and scaled in the loop. kiln against Triton on
the same source at fixed configs, each checked against PyTorch; bf16 in, fp32 sums, bf16 states.

    python bench/chunk_state_grad.py [--shapes 8x16x4096x128x128,...] [--configs 64/64/4/2,...]

Shapes are batch x heads x T x K x V; configs BK/BV/warps/stages (64-row chunks). Figures go to bench/results/.
"""
from __future__ import annotations

import torch

from run import fixed_config_args, interleaved

SHAPES = "8x16x4096x128x128,4x32x8192x64x64"
CONFIGS = "64/64/4/2,64/64/4/3,64/64/8/2,32/64/4/2"
BT = 64


def reference(q, do, scale):
    """dh[b, t, h] = sum over the chunks after t of (q_chunk^T * scale) @ do_chunk, in fp32."""
    B, T, H, K = q.shape
    V = do.shape[-1]
    chunks = T // BT
    qs = (q.float() * scale).to(q.dtype).float().view(B, chunks, BT, H, K)
    per_chunk = torch.einsum("bcthk,bcthv->bchkv", qs, do.float().view(B, chunks, BT, H, V))
    after = per_chunk.flip(1).cumsum(1).flip(1) - per_chunk
    return after


def main():
    args, libs = fixed_config_args(SHAPES, CONFIGS)
    first, *others = libs
    print("| B x H x T x K x V | BK/BV/warps/stages | " + " | ".join(f"{n} TFLOP/s" for n in libs)
          + "".join(f" | {first} / {n}" for n in others) + " | equal to PyTorch |")
    print("|---|---|" + "---:|" * (len(libs) + len(others)) + "---|")
    for shape in args.shapes.split(","):
        B, H, T, K, V = map(int, shape.split("x"))
        q = torch.randn(B, T, H, K, device="cuda", dtype=torch.bfloat16)
        do = torch.randn(B, T, H, V, device="cuda", dtype=torch.bfloat16)
        scale = K ** -0.5
        want = reference(q, do, scale)
        flops = 2 * B * H * T * K * V
        for config in args.configs.split(","):
            bk, bv, warps, stages = map(int, config.split("/"))
            runs, equal = {}, []
            for name, lib in libs.items():
                dh = torch.empty(B, T // BT, H, K, V, device="cuda", dtype=torch.bfloat16)
                runs[name] = lambda lib=lib, dh=dh: lib.chunk_state_grad_kernel[(K // bk, V // bv, B * H)](
                    q, do, dh, scale, T, H=H, K=K, V=V, BT=BT, BK=bk, BV=bv, num_warps=warps, num_stages=stages)
                runs[name]()
                torch.cuda.synchronize()
                equal.append(torch.allclose(dh.float(), want, atol=1e-1, rtol=2e-2))
            ms = interleaved(runs)
            cells = [f"{flops / ms[name] * 1e-9:.0f}" for name in libs]
            ratios = "".join(f" | {ms[n] / ms[first]:.2f}" for n in others)  # speed: the other's time over first's
            print(f"| {shape} | {config} | " + " | ".join(cells) + ratios + f" | {all(equal)} |", flush=True)


if __name__ == "__main__":
    main()
