"""Random block-IR kernels, run by the CPU emulator of the lowering and by the NumPy
interpreter; their outputs must agree.

    python tests/codegen_corpus/fuzz.py [first_seed] [count]

Each kernel loads a small 2-D block (sizes from 1 to 64 per dim, so layouts wrap and
threads share elements), chains random shape-changing and reducing ops (reduce and
broadcast back, permute, reshape, join/split, cat, scan, elementwise) at a random warp
count and stores the result. `test_codegen_emulate.py` runs a few fixed seeds.
"""
from __future__ import annotations

import random
import sys

import numpy as np

SIZES = [1, 2, 4, 8, 16, 32, 64]


class Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.lines: list[str] = []
        self.n = 0

    def new(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def emit(self, text: str, t: str) -> str:
        v = self.new()
        self.lines.append(f"  {v} = {text} : {t}")
        return v

    @staticmethod
    def ty(shape) -> str:
        return "<" + "x".join(map(str, shape)) + "xfp32>" if shape else "fp32"

    def offsets(self, shape) -> str:
        """int32 block of row-major flat indices of `shape`."""
        numel = int(np.prod(shape))
        flat = self.emit(f"arange {{end = {numel}, start = 0}}", f"<{numel}xint32>")
        if len(shape) == 1:
            return flat
        return self.emit(f"reshape {flat}", "<" + "x".join(map(str, shape)) + "xint32>")

    def combine(self, kind: str) -> str:
        a, b, c = self.new(), self.new(), self.new()
        return (f"{{\n  ^({a}: fp32, {b}: fp32):\n    {c} = {kind} {a}, {b} : fp32\n    yield {c}\n  }}")

    def step(self, v: str, shape: tuple) -> tuple[str, tuple]:
        r = self.r
        choice = r.choice(["unary", "binary", "reduce_back", "permute", "reshape", "join_split", "cat",
                           "scan", "reduce_scalar", "dot", "dot16", "cast", "loop", "where"])
        t = self.ty(shape)
        if choice == "unary":
            return self.emit(f"{r.choice(['neg', 'abs', 'floor'])} {v}", t), shape
        if choice == "binary":
            return self.emit(f"{r.choice(['add', 'mul', 'max', 'sub'])} {v}, {v}", t), shape
        if choice == "reduce_back":
            axis = r.randrange(len(shape))
            small = shape[:axis] + shape[axis + 1:]
            kind = r.choice(["add", "max", "min"])
            if not small:
                return self.step(v, shape)
            red = self.emit(f"reduce {v} {{axis = {axis}}}", self.ty(small) + " " + self.combine(kind))
            back = self.emit(f"expand_dims {red} {{axis = {axis}}}",
                             self.ty(small[:axis] + (1,) + small[axis:]))
            wide = self.emit(f"broadcast {back}", t)
            return self.emit(f"sub {v}, {wide}", t), shape
        if choice == "permute" and len(shape) >= 2:
            order = list(range(len(shape)))
            r.shuffle(order)
            new = tuple(shape[i] for i in order)
            return self.emit(f"permute {v} {{order = {order}}}", self.ty(new)), new
        if choice == "reshape":
            numel = int(np.prod(shape))
            options = [(a, numel // a) for a in SIZES if numel % a == 0 and numel // a in SIZES] + [(numel,)]
            options += [(a, b, numel // (a * b)) for a in (2, 4) for b in (2, 4, 8) if numel % (a * b) == 0]
            new = r.choice(options)
            return self.emit(f"reshape {v}", self.ty(new)), tuple(new)
        if choice == "join_split":
            joined = self.emit(f"join {v}, {v}", self.ty(shape + (2,)))
            a, b = self.new(), self.new()
            self.lines.append(f"  {a}, {b} = split {joined} : {t}, {t}")
            return self.emit(f"add {a}, {b}", t), shape
        if choice == "cat" and shape[0] <= 32:
            new = (shape[0] * 2,) + shape[1:]
            return self.emit(f"cat {v}, {v}", self.ty(new)), new
        if choice == "scan":
            axis = r.randrange(len(shape))
            rev = r.choice(["true", "false"])
            return self.emit(f"scan {v} {{axis = {axis}, reverse = {rev}}}", t + " " + self.combine("add")), shape
        if choice == "dot" and len(shape) == 2 and shape[1] <= 16:
            m = shape[0]
            vt = self.emit(f"permute {v} {{order = [1, 0]}}", self.ty(shape[::-1]))
            zero = self.emit("constant {value = 0.0}", self.ty((m, m)))
            return self.emit(f"dot {v}, {vt}, {zero} {{input_precision = \"ieee\"}}", self.ty((m, m))), (m, m)
        if choice == "dot16" and len(shape) == 2 and shape[1] in (16, 32):
            m, k = shape  # fp16 operands: the tensor-core path when the tile allows it
            h = self.emit(f"cast {v}", t.replace("fp32", "fp16"))
            ht = self.emit(f"permute {h} {{order = [1, 0]}}", self.ty((k, m)).replace("fp32", "fp16"))
            zero = self.emit("constant {value = 0.0}", self.ty((m, m)))
            return self.emit(f"dot {h}, {ht}, {zero} {{input_precision = \"ieee\"}}", self.ty((m, m))), (m, m)
        if choice == "cast":
            half = t.replace("fp32", "fp16")
            return self.emit(f"cast {self.emit(f'cast {v}', half)}", t), shape
        if choice == "where":
            zero = self.emit("constant {value = 0.0}", t)
            pos = self.emit(f"cmp {v}, {zero} {{pred = \"gt\"}}", t.replace("fp32", "int1"))
            return self.emit(f"select {pos}, {v}, {self.emit(f'neg {v}', t)}", t), shape
        if choice == "loop":
            lo, hi, one = (self.emit(f"constant {{value = {k}}}", "int32") for k in (0, 3, 1))
            out, iv, acc = self.new(), self.new(), self.new()
            inner = self.new()
            self.lines += [f"  {out} = for {lo}, {hi}, {one}, {v} : {t} {{",
                           f"  ^({iv}: int32, {acc}: {t}):",
                           f"    {inner} = add {acc}, {v} : {t}",
                           f"    yield {inner}", "  }"]
            return out, shape
        if choice == "reduce_scalar" and len(shape) == 1:
            s = self.emit(f"reduce {v} {{axis = 0}}", "fp32 " + self.combine("max"))
            return self.emit(f"sub {v}, {self.emit(f'splat {s}', t)}", t), shape
        return v, shape

    def kernel(self):
        r = self.r
        shape = (r.choice(SIZES), r.choice(SIZES))
        if shape == (1, 1):
            shape = (1, 2)
        self.lines.append('kernel @fuzz(%x: ptr<fp32> {divisibility = 16, name = "x"}, '
                          '%y: ptr<fp32> {divisibility = 16, name = "y"}) {')
        offs = self.offsets(shape)
        ityp = "<" + "x".join(map(str, shape)) + "xint32>"
        ptrs = self.emit(f"splat %x", ityp.replace("int32", "ptr<fp32>"))
        addr = self.emit(f"addptr {ptrs}, {offs}", ityp.replace("int32", "ptr<fp32>"))
        numel = int(np.prod(shape))
        limit = self.emit(f"constant {{value = {r.randint(0, numel)}}}", ityp)
        mask = self.emit(f"cmp {offs}, {limit} {{pred = \"lt\"}}", ityp.replace("int32", "int1"))
        other = self.emit(f"constant {{value = {float(r.randint(-3, 3))}}}", self.ty(shape))
        v = self.emit(f"load {addr}, {mask}, {other}", self.ty(shape))
        for _ in range(r.randint(3, 8)):
            v, shape = self.step(v, shape)
        offs = self.offsets(shape)
        ityp = "<" + "x".join(map(str, shape)) + "xint32>"
        ptrs = self.emit(f"splat %y", ityp.replace("int32", "ptr<fp32>"))
        addr = self.emit(f"addptr {ptrs}, {offs}", ityp.replace("int32", "ptr<fp32>"))
        self.lines.append(f"  store {addr}, {v}")
        self.lines.append("  return\n}")
        return "\n".join(self.lines) + "\n", int(np.prod(shape)), r.choice([1, 2, 4, 8])


def check(seed: int) -> str | None:
    """None when the emulated kernel matches the interpreter, else a description."""
    from kiln.codegen.emulate import run_on_cpu
    from kiln.interpret import run as interpret
    from kiln.ir import parse_function
    text, numel, num_warps = Gen(seed).kernel()
    fn = parse_function(text)
    x = np.random.default_rng(seed).integers(-8, 8, 64 * 64).astype(np.float32)  # exact sums
    want, got = np.zeros(numel * 2, np.float32), np.zeros(numel * 2, np.float32)
    interpret(fn, (1,), [x.copy(), want])
    run_on_cpu(fn, (1,), [x.copy(), got], num_warps=num_warps)
    # exact but for summation order in dots of large values
    bad = int((~np.isclose(want, got, rtol=1e-5, atol=0, equal_nan=True)).sum())
    if not bad:
        return None
    return f"seed {seed} ({num_warps} warps): {bad} of {numel} differ\n{text}"


def main():
    first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    failures = [f for f in (check(s) for s in range(first, first + count)) if f]
    for f in failures:
        print(f)
    print(f"{count - len(failures)} of {count} kernels match")


if __name__ == "__main__":
    main()
