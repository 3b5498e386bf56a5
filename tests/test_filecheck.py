"""kiln.filecheck: each directive matching where it should and failing, with FileCheck's kind of message."""
import pytest

from kiln.filecheck import FileCheckError, check, parse

IR = """\
kernel @add(%a: int32) {
  %0 = add   %a, %a : int32
  %1 = mul %0, %0 : int32

  return %1
}
kernel @sub() {
  %2 = sub %x, %y : int32
  return
}
"""


def fails(check_text, input_text=IR, **kwargs) -> str:
    with pytest.raises(FileCheckError) as e:
        check(input_text, check_text, **kwargs)
    return str(e.value)


def test_check_matches_in_order_and_fails_when_out_of_order():
    check(IR, "// CHECK: add\n// CHECK: mul\n// CHECK: return")
    message = fails("// CHECK: mul\n// CHECK: add", check_name="t.kir", input_name="ir")
    assert message.splitlines()[:3] == ["t.kir:2:4: error: CHECK: expected string not found in input",
                                       "// CHECK: add", "   ^"]
    # the search began right after `mul` (column 10, after whitespace folding) on input line 3
    assert "ir:3:10: note: scanning from here" in message


def test_a_failed_check_shows_its_line_with_whitespace_collapsed_as_filecheck_reads_it():
    message = fails("    def k():\n        # CHECK: %c42_i32", check_name="t.py")
    assert message.splitlines()[:3] == ["t.py:2:4: error: CHECK: expected string not found in input",
                                       " # CHECK: %c42_i32", "   ^"]


def test_check_may_match_later_on_the_same_line():
    check(IR, "CHECK: %0 = add\nCHECK: %a : int32")


def test_whitespace_runs_match_any_run_but_not_none():
    check("x =\t\t add  %a", "CHECK: x = add %a")
    check(IR, "CHECK:    %0   =   add %a, %a")
    assert "expected string not found" in fails("CHECK: x=add", "x = add")


def test_next_is_the_following_line():
    check(IR, "CHECK: = add\nCHECK-NEXT: mul")
    assert "3 lines after the previous match" in fails("CHECK: = add\nCHECK-NEXT: return")
    message = fails("CHECK: %0 = add\nCHECK-NEXT: %a")
    assert "error: CHECK-NEXT: the match is on the same line as the previous match" in message
    assert "<input>:2:2: note: previous match ended here" not in message  # it ended after `add`
    assert "<input>:2:10: note: previous match ended here" in message


def test_same_is_the_previous_match_line():
    check(IR, "CHECK: mul\nCHECK-SAME: : int32")
    assert "not on the same line" in fails("CHECK: mul\nCHECK-SAME: return")


def test_empty_is_an_empty_next_line():
    check(IR, "CHECK: mul\nCHECK-EMPTY:\nCHECK-NEXT: return %1")
    assert "is not empty" in fails("CHECK: add\nCHECK-EMPTY:")
    assert "takes no pattern" in fails("CHECK: add\nCHECK-EMPTY: x")


def test_not_holds_between_neighbouring_matches():
    check(IR, "CHECK: add\nCHECK-NOT: sub\nCHECK: return")  # `sub` comes after that `return`
    message = fails("CHECK: add\nCHECK-NOT: mul\nCHECK: return")
    assert "error: CHECK-NOT: excluded string found in input" in message
    assert "<input>:3:7: note: found here" in message
    assert "excluded" in fails("CHECK-NOT: kernel")  # before the first match: from the start
    assert "excluded" in fails("CHECK: mul\nCHECK-NOT: sub")  # after the last: to the end


def test_label_cuts_the_input_into_blocks():
    check(IR, "CHECK-LABEL: @add\nCHECK: return\nCHECK-LABEL: @sub\nCHECK: sub")
    # `sub` exists, but not in @add's block
    message = fails("CHECK-LABEL: @add\nCHECK: sub\nCHECK-LABEL: @sub")
    assert "CHECK: expected string not found" in message
    # a NOT sees only its block, and a label that is missing is named
    check(IR, "CHECK-LABEL: @add\nCHECK-NOT: sub\nCHECK-LABEL: @sub")
    assert "error: CHECK-LABEL: expected string not found" in fails("CHECK-LABEL: @add\nCHECK-LABEL: @mul")


def test_dag_matches_in_any_order_without_overlap():
    check(IR, "CHECK: add\nCHECK-DAG: return\nCHECK-DAG: mul\nCHECK-NEXT: }")
    check("a\na\n", "CHECK-DAG: a\nCHECK-DAG: a")  # two matches, one per line
    assert "CHECK-DAG: expected string not found" in fails("CHECK-DAG: a\nCHECK-DAG: a\nCHECK-DAG: a", "a\na\n")
    # a NOT before a run holds up to the run's first match
    assert "excluded" in fails("CHECK: kernel\nCHECK-NOT: add\nCHECK-DAG: return\nCHECK-DAG: mul")


def test_count():
    check(IR, "CHECK-COUNT-2: return")
    assert "CHECK-COUNT-3: expected string not found" in fails("CHECK-COUNT-3: return")


def test_regex_and_variables():
    found = check(IR, "CHECK: [[X:%[0-9]+]] = add\nCHECK: = mul [[X]], [[X]]\nCHECK: return [[R:%[0-9]]]")
    assert found == {"X": "%0", "R": "%1"}
    check(IR, "CHECK: add {{%[a-z]}}, {{%a}} : int{{[0-9]{2}}}")
    check("f(7, 7)", "CHECK: f([[N:[0-9]]], [[N]])")  # a use in the defining pattern
    check("a.b", "CHECK: a.b")  # literal text is literal
    assert "expected string not found" in fails("CHECK: a.b", "axb")
    message = fails("CHECK: [[X:%[0-9]+]] = add\nCHECK: return [[X]]")
    assert "note: with X equal to '%0'" in message
    assert "variable Y is used but was never set" in fails("CHECK: [[Y]]")
    assert "cannot set a variable" in fails("CHECK-NOT: [[Z:x]]")
    assert "not supported" in fails("CHECK: [[#N+1]]")


def test_custom_prefixes_and_comments():
    text = "// MINE: = add\n// CHECK: nothing-like-this\n// COM: MINE: nothing either\n// OTHER-NEXT: mul"
    check(IR, text, prefixes=("MINE", "OTHER"))
    assert "no directive found with prefix MINE" in fails("// CHECK: add", prefixes="MINE")
    assert [d.name for d in parse("X-PRECHECK: a\nCHECK-NOT: b\nCHECK-FOO: c")] == ["CHECK-NOT"]
    with pytest.raises(ValueError):
        parse("CHECK: a", prefixes=("9X",))


def test_malformed_check_texts():
    assert "no directive before it" in fails("CHECK-NEXT: add")
    assert "empty pattern" in fails("CHECK:   ")
    assert "no '}}'" in fails("CHECK: {{abc")
    assert "invalid regular expression" in fails("CHECK: {{(}}")
