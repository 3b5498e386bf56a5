"""Tutorial 06's own forward, unchanged, at fixed configs: `_attn_fwd` (the 3.6 source that
`scripts/upstream_tutorials.py extract` writes) called as its Hopper `warp_specialize=True` path
calls it — plain tensors, the kernel making its descriptors (`tl.make_tensor_descriptor`) — so the
rows it advances in its loop (`offsetk_y += BLOCK_N`) are what kiln must read by TMA. Its
autotuner is bypassed: every library runs the same configs, each in a process of its own (kiln
through the drop-in, `KILN_DROPIN=1`; Triton as installed), checked against SDPA first.

    python bench/tutorial06_configs.py --tutorial .scratch/tutorials/3.6/06-fused-attention.py \\
        [--libs kiln,triton] [--dims 64,128] [--ctx 16384] [--causal] [--fp8 | --bwd] \\
        [--configs 128x128x2x8,...] [--bwd-configs 32x128x128x32x5x4,...] [--out DIR]

Z=4, H=32, fp16; TFLOP/s count the forward's two matmuls (4 Z H N^2 D, halved when causal).
A config whose output is off by more than 0.05 (or NaN) is reported, not timed. `--fp8`: the
tutorial's fp8 forward (e5m2 operands, V stored transposed per head, O in fp8), checked by the
error's norm (under 0.1 of the reference's); its V^T descriptor spans Z * H * N_CTX columns at
a column offset head * HEAD_DIM * N_CTX, so a head's V rows past that extent read as zeros in
every library, and the reference zeroes the same rows. `--bwd`: the tutorial's backward (its
preprocess and `_attn_bwd` at its own fixed config, or at `--bwd-configs`, K scaled first, as its
`backward()` launches them) after a forward of the tutorial's at (128, 64, 2, 4) without the
hint, against PyTorch SDPA's backward timed in the same process; checked against SDPA's gradients
(atol and rtol 5e-2); TFLOP/s count 2.5 times the forward's. A library's process that dies (a
driver fault, a compiler's abort) costs the config it was on, whose row says so; a new process
runs the rest.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results_file  # noqa: E402

CONFIGS = "128x128x2x8,128x128x3x8,128x64x2x4,128x64x3x4,64x64x3x4"
Z, H = 4, 32


def parse_configs(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in c.split("x")) for c in text.split(",") if c]


def work_items(args) -> list[tuple]:
    """(D, N_CTX, config) in the order a child runs them."""
    configs = parse_configs(args.bwd_configs if args.bwd else args.configs)
    dims, contexts = [int(d) for d in args.dims.split(",")], [int(n) for n in args.ctx.split(",")]
    return [(dim, n_ctx, list(config)) for dim in dims for n_ctx in contexts
            for config in configs if args.bwd or config[1] <= dim]  # the tutorial's static_assert(BLOCK_N <= HEAD_DIM)


def run_one(args) -> None:
    """This process's library on the work items from `--skip` on: a JSON row per item on stdout as it
    finishes (TFLOP/s, or why none), so a crash loses only the item it happened in."""
    import torch
    import triton
    spec = importlib.util.spec_from_file_location("tutorial06", args.tutorial)
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    made = {}  # the operands of the last (D, N_CTX): one set at a time on the GPU
    for dim, n_ctx, config in work_items(args)[args.skip:]:
        if (dim, n_ctx) not in made:
            made.clear()
            made[dim, n_ctx] = None if args.bwd else operands(torch, dim, n_ctx, args.fp8, args.causal)
        row = dict(D=dim, N_CTX=n_ctx, config=config)
        if args.bwd:
            row.update(backward_row(args, torch, triton, tutorial, dim, n_ctx, config))
        else:
            row.update(forward_row(args, torch, triton, tutorial, made[dim, n_ctx], dim, n_ctx, config))
        print(json.dumps(row), flush=True)


def forward_row(args, torch, triton, tutorial, operands_, dim, n_ctx, config) -> dict:
    """The tutorial's forward at one config: its TFLOP/s and error, or why it has none."""
    q, k, v, want = operands_
    bm, bn, stages, warps = config
    kernel = tutorial._attn_fwd.fn  # under the autotuner: the configs are ours
    o = torch.empty_like(q)
    m = torch.empty((Z, H, n_ctx), device="cuda", dtype=torch.float32)
    grid = (triton.cdiv(n_ctx, bm), Z * H, 1)

    def go():
        kernel[grid](0.5, m, Z, H, q, k, v, o, N_CTX=n_ctx, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn,
                     FP8_OUTPUT=args.fp8, STAGE=3 if args.causal else 1, warp_specialize=True,
                     IS_HOPPER=True, num_warps=warps, num_stages=stages)
    failed = first_run(go, torch)
    if failed:
        return dict(error=failed)
    if args.fp8:  # e5m2 keeps 2 bits of mantissa: the error's size, not each element's
        err = ((o.float() - want).norm() / want.norm()).item()
        wrong = not err < 0.1
    else:
        err = (o.float() - want).abs().max().item()
        wrong = not err <= 0.05
    if wrong:
        return dict(error=f"{'relative' if args.fp8 else 'max'} error {err:.3g}")
    ms = triton.testing.do_bench(go)
    flops = 4 * Z * H * n_ctx * n_ctx * dim * (0.5 if args.causal else 1)
    print(f"  {args.one} D{dim} N{n_ctx} {tuple(config)}: {flops / ms * 1e-9:.1f} TFLOP/s", file=sys.stderr, flush=True)
    return dict(tflops=round(flops / ms * 1e-9, 1), max_error=err)


def first_run(go, torch) -> str | None:
    """Run `go` once (building what it launches): None, or why it failed, for the row to report (a
    library that cannot build a config says so in its cell)."""
    try:
        go()
        torch.cuda.synchronize()
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:160]}"
    return None


BACKWARD = "32x128x128x32x5x4"  # the tutorial's backward: BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, stages, warps
RCP_LN2 = 1.4426950408889634


def backward_row(args, torch, triton, tutorial, dim, n_ctx, config) -> dict:
    """The tutorial's backward at (D, N) and one config: its TFLOP/s, and SDPA's backward's beside it."""
    q, k, v, do = (0.5 * torch.randn((Z, H, n_ctx, dim), dtype=torch.float16, device="cuda") for _ in range(4))
    o, m = torch.empty_like(q), torch.empty((Z, H, n_ctx), device="cuda", dtype=torch.float32)
    tutorial._attn_fwd.fn[(n_ctx // 128, Z * H, 1)](
        0.5, m, Z, H, q, k, v, o, N_CTX=n_ctx, HEAD_DIM=dim, BLOCK_M=128, BLOCK_N=64, FP8_OUTPUT=False,
        STAGE=3 if args.causal else 1, warp_specialize=False, IS_HOPPER=True, num_warps=4, num_stages=2)
    grads = [torch.empty_like(x) for x in (q, k, v)]
    go = lambda: _tutorial_backward(tutorial, q, k, v, o, m, do, grads, args.causal, config)  # noqa: E731
    reference = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*reference, is_causal=args.causal, scale=0.5)
    want = torch.autograd.grad(out, reference, do, retain_graph=True)
    flops = 2.5 * 4 * Z * H * n_ctx * n_ctx * dim * (0.5 if args.causal else 1)
    sdpa_ms = triton.testing.do_bench(lambda: torch.autograd.grad(out, reference, do, retain_graph=True))
    row = dict(sdpa_tflops=round(flops / sdpa_ms * 1e-9, 1))
    failed = first_run(go, torch)
    if failed:
        return dict(row, error=failed)
    bad = [name for name, got, w in zip("qkv", grads, want) if not torch.allclose(got, w, atol=5e-2, rtol=5e-2)]
    if bad:
        return dict(row, error="d" + "/d".join(bad) + " off SDPA's")
    ms = triton.testing.do_bench(go)
    print(f"  {args.one} bwd D{dim} N{n_ctx}: {flops / ms * 1e-9:.1f} TFLOP/s (SDPA {row['sdpa_tflops']})",
          file=sys.stderr, flush=True)
    return dict(row, tflops=round(flops / ms * 1e-9, 1))


def _tutorial_backward(tutorial, q, k, v, o, m, do, grads, causal, config, sm_scale=0.5):
    """What the tutorial's `backward()` launches: K scaled by sm_scale / ln 2, Delta = rowsum(O dO), then
    dQ, dK and dV in one kernel."""
    dq, dk, dv = grads
    n_ctx, dim = q.shape[2], q.shape[3]
    delta = m.new_empty(m.shape)
    tutorial._attn_bwd_preprocess[(n_ctx // 128, Z * H)](o, do, delta, Z, H, n_ctx, BLOCK_M=128, HEAD_DIM=dim)
    m1, n1, m2, n2, stages, warps = config
    tutorial._attn_bwd[(n_ctx // n1, 1, Z * H)](
        q, k * (sm_scale * RCP_LN2), v, sm_scale, do, dq, dk, dv, m, delta, *q.stride(), H, n_ctx, BLOCK_M1=m1,
        BLOCK_N1=n1, BLOCK_M2=m2, BLOCK_N2=n2, BLK_SLICE_FACTOR=2, HEAD_DIM=dim, num_warps=warps, num_stages=stages,
        CAUSAL=causal)


def operands(torch, dim, n_ctx, fp8, causal, device="cuda"):
    """q, k, v as the tutorial's benchmark makes them, and the reference output (float32)."""
    q, k, v = (torch.randn((Z, H, n_ctx, dim), dtype=torch.float16, device=device) for _ in range(3))
    if fp8:
        q, k = q.to(torch.float8_e5m2), k.to(torch.float8_e5m2)
        v = v.permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2).to(torch.float8_e5m2)  # [Z][H][D][N] in memory
        # head g's row n is descriptor column g * D * N + n: read only below Z * H * N columns
        heads = torch.arange(Z * H, device=device).view(Z, H, 1) * dim * n_ctx
        seen = (heads + torch.arange(n_ctx, device=device)) < Z * H * n_ctx
        inputs = (q.float(), k.float(), v.float() * seen[..., None])
    else:
        inputs = (q, k, v)
    want = torch.nn.functional.scaled_dot_product_attention(*inputs, is_causal=causal, scale=0.5)
    return q, k, v, want.float()


def run_library(lib: str, argv: list[str], items: list[tuple], command=None) -> list[dict]:
    """`lib`'s rows for `items`, from children of this script (`command(skip)` makes one's command
    line): a child that dies costs the item it was on (a row saying so) and the rest run in a new one."""
    env = dict(os.environ)
    env.pop("KILN_DROPIN", None)
    if lib == "kiln":
        env["KILN_DROPIN"] = "1"  # `import triton` is kiln's drop-in
    command = command or (lambda skip: [sys.executable, __file__, *argv, "--one", lib, "--skip", str(skip)])
    rows = []
    while len(rows) < len(items):
        done = subprocess.run(command(len(rows)), env=env, stdout=subprocess.PIPE, text=True)
        for line in done.stdout.splitlines():
            got = _row(line)
            if got is not None and len(rows) < len(items):
                rows.append(got)
        if done.returncode != 0 and len(rows) < len(items):
            dim, n_ctx, config = items[len(rows)]
            died = f"its process died ({_exit(done.returncode)})"
            rows.append(dict(D=dim, N_CTX=n_ctx, config=list(config), error=died))
        elif done.returncode == 0 and len(rows) < len(items):
            raise SystemExit(f"{lib}'s run ended with {len(items) - len(rows)} configs unreported")
    return rows


def _row(line: str) -> dict | None:
    """A child's row (a JSON object with D, N_CTX and config), or None for any other line."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) and {"D", "N_CTX", "config"} <= row.keys() else None


def _exit(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return f"exit {code}"


def table(results: dict[str, list[dict]], causal: bool, kind: str = "fp16") -> list[str]:
    """Markdown: a row per (D, N_CTX, config), each library's TFLOP/s (or why none), kiln / Triton, and
    SDPA's (the backward's rows carry it) with kiln / SDPA."""
    libs = list(results)
    by_key = {lib: {(r["D"], r["N_CTX"], tuple(r["config"])): r for r in rows} for lib, rows in results.items()}
    keys = sorted({key for rows in by_key.values() for key in rows})
    pair = libs == ["kiln", "triton"]
    sdpa = any("sdpa_tflops" in r for rows in results.values() for r in rows)
    lines = ["| D | N_CTX | config | " + " | ".join(f"{lib} TFLOP/s" for lib in libs) + " |"
             + (" kiln / triton |" if pair else "") + (" SDPA TFLOP/s | kiln / SDPA |" if sdpa else ""),
             "|---:|---:|---|" + "---:|" * (len(libs) + pair + 2 * sdpa)]
    for key in keys:
        cells = [by_key[lib].get(key, {}) for lib in libs]
        line = f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(str(c.get("tflops", c.get("error", "-")))
                                                                  for c in cells) + " |"
        kiln = by_key.get("kiln", {}).get(key, {}).get("tflops")
        if pair:
            theirs = cells[1].get("tflops")
            line += f" {kiln / theirs:.2f} |" if kiln and theirs else " - |"
        if sdpa:
            theirs = next((c["sdpa_tflops"] for c in cells if "sdpa_tflops" in c), None)
            line += f" {theirs or '-'} |" + (f" {kiln / theirs:.2f} |" if kiln and theirs else " - |")
        lines.append(line)
    what = "backward (pointers)" if "backward" in kind else \
        "forward at fixed configs, through the descriptors it makes"
    return [f"### tutorial 06's {what}, causal={causal} (Z{Z} H{H} {kind})", ""] + lines


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tutorial", required=True, help="06-fused-attention.py as extracted from upstream")
    ap.add_argument("--libs", default="kiln,triton")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--ctx", default="16384")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="the tutorial's fp8 forward")
    ap.add_argument("--bwd", action="store_true", help="the tutorial's backward, against SDPA's")
    ap.add_argument("--configs", default=CONFIGS, help="BMxBNxSTAGESxWARPS,...")
    ap.add_argument("--bwd-configs", default=BACKWARD, help="the backward's M1xN1xM2xN2xSTAGESxWARPS,... "
                    "(default: the tutorial's own)")
    ap.add_argument("--out")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child: one library, its rows as JSON lines on stdout
    ap.add_argument("--skip", type=int, default=0, help=argparse.SUPPRESS)  # the child: items a dead one ran
    args = ap.parse_args(argv)
    if args.one:
        run_one(args)
        return
    passed = list(argv if argv is not None else sys.argv[1:])
    results = {lib: run_library(lib, passed, work_items(args)) for lib in args.libs.split(",")}
    rows = [dict(r, lib=lib) for lib, lib_rows in results.items() for r in lib_rows]
    kind = "fp8 e5m2" if args.fp8 else "fp16 backward" if args.bwd else "fp16"
    name = "tutorial06-configs" + ("-fp8" if args.fp8 else "-bwd" if args.bwd else "")
    name += "-causal" if args.causal else ""
    results_file.report(args.out, name, table(results, args.causal, kind), rows)


if __name__ == "__main__":
    main()
