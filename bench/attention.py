"""FlashAttention-2 forward and backward (bench/kernels.py `attention_fwd_kernel` and the
`attention_bwd_*` kernels, one kernel source) on kiln and on upstream Triton, each autotuned
over the same configs, against PyTorch SDPA (its backward through autograd).

    python bench/attention.py [--quick] [--check] [--modes fwd,bwd,desc,host,fp8,ahead,ahead-late] [--dims 64,128] [--ctx 1024,4096,16384]
                              [--configs 64x64x3x4,...] [--out DIR]

Z=4, H=32, fp16, causal and not. Forward TFLOP/s count its two matmuls (4 Z H N^2 D), the
backward 2.5 times that (its five; the kernels recompute P, as FlashAttention-2 does),
halved when causal. The backward is three launches: Delta = rowsum(O dO), dK and dV, dQ.
Mode `ahead` is the pointer forward pipelined by hand, the next key block's scores issued before
this block's softmax (`attention_ahead_fwd_kernel`; not causal), `ahead-late` the same with their
row maximum taken in the next iteration. Mode `fp8` is mode `host` on
float8_e5m2 operands (V transposed, O in fp8: tutorial 06's fp8 forward; its SDPA column is fp16's). Mode `desc` is the forward through descriptors the kernel makes
(`attention_descriptor_fwd_kernel`, tutorial 06's way: Z * H * N_CTX rows), mode `host` through host
TensorDescriptors (`attention_host_descriptor_fwd_kernel`, tutorial 06's way on Hopper).
--check first compares every config with SDPA (and its gradients) on small shapes. Prints
a markdown table and writes DIR/<date>-<gpu>-attention.{json,md} when --out is given.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402
from run import fastest, interleaved, load_kernels, triton_cdiv  # noqa: E402

# forward: (BLOCK_M, BLOCK_N, num_stages, num_warps)
CONFIGS = [(128, 64, 3, 8), (128, 64, 2, 8), (128, 128, 3, 8), (128, 128, 2, 8), (128, 64, 3, 4), (64, 64, 3, 4)]
QUICK = [(128, 64, 3, 8), (128, 128, 3, 8)]
# backward: (narrow block, wide block, num_stages, num_warps); dK dV take BLOCK_M = narrow
# queries per step for BLOCK_N = wide keys, dQ the other way round
BWD_CONFIGS = [(32, 128, 3, 4), (32, 128, 2, 4), (64, 128, 3, 8), (64, 128, 2, 8), (64, 64, 3, 4), (32, 64, 3, 4)]
BWD_QUICK = [(32, 128, 3, 4), (64, 128, 2, 8)]
Z, H = 4, 32


def operands(n_ctx, dim, z=Z, h=H):
    return [torch.randn(z, h, n_ctx, dim, device="cuda", dtype=torch.float16) for _ in range(3)]


def launcher(lib, q, k, v, o, causal, cfg, lse=None):
    bm, bn, stages, warps = cfg
    z, h, n_ctx, dim = q.shape
    grid = (triton_cdiv(n_ctx, bm), z * h)
    lse = lse if lse is not None else torch.empty(z, h, n_ctx, device=q.device, dtype=torch.float32)

    def go():
        lib.attention_fwd_kernel[grid](q, k, v, o, lse, 1 / dim ** 0.5, *q.stride(), *k.stride(), *v.stride(),
                                       *o.stride(), h, n_ctx, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal,
                                       num_warps=warps, num_stages=stages)
    return go


def descriptor_launcher(lib, q, k, v, o, causal, cfg):
    """`attention_descriptor_fwd_kernel`: the forward through descriptors made in the kernel."""
    bm, bn, stages, warps = cfg
    z, h, n_ctx, dim = q.shape
    grid = (triton_cdiv(n_ctx, bm), z * h)
    lse = torch.empty(z, h, n_ctx, device=q.device, dtype=torch.float32)

    def go():
        lib.attention_descriptor_fwd_kernel[grid](q, k, v, o, lse, 1 / dim ** 0.5, z, h, n_ctx, HEAD_DIM=dim,
                                                  BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps,
                                                  num_stages=stages)
    return go


def host_descriptor_launcher(lib, q, k, v, o, causal, cfg):
    """`attention_host_descriptor_fwd_kernel`: host TensorDescriptors of the library's own kind over
    Z * H * N_CTX rows (tutorial 06's forward on Hopper)."""
    from tma import descriptor_class
    bm, bn, stages, warps = cfg
    z, h, n_ctx, dim = q.shape
    D = descriptor_class(lib.__name__.split("_")[0])  # bench/kernel_source names the module <flavour>_kernels
    rows = lambda t: t.view(z * h * n_ctx, dim)  # noqa: E731
    descs = D.from_tensor(rows(q), [bm, dim]), D.from_tensor(rows(k), [bn, dim]), D.from_tensor(rows(v), [bn, dim]), \
        D.from_tensor(rows(o), [bm, dim])
    grid = (triton_cdiv(n_ctx, bm), z * h)
    lse = torch.empty(z, h, n_ctx, device=q.device, dtype=torch.float32)

    def go():
        lib.attention_host_descriptor_fwd_kernel[grid](*descs, lse, 1 / dim ** 0.5, n_ctx, HEAD_DIM=dim, BLOCK_M=bm,
                                                       BLOCK_N=bn, CAUSAL=causal, num_warps=warps, num_stages=stages)
    return go


def host_descriptor_fp8_launcher(lib, q, k, v, o, causal, cfg):
    """`attention_host_descriptor_fp8_fwd_kernel`: the host-descriptor forward on float8_e5m2 copies
    of the operands, V transposed per head (tutorial 06's fp8 forward on Hopper); O in fp8."""
    from tma import descriptor_class
    bm, bn, stages, warps = cfg
    z, h, n_ctx, dim = q.shape
    D = descriptor_class(lib.__name__.split("_")[0])
    q8, k8 = (t.to(torch.float8_e5m2).view(z * h * n_ctx, dim) for t in (q, k))
    vt8 = v.transpose(2, 3).contiguous().to(torch.float8_e5m2).view(z * h * dim, n_ctx)
    o8 = torch.empty(z * h * n_ctx, dim, device=q.device, dtype=torch.float8_e5m2)
    descs = D.from_tensor(q8, [bm, dim]), D.from_tensor(k8, [bn, dim]), D.from_tensor(vt8, [dim, bn]), \
        D.from_tensor(o8, [bm, dim])
    grid = (triton_cdiv(n_ctx, bm), z * h)
    lse = torch.empty(z, h, n_ctx, device=q.device, dtype=torch.float32)

    def go():
        lib.attention_host_descriptor_fp8_fwd_kernel[grid](*descs, lse, 1 / dim ** 0.5, n_ctx, HEAD_DIM=dim,
                                                           BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, num_warps=warps,
                                                           num_stages=stages)
    go.output = lambda: o8.view(o.shape)  # what --check compares (fp8: not written to `o`)
    return go


def ahead_launcher(lib, q, k, v, o, causal, cfg, late_max=False):
    """`attention_ahead_fwd_kernel`: the pointer forward with the next block's scores issued before this
    block's softmax (no causal mask); `late_max`: their row maximum taken in the next iteration."""
    assert not causal
    bm, bn, stages, warps = cfg
    z, h, n_ctx, dim = q.shape
    lse = torch.empty(z, h, n_ctx, device=q.device, dtype=torch.float32)

    def go():
        lib.attention_ahead_fwd_kernel[(triton_cdiv(n_ctx, bm), z * h)](
            q, k, v, o, lse, 1 / dim ** 0.5, *q.stride(), *k.stride(), *v.stride(), *o.stride(), h, n_ctx,
            HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn, LATE_MAX=late_max, num_warps=warps, num_stages=stages)
    return go


def ahead_late_launcher(lib, q, k, v, o, causal, cfg):
    return ahead_launcher(lib, q, k, v, o, causal, cfg, late_max=True)


FORWARDS = {"fwd": launcher, "desc": descriptor_launcher, "host": host_descriptor_launcher,
            "fp8": host_descriptor_fp8_launcher, "ahead": ahead_launcher, "ahead-late": ahead_late_launcher}
NOT_CAUSAL = {"ahead", "ahead-late"}  # forwards without a causal mask


def bwd_launcher(lib, q, k, v, o, lse, do, grads, causal, cfg):
    """The three backward launches; `grads` = (dq, dk, dv) are written."""
    narrow, wide, stages, warps = cfg
    z, h, n_ctx, dim = q.shape
    delta = torch.empty_like(lse)
    dq, dk, dv = grads
    scale = 1 / dim ** 0.5
    tuning = dict(HEAD_DIM=dim, CAUSAL=causal, num_warps=warps, num_stages=stages)

    def go():
        lib.attention_bwd_preprocess_kernel[(n_ctx // 128, z * h)](o, do, delta, n_ctx, HEAD_DIM=dim, BLOCK_M=128)
        lib.attention_bwd_dkdv_kernel[(n_ctx // wide, z * h)](q, k, v, do, dk, dv, lse, delta, scale, n_ctx,
                                                               BLOCK_M=narrow, BLOCK_N=wide, **tuning)
        lib.attention_bwd_dq_kernel[(n_ctx // wide, z * h)](q, k, v, do, dq, lse, delta, scale, n_ctx,
                                                             BLOCK_M=wide, BLOCK_N=narrow, **tuning)
    return go


def forward_for_backward(lib, q, k, v, causal):
    """O and the log-sum-exp rows from `lib`'s own forward (not timed)."""
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    launcher(lib, q, k, v, o, causal, QUICK[0], lse)()
    return o, lse


def sdpa_backward(q, k, v, do, causal):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    o = sdpa(q, k, v, causal)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def sdpa(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=1 / q.shape[-1] ** 0.5)


def check(libs, dims, configs, bwd_configs, forwards=tuple(FORWARDS)):
    failures = []
    for dim in dims:
        q, k, v, do = operands(512, dim, z=1, h=3) + operands(512, dim, z=1, h=3)[:1]
        for causal in (False, True):
            want = sdpa(q, k, v, causal)
            kinds = [kind for kind in forwards if not (causal and kind in NOT_CAUSAL)]
            qr, kr, vr = (x.float().requires_grad_() for x in (q, k, v))
            want_grads = torch.autograd.grad(sdpa(qr, kr, vr, causal), (qr, kr, vr), do.float())
            for name, lib in libs.items():
                for cfg in configs:
                    for kind in kinds:
                        o = torch.full_like(q, float("nan"))
                        go = FORWARDS[kind](lib, q, k, v, o, causal, cfg)
                        got = _attempt(name, dim, causal, cfg, go)
                        if got and kind == "fp8":  # e5m2 keeps 2 bits of mantissa: the error's size, not each element
                            out, want8 = go.output().float(), sdpa(*(x.to(torch.float8_e5m2).float()
                                                                     for x in (q, k, v)), causal)
                            if not (out - want8).norm() < 0.1 * want8.norm():
                                failures.append(_mismatch(name, kind, dim, causal, cfg, out, want8))
                        elif got and not torch.allclose(o.float(), want.float(), atol=2e-2, rtol=2e-2):
                            failures.append(_mismatch(name, kind, dim, causal, cfg, o, want))
                o, lse = forward_for_backward(lib, q, k, v, causal)
                for cfg in bwd_configs:
                    grads = [torch.full_like(q, float("nan")) for _ in range(3)]
                    go = bwd_launcher(lib, q, k, v, o, lse, do, grads, causal, cfg)
                    if _attempt(name, dim, causal, cfg, go):
                        for which, g, w in zip(("dq", "dk", "dv"), grads, want_grads):
                            if not torch.allclose(g.float(), w, atol=5e-2, rtol=5e-2):
                                failures.append(_mismatch(name, which, dim, causal, cfg, g, w))
    print(f"check: {len(failures)} mismatches")
    return failures


def _attempt(name, dim, causal, cfg, go) -> bool:
    try:
        go()
        torch.cuda.synchronize()
        return True
    except Exception as e:  # OutOfResources and the like
        print(f"  {name} D{dim} causal={causal} {cfg}: {type(e).__name__}: {str(e)[:120]}")
        return False


def _mismatch(name, what, dim, causal, cfg, got, want):
    err = (got.float() - want.float()).abs().max().item()
    print(f"  MISMATCH {name} {what} D{dim} causal={causal} {cfg}: max error {err:.3g}")
    return (name, what, dim, causal, cfg, err)


def run(libs, dims, contexts, configs, rounds=3, mode="fwd"):
    rows = []
    for dim in dims:
        for causal in (False,) if mode in NOT_CAUSAL else (False, True):
            for n_ctx in contexts:
                q, k, v = operands(n_ctx, dim)
                if mode in FORWARDS:
                    o = torch.empty_like(q)
                    make = {name: lambda cfg, lib=lib: FORWARDS[mode](lib, q, k, v, o, causal, cfg)
                            for name, lib in libs.items()}
                    reference = lambda: sdpa(q, k, v, causal)  # noqa: E731
                else:
                    do = torch.randn_like(q)
                    grads = [torch.empty_like(q) for _ in range(3)]
                    make = {}
                    for name, lib in libs.items():
                        o, lse = forward_for_backward(lib, q, k, v, causal)
                        make[name] = lambda cfg, lib=lib, o=o, lse=lse: bwd_launcher(lib, q, k, v, o, lse, do, grads,
                                                                                      causal, cfg)
                    reference = sdpa_backward(q, k, v, do, causal)
                picked = {name: fastest(make[name], configs) for name in libs}
                fns = {name: make[name](got[1]) for name, got in picked.items() if got}
                fns["sdpa"] = reference
                flops = 4 * Z * H * n_ctx * n_ctx * dim / (2 if causal else 1) * (2.5 if mode == "bwd" else 1)
                row = {"mode": mode, "dim": dim, "causal": causal, "n_ctx": n_ctx}
                for name, ms in interleaved(fns, rounds).items():
                    row[name] = flops / (ms * 1e-3) / 1e12
                row["configs"] = {name: got[1] for name, got in picked.items() if got}
                rows.append(row)
                print(json.dumps(row))
    return rows


def table(rows) -> str:
    lines = ["| pass | D | causal | N_CTX | kiln TFLOP/s | Triton TFLOP/s | SDPA TFLOP/s | kiln / Triton | kiln / SDPA "
             "| kiln config |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        k, t, s = r.get("kiln", 0), r.get("triton", 0), r.get("sdpa", 0)
        lines.append(f"| {r.get('mode', 'fwd')} | {r['dim']} | {r['causal']} | {r['n_ctx']} | {k:.0f} | {t:.0f} | {s:.0f} | "
                     f"{k / t if t else 0:.2f} | {k / s if s else 0:.2f} | {r['configs'].get('kiln')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--modes", default="fwd,bwd")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--ctx", default="1024,4096,16384")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--configs", help="BMxBNxSTAGESxWARPS,... (backward: NARROWxWIDE...): the configs every library "
                                      "tunes over, to see configs side by side (default: all of each pass's)")
    ap.add_argument("--out")
    args = ap.parse_args()
    libs = {name: load_kernels(name) for name in args.libs.split(",")}
    if "desc" in args.modes.split(","):  # both write the descriptors' TMA maps to global scratch from torch
        from tma import give_triton_an_allocator
        import kiln
        give_triton_an_allocator()
        kiln.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    dims = [int(d) for d in args.dims.split(",")]
    configs = {"fwd": QUICK if args.quick else CONFIGS, "bwd": BWD_QUICK if args.quick else BWD_CONFIGS}
    configs["desc"] = configs["host"] = configs["fp8"] = configs["ahead"] = configs["ahead-late"] = configs["fwd"]
    if args.configs:
        chosen = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
        configs = {mode: chosen for mode in configs}
    if args.check:
        check(libs, dims, configs["fwd"], configs["bwd"], [m for m in args.modes.split(",") if m in FORWARDS])
    rows = [row for mode in args.modes.split(",")
            for row in run(libs, dims, [int(s) for s in args.ctx.split(",")], configs[mode], mode=mode)]
    text = table(rows)
    print(text)
    if args.out:
        results_file.save_today(args.out, "attention", rows, text)


if __name__ == "__main__":
    main()
