"""The TTIR module `ASTSource.make_ir` gives under the drop-in (kiln.ttir_module), and what PyTorch
learns from walking it: which tensors a user's Triton kernel reads and which it writes."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import kiln
import kiln.language as tl
from kiln.dropin import doctor
from kiln.dropin.backends import BaseBackend
from kiln.dropin.jit import native_specialize_impl
from kiln.dropin.utils import find_paths_if, get_iterable_path
from kiln.ttir import kernel_with_calls
from kiln.ttir_module import Module


@kiln.jit
def _scaled_store(ptr, value, BLOCK: tl.constexpr):
    tl.store(ptr + tl.arange(0, BLOCK), value * 2)


@kiln.jit
def _steps(src, dst, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n, BLOCK):
        acc += tl.load(src + i + tl.arange(0, BLOCK))
    _scaled_store(dst, acc, BLOCK)


def module_of_steps():
    import numpy as np
    x = np.zeros(64, np.float32)
    return Module(kernel_with_calls(_steps, (x, x, 64), {"BLOCK": 16}))


def test_the_walk_visits_each_op_after_the_ops_in_its_regions_and_the_module_last():
    module = module_of_steps()
    names = []
    module.walk(lambda op: names.append(op.get_name()))
    assert names[-1] == "builtin.module"
    assert names.count("tt.func") == 2
    assert names.index("tt.load") < names.index("scf.yield") < names.index("scf.for") < names.index("tt.call")
    assert names.index("tt.call") < names.index("tt.func") < names.index("tt.store")  # the kernel, then its callee
    assert module.verify()


def test_ops_have_ttir_s_operands_blocks_and_symbols():
    module = module_of_steps()
    ops = {}
    module.walk(lambda op: ops.setdefault(op.get_name(), []).append(op))
    kernel, callee = ops["tt.func"]
    assert kernel.get_str_attr("sym_name") == "_steps" and kernel.get_block().get_parent() is module.get_region(0)
    entry = kernel.get_region(0).blocks[0]
    assert entry.get_num_arguments() == 3  # src, dst, n: BLOCK is a constexpr
    (loop,) = ops["scf.for"]
    assert loop.get_num_operands() == 4  # lower bound, upper bound, step, the carried value's start
    body = loop.get_region(0).blocks[0]
    assert body.get_num_arguments() == 2  # the induction variable, the carried value
    assert body.get_parent().id() == loop.get_region(0).id()
    (call,) = ops["tt.call"]
    assert call.get_flat_symbol_ref_attr("callee") == callee.get_str_attr("sym_name")
    assert call.get_operand(0).id() == entry.get_argument(1).id()  # dst, passed on as it is
    (store,) = ops["tt.store"]
    assert store.get_block().get_parent().owner is callee
    ids = [v.id() for op in ops["tt.load"] + ops["tt.store"] for v in (op.get_operand(0),)]
    assert len(set(ids)) == len(ids)
    assert "tt.func public @_steps" in str(module)


def test_a_use_before_its_definition_does_not_verify():
    module = module_of_steps()
    stores = []
    module.walk(lambda op: stores.append(op) if op.get_name() == "tt.store" else None)
    stores[0].operands[0] = type(stores[0].operands[0])()  # a value nothing defines
    assert not module.verify()


class _Tensor:
    def __init__(self, address, dtype="float32"):
        self.address, self.dtype = address, dtype

    def data_ptr(self):
        return self.address


@pytest.mark.parametrize("arg, is_const, specialize, want", [
    (_Tensor(4096), False, True, ("*fp32", "D")),
    (_Tensor(4100), False, True, ("*fp32", "")),
    (_Tensor(4096, "float16"), True, True, ("*kfp16", "D")),
    (_Tensor(4096), False, False, ("*fp32", None)),
    (1, False, True, ("constexpr", 1)),
    (1, False, False, ("i32", None)),
    (32, False, True, ("i32", "D")),
    (33, False, True, ("i32", "")),
    (2**31 + 1, False, True, ("i64", "")),
    (2**63, False, True, ("u64", "D")),
    (True, False, True, ("u1", None)),
    (0.5, False, True, ("fp32", None)),
    (None, False, True, ("constexpr", None)),
    ((16, 0.5), False, True, (("i32", "fp32"), ("D", None))),
])
def test_arguments_specialize_as_triton_s_launcher_keys_them(arg, is_const, specialize, want):
    assert native_specialize_impl(BaseBackend, arg, is_const, specialize, True) == want


def test_an_integer_past_64_bits_cannot_be_specialized():
    with pytest.raises(OverflowError):
        native_specialize_impl(BaseBackend, 2**64, False, True, True)


def test_paths_of_nested_values():
    values = [1, "D", (2, ("", 3)), "x"]
    paths = find_paths_if(values, lambda _, v: isinstance(v, str))
    assert paths == [(1,), (2, 1, 0), (3,)]
    assert [get_iterable_path(values, p) for p in paths] == ["D", "", "x"]
    assert BaseBackend.parse_attr("D") == [["tt.divisibility", 16]] and BaseBackend.parse_attr("") == []


# PyTorch's mutation analysis of user kernels (torch.compile's triton_kernel_wrap), on the drop-in's module
ANALYSIS = textwrap.dedent('''
    import json
    import torch
    import triton
    import triton.language as tl
    from torch._higher_order_ops.triton_kernel_wrap import identify_accessed_tensors

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    @triton.jit
    def copy_in_steps(src, dst, n, BLOCK: tl.constexpr):
        p, q = src, dst
        for i in range(0, n, BLOCK):
            offs = tl.arange(0, BLOCK)
            tl.store(q + offs, tl.load(p + offs))
            p += BLOCK
            q += BLOCK

    @triton.jit
    def pick(a, b, c, flag, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(c + offs)
        if flag > 0:
            tl.store(a + offs, v)
        else:
            tl.store(b + offs, v)

    @triton.jit
    def count(x, counter, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.atomic_add(counter, tl.sum(tl.load(x + offs, mask=offs < n, other=0.0), axis=0))

    @triton.jit
    def store_helper(ptr, value, BLOCK: tl.constexpr):
        tl.store(ptr + tl.arange(0, BLOCK), value)

    @triton.jit
    def through_a_call(x, out, unused, BLOCK: tl.constexpr):
        store_helper(out, tl.load(x + tl.arange(0, BLOCK)) * 2, BLOCK)

    @triton.jit
    def until_four(x, out, BLOCK: tl.constexpr):
        i = 0
        acc = tl.zeros([BLOCK], tl.float32)
        while i < 4:
            acc += tl.load(x + tl.arange(0, BLOCK))
            i += 1
        tl.store(out + tl.arange(0, BLOCK), acc)

    @triton.jit
    def maybe_bias(x, bias, out, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x + offs)
        if bias is not None:
            v += tl.load(bias + offs)
        tl.store(out + offs + n - 1, tl.cumsum(v, axis=0))

    t = lambda: torch.zeros(64)
    cases = {
        "add": (add, dict(x_ptr=t(), y_ptr=t(), out_ptr=t(), n=64, BLOCK=64)),
        "copy_in_steps": (copy_in_steps, dict(src=t(), dst=t(), n=64, BLOCK=16)),
        "pick": (pick, dict(a=t(), b=t(), c=t(), flag=3, BLOCK=64)),
        "count": (count, dict(x=t(), counter=t(), n=64, BLOCK=64)),
        "through_a_call": (through_a_call, dict(x=t(), out=t(), unused=t(), BLOCK=64)),
        "until_four": (until_four, dict(x=t(), out=t(), BLOCK=64)),
        "no_bias": (maybe_bias, dict(x=t(), bias=None, out=t(), n=1, BLOCK=64)),
        "bias": (maybe_bias, dict(x=t(), bias=t(), out=t(), n=5, BLOCK=64)),
    }
    found = {}
    for name, (kernel, kwargs) in cases.items():
        rw = identify_accessed_tensors(kernel, kwargs, {}).read_writes
        found[name] = [sorted(d.name for d in rw.reads), sorted(d.name for d in rw.writes)]
    print(json.dumps(found))
''')


@pytest.mark.skipif(doctor.installed_hook() is None, reason="kiln's drop-in hook is not installed here")
def test_pytorch_learns_which_tensors_a_user_kernel_reads_and_writes(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "analysis.py"
    script.write_text(ANALYSIS)
    env = {**os.environ, "KILN_DROPIN": "1", "TRITON_INTERPRET": "1", "KILN_DAEMON": "off",
           "KILN_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "assuming every input is mutated" not in out.stderr, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {
        "add": [["x_ptr", "y_ptr"], ["out_ptr"]],
        "copy_in_steps": [["src"], ["dst"]],
        "pick": [["c"], ["a", "b"]],
        "count": [["x"], ["counter"]],
        "through_a_call": [["x"], ["out"]],
        "until_four": [["x"], ["out"]],
        "no_bias": [["x"], ["out"]],
        "bias": [["bias", "x"], ["out"]],
    }


def test_a_jit_function_and_a_tensor_descriptor_specialize_as_in_triton():
    torch = pytest.importorskip("torch")
    from kiln.tools.tensor_descriptor import TensorDescriptor
    assert native_specialize_impl(BaseBackend, _steps, False, True, True) == ("constexpr", _steps.cache_key)
    desc = TensorDescriptor(torch.zeros(64, 32, dtype=torch.float16), [64, 32], [32, 1], [16, 32])
    assert native_specialize_impl(BaseBackend, desc, False, True, True) == ("tensordesc<fp16[16, 32]>", None)
