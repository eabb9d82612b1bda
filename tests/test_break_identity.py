"""A graph break's identity in the baseline (issue 41): kind, gb_type, file and the line's source text, so that an
edit above a break moves it without a change, an edit of the line makes it another break, and a library upgrade is
named beside the new breaks in the library's files.

Pure: baselines written here by hand, compared with ``comparison.compare``.
"""
import pytest

from report_factory import break_finding, small_report
from tracecheck.gate import changes, comparison, document, snapshot
from tracecheck.model.evidence import Owner
from tracecheck.model.report import FAIL, StageResult

PID = "model.py::probe_id"


def doc(*breaks: dict) -> dict:
    snap = {"status": "fail" if breaks else "pass", "kinds": ["graph-break"] if breaks else [],
            "graph_count": len(breaks) + 1, "graph_break_count": len(breaks), "breaks": list(breaks),
            "recompiles": None, "phases": ["forward"], "target": "compile"}
    return {"format": "tracecheck-baseline", "schema_version": 1, "torch": "2.13.0", "stages": ["explain"],
            "probes": {PID: {"stages": {"explain": snap}}}}


def brk(line: int, code: str | None, gb_type: str = "Failed to trace builtin operator", file: str = "model.py",
        owner: str | None = None) -> dict:
    b = {"kind": "graph-break", "gb_type": gb_type, "file": file, "line": line}
    if code is not None:
        b["code"] = code
    if owner is not None:
        b["owner"] = owner
    return b


def effects(cmp) -> list[tuple[str, str]]:
    return sorted((c.effect, c.detail) for c in cmp.changes if c.aspect == "break")


@pytest.mark.parametrize("code, expected", [
    ('  print("hi")  # say hello', 'print("hi")'),
    ('x = "#" + y', 'x = "#" + y'),  # a hash in a string is no comment
    ("foo(a,  # the first argument", "foo(a,"),  # a piece of a longer call: still its comment dropped
    ("    return x.sum()\n", "return x.sum()"),
])
def test_source_text_is_the_line_without_its_comment(code, expected):
    assert snapshot.source_text(code) == expected


def test_the_same_code_at_another_line_moved():
    cmp = comparison.compare(doc(brk(8, 'print("step")')), doc(brk(15, 'print("step")')))
    assert not cmp.regressed
    assert effects(cmp) == [("changed", 'graph break moved: graph-break (Failed to trace builtin operator) at '
                                        'model.py:15 `print("step")` (was line 8)')]


def test_other_code_is_another_break_even_of_the_same_gb_type_in_the_same_file():
    """The old rule paired any two breaks of one gb_type in one file as a move; the source text tells them apart."""
    cmp = comparison.compare(doc(brk(8, 'print("step")'), brk(10, 'print("again")')),
                           doc(brk(15, 'print("step")'), brk(16, 'log(y)')))
    assert cmp.regressed
    assert effects(cmp) == [
        ("changed", 'graph break moved: graph-break (Failed to trace builtin operator) at model.py:15 '
                    '`print("step")` (was line 8)'),
        ("improved", 'graph break gone: graph-break (Failed to trace builtin operator) at model.py:10 '
                     '`print("again")`'),
        ("regressed", "new graph break graph-break (Failed to trace builtin operator) at model.py:16 `log(y)`"),
    ]
    assert [c.what for c in cmp.causes if c.effect == changes.REGRESSED] == [
        "new graph break at model.py:16 `log(y)` (graph-break, Failed to trace builtin operator)"]


def test_a_line_edited_in_place_is_the_same_break_edited():
    """The same gb_type at the same line, its code rewritten (y.sum() -> y.mean()): neither better nor worse."""
    cmp = comparison.compare(doc(brk(8, "if y.sum().item() > 0:")), doc(brk(8, "if y.mean().item() > 0:")))
    assert not cmp.regressed
    assert effects(cmp) == [("changed", "graph break's line edited: graph-break (Failed to trace builtin operator) "
                                        "at model.py:8 `if y.mean().item() > 0:` (was `if y.sum().item() > 0:`)")]


def test_a_reformatted_line_that_moved_is_the_same_break():
    """Spacing and quote style are no new code: compared as tokens."""
    cmp = comparison.compare(doc(brk(8, "print( 'step' )")), doc(brk(11, 'print("step")')))
    assert [e for e, _ in effects(cmp)] == ["changed"] and "moved" in effects(cmp)[0][1]


def test_a_baseline_without_source_text_pairs_as_before():
    """A baseline written before the source text: a break of the same kind, gb_type and file at another line moved."""
    cmp = comparison.compare(doc(brk(8, None)), doc(brk(15, 'print("step")')))
    assert not cmp.regressed and [e for e, _ in effects(cmp)] == ["changed"]
    cmp = comparison.compare(doc(brk(8, None)), doc(brk(8, 'print("step")')))
    assert cmp.changes == []


def test_a_comment_edit_on_the_break_line_changes_nothing():
    old, new = small_report(), small_report()
    for report, code in ((old, 'print("hi")'), (new, 'print("hi")  # greet, now with a comment')):
        f, b = break_finding(report.probes[1].file, 5, code=code)
        report.probes[1].stages["explain"] = StageResult("explain", FAIL, failure=f, findings=[f], graph_count=2,
                                                         graph_break_count=1, breaks=[b])
    cmp = comparison.compare(document.from_report(old), document.from_report(new))
    assert cmp.changes == []


def test_a_new_break_in_an_upgraded_library_names_the_upgrade():
    lib = "site/transformers/models/gpt2/modeling_gpt2.py"
    cmp = comparison.compare(doc(brk(40, "a = b.item()", file=lib, owner="transformers 5.24.0")),
                           doc(brk(40, "a = b.item()", file=lib, owner="transformers 5.25.0"),
                               brk(97, "if mask.any():", file=lib, owner="transformers 5.25.0")))
    assert cmp.regressed
    (new,) = [c for c in cmp.changes if c.effect == changes.REGRESSED and c.aspect == "break"]
    assert new.detail.endswith(", since transformers 5.24.0 -> 5.25.0")
    assert cmp.notes == ["transformers 5.24.0 -> 5.25.0 since the baseline: a new break in its files may come with "
                         "the upgrade"]
    (cause,) = [c for c in cmp.causes if c.aspect == "break"]
    assert cause.what.startswith(f"new graph break in transformers 5.25.0 at {lib}:97 `if mask.any():`")


def test_a_snapshot_names_a_librarys_break_owner_and_not_the_users():
    report = small_report()
    f, b = break_finding("/venv/site-packages/lib/m.py", 3)
    b.owner = Owner("library", "lib", "1.2")
    report.probes[1].stages["explain"] = StageResult("explain", FAIL, failure=f, findings=[f], graph_count=2,
                                                     graph_break_count=1, breaks=[b])
    snap = document.from_report(report)["probes"][report.probes[1].id]["stages"]["explain"]["breaks"]
    assert [(x["file"], x.get("owner")) for x in snap] == [("site-packages/lib/m.py", "lib 1.2")]
    yours = document.from_report(small_report())["probes"]["model.py::probe_bad"]["stages"]["explain"]["breaks"]
    assert "owner" not in yours[0]
