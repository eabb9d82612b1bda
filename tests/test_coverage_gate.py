"""The gate on compile coverage (issue 41): ops captured, frames run in eager, and the breaks they outweigh.

Pure: baselines written here by hand (the oracle is the literal numbers and PyTorch's rule in
benchmarks/dynamo/check_graph_breaks.py: fewer breaks and fallbacks, more ops captured is better; PASS / FAIL /
IMPROVED per metric), compared with ``comparison.compare``. The end-to-end check on real runs is in
tests/test_coverage.py.
"""
import json

import pytest

from report_factory import small_report
from tracecheck.gate import changes, comparison, document
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


#: a frame that fell back to eager whole (a break Dynamo cannot resume from, in a try block): 2 of the forward's 90
#: torch calls captured
FELL_BACK = {"status": "fail", "kinds": ["graph-break"], "graph_count": 1, "graph_break_count": 1,
             "breaks": [brk(5)],
             "coverage": {"calls_captured": 2, "unique_graphs": 1, "frames_eager": 1, "torch_calls_eager": 90}}
#: the same model once Dynamo resumes (nested graph breaks, or the try block gone): 2 breaks, 84 of 90 captured
RESUMES = {"status": "fail", "kinds": ["graph-break"], "graph_count": 3, "graph_break_count": 2,
           "breaks": [brk(8), brk(12)],
           "coverage": {"calls_captured": 84, "unique_graphs": 3, "frames_eager": 0, "torch_calls_eager": 90}}


def captured(n: int, breaks: int = 0, eager: int | None = None) -> dict:
    """A probe whose forward makes ``eager`` torch calls (``n`` by default: all captured) and captures ``n``."""
    return {"status": PASS if not breaks else "fail", "kinds": [] if not breaks else ["graph-break"],
            "graph_count": breaks + 1, "graph_break_count": breaks, "breaks": [brk(5 + i) for i in range(breaks)],
            "coverage": {"calls_captured": n, "unique_graphs": breaks + 1, "frames_eager": 0,
                         "torch_calls_eager": n if eager is None else eager}}


def metric(cmp, name):
    return next(m for m in cmp.metrics if m.metric == name)


def test_more_ops_captured_outweighs_more_breaks_and_is_an_improvement():
    cmp = comparison.compare(doc(FELL_BACK), doc(RESUMES))
    assert not cmp.regressed
    # one improvement: the ops captured, with the frame that no longer runs in eager
    (gain,) = [c for c in cmp.causes if c.effect == changes.IMPROVED]
    assert gain.what == "more ops captured (2 -> 84)"
    assert {c.aspect for c in gain.changes} == {"coverage.calls_captured", "coverage.frames_eager"}
    # the break at line 5 is paired with the one at 12 (same kind, gb_type, file: moved); the one at 8 is new
    news = [c for c in cmp.causes if c.aspect == "break" and c.what.startswith("new graph break")]
    assert len(news) == 1 and all(c.effect == changes.CHANGED and "outweighed: ops captured 2 -> 84, torch calls "
                                  "outside graphs 88 -> 6" in c.what for c in news)
    assert (metric(cmp, "graph_breaks").expected, metric(cmp, "graph_breaks").actual) == (1, 2)
    assert metric(cmp, "graph_breaks").result == "PASS" and "outweighed" in metric(cmp, "graph_breaks").note
    assert metric(cmp, "calls_captured").result == "IMPROVED"
    assert metric(cmp, "fallbacks_to_eager").result == "IMPROVED"
    assert metric(cmp, "unique_graphs").result == "CHANGED"  # shown, not weighed
    assert diff.summary(cmp, "b.json").plain.startswith("baseline b.json: improved")


def test_a_model_that_only_grew_does_not_outweigh_its_new_break():
    """A new layer with a print in a model that already breaks: more ops captured (the layer's), but no fewer torch
    calls outside graphs: its break regresses."""
    cmp = comparison.compare(doc(captured(50, breaks=1)), doc({**captured(52, breaks=2), "breaks": [brk(5), brk(40)]}))
    assert cmp.regressed
    assert [c.what for c in cmp.causes if c.effect == changes.REGRESSED][0].startswith("new graph break at model.py:40")
    # the ops the layer brought came with its break: no improvement beside the regression (issue 53)
    assert [c.effect for c in cmp.causes] == [changes.REGRESSED]
    captured_ = metric(cmp, "calls_captured")
    assert metric(cmp, "graph_breaks").result == "FAIL" and captured_.result == "PASS"
    assert captured_.note == "came with the new graph break at model.py:40"


def test_more_breaks_with_more_frames_in_eager_still_regress():
    worse = {**RESUMES, "coverage": {"calls_captured": 84, "unique_graphs": 3, "frames_eager": 2,
                                     "torch_calls_eager": 90}}
    cmp = comparison.compare(doc(FELL_BACK), doc(worse))
    assert cmp.regressed
    assert {c.aspect for c in cmp.regressions} >= {"break", "graph_break_count", "coverage.frames_eager"}
    assert metric(cmp, "graph_breaks").result == "FAIL" and metric(cmp, "fallbacks_to_eager").result == "FAIL"


def test_more_breaks_with_the_same_ops_captured_regress():
    cmp = comparison.compare(doc(captured(50)), doc(captured(50, breaks=1)))
    assert cmp.regressed and metric(cmp, "graph_breaks").result == "FAIL"
    assert metric(cmp, "calls_captured").result == "PASS"


def test_fewer_ops_captured_regress_by_default_and_fold_into_the_break_that_cost_them():
    cmp = comparison.compare(doc(captured(100)), doc(captured(99)))
    assert cmp.regressed
    assert [c.what for c in cmp.causes] == ["fewer ops captured (100 -> 99)"]
    assert metric(cmp, "calls_captured").result == "FAIL"
    # with a new break in the same stage, the drop is that break's cost: one root cause
    cmp = comparison.compare(doc(captured(100)), doc(captured(60, breaks=1)))
    assert [c.aspect for c in cmp.causes] == ["break"] and cmp.causes[0].effect == changes.REGRESSED
    assert any(ch.aspect == "coverage.calls_captured" for ch in cmp.causes[0].changes)


@pytest.mark.parametrize("now, regressed, result", [(96, False, "PASS"), (95, False, "PASS"), (94, True, "FAIL")])
def test_a_drop_within_the_baselines_tolerance_passes(now, regressed, result):
    cmp = comparison.compare(doc(captured(100), tolerance={"calls_captured": 0.05}), doc(captured(now)))
    assert cmp.regressed is regressed and metric(cmp, "calls_captured").result == result
    assert metric(cmp, "calls_captured").note == (f"-{100 - now}.0%; tolerance 5%" if regressed else
                                                  f"-{100 - now}.0%, within the baseline's tolerance of 5%")


def test_a_tolerance_below_one_percent_is_printed_as_set():
    cmp = comparison.compare(doc(captured(1000), tolerance={"calls_captured": 0.004}), doc(captured(997)))
    assert metric(cmp, "calls_captured").note == "-0.3%, within the baseline's tolerance of 0.4%"


def test_more_frames_in_eager_with_a_drop_within_the_tolerance_is_its_own_regression():
    old = captured(100)
    new = {**captured(98), "coverage": {**captured(98)["coverage"], "frames_eager": 1}}
    cmp = comparison.compare(doc(old, tolerance={"calls_captured": 0.05}), doc(new))
    assert [c.what for c in cmp.causes if c.effect == changes.REGRESSED] == ["more frames run in eager (0 -> 1)"]


def test_a_baseline_without_coverage_compares_nothing_of_it():
    """As PyTorch's gate skips a metric its expected file predates."""
    old = {k: v for k, v in captured(100).items() if k != "coverage"}
    cmp = comparison.compare(doc(old), doc(captured(3)))
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
        document.load_baseline(str(path))


def test_a_snapshot_keeps_the_explain_stages_coverage_and_a_rewrite_keeps_the_tolerance(tmp_path):
    report = small_report()
    cov = Coverage(calls_captured=17, unique_graphs=2, frames_eager=0, torch_calls_eager=20, captured_share=0.85)
    report.probes[0].stages["explain"] = StageResult("explain", PASS, graph_count=2, graph_break_count=1,
                                                     extra=cov.to_extra())
    snap = document.from_report(report)["probes"][report.probes[0].id]["stages"]["explain"]
    assert snap["coverage"] == {"calls_captured": 17, "unique_graphs": 2, "frames_eager": 0, "torch_calls_eager": 20}
    path = tmp_path / "base.json"
    document.write_baseline(str(path), report, keep={"tolerance": {"calls_captured": 0.02}})
    assert json.loads(path.read_text())["tolerance"] == {"calls_captured": 0.02}


def test_the_metrics_table_names_each_moved_metric():
    from rich.console import Console

    cmp = comparison.compare(doc(FELL_BACK), doc(RESUMES))
    console = Console(width=120, record=True)
    console.print(diff.render(cmp, "b.json"))
    text = console.export_text()
    for word in ("calls_captured ↑", "fallbacks_to_eager ↓", "graph_breaks ↓", "IMPROVED", "outweighed"):
        assert word in text


# --- hand-edited input (issue 41's new fields): a one-line error naming the field, before any run -------------------
@pytest.mark.parametrize("edit, message", [
    (lambda s: s["coverage"].__setitem__("calls_captured", -5), "coverage.calls_captured must be a count"),
    (lambda s: s["coverage"].__setitem__("frames_eager", "many"), "coverage.frames_eager must be a count"),
    (lambda s: s.__setitem__("coverage", [1, 2]), "'coverage' must be an object"),
    (lambda s: s["breaks"].append({"kind": "graph-break", "code": 42}), r"breaks\[0\].code must be the line's source"),
    (lambda s: s["breaks"].append({"kind": "graph-break", "owner": ["x"]}), r"breaks\[0\].owner must be a library"),
    (lambda s: s["breaks"].append({"kind": "graph-break", "gb_code": 59}), r"breaks\[0\].gb_code must be a GB code"),
])
def test_a_hand_broken_coverage_or_break_field_is_named(tmp_path, edit, message):
    d = doc(captured(10))
    edit(d["probes"][PID]["stages"]["explain"])
    path = tmp_path / "base.json"
    path.write_text(json.dumps(d))
    with pytest.raises(UsageError, match=message):
        document.load_baseline(str(path))


def test_a_coverage_key_a_newer_tracecheck_wrote_is_kept_and_not_read():
    d = doc({**captured(10), "coverage": {**captured(10)["coverage"], "ops_in_backward": 7}})
    assert comparison.compare(document.to_baseline(d), doc(captured(10))).changes == []


@pytest.mark.parametrize("bad", [{"calls_captured": "many", "captured_share": "x"}, {"calls_captured": -1},
                                 {"lines": {"/m.py": {"graph": "abc", "eager": 5}}}, {"lines": {"": {"graph": [1]}}},
                                 {"lines": "garbage"}])
def test_odd_coverage_in_a_report_reads_as_not_measured(bad):
    """A hand-edited report: every reader (the gate, the renderers) meets None, never the odd value."""
    cov = Coverage.of({"coverage": {**Coverage(calls_captured=4, unique_graphs=1, frames_eager=0, torch_calls_eager=4,
                                               captured_share=1.0).to_extra()["coverage"], **bad}})
    for name in ("calls_captured", "captured_share"):
        if name in bad:
            assert getattr(cov, name) is None
    assert all(isinstance(n, int) for v in (cov.lines or {}).values() for n in (*v.graph, *v.eager))
    assert "" not in (cov.lines or {})


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_the_comparison_keeps_every_probe_id_whole_at_any_width(width):
    """The root causes and the metrics: a table where it fits whole, else a list; never a cut id or a wide line."""
    from rich.cells import cell_len
    from rich.console import Console

    long_id = "models/vision/model.py::probe_conv_net_training"
    docs = [doc(x) for x in (FELL_BACK, {**captured(50, breaks=2), "breaks": [brk(5), brk(40)]})]
    for d in docs:
        d["probes"] = {long_id: d["probes"][PID]}
    console = Console(width=width, record=True)
    console.print(diff.render(comparison.compare(*docs), "b.json"))
    lines = console.export_text().splitlines()
    assert all(cell_len(line.rstrip()) <= width for line in lines)
    text = "\n".join(lines)
    # a table (2 causes and 4 metric rows, each naming the probe) or a list (2 causes, the metrics' heading)
    assert text.count(long_id) in (3, 6)
    assert text.count("::probe_conv") == text.count(long_id), "an id cut short"
    for metric in ("graph_breaks", "calls_captured", "fallbacks_to_eager"):
        assert metric in text
