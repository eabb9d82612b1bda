"""The stage record (tracecheck/model/records.py): the one contract between the stages and the classifier."""
from pathlib import Path

import pytest

from tracecheck.classify import results
from tracecheck.model.records import FIELDS, StageRecord

REPO = Path(__file__).resolve().parents[1]


def test_a_key_no_field_names_is_refused():
    with pytest.raises(ValueError, match="ran_backward"):
        StageRecord.from_raw({"error": None, "ran_backward": True})


def test_a_record_reads_its_fields_and_defaults():
    rec = StageRecord.from_raw({"warnings": ["w"], "graph_count": 2, "opcheck": None})
    assert (rec.warnings, rec.graph_count, rec.opcheck, rec.breaks, rec.skip_reason) == (["w"], 2, {}, None, None)


def test_breaks_not_written_are_not_a_count_of_zero():
    # hand-written: a stage that does not count breaks (eager) reports no count; one that counted none, 0
    assert results.build_stage_result("eager", {"warnings": []}, 0.1).graph_break_count is None
    assert results.build_stage_result("explain", {"breaks": [], "graph_count": 1}, 0.1).graph_break_count == 0


def test_every_field_says_what_it_holds():
    lines = (REPO / "tracecheck" / "model" / "records.py").read_text().splitlines()
    for name in FIELDS:  # the line above each field is its own "#:" comment
        i = next(i for i, ln in enumerate(lines) if ln.startswith(f"    {name}: "))
        assert lines[i - 1].strip().startswith("#:"), name


def test_a_frame_reads_what_any_report_holds():
    from tracecheck.model.frame import Frame
    from tracecheck.model.report import Finding

    assert Frame.from_dict(None) is None and Frame.from_dict({}) is None and Frame.from_dict({"file": ""}) is None
    got = Frame.from_dict({"file": "m.py", "line": 7, "code": "y = ext.f(x)"})
    assert (got.file, got.line, got.function, got.code, got.location) == ("m.py", 7, None, "y = ext.f(x)", "m.py:7")
    assert Frame("m.py", 7, "forward", "y = ext.f(x)").to_dict() == \
        {"file": "m.py", "line": 7, "function": "forward", "code": "y = ext.f(x)"}
    f = Finding("unknown", "s", {}, {"user_frame": {"file": "m.py", "line": 7}})
    assert f.user_frame == Frame("m.py", 7) and Finding("unknown", "s").user_frame is None
