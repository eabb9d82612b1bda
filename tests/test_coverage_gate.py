"""The gate on compile coverage (issue 41): ops captured, frames run in eager, and the breaks they outweigh.

Pure: baselines written here by hand (the oracle is the literal numbers and PyTorch's rule in
benchmarks/dynamo/check_graph_breaks.py: fewer breaks and fallbacks, more ops captured is better; PASS / FAIL /
IMPROVED per metric), compared with ``baseline.compare``. The end-to-end check on real runs is in
tests/test_coverage.py.
"""
import json

import pytest

from report_factory import small_report
from tracecheck.gate import baseline
from tracecheck.model.exitcodes import UsageError
from tracecheck.model.payloads import Coverage
from tracecheck.model.report import PASS, StageResult
from tracecheck.render import diff

PID = "model.py::probe_gate"


def doc(explain: dict, tolerance: dict | None = None) -> dict:
    d = {"format": "tracecheck-baseline", "schema_version": 1, "torch": "2.13.0", "stages": ["explain"],
         "probes": {PID: {"stages": {"explain": {"target": "compile", "phases": ["forward"], "recompiles": None,
                                                 **explain}}}}}
    if tolerance is not None:
        d["tolerance"] = tolerance
    return d


def brk(line: int) -> dict:
    return {"kind": "graph-break", "gb_type": "Attempted to call function marked as skipped", "file": "model.py",
            "line": line}


#: a frame that fell back to eager whole (a break Dynamo cannot resume from, in a try block): 2 ops captured
FELL_BACK = {"status": "fail", "kinds": ["graph-break"], "graph_count": 1, "graph_break_count": 1,
             "breaks": [brk(5)], "coverage": {"calls_captured": 2, "unique_graphs": 1, "frames_eager": 1}}
#: the same model once Dynamo resumes (nested graph breaks, or the try block gone): 2 breaks, 84 ops captured
RESUMES = {"status": "fail", "kinds": ["graph-break"], "graph_count": 3, "graph_break_count": 2,
           "breaks": [brk(8), brk(12)], "coverage": {"calls_captured": 84, "unique_graphs": 3, "frames_eager": 0}}


def captured(n: int, breaks: int = 0) -> dict:
    return {"status": PASS if not breaks else "fail", "kinds": [] if not breaks else ["graph-break"],
            "graph_count": breaks + 1, "graph_break_count": breaks, "breaks": [brk(5 + i) for i in range(breaks)],
            "coverage": {"calls_captured": n, "unique_graphs": breaks + 1, "frames_eager": 0}}


def metric(cmp, name):
    return next(m for m in cmp.metrics if m.metric == name)


def test_more_ops_captured_outweighs_more_breaks_and_is_an_improvement():
    cmp = baseline.compare(doc(FELL_BACK), doc(RESUMES))
    assert not cmp.regressed
    # one improvement: the ops captured, with the frame that no longer runs in eager
    (gain,) = [c for c in cmp.causes if c.effect == baseline.IMPROVED]
    assert gain.what == "more ops captured (2 -> 84)"
    assert {c.aspect for c in gain.changes} == {"coverage.calls_captured", "coverage.frames_eager"}
    # the break at line 5 is paired with the one at 12 (same kind, gb_type, file: moved); the one at 8 is new
    news = [c for c in cmp.causes if c.aspect == "break" and c.what.startswith("new graph break")]
    assert len(news) == 1 and all(c.effect == baseline.CHANGED and "outweighed: ops captured 2 -> 84" in c.what
                                  for c in news)
    assert (metric(cmp, "graph_breaks").expected, metric(cmp, "graph_breaks").actual) == (1, 2)
    assert metric(cmp, "graph_breaks").result == "PASS" and "outweighed" in metric(cmp, "graph_breaks").note
    assert metric(cmp, "calls_captured").result == "IMPROVED"
    assert metric(cmp, "fallbacks_to_eager").result == "IMPROVED"
    assert metric(cmp, "unique_graphs").result == "CHANGED"  # shown, not weighed
    assert diff.summary(cmp, "b.json").plain.startswith("baseline b.json: improved")


def test_more_breaks_with_more_frames_in_eager_still_regress():
    worse = {**RESUMES, "coverage": {"calls_captured": 84, "unique_graphs": 3, "frames_eager": 2}}
    cmp = baseline.compare(doc(FELL_BACK), doc(worse))
    assert cmp.regressed
    assert {c.aspect for c in cmp.regressions} >= {"break", "graph_break_count", "coverage.frames_eager"}
    assert metric(cmp, "graph_breaks").result == "FAIL" and metric(cmp, "fallbacks_to_eager").result == "FAIL"


def test_more_breaks_with_the_same_ops_captured_regress():
    cmp = baseline.compare(doc(captured(50)), doc(captured(50, breaks=1)))
    assert cmp.regressed and metric(cmp, "graph_breaks").result == "FAIL"
    assert metric(cmp, "calls_captured").result == "PASS"


def test_fewer_ops_captured_regress_by_default_and_fold_into_the_break_that_cost_them():
    cmp = baseline.compare(doc(captured(100)), doc(captured(99)))
    assert cmp.regressed
    assert [c.what for c in cmp.causes] == ["fewer ops captured (100 -> 99)"]
    assert metric(cmp, "calls_captured").result == "FAIL"
    # with a new break in the same stage, the drop is that break's cost: one root cause
    cmp = baseline.compare(doc(captured(100)), doc(captured(60, breaks=1)))
    assert [c.aspect for c in cmp.causes] == ["break"] and cmp.causes[0].effect == baseline.REGRESSED
    assert any(ch.aspect == "coverage.calls_captured" for ch in cmp.causes[0].changes)


@pytest.mark.parametrize("now, regressed, result", [(96, False, "PASS"), (95, False, "PASS"), (94, True, "FAIL")])
def test_a_drop_within_the_baselines_tolerance_passes(now, regressed, result):
    cmp = baseline.compare(doc(captured(100), tolerance={"calls_captured": 0.05}), doc(captured(now)))
    assert cmp.regressed is regressed and metric(cmp, "calls_captured").result == result
    assert "tolerance of 5%" in metric(cmp, "calls_captured").note or regressed


def test_a_baseline_without_coverage_compares_nothing_of_it():
    """As PyTorch's gate skips a metric its expected file predates."""
    old = {k: v for k, v in captured(100).items() if k != "coverage"}
    cmp = baseline.compare(doc(old), doc(captured(3)))
    assert not cmp.regressed and cmp.changes == []
    assert [m.metric for m in cmp.metrics] == ["graph_breaks"]


@pytest.mark.parametrize("setting, message", [
    ({"calls_captured": 1.5}, "fraction"), ({"calls_captured": -0.1}, "fraction"), ({"calls_captured": True}, "fraction"),
    ({"graph_breaks": 0.1}, "has no tolerance"), ([0.05], "must be an object"),
])
def test_a_bad_tolerance_setting_is_a_usage_error(tmp_path, setting, message):
    path = tmp_path / "base.json"
    path.write_text(json.dumps(doc(captured(10), tolerance=setting)))
    with pytest.raises(UsageError, match=message):
        baseline.load_baseline(str(path))


def test_a_snapshot_keeps_the_explain_stages_coverage_and_a_rewrite_keeps_the_tolerance(tmp_path):
    report = small_report()
    cov = Coverage(calls_captured=17, unique_graphs=2, frames_eager=0, torch_calls_eager=20, captured_share=0.85)
    report.probes[0].stages["explain"] = StageResult("explain", PASS, graph_count=2, graph_break_count=1,
                                                     extra=cov.to_extra())
    snap = baseline.from_report(report)["probes"][report.probes[0].id]["stages"]["explain"]
    assert snap["coverage"] == {"calls_captured": 17, "unique_graphs": 2, "frames_eager": 0}
    path = tmp_path / "base.json"
    baseline.write_baseline(str(path), report, keep={"tolerance": {"calls_captured": 0.02}})
    assert json.loads(path.read_text())["tolerance"] == {"calls_captured": 0.02}


def test_the_metrics_table_names_each_moved_metric():
    from rich.console import Console

    cmp = baseline.compare(doc(FELL_BACK), doc(RESUMES))
    console = Console(width=120, record=True)
    console.print(diff.render(cmp, "b.json"))
    text = console.export_text()
    for word in ("calls_captured ↑", "fallbacks_to_eager ↓", "graph_breaks ↓", "IMPROVED", "outweighed"):
        assert word in text
