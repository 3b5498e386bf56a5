"""Triton's `cache_key` of a @jit function (kiln.dependencies): the source of the function and of
every @jit or constexpr function it calls, its line, its constexpr globals; kept in `hash` until
that is reset. A function passed as an argument is a new kernel when its source changes; globals
and closure values are checked at launch against copies; two callers that saw one global differ
is Triton's error. (Upstream's runtime/test_cache.py under the drop-in, issue 31.)"""
import re
import textwrap

import numpy as np
import pytest

import kiln
import kiln.language as tl
from kiln.dropin.jit import jit

SCALE = tl.constexpr(3)
SHARED = tl.constexpr(0)


@jit
def _leaf(v):
    return v * 2


@jit
def _middle(v):
    return _leaf(v) + 1


@jit
def _top(out):
    tl.store(out, _middle(tl.full((), 1, tl.int32)) * SCALE)


@kiln.constexpr_function
def _doubled(n):
    return 2 * n


@jit
def _uses_doubled(out):
    tl.store(out, _doubled(4))


def _host_helper(n):
    return n + 1


@jit
def _names_plain_function(out):
    tl.store(out, _host_helper(4))


def _keys_after(change, *fns):
    """(key before, key after) of fns[0] with `change` applied to the source of fns[-1]."""
    before = fns[0].cache_key
    original = fns[-1].src
    fns[-1]._unsafe_update_src(change(original))
    try:
        for fn in fns:
            fn.hash = None
        after = fns[0].cache_key
    finally:
        fns[-1]._unsafe_update_src(original)
        for fn in fns:
            fn.hash = None
    assert fns[0].cache_key == before  # back as it was
    return before, after


def test_a_callees_source_is_part_of_the_key_at_any_depth():
    before, after = _keys_after(lambda s: s.replace("v * 2", "v * 3"), _top, _middle, _leaf)
    assert before != after
    before, after = _keys_after(lambda s: s, _top, _middle, _leaf)
    assert before == after


def test_the_key_is_kept_until_hash_is_reset():
    before = _top.cache_key
    original = _leaf.src
    _leaf._unsafe_update_src(original.replace("v * 2", "v * 5"))
    try:
        assert _top.cache_key == before  # callers keep theirs, as in Triton
        assert _leaf.hash is None
    finally:
        _leaf._unsafe_update_src(original)


def test_constexpr_functions_have_a_key_that_follows_their_source():
    assert len(_doubled.cache_key) == 64
    before, after = _keys_after(lambda s: s.replace("2 * n", "3 * n"), _uses_doubled, _doubled)
    assert before != after
    out = np.zeros(1, np.int32)
    _uses_doubled[(1,)](out)  # the function called is still the one defined
    assert out[0] == 8


def test_naming_a_plain_function_fails_cache_key_as_in_triton_but_still_runs_in_kiln():
    with pytest.raises(RuntimeError, match="Unsupported function referenced"):
        _names_plain_function.cache_key
    out = np.zeros(1, np.int32)
    _names_plain_function[(1,)](out)
    assert out[0] == 5


def test_the_line_of_the_definition_is_part_of_the_key(tmp_path):
    import importlib.util
    code = textwrap.dedent("""
        from kiln.dropin.jit import jit
        @jit
        def k(x):
            x = x + 1
    """)
    keys = []
    for blank_lines in (0, 2):
        path = tmp_path / f"mod{blank_lines}.py"
        path.write_text("\n" * blank_lines + code)
        spec = importlib.util.spec_from_file_location(f"kiln_key_mod{blank_lines}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        keys.append(module.k.cache_key)
    assert keys[0] != keys[1]


def test_a_function_argument_whose_source_changes_is_a_new_kernel_and_the_old_one_comes_back():
    @jit
    def value():
        return 10

    @jit
    def store(out, FN: tl.constexpr):
        tl.store(out, FN())

    out = np.zeros(1, np.int32)
    store[(1,)](out, value)
    assert out[0] == 10
    first = store.device_caches[0][0].copy()
    original = value.src
    value._unsafe_update_src(original.replace("10", "11"))
    store[(1,)](out, value)
    assert out[0] == 11
    value._unsafe_update_src(original)
    kernel = store[(1,)](out, value)
    assert out[0] == 10
    assert kernel in first.values()  # the kernel compiled first, not a new compile


def test_a_closure_constexpr_changed_in_place_makes_the_launch_an_error():
    def make(c):
        @jit
        def fill(out):
            tl.store(out, c)
        return fill

    c = tl.constexpr(42)
    fill = make(c)
    out = np.zeros(1, np.int32)
    fill[(1,)](out)
    c.value = 43
    with pytest.raises(RuntimeError, match=re.escape("Global variable c has changed since we compiled this kernel, "
                                                     "from constexpr[42] to constexpr[43]")):
        fill[(1,)](out)


def test_two_callers_that_saw_a_global_differ_is_tritons_error(monkeypatch):
    @jit
    def inner():
        a = SHARED  # noqa: F841

    @jit
    def first():
        a = SHARED  # noqa: F841
        inner()

    @jit
    def second():
        a = SHARED  # noqa: F841
        inner()

    first[(1,)]()
    monkeypatch.setitem(globals(), "SHARED", tl.constexpr(1))
    with pytest.raises(RuntimeError, match="Global variable SHARED has value constexpr\\[1\\] when compiling .*second, "
                                           "but inner kernel inner has conflicting value constexpr\\[0\\]"):
        second[(1,)]()


def test_a_pickled_kernel_keeps_its_key():
    import pickle
    key = _top.cache_key
    assert pickle.loads(pickle.dumps(_top)).cache_key == key


def test_do_not_specialize_on_alignment_keeps_the_one_but_not_divisibility():
    compiled = []

    def heard(**kwargs):
        compiled.append(kwargs["key"])

    @jit(do_not_specialize_on_alignment=["n"])
    def unaligned(out, n):
        tl.store(out, n)

    @jit(do_not_specialize_on_alignment=[0])
    def unaligned_pointer(out, n):
        tl.store(out, n)

    from kiln.dropin import knobs
    out = np.zeros(2, np.int32)
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = heard
        for n in (1, 2, 4, 16, 32):
            unaligned[(1,)](out, n)
        assert len(compiled) == 2  # 1 (a constant), then every other value alike
        assert unaligned.params[1].do_not_specialize_on_alignment
        kernel = unaligned[(1,)](out, 16)
        assert "tt.divisibility" not in kernel.asm["ttir"].split("\n")[1].split("%n")[1]
        compiled.clear()
        unaligned_pointer[(1,)](out, 3)
        unaligned_pointer[(1,)](out[1:], 3)  # 4 bytes off: the same kernel
        assert len(compiled) == 1
        assert "tt.divisibility" not in unaligned_pointer[(1,)](out, 3).asm["ttir"].split("\n")[1]
