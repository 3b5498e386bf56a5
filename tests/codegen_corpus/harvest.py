"""Refresh `lang/*.kir` from the language conformance tests, and check codegen on them.

    python tests/codegen_corpus/harvest.py [--emulate] [pytest args...]

Runs the `test_lang_*` and example tests in the NumPy interpreter with a hook on kernel
launches: every distinct kernel's block IR is written to `lang/` (the corpus that
`test_codegen.py` compiles for every target). With `--emulate`, each launch is also run
through `kiln.codegen.emulate` on copies of its arguments and compared with the
interpreter's results: a CPU-only check of the lowering's semantics on every kernel of
the language.
"""
import json
import os
import pathlib
import re
import sys

import numpy as np

HERE = pathlib.Path(__file__).parent
EMULATE = "--emulate" in sys.argv


class Hook:
    def __init__(self):
        self.kernels: dict[str, str] = {}
        self.problems: list[str] = []

    def pytest_configure(self, config):
        import kiln.compiler as kc
        from kiln.ir import print_function
        original = kc.CompiledKernel.launch
        hook = self

        def launch(kernel, grid, args, stream=None):
            copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            original(kernel, grid, args, stream)
            text = print_function(kernel.ir, locs=False)
            name = re.sub(r"\W", "_", kernel.name.strip("_"))
            if text in hook.kernels.values():
                return
            key = name
            n = 1
            while key in hook.kernels:
                n += 1
                key = f"{name}_{n}"
            hook.kernels[key] = text
            if EMULATE:
                hook.emulate(key, kernel, grid, args, copies, kc.codegen_options(kernel.options)["num_warps"])

        kc.CompiledKernel.launch = launch

    def emulate(self, key, kernel, grid, args, copies, num_warps):
        from kiln.codegen.emulate import run_on_cpu
        if np.prod(grid) > 64 or not all(isinstance(a, (np.ndarray, int, float, bool, np.generic)) for a in copies):
            return
        try:
            run_on_cpu(kernel.ir, tuple(grid), [a.item() if isinstance(a, np.generic) else a for a in copies], num_warps)
        except Exception as e:
            self.problems.append(f"{key}: {type(e).__name__}: {e}")
            return
        for i, (want, got) in enumerate(zip(args, copies)):
            if not isinstance(want, np.ndarray):
                continue
            if want.dtype.kind == "f" or want.dtype.name.startswith(("bfloat16", "float8")):
                bad = ~np.isclose(want.astype(np.float64), got.astype(np.float64), rtol=2e-3, atol=1e-3, equal_nan=True)
            else:
                bad = want != got
            if bad.any():
                self.problems.append(f"{key}: argument {i} differs in {int(bad.sum())} of {bad.size} elements")


def main():
    import pytest
    os.environ["KILN_INTERPRET"] = "1"
    hook = Hook()
    extra = [a for a in sys.argv[1:] if a != "--emulate"]
    tests = sorted(str(p) for p in (HERE.parent).glob("test_lang_*.py")) + [str(HERE.parent / "test_examples.py")]
    pytest.main(["-q", "-p", "no:cacheprovider", *tests, *extra], plugins=[hook])
    out = HERE / "lang"
    out.mkdir(exist_ok=True)
    if not extra:  # a filtered run adds kernels; only a full run replaces the corpus
        for old in out.glob("*.kir"):
            old.unlink()
    for key, text in sorted(hook.kernels.items()):
        (out / f"{key}.kir").write_text(text)
    print(f"{len(hook.kernels)} kernels written to {out}")
    if EMULATE:
        print(json.dumps(hook.problems, indent=1) if hook.problems else "emulation matches the interpreter on every kernel")


if __name__ == "__main__":
    main()
