"""`copy_function` gives what the text round trip `parse_function(print_function(fn))` gives
(codegen copies each kernel before its passes rewrite it), without printing or parsing."""
import pathlib

import pytest

from kiln.codegen.pipeline import PassContext, run_passes
from kiln.codegen.target import parse_target
from kiln.ir import Function, IRParseError, Operation, copy_function, parse_function, print_function
from kiln.ir.types import int32, pointer_type

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"
KERNELS = sorted(CORPUS.glob("*.kir")) + sorted((CORPUS / "lang").glob("*.kir"))[::5]


def described(fn: Function) -> list:
    """Everything a Function holds, values named by definition order, each attribute value with
    its Python type and each type with its class and the fields its text leaves out."""
    names = {}

    def name(v):
        return names.setdefault(id(v), len(names))

    def typ(t):
        return (type(t).__name__, str(t), getattr(t, "address_space", None), getattr(t, "const", None))

    def attr(v):
        if isinstance(v, (list, tuple)):
            return [attr(x) for x in v]
        return type(v).__name__, repr(v) if isinstance(v, float) else v  # nan equals its own repr

    def attrs(d):
        return [(k, attr(v)) for k, v in d.items()]  # in the dict's own order

    def block(b, parent):
        out = [("block", b.parent is parent, [(name(a), typ(a.type), a.owner is b, a.index) for a in b.args])]
        for op in b.ops:
            out.append(("op", op.name, op.parent is b, [names[id(v)] for v in op.operands], attrs(op.attrs), op.loc))
            out.extend(block(region, op) for region in op.regions)
            out.append([(name(r), typ(r.type), r.owner is op, r.index) for r in op.results])
        return out

    return [fn.name, fn.arg_names, [attrs(a) for a in fn.arg_attrs], attrs(fn.attrs), block(fn.body, fn)]


@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.stem)
def test_a_copy_is_the_text_round_trip(path):
    fn = parse_function(path.read_text())
    assert described(copy_function(fn)) == described(parse_function(print_function(fn)))
    ctx = PassContext(parse_target("sm_90a"), 4, 3)
    run_passes(fn, ctx)  # layouts in the types, shared buffers, plans in the attributes
    assert described(copy_function(fn)) == described(parse_function(print_function(fn)))


def test_a_copy_shares_no_op_value_or_attribute_list_with_its_original():
    fn = parse_function((CORPUS / "dot_f16.kir").read_text())
    copy = copy_function(fn)
    ops, copied = list(fn.walk()), list(copy.walk())
    assert not {id(op) for op in ops} & {id(op) for op in copied}
    assert not {id(v) for op in ops for v in op.results} & {id(v) for op in copied for v in op.results}
    lists = lambda f: {id(v) for op in f.walk() for v in op.attrs.values() if isinstance(v, list)}
    assert not lists(fn) & lists(copy)


def test_a_copy_reads_attributes_and_types_back_as_the_text_does():
    fn = Function("k", [pointer_type(int32, const=True), int32], ["p", "n"], [{"divisibility": 16, "name": "x"}, {}],
                  {"tuple": (1, 2.5, True)})
    fn.body.append(Operation("return"))
    copy = copy_function(fn)
    assert described(copy) == described(parse_function(print_function(fn)))
    assert copy.attrs == {"tuple": [1, 2.5, True]} and copy.arg_attrs[0] == {"divisibility": 16}
    assert not copy.args[0].type.is_const()  # the text says ptr<int32>: const is not printed


def test_a_use_before_its_definition_is_refused_as_the_text_refuses_it():
    fn = Function("k", [int32])
    later = Operation("add", [fn.args[0], fn.args[0]], [int32])
    fn.body.append(Operation("add", [later.result, fn.args[0]], [int32]))
    fn.body.append(later)
    fn.body.append(Operation("return"))
    with pytest.raises(IRParseError):
        parse_function(print_function(fn))
    with pytest.raises(IRParseError):
        copy_function(fn)
