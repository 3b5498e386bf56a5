"""`triton.tools.LinearLayout`: Triton's linear layouts, a map from named input dimensions (register,
lane, warp, ...) to named output dimensions (a tensor's axes), linear over GF(2). Each input
dimension of size 2^k has k bases, one per bit of its index, each an offset per output dimension;
an input's image is the XOR of the bases of its set bits. Sizes are powers of two.

The same operations and results as Triton's (its C++ class, bound to Python): products (`*`, the
left operand's dims the minor ones), composition, inversion and `invert_and_compose` (the
least-squares solution over GF(2), free variables zero, dimensions that both layouts map alike kept
as identities), the matrix view (a row per output bit, a column per input bit), and the text views.
Layouts are small (at most 64 input and 64 output bits), so the linear algebra runs on Python
integers, a row a bitmask.
"""
from __future__ import annotations

MAX_BITS = 64


class LinearLayout:
    """A linear layout; `LinearLayout()` is the empty one (the identity of `*`)."""

    __hash__ = None  # compared by value, as Triton's

    def __init__(self):
        self._bases: dict[str, list[list[int]]] = {}
        self._out: dict[str, int] = {}
        self._rank = 0

    # ---- construction ---------------------------------------------------------------------------

    @classmethod
    def _make(cls, bases, out_dims, require_surjective: bool) -> "LinearLayout":
        """`bases` (in dim -> its bases, in order), `out_dims` ((name, size) in order), checked."""
        layout = cls()
        layout._bases = {str(d): [[int(v) for v in basis] for basis in b] for d, b in bases}
        layout._out = {}
        for name, size in out_dims:
            layout._out[str(name)] = int(size)
        layout._check(require_surjective)
        return layout

    def _check(self, require_surjective: bool) -> None:
        n_out = len(self._out)
        for dim, bases in self._bases.items():
            for basis in bases:
                if any(v < 0 for v in basis):
                    raise ValueError(f"LinearLayout: a negative basis value for in dim {dim!r}:{self}")
                if len(basis) != n_out:
                    raise ValueError(f"LinearLayout: in dim {dim!r} has a basis of {len(basis)} values, not one per "
                                     f"out dim ({n_out}):{self}")
        for name, size in self._out.items():
            if size < 1 or size & (size - 1):
                raise ValueError(f"LinearLayout: out dim {name!r} has size {size}, not a power of 2")
        sizes = list(self._out.values())
        for dim, bases in self._bases.items():
            for basis in bases:
                for value, size, name in zip(basis, sizes, self._out):
                    if value >= size:
                        raise ValueError(f"LinearLayout: basis {value} of in dim {dim!r} is not below out dim "
                                         f"{name!r}'s size {size}")
        if self._total_in_log2() > MAX_BITS or self._total_out_log2() > MAX_BITS:
            raise ValueError(f"LinearLayout: more than {MAX_BITS} input or output bits")
        self._rank = _rank(self._matrix())
        if require_surjective and not self.is_surjective():
            raise ValueError(f"LinearLayout: expected surjective (every out coordinate reached), but it is not:{self}")

    @staticmethod
    def strided_1d(size: int, stride: int, inDim: str, outDim: str) -> "LinearLayout":
        """x -> x * stride for x < size; surjective only for stride 1."""
        if size == 0:
            return LinearLayout()
        _power_of_two(size, "size")
        bases = [[(1 << i) * stride] for i in range(size.bit_length() - 1)]
        return LinearLayout._make([(inDim, bases)], [(outDim, stride * size)], stride == 1)

    @staticmethod
    def identity_1d(size: int, inDim: str, outDim: str) -> "LinearLayout":
        return LinearLayout.strided_1d(size, 1, inDim, outDim)

    @staticmethod
    def zeros_1d(size: int, inDim: str, outDim: str, outDimSize: int = 1) -> "LinearLayout":
        """x -> 0 for x < size, into an out dim of `outDimSize` (surjective only where that is 1)."""
        if size == 0:
            return LinearLayout()
        _power_of_two(size, "size")
        return LinearLayout._make([(inDim, [[0]] * (size.bit_length() - 1))], [(outDim, outDimSize)],
                                  outDimSize == 1)

    @staticmethod
    def from_bases(bases, out_dim_names, out_dim_sizes=None, require_surjective: bool = True) -> "LinearLayout":
        """From `[(in dim, [basis, ...]), ...]`; without `out_dim_sizes`, each out dim is the smallest
        power of two above every basis value along it (and the layout must be surjective)."""
        bases = [(name, [list(b) for b in dim_bases]) for name, dim_bases in bases]
        names = list(out_dim_names)
        if out_dim_sizes is not None:
            if len(out_dim_sizes) != len(names):
                raise ValueError("out_dim_names and out_dim_sizes must have the same length")
            return LinearLayout._make(bases, list(zip(names, out_dim_sizes)), require_surjective)
        if not require_surjective:
            raise ValueError("out_dim_sizes must be provided when require_surjective is false")
        sizes = [1] * len(names)
        for _, dim_bases in bases:
            for basis in dim_bases:
                for i, value in enumerate(basis[:len(names)]):
                    sizes[i] = max(sizes[i], 1 << int(value).bit_length())  # the next power of two above it
        return LinearLayout._make(bases, list(zip(names, sizes)), True)

    # ---- what it is ----------------------------------------------------------------------------

    @property
    def bases(self) -> list:
        return [(dim, [list(b) for b in bases]) for dim, bases in self._bases.items()]

    @property
    def out_dims(self) -> list:
        return list(self._out.items())

    @property
    def num_in_dims(self) -> int:
        return len(self._bases)

    @property
    def num_out_dims(self) -> int:
        return len(self._out)

    def get_in_dim_names(self) -> list:
        return list(self._bases)

    def get_out_dim_names(self) -> list:
        return list(self._out)

    def is_surjective(self) -> bool:
        return self._rank == self._total_out_log2()

    def is_injective(self) -> bool:
        return self._rank == self._total_in_log2()

    def is_invertible(self) -> bool:
        return self.is_surjective() and self._total_in_log2() == self._total_out_log2()

    def apply(self, inputs) -> dict:
        """{out dim: value} of `inputs` ({in dim: value}, every in dim given)."""
        inputs = dict(inputs)
        if sorted(inputs) != sorted(self._bases):
            raise ValueError(f"apply takes the in dims {list(self._bases)}, not {list(inputs)}")
        out = [0] * len(self._out)
        for dim, value in inputs.items():
            for bit, basis in enumerate(self._bases[dim]):
                if int(value) >> bit & 1:
                    out = [o ^ b for o, b in zip(out, basis)]
        return dict(zip(self._out, out))

    def get_matrix_view(self) -> list:
        """A row per output bit (out dims in order, low bits first), a column per input bit."""
        columns = self._total_in_log2()
        return [[row >> c & 1 for c in range(columns)] for row in self._matrix()]

    # ---- operations -----------------------------------------------------------------------------

    def __mul__(self, outer: "LinearLayout") -> "LinearLayout":
        """The product: `self`'s bits the low ones of every dim the two share, `outer`'s above them."""
        if not isinstance(outer, LinearLayout):
            return NotImplemented
        ins = _supremum(list(self._bases), list(outer._bases))
        outs = _supremum(list(self._out), list(outer._out))
        out_log2 = {d: self._out_log2(d) + outer._out_log2(d) for d in outs}
        bases = []
        for dim in ins:
            inner_bits, outer_bits = len(self._bases.get(dim, ())), len(outer._bases.get(dim, ()))
            rows = [[0] * len(outs) for _ in range(inner_bits + outer_bits)]
            for j, out in enumerate(outs):
                if dim in self._bases and out in self._out:
                    column = list(self._out).index(out)
                    for i, basis in enumerate(self._bases[dim]):
                        rows[i][j] = basis[column]
                if dim in outer._bases and out in outer._out:
                    column, shift = list(outer._out).index(out), self._out_log2(out)
                    for i, basis in enumerate(outer._bases[dim]):
                        rows[inner_bits + i][j] = basis[column] << shift
            bases.append((dim, rows))
        return LinearLayout._make(bases, [(d, 1 << out_log2[d]) for d in outs],
                                  self.is_surjective() and outer.is_surjective())

    def __imul__(self, outer: "LinearLayout") -> "LinearLayout":
        product = self * outer
        self._bases, self._out, self._rank = product._bases, product._out, product._rank
        return self

    def compose(self, outer: "LinearLayout") -> "LinearLayout":
        """x -> outer(self(x)): `self`'s out dims are `outer`'s in dims, none larger."""
        if sorted(self._out) != sorted(outer._bases):
            raise ValueError(f"compose: the out dims {list(self._out)} are not the outer layout's in dims "
                             f"{list(outer._bases)}")
        for dim, size in self._out.items():
            if size > outer._in_size(dim):
                raise ValueError(f"compose: out dim {dim!r} ({size}) is larger than the outer layout's in dim")
        bases = [(dim, [list(outer.apply(dict(zip(self._out, basis))).values()) for basis in dim_bases])
                 for dim, dim_bases in self._bases.items()]
        surjective = self.is_surjective() and outer.is_surjective() and \
            all(size == outer._in_size(dim) for dim, size in self._out.items())
        return LinearLayout._make(bases, list(outer._out.items()), surjective)

    def invert_and_compose(self, outer: "LinearLayout") -> "LinearLayout":
        """x -> outer^-1(self(x)), the least-squares solution where `outer` is not injective: from
        `self`'s in dims to `outer`'s. The two share their out dims, `outer`'s none smaller."""
        outs = list(self._out)
        if sorted(outs) != sorted(outer._out):
            raise ValueError(f"invert_and_compose: out dims {outs} and {list(outer._out)} differ")
        a = outer.transpose_outs(outs)
        for dim in outs:
            if a._out[dim] < self._out[dim]:
                raise ValueError(f"invert_and_compose: out dim {dim!r} of the outer layout is smaller")
        # a dim both map alike maps to itself (no data moves there); the rest is solved
        same = [d for d in a._bases if d in self._bases and a.sublayout([d], outs) == self.sublayout([d], outs)]
        a_rest = [d for d in a._bases if d not in same]
        b_rest = [d for d in self._bases if d not in same]
        if bool(a_rest) != bool(b_rest):
            raise ValueError("invert_and_compose: one layout has in dims to solve for and the other none")
        result = _lstsq(a.sublayout(a_rest, outs), self.sublayout(b_rest, outs)) if a_rest else LinearLayout()
        for dim in same:
            result *= LinearLayout.identity_1d(a._in_size(dim), dim, dim)
        return result.transpose_ins(list(self._bases)).transpose_outs(list(a._bases))

    def pseudoinvert(self) -> "LinearLayout":
        identity = LinearLayout()
        for dim, size in self._out.items():
            identity *= LinearLayout.identity_1d(size, dim, dim)
        return identity.invert_and_compose(self)

    def invert(self) -> "LinearLayout":
        if not self.is_invertible():
            raise ValueError(f"invert: the layout is not surjective and square, so has no inverse:{self}")
        return self.pseudoinvert()

    # ---- reshaping (Triton's C++ names them; Python callers reach them here too) ---------------

    def transpose_ins(self, names) -> "LinearLayout":
        _same_names(names, self._bases, "in")
        return LinearLayout._make([(d, self._bases[d]) for d in names], self._out.items(), self.is_surjective())

    def transpose_outs(self, names) -> "LinearLayout":
        _same_names(names, self._out, "out")
        order = [list(self._out).index(d) for d in names]
        bases = [(d, [[basis[i] for i in order] for basis in b]) for d, b in self._bases.items()]
        return LinearLayout._make(bases, [(d, self._out[d]) for d in names], self.is_surjective())

    def reshape_ins(self, dims) -> "LinearLayout":
        """The input bits, all dims' in order, regrouped as `dims` ((name, size) pairs)."""
        flat = [basis for b in self._bases.values() for basis in b]
        _sizes_match(dims, 1 << len(flat), "in")
        bases, at = [], 0
        for name, size in dims:
            bits = int(size).bit_length() - 1
            bases.append((name, flat[at:at + bits]))
            at += bits
        return LinearLayout._make(bases, self._out.items(), self.is_surjective())

    def reshape_outs(self, dims) -> "LinearLayout":
        """The output bits, all dims' in order (the first dim's low), regrouped as `dims`."""
        _sizes_match(dims, 1 << self._total_out_log2(), "out")
        shifts, at = [], 0
        for dim in self._out:
            shifts.append(at)
            at += self._out_log2(dim)
        bases = []
        for dim, dim_bases in self._bases.items():
            regrouped = []
            for basis in dim_bases:
                flat = sum(v << s for v, s in zip(basis, shifts))
                values = []
                for _, size in dims:
                    values.append(flat % size)
                    flat //= size
                regrouped.append(values)
            bases.append((dim, regrouped))
        return LinearLayout._make(bases, list(dims), self.is_surjective())

    def sublayout(self, in_names, out_names) -> "LinearLayout":
        """Only the in dims `in_names` and the out dims `out_names` (each kept in this layout's order)."""
        ins, outs = set(in_names), set(out_names)
        if not ins <= set(self._bases) or not outs <= set(self._out):
            raise ValueError(f"sublayout: {sorted(ins)} / {sorted(outs)} are not dims of the layout")
        keep = [i for i, d in enumerate(self._out) if d in outs]
        bases = [(d, [[basis[i] for i in keep] for basis in b]) for d, b in self._bases.items() if d in ins]
        return LinearLayout._make(bases, [(d, s) for d, s in self._out.items() if d in outs], False)

    # ---- comparison and text --------------------------------------------------------------------

    def __eq__(self, other) -> bool:
        if not isinstance(other, LinearLayout):
            return NotImplemented
        return list(self._out.items()) == list(other._out.items()) and \
            list(self._bases.items()) == list(other._bases.items())

    def __ne__(self, other) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __str__(self) -> str:
        outs = "[" + ", ".join(f"{d} (size {s})" for d, s in self._out.items()) + "]"
        if not self._bases:
            return "\n(empty layout)" if not self._out else f"\n(empty layout with out-dims {outs})"
        text = "\n"
        for dim, bases in self._bases.items():
            if not bases:
                text += f" - {dim} is a size 1 dimension\n"
                continue
            text += " - " + "\n   ".join(f"{dim}={1 << i} -> ({', '.join(map(str, b))})"
                                         for i, b in enumerate(bases)) + "\n"
        return text + "where out dims are: " + outs

    __repr__ = __str__

    def get_distributed_view(self, useHWPointOfView: bool) -> str:
        """Which thread holds each element (`T<thread>:<register>`, `|` between copies), laid out as the
        tensor; or, from the hardware's side, each warp's registers as rows of the lanes' coordinates."""
        from .layout_views import distributed_view
        return distributed_view(self, useHWPointOfView)

    def get_shared_view(self, useHWPointOfView: bool) -> str:
        """The coordinates each shared-memory offset holds, laid out as the tensor; or, from the
        hardware's side, offset by offset."""
        from .layout_views import shared_view
        return shared_view(self, useHWPointOfView)

    # ---- internals ------------------------------------------------------------------------------

    def _in_size(self, dim: str) -> int:
        return 1 << len(self._bases[dim])

    def _out_log2(self, dim: str) -> int:
        size = self._out.get(dim, 1)
        return size.bit_length() - 1

    def _total_in_log2(self) -> int:
        return sum(len(b) for b in self._bases.values())

    def _total_out_log2(self) -> int:
        return sum(self._out_log2(d) for d in self._out)

    def _matrix(self) -> list:
        """Rows as bitmasks over the input bits (column c: bit c)."""
        rows = []
        for j, dim in enumerate(self._out):
            for bit in range(self._out_log2(dim)):
                row, column = 0, 0
                for bases in self._bases.values():
                    for basis in bases:
                        row |= (basis[j] >> bit & 1) << column
                        column += 1
                rows.append(row)
        return rows


def _power_of_two(value: int, what: str) -> None:
    if value < 1 or value & (value - 1):
        raise ValueError(f"LinearLayout: {what} {value} is not a power of 2")


def _same_names(names, dims, kind: str) -> None:
    if sorted(names) != sorted(dims):
        raise ValueError(f"the {kind} dims {list(names)} are not a reordering of {list(dims)}")


def _sizes_match(dims, total: int, kind: str) -> None:
    product = 1
    for _, size in dims:
        _power_of_two(int(size), f"{kind} dim size")
        product *= int(size)
    if product != total:
        raise ValueError(f"reshape: {kind} dims of {product} elements in all, the layout has {total}")


def _supremum(first: list, second: list) -> list:
    """Both lists' names in one order that keeps each list's, `first`'s where the two leave it open."""
    out, i, j = [], 0, 0
    where_first, where_second = {d: k for k, d in enumerate(first)}, {d: k for k, d in enumerate(second)}
    while True:
        while i < len(first) and first[i] in out:
            i += 1
        while j < len(second) and second[j] in out:
            j += 1
        if i == len(first) and j == len(second):
            return out
        a = first[i] if i < len(first) else None
        b = second[j] if j < len(second) else None
        if a is not None and (a == b or a not in where_second):
            out.append(a)
        elif b is not None and b not in where_first:  # (an unplaced name of both lists leaves neither spent)
            out.append(b)
        else:  # both appear in both lists: the one the other list wants sooner
            out.append(a if where_second[a] <= where_first[b] else b)


def _rref(rows: list) -> list:
    """The reduced row echelon form over GF(2), pivots taken from the lowest column up; rows are
    bitmasks (column c: bit c). Zero rows come last."""
    rows = list(rows)
    pivot_row = 0
    columns = max((r.bit_length() for r in rows), default=0)
    for column in range(columns):
        bit = 1 << column
        found = next((r for r in range(pivot_row, len(rows)) if rows[r] & bit), None)
        if found is None:
            continue
        rows[pivot_row], rows[found] = rows[found], rows[pivot_row]
        for r in range(len(rows)):
            if r != pivot_row and rows[r] & bit:
                rows[r] ^= rows[pivot_row]
        pivot_row += 1
    return rows


def _rank(rows: list) -> int:
    return sum(1 for r in _rref(rows) if r)


def _lstsq(a: LinearLayout, b: LinearLayout) -> LinearLayout:
    """X with a(X(y)) = b(y) for every y, the free variables zero: from b's in dims to a's. b's out
    bits sit on a's rows of the same dim and bit (a's out dims at least as large, in one order)."""
    a_rows, b_rows = a._matrix(), b._matrix()
    a_columns = a._total_in_log2()
    combined, row_b = list(a_rows), 0
    row = 0
    for dim in a._out:
        for bit in range(a._out_log2(dim)):
            if bit < b._out_log2(dim):
                combined[row] |= b_rows[row_b] << a_columns
                row_b += 1
            row += 1
    solution = [0] * a_columns  # row c of X: which of b's input bits set a's input bit c
    for r in _rref(combined):
        if r:
            pivot = (r & -r).bit_length() - 1
            if pivot >= a_columns:
                raise ValueError("invert_and_compose: the image of one layout is not within the other's")
            solution[pivot] = r >> a_columns
    flat = [[sum((solution[c] >> j & 1) << c for c in range(a_columns))] for j in range(b._total_in_log2())]
    in_dim = next(iter(a._bases))
    out_dim = next(iter(a._out), in_dim)  # names only: the reshapes below rename both
    flattened = LinearLayout._make([(in_dim, flat)], [(out_dim, 1 << a_columns)], False)
    return flattened.reshape_ins([(d, b._in_size(d)) for d in b._bases]) \
        .reshape_outs([(d, a._in_size(d)) for d in a._bases])
