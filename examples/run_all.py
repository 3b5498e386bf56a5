"""The main job: run every example kernel and build each of its specializations for two GPUs.

On a machine without a GPU the kernels run in the NumPy interpreter (KILN_INTERPRET=1)
and are checked against NumPy; every specialization they compiled is then lowered to
PTX and linked into a cubin for sm_80 and sm_90a, which needs no GPU. The builds go the
way a training job's do: the node cache, else the node's compile daemon (started on
first need; `KILN_DAEMON=off` compiles in this process), so a second run is all hits.
"""
import importlib
import os
import sys
import time

EXAMPLES = ["vector_add", "fused_softmax", "matmul", "dropout", "layer_norm", "fused_attention"]
TARGETS = ["sm_80", "sm_90a"]


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def main():
    if not _has_gpu():
        os.environ.setdefault("KILN_INTERPRET", "1")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kiln
    from kiln.compiler import compile_binary

    kernels = []
    for name in EXAMPLES:
        module = importlib.import_module(name)
        start = time.perf_counter()
        module.main()
        print(f"  ({time.perf_counter() - start:.2f} s)")
        for value in vars(module).values():
            fn = value
            while not isinstance(fn, kiln.JITFunction) and hasattr(fn, "fn"):
                fn = fn.fn
            if isinstance(fn, kiln.JITFunction) and fn.cache and fn not in [k for k, _ in kernels]:
                kernels.append((fn, name))

    print(f"\n{'kernel':36} {'target':7} {'PTX bytes':>10} {'cubin bytes':>12} {'regs':>5} {'shared':>7} "
          f"{'from':>7} {'ms':>6}")
    for fn, module in kernels:
        for compiled in fn.cache.values():
            for target in TARGETS:
                start = time.perf_counter()
                ck = compile_binary(compiled.ir, target, compiled.options)
                ms = (time.perf_counter() - start) * 1e3
                print(f"{module + '.' + fn.__name__:36} {target:7} {len(ck.ptx):10} {len(ck.cubin):12} "
                      f"{ck.metadata.get('n_regs', '?'):>5} {ck.metadata.get('shared', 0):>7} {ck.source:>7} {ms:6.0f}")


if __name__ == "__main__":
    main()
