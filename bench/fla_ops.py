"""flash-linear-attention's chunked ops (a library kiln has not been written against) under whatever
`import triton` is: upstream Triton, or kiln with KILN_DROPIN=1. One process per library, run from a
scratch checkout of fla (nothing of it in this repository):

    FLA=/path/to/flash-linear-attention python bench/fla_ops.py                 # Triton; saves REF
    FLA=/path/to/flash-linear-attention KILN_DROPIN=1 python bench/fla_ops.py   # kiln; compares with REF

Cases (CASES=...): gdn (chunk_gated_delta_rule, q and k normalized in the kernel), gla (chunk_gla),
simple_gla (a scalar gate per head), linear (simple_gla without a gate), delta (chunk_delta_rule); bf16,
B x T x H x D = B x T x 16 x 128 (B, T from the environment: 2, 4096). Per case: the first call (fla's
autotuning and every compile in it), then the median of 30 CUDA-event timings after 3 warm-ups of the
forward, and of forward and backward where fla allows it (it refuses gated backwards with Triton
3.4-3.7.1 on Hopper, its issue 640: only linear and delta). One JSON line per case; the kiln run reports
each output's and gradient's largest difference from Triton's over its largest magnitude. Both run with
their defaults, as a user runs them: kiln compiles on the node's daemon, started on demand (`bash
bench/gpu_session.sh fla` gives each library a cold cache of its own; KILN_DAEMON=off compiles in the process,
one build at a time, as session 80's figures were taken).
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.environ.get("FLA", "."))  # a checkout of flash-linear-attention (its `fla` package)
from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402
from fla.ops.gla import chunk_gla  # noqa: E402
from fla.ops.simple_gla import chunk_simple_gla  # noqa: E402
from fla.ops.delta_rule import chunk_delta_rule  # noqa: E402

lib = "kiln" if os.environ.get("KILN_DROPIN") == "1" else "triton"
REF = os.environ.get("REF", "/tmp/fla_ref.pt")
B, T, H, D = int(os.environ.get("B", 2)), int(os.environ.get("T", 4096)), 16, 128
dev, dt = "cuda", torch.bfloat16


def make(case, seed=0):
    g_ = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s, dtype=dt: torch.randn(*s, device=dev, dtype=dtype, generator=g_)
    q, k, v = r(B, T, H, D), r(B, T, H, D), r(B, T, H, D)
    if case == "gdn":
        g = F.logsigmoid(r(B, T, H, dtype=torch.float32))
        beta = torch.sigmoid(r(B, T, H))
        args = [q, k, v, g, beta]
        fn = lambda q, k, v, g, beta: chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)[0]
    elif case == "gla":
        g = F.logsigmoid(r(B, T, H, D, dtype=torch.float32)) / 16
        args = [q, k, v, g]
        fn = lambda q, k, v, g: chunk_gla(q, k, v, g)[0]
    elif case == "simple_gla":
        g = F.logsigmoid(r(B, T, H, dtype=torch.float32))
        args = [q, k, v, g]
        fn = lambda q, k, v, g: chunk_simple_gla(q, k, v, g)[0]
    elif case == "linear":  # simple_gla without a gate: its backward runs under Triton 3.6 on Hopper
        args = [q, k, v]
        fn = lambda q, k, v: chunk_simple_gla(q, k, v)[0]
    else:  # delta rule, ungated
        beta = torch.sigmoid(r(B, T, H))
        args = [F.normalize(q.float(), dim=-1).to(dt), F.normalize(k.float(), dim=-1).to(dt), v, beta]
        fn = lambda q, k, v, beta: chunk_delta_rule(q, k, v, beta)[0]
    for a in args:
        a.requires_grad_(a.is_floating_point())
    do = r(B, T, H, D)
    return fn, args, do


def bench(f, n=30):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


ref = torch.load(REF) if lib == "kiln" and os.path.exists(REF) else {}
saved = {}
for case in os.environ.get("CASES", "gdn,gla,simple_gla,linear,delta").split(","):
    fn, args, do = make(case)
    bwd = case in ("linear", "delta")  # gated backwards: fla refuses Triton 3.4-3.7.1 on Hopper (its #640)
    t0 = time.perf_counter()
    out = fn(*args)
    if bwd:
        out.backward(do)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    grads = [a.grad.float().clone() for a in args if a.grad is not None]
    results = [out.float()] + grads
    saved[case] = [x.cpu() for x in results]

    def fwd():
        with torch.no_grad():
            fn(*args)

    def fwdbwd():
        for a in args:
            a.grad = None
        fn(*args).backward(do)
    row = {"lib": lib, "case": case, "B": B, "T": T, "H": H, "D": D, "first_s": round(first, 2),
           "fwd_ms": round(bench(fwd), 4), "fwdbwd_ms": round(bench(fwdbwd), 4) if bwd else None}
    if case in ref:
        errs = []
        for a, b in zip(ref[case], saved[case]):
            b = b.to(a.dtype)
            errs.append(round(float((a - b).abs().max() / (a.abs().max() + 1e-6)), 5))
        row["rel_err_vs_triton"] = errs
    print(json.dumps(row), flush=True)
if lib == "triton":
    torch.save(saved, REF)
