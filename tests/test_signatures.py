"""Declared signatures (`jit(prewarm=[...])`) build the IR a launch with such arguments builds."""
import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.ir import print_function
from kiln.ir.types import float16, int32, int64, pointer_type
from kiln.language.core import constexpr
from kiln.proto import compile_key
from kiln.signatures import Declared, SignatureError, expand, parse_arg

COPY_SIGNATURES = [{"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32:16", "BLOCK": 128},
                   {"x_ptr": "*fp16", "y_ptr": "*fp16:16", "n": 1, "BLOCK": 64, "num_warps": 8},
                   {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i64", "BLOCK": 32, "scale": 0.5}]


@kiln.jit(prewarm=COPY_SIGNATURES)
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, scale=2.0):
    offs = tl.arange(0, BLOCK)
    tl.device_assert(n > 0)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * scale, mask=offs < n)


def launched_key(kernel):
    ir, options = kernel.binary_inputs()
    return compile_key(ir, "sm_90a", options)


def declared_key(declared):
    ir, options = declared.build()
    return compile_key(ir, "sm_90a", options)


def test_arg_types_in_triton_spelling():
    assert parse_arg("*fp16:16") == (pointer_type(float16), {"divisibility": 16})
    assert parse_arg("*i8") == (pointer_type(kiln.language.int8), {})
    assert parse_arg("i32:16") == (int32, {"divisibility": 16})
    assert parse_arg("i64") == (int64, {})
    assert parse_arg("i32:8") == (int32, {"divisibility": 8})  # kiln specializes on 8 as well
    assert parse_arg("i32:1") == constexpr(1)
    assert parse_arg("fp16") == (float16, {}) and parse_arg("bf16") == (kiln.language.bfloat16, {})
    # Triton's other spellings: a const pointer (`tl.const` data; launches spell it so), bools as u1 and B
    const, attrs = parse_arg("*kfp16:16")
    assert const.const and const.element_ty == float16 and attrs == {"divisibility": 16}
    assert not parse_arg("*fp16")[0].const
    assert parse_arg("u1") == parse_arg("B") == (kiln.language.int1, {})
    assert parse_arg("*u1")[0].element_ty == kiln.language.int1
    for bad, message in (("fp8e5", "runtime scalar"), ("*fp99", "unknown pointer"), ("*kx", "unknown pointer"),
                         ("fp32:16", "only integers"),
                         ("i32:4", "only hints"), ("*fp32:1", "16-byte aligned"), ("*fp16:8", "16-byte aligned")):
        with pytest.raises(SignatureError, match=message):
            parse_arg(bad)


def test_declared_signatures_have_the_keys_of_real_launches():
    x = np.ones(128, np.float32)
    y = np.zeros(128, np.float32)
    declared = expand(copy).declared
    assert [d.label for d in declared][0] == "copy(x_ptr=*fp32:16, y_ptr=*fp32:16, n=i32:16, BLOCK=128)"
    assert declared_key(declared[0]) == launched_key(copy.warmup(x, y, 32, BLOCK=128))
    # n == 1 folds to a constant; y is aligned, x one element off (not 16-byte aligned)
    x16, y16 = np.ones(65, np.float16)[1:], np.zeros(64, np.float16)
    assert declared_key(declared[1]) == launched_key(copy.warmup(x16, y16, 1, BLOCK=64, num_warps=8))
    assert declared_key(declared[2]) == launched_key(copy.warmup(x, y, 2**33 + 1, BLOCK=32, scale=0.5))
    assert declared_key(declared[0]) != declared_key(declared[2])


@kiln.jit(prewarm=[{"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32:8", "BLOCK": 128}])
def copy_eights(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_a_declared_multiple_of_8_is_the_key_of_a_launch_with_one():
    x, y = np.ones(128, np.float32), np.zeros(128, np.float32)
    declared = expand(copy_eights).declared[0]
    assert declared_key(declared) == launched_key(copy_eights.warmup(x, y, 1000, BLOCK=128))
    assert declared_key(declared) != launched_key(copy_eights.warmup(x, y, 1001, BLOCK=128))
    assert declared_key(declared) != launched_key(copy_eights.warmup(x, y, 1008, BLOCK=128))


def test_the_ir_keeps_asserts_only_in_debug_mode():
    ir, _ = Declared(copy, dict(COPY_SIGNATURES[0])).build()
    assert "assert" not in print_function(ir)
    ir, _ = Declared(copy, {**COPY_SIGNATURES[0], "debug": True}).build()
    assert "assert" in print_function(ir)


@pytest.mark.parametrize("values, message", [
    ({"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 16}, "gives no n"),
    ({"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": 16, "nope": 1}, "no parameter nope"),
    ({"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "f32", "BLOCK": 16}, "runtime scalar"),
])
def test_bad_signatures_say_what_is_wrong(values, message):
    with pytest.raises(SignatureError, match=message):
        Declared(copy, values).build()


CONFIGS = [kiln.Config({"BLOCK": 32}, num_warps=2, num_stages=2), kiln.Config({"BLOCK": 64}, num_warps=4)]


@kiln.autotune(configs=CONFIGS, key=["n"])
@kiln.jit(prewarm=[{"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32"},
                   {"x_ptr": "*fp16:16", "y_ptr": "*fp16:16", "n": "i32:16", "BLOCK": 8}])
def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_autotune_expands_every_signature_over_every_config():
    declared = expand(tuned).declared
    assert len(declared) == 3  # 2 configs for the first signature; the second clashes with BLOCK: one error
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    launched = {launched_key(k) for k in tuned.warmup(x, y, 5)}
    assert {declared_key(d) for d in declared[:2]} == launched
    assert declared[0].build()[1] == {"num_warps": 2, "num_stages": 2}
    with pytest.raises(SignatureError, match="BLOCK given by the signature and by the autotuner's configs"):
        declared[2].build()


@kiln.heuristics({"BLOCK": lambda args: 2 * args["WIDTH"], "EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@kiln.jit(prewarm=[{"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "WIDTH": 16},
                   {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "WIDTH": 16, "EVEN": False},
                   {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": 16, "WIDTH": 8}])
def guided(x_ptr, y_ptr, n, WIDTH: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_heuristics_run_on_plain_values_and_skip_otherwise():
    expansion = expand(guided)
    assert [s.label for s in expansion.skipped] == ["guided(x_ptr=*fp32, y_ptr=*fp32, n=i32, WIDTH=16, BLOCK=32)"]
    assert "heuristic for EVEN" in expansion.skipped[0].reason and "KeyError" in expansion.skipped[0].reason
    declared = expansion.declared
    assert [d.values["BLOCK"] for d in declared] == [32, 16]
    assert declared[0].values["EVEN"] is False  # declared by hand: taken as given
    assert declared[1].values["EVEN"] is True   # computed from the plain value n = 16
    x, y = np.ones(16, np.float32), np.zeros(16, np.float32)
    assert declared_key(declared[1]) == launched_key(guided.warmup(x, y, 16, WIDTH=8))
