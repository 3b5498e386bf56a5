"""Block IR on its own: types, the text form, and the verifier's messages."""
import pytest

from kiln.ir import IRParseError, VerificationError, parse_function, print_function, verify
from kiln.ir.types import block_type, float32, int32, parse_type, pointer_type

KERNEL = """\
kernel @k(%0: ptr<fp32> {divisibility = 16, name = "x"}, %1: int32 {name = "n"}) attributes {note = "a \\"q\\""} {
  %2 = program_id {axis = 0} : int32 loc("k.py":3:10)
  %3 = arange {end = 64, start = 0} : <64xint32>
  %4 = splat %0 : <64xptr<fp32>>
  %5 = addptr %4, %3 : <64xptr<fp32>>
  %6 = splat %1 : <64xint32>
  %7 = cmp %3, %6 {pred = "lt"} : <64xint1>
  %8 = constant {value = -inf} : fp32
  %9 = splat %8 : <64xfp32>
  %10 = load %5, %7, %9 : <64xfp32>
  %11 = constant {value = 0.0} : fp32
  %12 = constant {value = 0} : int32
  %13 = constant {value = 1} : int32
  %14 = for %12, %1, %13, %11 : fp32 {
  ^(%15: int32, %16: fp32):
    %17 = cast %15 : fp32
    %18 = add %16, %17 : fp32
    yield %18
  }
  %19 = reduce %10 {axis = 0} : fp32 {
  ^(%20: fp32, %21: fp32):
    %22 = max %20, %21 : fp32
    yield %22
  }
  %23 = cmp %2, %12 {pred = "eq"} : int1
  %24 = if %23 : fp32 {
  ^():
    yield %19
  } {
  ^():
    yield %14
  }
  %25, %26 = while %12, %11 : int32, fp32 {
  ^(%27: int32, %28: fp32):
    %29 = cmp %27, %1 {pred = "lt"} : int1
    condition %29, %27, %28
  } {
  ^(%30: int32, %31: fp32):
    %32 = add %30, %13 : int32
    yield %32, %31
  }
  %33 = split %34 : fp32, fp32
  return
}
"""


def valid_kernel():
    lines = [line for line in KERNEL.splitlines() if "split" not in line]
    return "\n".join(lines) + "\n"


def test_types_print_and_parse():
    for text in ["int1", "uint64", "bf16", "fp8e4nv", "ptr<fp16>", "ptr<ptr<int8>>", "<128xfp32>",
                 "<16x64xptr<bf16>>"]:
        assert str(parse_type(text)) == text
    assert parse_type("<2x4xfp32>") == block_type(float32, [2, 4])
    assert parse_type("ptr<int32>") == pointer_type(int32)
    assert pointer_type(int32).element_ty is int32
    with pytest.raises(ValueError):
        parse_type("<3xfoo>")


def test_text_round_trip_is_exact():
    fn = parse_function(valid_kernel())
    verify(fn)
    text = print_function(fn)
    assert text == valid_kernel()
    assert print_function(parse_function(text)) == text


def test_text_round_trip_keeps_attributes_and_locations():
    fn = parse_function(valid_kernel())
    assert fn.attrs == {"note": 'a "q"'}
    assert fn.arg_attrs[0] == {"divisibility": 16}
    first = fn.body.ops[0]
    assert (first.loc.file, first.loc.line, first.loc.col) == ("k.py", 3, 10)
    assert fn.body.ops[6].attrs["value"] == float("-inf")


def test_parse_error_names_the_line():
    with pytest.raises(IRParseError, match="line 42: use of undefined value %34"):
        parse_function(KERNEL)
    with pytest.raises(IRParseError, match="line 2"):
        parse_function(valid_kernel().replace("program_id {axis = 0} : int32", "program_id {axis = 0} : int33"))


def test_verifier_names_the_op_and_shows_its_neighbourhood():
    bad = valid_kernel().replace("%18 = add %16, %17 : fp32", "%18 = add %16, %15 : fp32")
    with pytest.raises(VerificationError) as info:
        verify(parse_function(bad))
    message = str(info.value)
    assert "invalid 'add'" in message
    assert ">> %18 = add %16, %15 : fp32" in message
    assert "%17 = cast %15 : fp32" in message  # the op before it


@pytest.mark.parametrize("old, new, reason", [
    ("%3 = arange {end = 64, start = 0} : <64xint32>", "%3 = arange {end = 48, start = 0} : <64xint32>",
     "arange result"),
    ("%7 = cmp %3, %6 {pred = \"lt\"} : <64xint1>", "%7 = cmp %3, %6 {pred = \"lt\"} : <64xint32>", "result must be"),
    ("    yield %18\n", "    yield %17, %18\n", "region 0 yields"),
    ("    condition %29, %27, %28\n", "    condition %27, %27, %28\n", "condition must start with an int1"),
    ("%22 = max %20, %21 : fp32", "%22 = frobnicate %20, %21 : fp32", "unknown op"),
    ("%10 = load %5, %7, %9 : <64xfp32>", "%10 = load %5, %7, %9 : <32xfp32>", "load result"),
])
def test_verifier_rejects(old, new, reason):
    text = valid_kernel()
    assert old in text
    with pytest.raises(VerificationError, match=reason):
        verify(parse_function(text.replace(old, new)))


def test_verifier_rejects_use_before_definition():
    text = valid_kernel().replace("%5 = addptr %4, %3", "%5 = addptr %4, %6")
    with pytest.raises(IRParseError, match="undefined value %6"):
        parse_function(text)


def test_non_power_of_two_blocks_are_rejected():
    text = valid_kernel().replace("%4 = splat %0 : <64xptr<fp32>>", "%4 = splat %0 : <48xptr<fp32>>")
    with pytest.raises(VerificationError):
        verify(parse_function(text))


class _CountingText(str):
    """IR text that tallies the characters `str.count` scans in it."""
    scanned = 0

    def count(self, sub, start=0, end=None):
        end = len(self) if end is None else end
        _CountingText.scanned += max(0, end - start)
        return super().count(sub, start, end)


def test_the_parser_counts_each_newline_once():
    """It counted the newlines from the start of the text again for every token: a kernel of 65,536
    operations took minutes to parse (issue 34, item 5). Now it scans the text once, whatever its size."""
    body = "".join(f"  %v{i} = add %v{i - 1}, %v{i - 1} : int32\n" for i in range(1, 2000))
    text = _CountingText("kernel @k(%v0: int32) {\n" + body + "  return\n}\n")
    _CountingText.scanned = 0
    fn = parse_function(text)
    assert len(fn.body.ops) == 2000
    assert _CountingText.scanned <= len(text)
