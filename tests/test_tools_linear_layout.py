"""kiln.tools.LinearLayout (`triton.tools.LinearLayout`): maps over GF(2) from named input bits to
named output bits. Checked by what each operation means (a product's bits, an inverse undoing, a
least-squares solution solving) on random layouts, and by the texts of one small layout, which
Triton 3.6's binding printed alike (2026-12-08, bench/results/2026-12-08-cpu-linear-layout-session108.md)."""
import random

import pytest

from kiln.tools import LinearLayout

IN_DIMS = ["register", "lane", "warp", "block", "a"]
OUT_DIMS = ["dim0", "dim1", "dim2"]


def _random_layout(rng, surjective=False):
    outs = rng.sample(OUT_DIMS, rng.randint(1, 2))
    sizes = [1 << rng.randint(0, 3) for _ in outs]
    bases = [(d, [[rng.randrange(s) for s in sizes] for _ in range(rng.randint(0, 3))])
             for d in rng.sample(IN_DIMS, rng.randint(1, 3))]
    if surjective:  # every out bit reached: one more in dim holding each as a basis
        bases.append(("extra", [[(1 << b) if i == j else 0 for i in range(len(outs))]
                                for j, s in enumerate(sizes) for b in range(s.bit_length() - 1)]))
    return LinearLayout.from_bases(bases, outs, sizes, require_surjective=surjective)


def _inputs(rng, layout):
    return {d: rng.randrange(1 << len(b)) for d, b in layout.bases}


def test_apply_xors_the_bases_of_the_set_bits():
    rng = random.Random(1)
    for _ in range(200):
        layout = _random_layout(rng)
        x, y = _inputs(rng, layout), _inputs(rng, layout)
        xor = {d: x[d] ^ y[d] for d in x}
        assert layout.apply(xor) == {d: layout.apply(x)[d] ^ layout.apply(y)[d] for d in layout.get_out_dim_names()}
        zero = {d: 0 for d in x}
        assert set(layout.apply(zero).values()) <= {0}


def test_a_product_puts_the_outer_layouts_bits_above_the_inner_ones():
    assert LinearLayout.identity_1d(4, "i", "o") * LinearLayout.identity_1d(8, "i", "o") == \
        LinearLayout.identity_1d(32, "i", "o")
    rng = random.Random(2)
    for _ in range(200):
        inner, outer = _random_layout(rng), _random_layout(rng)
        product = inner * outer
        x, y = _inputs(rng, inner), _inputs(rng, outer)
        both = {d: x.get(d, 0) + (y.get(d, 0) << len(dict(inner.bases).get(d, ()))) for d in product.get_in_dim_names()}
        inner_out, outer_out = inner.apply(x), outer.apply(y)
        sizes = dict(inner.out_dims)
        expected = {d: inner_out.get(d, 0) ^ (outer_out.get(d, 0) * sizes.get(d, 1))
                    for d in product.get_out_dim_names()}
        assert product.apply(both) == expected
    layout = LinearLayout.identity_1d(4, "i", "o")
    same = layout
    layout *= LinearLayout.zeros_1d(2, "i", "o")  # in place: x -> x % 4
    assert layout is same and [layout.apply({"i": v})["o"] for v in range(8)] == [0, 1, 2, 3] * 2


def test_inverses_undo_and_least_squares_solve():
    rng = random.Random(3)
    checked = 0
    for _ in range(300):
        layout = _random_layout(rng, surjective=True)
        plus = layout.pseudoinvert()
        for _ in range(8):
            y = {d: rng.randrange(s) for d, s in layout.out_dims}
            assert layout.apply(plus.apply(y)) == y
        if layout.is_invertible():
            inverse = layout.invert()
            x = _inputs(rng, layout)
            assert inverse.apply(layout.apply(x)) == x
            checked += 1
        # another layout onto the same out dims: X with layout(X(z)) == other(z)
        other = LinearLayout.from_bases([("p", [[rng.randrange(s) for _, s in layout.out_dims] for _ in range(3)])],
                                        layout.get_out_dim_names(), [s for _, s in layout.out_dims],
                                        require_surjective=False)
        solved = other.invert_and_compose(layout)
        for z in range(8):
            assert layout.apply(solved.apply({"p": z})) == other.apply({"p": z})
    assert checked > 10


def test_composition_applies_one_layout_then_the_other():
    rng = random.Random(4)
    for _ in range(100):
        layout = _random_layout(rng)
        outer = LinearLayout()
        for name, size in layout.out_dims:
            outer *= LinearLayout.strided_1d(size, 2, name, name + "_x2")
        composed = layout.compose(outer)
        x = _inputs(rng, layout)
        assert composed.apply(x) == outer.apply(layout.apply(x))


def test_properties_and_matrix_view():
    layout = LinearLayout.from_bases([("in0", [[1, 0], [2, 0]]), ("in1", [[0, 1], [0, 0]])], ["out0", "out1"])
    assert layout.out_dims == [("out0", 4), ("out1", 2)] and layout.num_in_dims == 2 and layout.num_out_dims == 2
    assert layout.get_in_dim_names() == ["in0", "in1"] and layout.bases[1] == ("in1", [[0, 1], [0, 0]])
    assert layout.get_matrix_view() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert layout.is_surjective() and not layout.is_injective() and not layout.is_invertible()
    assert LinearLayout.strided_1d(4, 2, "i", "o").get_matrix_view() == [[0, 0], [1, 0], [0, 1]]
    assert layout != LinearLayout() and layout == layout.transpose_ins(["in0", "in1"])


def test_texts_as_triton_prints_them():
    layout = LinearLayout.from_bases([("register", [[0, 1]]), ("lane", [[0, 2], [1, 0]]), ("warp", [[2, 0]]),
                                      ("block", [])], ["dim0", "dim1"])
    assert str(layout) == ("\n - register=1 -> (0, 1)\n - lane=1 -> (0, 2)\n   lane=2 -> (1, 0)\n - warp=1 -> (2, 0)\n"
                           " - block is a size 1 dimension\nwhere out dims are: [dim0 (size 4), dim1 (size 4)]")
    assert layout.get_distributed_view(False) == ("[[T0:0, T0:1, T1:0, T1:1]\n[ T2:0, T2:1, T3:0, T3:1]\n"
                                                  "[ T4:0, T4:1, T5:0, T5:1]\n[ T6:0, T6:1, T7:0, T7:1]]\n")
    assert layout.get_distributed_view(True) == ("Warp0:\n(0,0), (0,2), (1,0), (1,2)\n(0,1), (0,3), (1,1), (1,3)\n"
                                                 "Warp1:\n(2,0), (2,2), (3,0), (3,2)\n(2,1), (2,3), (3,1), (3,3)\n")
    shared = LinearLayout.from_bases([("offset", [[0, 1], [1, 0], [0, 2]]), ("block", [])], ["dim0", "dim1"], [2, 4])
    assert shared.get_shared_view(False) == "[[(0:0),(0:1),(1:0),(1:1)]\n[ (0:2),(0:3),(1:2),(1:3)]]\n"
    assert shared.get_shared_view(True).splitlines()[:3] == ["Block: 0:", "Offset: 0 -> (0,0)", "Offset: 1 -> (0,1)"]
    assert str(LinearLayout()) == "\n(empty layout)"


@pytest.mark.parametrize("make, message", [
    (lambda: LinearLayout.identity_1d(6, "i", "o"), "not a power of 2"),
    (lambda: LinearLayout.from_bases([("i", [[4]])], ["o"], [4]), "not below"),
    (lambda: LinearLayout.from_bases([("i", [[1]])], ["o"], [4]), "surjective"),
    (lambda: LinearLayout.from_bases([("i", [[1]])], ["o"], require_surjective=False), "out_dim_sizes must be"),
    (lambda: LinearLayout.from_bases([("i", [[1, 0]])], ["o"]), "one per out dim"),
    (lambda: LinearLayout.zeros_1d(4, "i", "o", 2).invert(), "no inverse"),
    (lambda: LinearLayout.identity_1d(4, "i", "o").apply({"j": 1}), "in dims"),
    (lambda: LinearLayout.identity_1d(4, "i", "o").get_distributed_view(False), "walks the in dims"),
])
def test_what_it_cannot_be_is_a_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()
