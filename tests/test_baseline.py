"""Baselines, comparison rules, sharding, merging and GitHub annotations (pure; no torch, no subprocess)."""
import dataclasses
import copy
import json

import pytest

from report_factory import break_finding, small_report
from tracecheck.collect import sharding
from tracecheck.gate import comparison, document, shards
from tracecheck.model.exitcodes import UsageError
from tracecheck.render import annotations
from tracecheck.model.report import FAIL, PASS, Finding, StageResult


def base_and_new(**kw):
    old = small_report(**kw)
    return old, copy.deepcopy(old)


def compare(old, new):
    return comparison.compare(document.from_report(old), document.from_report(new))


def effects(cmp):
    return sorted((c.probe.split("::")[1], c.stage, c.aspect, c.effect) for c in cmp.changes)


# ---------------------------------------------------------------------------------------------------------
# The document


def test_baseline_holds_no_timings_and_no_paths():
    doc = document.from_report(small_report(root="/home/alice/proj"))
    text = json.dumps(doc)
    assert doc["format"] == "tracecheck-baseline" and doc["schema_version"] == 1
    assert "seconds" not in text and "/home/alice" not in text and "proj" not in text
    brk = doc["probes"]["model.py::probe_bad"]["stages"]["explain"]["breaks"]
    assert brk == [{"kind": "graph-break", "gb_type": "Failed to trace builtin operator", "file": "model.py",
                    "line": 5, "gb_code": "GB0059", "code": 'print("hi")'}]


# The baseline of report_factory.small_report(), written by hand from docs/ci.md ("The baseline file") and the
# values report_factory sets, never from document.from_report's output: ids and break files relative to the probe's
# file, no timings, no paths, no message text; every stage of the compile target; recompiles only where the
# compiled_autograd stage recorded them (an empty list: 0); the compiled_autograd counts that stage keeps; a break's
# GB code where the run had one, and its line's source text without the comment.
_CA = {"unique_graphs_without_ca": 3, "unique_graphs_with_ca": 1, "captures": 2, "hooks_captured": 1}
_PASS = {"status": "pass", "kinds": [], "graph_count": None, "graph_break_count": None, "graph_break_sites": None,
         "breaks": [],
         "recompiles": None, "phases": None, "target": "compile"}
_PRINT_BREAK = {"kind": "graph-break", "gb_type": "Failed to trace builtin operator", "file": "model.py", "line": 5,
                "gb_code": "GB0059", "code": 'print("hi")'}
_PRINT_SITE = {"graph-break": [{"file": "model.py", "line": 5}]}
SMALL_REPORT_BASELINE = {
    "format": "tracecheck-baseline",
    "schema_version": 1,
    "torch": "2.13.0+cpu",
    "tracecheck": "0.1.0",  # informative, as torch: a note when it differs (test below)
    "stages": ["eager", "explain", "aot_eager", "fullgraph", "compiled_autograd"],
    "probes": {
        "model.py::probe_bad": {"stages": {
            "eager": _PASS,
            "explain": {**_PASS, "status": "fail", "kinds": ["graph-break"], "graph_count": 2,
                        "graph_break_count": 1, "graph_break_sites": 1, "breaks": [_PRINT_BREAK], "sites": _PRINT_SITE},
            "aot_eager": {**_PASS, "status": "fail", "kinds": ["graph-break"], "graph_count": 2,
                          "graph_break_count": 1, "graph_break_sites": 1, "breaks": [_PRINT_BREAK], "sites": _PRINT_SITE},
            # where each kind's findings point (relative, as the break): grouped by, not compared
            "fullgraph": {**_PASS, "status": "fail", "kinds": ["missing-fake"],
                          "sites": {"missing-fake": [{"file": "model.py", "line": 9}]}},
            "compiled_autograd": {**_PASS, "recompiles": 0, "compiled_autograd": _CA},
        }},
        "model.py::probe_ok": {"stages": {
            "eager": _PASS,
            "explain": {**_PASS, "graph_count": 1, "graph_break_count": 0, "graph_break_sites": 0},
            "aot_eager": {**_PASS, "graph_count": 1, "graph_break_count": 0, "graph_break_sites": 0},
            "fullgraph": _PASS,
            "compiled_autograd": {**_PASS, "recompiles": 0, "compiled_autograd": _CA},
        }},
    },
}


def test_two_machines_with_different_checkouts_compare_equal():
    a = small_report(root="/ci/runner-1/work/repo")
    b = small_report(root="/home/bob/src/repo")
    for s in b.probes[1].stages.values():  # timings and wording differ between machines: not compared
        s.seconds = 99.0
        for f in s.findings:
            f.summary = "reworded"
            f.evidence = dataclasses.replace(f.evidence, message="a different torch wording")
    # each machine's baseline is the hand-written one, so they are equal to each other
    assert document.from_report(a) == SMALL_REPORT_BASELINE
    assert document.from_report(b) == SMALL_REPORT_BASELINE
    # and either run compared with the hand-written baseline changes nothing
    for run in (a, b):
        cmp = comparison.compare_report(copy.deepcopy(SMALL_REPORT_BASELINE), run)
        assert (cmp.compared_probes, cmp.changes, cmp.regressed) == (2, [], False)


def test_a_full_report_reads_as_a_baseline_of_its_own_run():
    r = small_report()
    doc = document.to_baseline(json.loads(json.dumps(r.to_dict())))
    # the values report_factory wrote by hand, as the baseline keeps them
    bad = doc["probes"]["model.py::probe_bad"]["stages"]
    assert (bad["explain"]["status"], bad["explain"]["kinds"]) == ("fail", ["graph-break"])
    assert (bad["explain"]["graph_count"], bad["explain"]["graph_break_count"]) == (2, 1)
    assert bad["explain"]["breaks"] == [{"kind": "graph-break", "gb_type": "Failed to trace builtin operator",
                                         "file": "model.py", "line": 5, "gb_code": "GB0059", "code": 'print("hi")'}]
    assert (bad["fullgraph"]["status"], bad["fullgraph"]["kinds"]) == ("fail", ["missing-fake"])
    assert bad["compiled_autograd"]["compiled_autograd"] == {"unique_graphs_without_ca": 3, "unique_graphs_with_ca": 1,
                                                             "captures": 2, "hooks_captured": 1}
    ok = doc["probes"]["model.py::probe_ok"]["stages"]
    assert {s: v["status"] for s, v in ok.items()} == {"eager": "pass", "explain": "pass", "aot_eager": "pass",
                                                       "fullgraph": "pass", "compiled_autograd": "pass"}
    # and the run compared with it: nothing changed
    cmp = comparison.compare_report(doc, r)
    assert (cmp.compared_probes, cmp.changes, cmp.regressed) == (2, [], False)


def test_unsupported_baseline_version_is_refused():
    doc = document.from_report(small_report())
    doc["schema_version"] = 7
    with pytest.raises(ValueError, match="schema_version"):
        document.to_baseline(doc)


def test_unreadable_baseline_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        document.load_baseline(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(UsageError, match="not readable JSON"):
        document.load_baseline(str(bad))
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(UsageError, match="neither"):
        document.load_baseline(str(other))


# ---------------------------------------------------------------------------------------------------------
# Comparison rules


def test_identical_runs_do_not_regress():
    old, new = base_and_new()
    cmp = compare(old, new)
    assert cmp.changes == [] and not cmp.regressed and cmp.compared_probes == 2


def test_a_new_graph_break_is_a_named_regression():
    old, new = base_and_new()
    f, b = break_finding(new.probes[0].file, 7, gb_type="Unsupported context manager")
    new.probes[0].stages["explain"] = StageResult("explain", FAIL, failure=f, findings=[f], graph_count=2,
                                                  graph_break_count=1, breaks=[b])
    cmp = compare(old, new)
    assert cmp.regressed
    assert ("probe_ok", "explain", "break", "regressed") in effects(cmp)
    assert ("probe_ok", "explain", "status", "regressed") in effects(cmp)
    assert ("probe_ok", "explain", "graph_count", "regressed") in effects(cmp)
    assert ("probe_ok", "explain", "graph_break_count", "regressed") in effects(cmp)
    brk = next(c for c in cmp.changes if c.aspect == "break")
    assert "Unsupported context manager" in brk.detail and "model.py:7" in brk.detail
    assert brk.location == {"file": "model.py", "line": 7}


def test_a_removed_break_is_an_improvement_not_a_regression():
    old, new = base_and_new()
    new.probes[1].stages["explain"] = StageResult("explain", PASS, graph_count=1, graph_break_count=0)
    cmp = compare(old, new)
    assert not cmp.regressed
    assert {c.aspect for c in cmp.improvements} == {"status", "kind", "graph_count", "graph_break_count", "break"}


def test_a_break_whose_line_moved_is_neither_better_nor_worse():
    old, new = base_and_new()
    new.probes[1].stages["explain"].breaks[0].line = 12  # lines above were edited (the same break object
    cmp = compare(old, new)                               # is seen by explain and aot_eager)
    assert not cmp.regressed and not cmp.improvements
    assert [(c.stage, c.aspect, c.effect) for c in cmp.changes] == [("explain", "break", "changed"),
                                                                     ("aot_eager", "break", "changed")]
    assert "moved" in cmp.changes[0].detail and "was line 5" in cmp.changes[0].detail


def test_a_second_break_of_the_same_type_in_the_same_file_is_a_regression():
    old, new = base_and_new()
    s = new.probes[1].stages["explain"]
    extra = copy.deepcopy(s.breaks[0])
    extra.line = 30
    s.breaks.append(extra)
    s.graph_break_count = 2
    cmp = compare(old, new)
    assert [(c.aspect, c.effect) for c in cmp.regressions] == [("graph_break_count", "regressed"),
                                                               ("break", "regressed")]


def test_a_new_kind_at_a_failing_stage_is_a_regression():
    old, new = base_and_new()
    s = new.probes[1].stages["fullgraph"]
    s.findings.append(Finding("missing-autograd", "no autograd", {"op": "mylib::x"}, {}))
    cmp = compare(old, new)
    assert [(c.aspect, c.after, c.effect) for c in cmp.changes] == [("kind", "missing-autograd", "regressed")]


@pytest.mark.parametrize("key,aspect", [("unique_graphs_with_ca", "compiled_autograd.unique_graphs_with_ca"),
                                        ("unique_graphs_without_ca", "compiled_autograd.unique_graphs_without_ca"),
                                        ("captures", "compiled_autograd.captures"),
                                        ("recompiles", "recompiles")])
def test_more_compiled_autograd_graphs_or_recompiles_regress(key, aspect):
    old, new = base_and_new()
    old.probes[0].stages["compiled_autograd"].extra[key] = 1
    new.probes[0].stages["compiled_autograd"].extra[key] = 3
    assert [(c.aspect, c.effect) for c in compare(old, new).changes] == [(aspect, "regressed")]
    new.probes[0].stages["compiled_autograd"].extra[key] = 0
    assert [(c.aspect, c.effect) for c in compare(old, new).changes] == [(aspect, "improved")]


def test_recompiles_read_from_the_compiled_autograd_record_list():
    old, new = base_and_new()
    ca_old, ca_new = old.probes[0].stages["compiled_autograd"], new.probes[0].stages["compiled_autograd"]
    ca_old.extra["recompiles"] = [{"source": "dynamo", "reason": "a"}]
    ca_new.extra["recompiles"] = [{"source": "dynamo", "reason": "a"}, {"source": "compiled_autograd", "reason": "b"}]
    assert ca_new.recompile_count == 2
    assert [(c.aspect, c.before, c.after) for c in compare(old, new).regressions] == [("recompiles", 1, 2)]
    ca_new.extra["recompile_count"] = 1  # an explicit count wins over the list
    assert compare(old, new).changes == []


def test_more_recompiles_regress():
    old, new = base_and_new()
    old.probes[0].stages["explain"].extra["recompiles"] = 1
    new.probes[0].stages["explain"].extra["recompiles"] = 3
    assert [(c.aspect, c.effect) for c in compare(old, new).changes] == [("recompiles", "regressed")]


def test_a_missing_probe_regresses_and_a_new_passing_probe_does_not():
    old, new = base_and_new()
    new.probes = new.probes[:1]
    cmp = compare(old, new)
    assert [(c.probe, c.after, c.effect) for c in cmp.changes] == [("model.py::probe_bad", "missing", "regressed")]
    cmp = compare(new, old)  # the other way round: probe_bad is new, and it fails
    assert cmp.regressed and "new probe fails" in cmp.changes[0].detail
    passing_new, _ = base_and_new()
    only_bad = copy.deepcopy(passing_new)
    only_bad.probes = only_bad.probes[1:]
    cmp = compare(only_bad, passing_new)  # probe_ok is new and passes
    assert not cmp.regressed and cmp.changes[0].effect == "changed"


def test_a_stage_not_run_any_more_is_not_compared():
    old, new = base_and_new()
    del new.probes[1].stages["fullgraph"]
    cmp = compare(old, new)
    assert not cmp.regressed and [c.aspect for c in cmp.changes] == ["stage"]


def test_compare_only_restricts_to_the_given_probes():
    old, new = base_and_new()
    new.probes = new.probes[:1]
    cmp = comparison.compare(document.from_report(old), document.from_report(new), only=["model.py::probe_ok"])
    assert cmp.changes == []


def test_a_shard_report_is_compared_on_its_own_probes():
    old, new = base_and_new()
    new.probes = new.probes[:1]
    new.command = ["tracecheck", "run", ".", "--shard", "1/2"]
    cmp = comparison.compare_report(document.from_report(old), new)
    assert not cmp.regressed and "shard 1/2" in cmp.notes[0]


# ---------------------------------------------------------------------------------------------------------
# Sharding and merging


@pytest.mark.parametrize("text,expected", [("1/1", (1, 1)), ("2/4", (2, 4)), (" 4 / 4 ", (4, 4))])
def test_parse_shard(text, expected):
    assert shards.parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "a/b", "3", ""])
def test_parse_shard_rejects(text):
    with pytest.raises(UsageError, match="--shard"):
        shards.parse_shard(text)


def test_shards_partition_the_sorted_ids_deterministically():
    ids = [f"m{i % 7}.py::probe_{i}" for i in range(23)]
    parts = [sharding.shard_ids(ids, k, 4) for k in range(1, 5)]
    assert sorted(sum(parts, [])) == sorted(ids)  # every id exactly once
    assert sharding.shard_ids(list(reversed(ids)), 2, 4) == parts[1]  # input order does not matter
    assert sharding.shard_ids(["c", "a", "b", "d"], 1, 2) == ["a", "c"]
    assert sharding.shard_ids(["c", "a", "b", "d"], 2, 2) == ["b", "d"]


def test_shard_is_read_back_from_the_command():
    assert shards.shard_from_command(["tracecheck", "run", "x", "--shard", "3/5"]) == (3, 5)
    assert shards.shard_from_command(["tracecheck", "run", "x", "--shard=2/2"]) == (2, 2)
    assert shards.shard_from_command(["tracecheck", "run", "x"]) is None


def test_merge_joins_disjoint_shards_and_refuses_overlap():
    r = small_report()
    a, b = copy.deepcopy(r), copy.deepcopy(r)
    a.probes, b.probes = r.probes[1:], r.probes[:1]
    merged = shards.merge([a, b], ["a.json", "b.json"])
    assert [p.id for p in merged.probes] == sorted(p.id for p in r.probes)
    assert document.from_report(merged) == document.from_report(r)
    with pytest.raises(UsageError, match="in both a.json and b.json"):
        shards.merge([r, r], ["a.json", "b.json"])


# ---------------------------------------------------------------------------------------------------------
# GitHub annotations


def test_annotations_only_under_github_actions():
    assert annotations.enabled({"GITHUB_ACTIONS": "true"})
    assert not annotations.enabled({})


def test_annotation_at_the_user_frame_of_each_new_break():
    old, new = base_and_new()
    f, b = break_finding(new.probes[0].file, 7, gb_type="Unsupported: a, b")
    for stage in ("explain", "aot_eager"):
        new.probes[0].stages[stage] = StageResult(stage, FAIL, failure=f, findings=[f], graph_count=2,
                                                  graph_break_count=1, breaks=[b])
    lines = annotations.lines(new, compare(old, new), environ={})
    assert len(lines) == 1  # one per location, naming both stages
    assert lines[0].startswith("::error file=model.py,line=7,title=tracecheck%3A new graph break::")
    assert "Unsupported: a, b" in lines[0] and "explain, aot_eager" in lines[0]


def test_without_a_baseline_every_break_is_annotated_relative_to_the_workspace():
    r = small_report(root="/ws/repo")
    lines = annotations.lines(r, None, environ={"GITHUB_WORKSPACE": "/ws/repo"})
    # GitHub's workflow-command syntax, written by hand: ':' in the title and ':' ',' in properties escaped
    assert lines == ["::error file=model.py,line=5,title=tracecheck%3A new graph break::graph-break (Failed to trace "
                     "builtin operator) at model.py:5 [probes: model.py::probe_bad; stages: explain, aot_eager]"]


def test_without_a_baseline_one_break_reached_by_two_probes_is_one_annotation():
    r = small_report(root="/ws/repo")
    twin = copy.deepcopy(next(p for p in r.probes if p.name == "probe_bad"))
    twin.id, twin.name = "model.py::probe_twin", "probe_twin"
    r.probes.append(twin)
    lines = annotations.lines(r, None, environ={"GITHUB_WORKSPACE": "/ws/repo"})
    assert lines == ["::error file=model.py,line=5,title=tracecheck%3A new graph break::graph-break (Failed to trace "
                     "builtin operator) at model.py:5 [probes: model.py::probe_bad, model.py::probe_twin; stages: "
                     "explain, aot_eager]"]


def test_breaks_of_a_probe_the_baseline_did_not_have_are_annotated():
    old, new = base_and_new()
    old.probes = old.probes[:1]
    lines = annotations.lines(new, compare(old, new), environ={"GITHUB_WORKSPACE": "/home/alice/proj"})
    assert len(lines) == 1 and lines[0].startswith("::error file=model.py,line=5,")


def test_annotation_escaping():
    line = annotations.command("a,b:c.py", 3, "t", "50% done\nnext")
    assert line == "::error file=a%2Cb%3Ac.py,line=3,title=t::50%25 done%0Anext"


def test_compare_cli_with_a_baseline_as_new(tmp_path):
    """Two baselines compared: the exit code says regressed or not, and nothing else (no traceback)."""
    import json
    import subprocess
    import sys

    old, new = base_and_new()
    new.probes = new.probes[1:]                        # a probe went missing: a regression
    (tmp_path / "old.json").write_text(json.dumps(document.from_report(old)))
    (tmp_path / "same.json").write_text(json.dumps(document.from_report(old)))
    (tmp_path / "new.json").write_text(json.dumps(document.from_report(new)))

    def compare_cli(a, b):
        return subprocess.run([sys.executable, "-m", "tracecheck", "compare", a, b], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)

    same = compare_cli("old.json", "same.json")
    assert same.returncode == 0 and "Traceback" not in same.stderr, same.stderr
    worse = compare_cli("old.json", "new.json")
    assert "Traceback" not in worse.stderr, worse.stderr
    assert worse.returncode == 1 and "went missing" in worse.stdout


def test_a_stage_that_stops_running_backward_regresses():
    old, new = base_and_new()
    old.probes[0].stages["aot_eager"].phases = ["forward", "backward"]
    new.probes[0].stages["aot_eager"].phases = ["forward"]
    cmp = compare(old, new)
    assert [(c.stage, c.aspect, c.effect) for c in cmp.changes] == [("aot_eager", "phases", "regressed")]
    assert compare(new, old).regressions == []        # gaining backward is not a regression


def test_an_import_failure_that_goes_away_is_an_improvement_not_a_missing_probe():
    from report_factory import probe as make_probe
    from tracecheck.model.report import LOAD_STAGE, RunReport

    twice = Finding("op-redefined", "Operator ns::f was registered twice under one qualified name.", {"op": "ns::f"},
                    {"user_frame": {"file": "/p/m.py", "line": 7}})
    failed = RunReport(probes=[make_probe("m.py", "(import)", "/p/m.py", {
        LOAD_STAGE: StageResult(LOAD_STAGE, FAIL, failure=twice, findings=[twice])})], environment={}, stages=["eager"])
    fixed = RunReport(probes=[make_probe("m.py", "probe_a", "/p/m.py", {"eager": StageResult("eager", PASS)})],
                      environment={}, stages=["eager"])
    cmp = compare(failed, fixed)
    assert sorted((c.probe, c.effect) for c in cmp.changes) == [("m.py::(import)", "improved"),
                                                                ("m.py::probe_a", "changed")]
    assert cmp.regressions == []


# ---------------------------------------------------------------------------------------------------------
# Advice: shown, never a regression unless --strict or the baseline's severity asks


def _with_advice(report, kind="opaque-op", op="mylib::op"):
    """``probe_ok``'s aot_eager stage passes with one advice finding, written by hand."""
    f = Finding(kind, f"advice about {op}", {"op": op})
    s = report.probes[0].stages["aot_eager"]
    s.findings.append(f)
    return report


def test_new_advice_is_shown_but_does_not_regress():
    old, new = base_and_new()
    cmp = compare(old, _with_advice(new))
    assert not cmp.regressed
    assert effects(cmp) == [("probe_ok", "aot_eager", "advice", "changed")]
    snap = document.from_report(new)["probes"]["model.py::probe_ok"]["stages"]["aot_eager"]
    assert snap["status"] == PASS and snap["kinds"] == [] and snap["advice"] == ["opaque-op"]


def test_the_baselines_severity_setting_makes_one_advice_kind_regress():
    old, new = base_and_new()
    base = document.from_report(old, {"opaque-op": "error"})
    cmp = comparison.compare(base, document.from_report(_with_advice(new)))
    assert cmp.regressed
    assert [c.detail for c in cmp.regressions] == [
        "new failure kind opaque-op (advice, gated by --strict or the baseline's severity)"]
    other = comparison.compare(base, document.from_report(_with_advice(copy.deepcopy(old), "no-batching-rule")))
    assert not other.regressed                      # only the kind the setting names gates


def _strict(report):
    from tracecheck.classify import settle

    report.strict = True
    for p in report.probes:
        p.strict = True
        p.stages = {name: settle.under_strict(s) for name, s in p.stages.items()}
    return report


def test_a_strict_run_makes_every_new_advice_kind_regress():
    old, new = base_and_new()
    new = _strict(_with_advice(new, "no-batching-rule"))
    assert new.probes[0].stages["aot_eager"].status == FAIL          # --strict failed the stage
    cmp = comparison.compare(document.from_report(old), document.from_report(new))
    assert [(c.aspect, c.after) for c in cmp.regressions] == [("kind", "no-batching-rule")]


def test_a_strict_run_with_the_advice_the_baseline_has_does_not_regress():
    """The baseline was recorded without --strict; the same advice under --strict is nothing new."""
    old = _with_advice(small_report())
    new = _strict(_with_advice(small_report()))
    cmp = comparison.compare(document.from_report(old), document.from_report(new))
    assert not cmp.regressed, [c.detail for c in cmp.changes]


def test_merge_keeps_strict_and_refuses_a_mix():
    a, b = small_report(), small_report()
    for p in b.probes:
        p.id = p.id.replace("model.py", "other.py")
    a.strict = b.strict = True
    assert shards.merge([a, b], ["a.json", "b.json"]).strict is True
    b.strict = False
    with pytest.raises(UsageError, match="--strict"):
        shards.merge([a, b], ["a.json", "b.json"])


@pytest.mark.parametrize("setting, message", [
    ({"graph-break": "advice"}, "'graph-break' is an error kind, which always gates"),
    ({"no-such-kind": "error"}, "'no-such-kind' is not a kind"),
    ({"opaque-op": "fatal"}, "expected one of error, advice"),
    (["opaque-op"], "must be an object"),
    (None, "must be an object"),
    ([], "must be an object"),
])
def test_a_bad_severity_setting_is_a_usage_error(tmp_path, setting, message):
    doc = document.from_report(small_report())
    doc["severity"] = setting
    path = tmp_path / "base.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=message):
        document.load_baseline(str(path))


def test_rewriting_a_baseline_keeps_its_severity_setting(tmp_path):
    doc = document.from_report(small_report(), {"opaque-op": "error"})
    path = tmp_path / "base.json"
    document.write_baseline(str(path), small_report(), keep=doc)
    assert json.loads(path.read_text())["severity"] == {"opaque-op": "error"}
    document.write_baseline(str(path), small_report())
    assert "severity" not in json.loads(path.read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["probes"].__setitem__("model.py::probe_ok", "garbage"), "expected an object with a 'stages'"),
    (lambda d: d["probes"]["model.py::probe_ok"]["stages"]["aot_eager"].__setitem__("advice", None),
     "'advice' must be a list"),
    (lambda d: d["probes"]["model.py::probe_ok"]["stages"]["aot_eager"].__setitem__("kinds", "opaque-op"),
     "'kinds' must be a list"),
])
def test_a_hand_broken_baseline_is_refused_when_loaded(tmp_path, edit, message):
    """Before the run, so that its results are not lost at the comparison."""
    doc = document.from_report(small_report())
    edit(doc)
    path = tmp_path / "base.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=message):
        document.load_baseline(str(path))


# ---------------------------------------------------------------------------------------------------------
# Root causes. The documents are written by hand (docs/ci.md, "The baseline file"); the expected causes, counts
# and wording are worked out from them by hand, not from compare's output.

_CLEAN = {"status": "pass", "kinds": [], "graph_count": 1, "graph_break_count": 0, "graph_break_sites": 0, "breaks": [],
          "recompiles": None,
          "phases": None, "target": "compile"}
_ITEM = {"kind": "data-dependent", "gb_type": "Unsupported Tensor.item() call with capture_scalar_outputs=False",
         "file": "gate_model.py", "line": 14, "gb_code": "GB0124"}
_ITEM_BROKEN = {**_CLEAN, "status": "fail", "kinds": ["data-dependent"], "graph_count": 2, "graph_break_count": 1,
                "graph_break_sites": 1, "breaks": [_ITEM]}
# fullgraph and export raise at the break: they record the kind and no break (and no counts)
_RAISES = {**_CLEAN, "graph_count": None, "graph_break_count": None, "graph_break_sites": None}
_OLD_BREAK = {"kind": "graph-break", "gb_type": "Call to `torch._dynamo.graph_break()`", "file": "other.py",
              "line": 30}  # a baseline written before gb_code: none recorded


def _doc(probes: dict) -> dict:
    return {"format": "tracecheck-baseline", "schema_version": 1, "torch": "2.13.0+cpu",
            "stages": ["explain", "aot_eager", "inductor", "fullgraph", "dynamic", "export"],
            "probes": {pid: {"stages": stages} for pid, stages in probes.items()}}


def _item_guard_docs():
    """Two probes; the new run adds one `.item()` guard at gate_model.py:14 that every stage sees, and, unrelated,
    one more graph in probe_small's dynamic stage with no break or kind to explain it."""
    before = {"explain": _CLEAN, "aot_eager": _CLEAN, "inductor": _CLEAN, "fullgraph": _RAISES, "dynamic": _CLEAN,
              "export": {**_RAISES, "target": "export"}}
    after = {"explain": _ITEM_BROKEN, "aot_eager": _ITEM_BROKEN, "inductor": _ITEM_BROKEN,
             "fullgraph": {**_RAISES, "status": "fail", "kinds": ["data-dependent"]}, "dynamic": _CLEAN,
             "export": {**_RAISES, "target": "export", "status": "fail", "kinds": ["data-dependent"]}}
    base = _doc({"gate_model.py::probe_large": before, "gate_model.py::probe_small": before})
    new = _doc({"gate_model.py::probe_large": after,
                "gate_model.py::probe_small": {**after, "dynamic": {**_CLEAN, "graph_count": 2}}})
    return base, new


def test_one_new_break_seen_by_every_stage_of_two_probes_is_one_root_cause():
    cmp = comparison.compare(*_item_guard_docs())
    # per probe: explain, aot_eager, inductor each change status, kind, graphs, graph breaks and the break (5 x 3);
    # fullgraph and export status and kind (2 x 2); and probe_small's dynamic its graph count: 2 x 19 + 1
    assert len(cmp.changes) == 39 and cmp.regressed
    item, graphs = cmp.causes
    assert (item.effect, item.aspect, item.location) == ("regressed", "break", {"file": "gate_model.py", "line": 14})
    # export is not a required target: its changes are `changed`, the same break's, and named apart
    assert item.description == ("new graph break at gate_model.py:14 (data-dependent, GB0124) in 2 probes × 4 stages; "
                                "also in export (target not required)")
    assert item.probes == ["gate_model.py::probe_large", "gate_model.py::probe_small"]
    assert item.stages == ["explain", "aot_eager", "inductor", "fullgraph"] and item.also == ["export"]
    assert len(item.changes) == 38
    assert {c.effect for c in item.changes if c.stage == "export"} == {"changed"}
    # a graph count that rises with no new break or kind in its stage is a cause of its own
    assert (graphs.effect, graphs.description) == ("regressed", "more graphs (1 -> 2) in 1 probe × 1 stage")
    assert [(c.probe, c.stage, c.aspect) for c in graphs.changes] == [("gate_model.py::probe_small", "dynamic",
                                                                       "graph_count")]


def test_the_summary_line_counts_root_causes():
    from tracecheck.render import diff

    cmp = comparison.compare(*_item_guard_docs())
    # before: "REGRESSED — 35 regression(s), 0 improvement(s), 4 other change(s) over 2 probe(s)"
    assert diff.summary(cmp, "base.json").plain == (
        "baseline base.json: REGRESSED — 2 regressions, 0 improvements, 0 other changes, by root cause "
        "(39 per-stage changes; 2 probes compared)")
    unchanged = comparison.compare(_item_guard_docs()[0], _item_guard_docs()[0])
    assert diff.summary(unchanged, "b.json").plain == (
        "baseline b.json: unchanged — 0 regressions, 0 improvements, 0 other changes, by root cause "
        "(0 per-stage changes; 2 probes compared)")


def test_the_diff_table_has_one_row_per_root_cause():
    import io

    from rich.console import Console

    from tracecheck.render import diff

    def text(detail):
        console = Console(file=io.StringIO(), width=200, color_system=None)
        console.print(diff.render(comparison.compare(*_item_guard_docs()), "base.json", detail=detail))
        return console.file.getvalue()

    rows = [line for line in text(False).splitlines() if line.startswith("│ regressed")]
    assert len(rows) == 2
    assert "new graph break at gate_model.py:14 (data-dependent, GB0124)" in rows[0]
    assert "2 probes × 4 stages" in rows[0]
    # export is not required: named apart, under where it regressed
    assert rows[0].count("│") == 5 and "○ also in export (target not required)" in text(False)
    assert "gate_model.py::probe_large" in rows[0]  # few probes: listed
    assert "more graphs (1 -> 2)" in rows[1] and "1 probe × 1 stage: dynamic" in rows[1]
    # -v: every per-stage change as well
    rows = [line for line in text(True).splitlines() if line.startswith(("│ regressed", "│ changed"))]
    assert len(rows) == 2 + 39


def test_an_improvement_and_a_regression_elsewhere_are_two_causes():
    broken = {**_CLEAN, "status": "fail", "kinds": ["graph-break"], "graph_count": 2, "graph_break_count": 1,
              "breaks": [_OLD_BREAK]}
    base = _doc({"m.py::probe_a": {"explain": broken, "aot_eager": broken}, "m.py::probe_b": {"explain": _CLEAN}})
    new = _doc({"m.py::probe_a": {"explain": _CLEAN, "aot_eager": _CLEAN}, "m.py::probe_b": {"explain": _ITEM_BROKEN}})
    cmp = comparison.compare(base, new)
    assert len(cmp.changes) == 15  # status, kind, graphs, graph breaks, the break: in 3 probe-stages
    assert [(c.effect, c.description) for c in cmp.causes] == [
        ("improved", "graph break gone at other.py:30 (graph-break, Call to `torch._dynamo.graph_break()`) "
                     "in 1 probe × 2 stages"),  # no GB code in that baseline: the gb_type says which
        ("regressed", "new graph break at gate_model.py:14 (data-dependent, GB0124) in 1 probe × 1 stage"),
    ]
    assert [len(c.changes) for c in cmp.causes] == [10, 5]
    # the exit code's rule is unchanged: regressed iff a change regressed, which is iff a cause did
    assert cmp.regressed and comparison.compare(new, base).regressed
    assert not comparison.compare(base, base).regressed and comparison.compare(base, base).causes == []


def test_a_kind_without_a_break_joins_a_break_only_when_the_probe_has_one_of_that_kind():
    second = {**_ITEM, "line": 20}
    two = {**_ITEM_BROKEN, "graph_count": 3, "graph_break_count": 2, "breaks": [_ITEM, second]}
    base = _doc({"m.py::probe": {"explain": _CLEAN, "fullgraph": _RAISES}})
    new = _doc({"m.py::probe": {"explain": two, "fullgraph": {**_RAISES, "status": "fail",
                                                                     "kinds": ["data-dependent"]}}})
    cmp = comparison.compare(base, new)
    # explain's status, kind and counts go with its first new break; fullgraph's kind could be either break
    assert [(c.what, len(c.changes)) for c in cmp.causes] == [
        ("new graph break at gate_model.py:14 (data-dependent, GB0124)", 5),
        ("new graph break at gate_model.py:20 (data-dependent, GB0124)", 1),
        ("new failure kind data-dependent", 2),
    ]


def test_causes_are_in_the_json_beside_every_change():
    cmp = comparison.compare(*_item_guard_docs())
    doc = json.loads(json.dumps(cmp.to_dict()))
    assert len(doc["changes"]) == 39 and len(doc["causes"]) == 2
    listed = sorted(i for cause in doc["causes"] for i in cause["changes"])
    assert listed == list(range(39))  # every change in exactly one cause
    assert doc["causes"][0]["description"].startswith("new graph break at gate_model.py:14")
    assert doc["causes"][0]["location"] == {"file": "gate_model.py", "line": 14}
    brk = next(c for c in doc["changes"] if c["aspect"] == "break")
    assert brk["graph_break"] == _ITEM


def test_one_annotation_per_regressed_root_cause():
    cmp = comparison.compare(*_item_guard_docs())
    # GitHub's workflow-command syntax, written by hand (':' escaped in the title only)
    assert annotations.lines(None, cmp, environ={}) == [
        "::error file=gate_model.py,line=14,title=tracecheck%3A new graph break::new graph break at gate_model.py:14 "
        "(data-dependent, GB0124) in 2 probes × 4 stages: Unsupported Tensor.item() call with "
        "capture_scalar_outputs=False [probes: gate_model.py::probe_large, gate_model.py::probe_small; stages: "
        "explain, aot_eager, inductor, fullgraph]",  # export: not a required target, no part of the failure
        "::error title=tracecheck%3A regression::more graphs (1 -> 2) in 1 probe × 1 stage "
        "[probes: gate_model.py::probe_small; stages: dynamic]",
    ]
    base, new = _item_guard_docs()
    assert annotations.lines(None, comparison.compare(new, base), environ={}) == []  # improvements: none


def test_a_baseline_with_gb_codes_is_read_by_the_same_schema_version():
    base, new = _item_guard_docs()
    assert document.to_baseline(copy.deepcopy(new)) == new
    bad = copy.deepcopy(new)
    bad["probes"]["gate_model.py::probe_large"]["stages"]["explain"]["breaks"][0]["gb_code"] = 124
    with pytest.raises(ValueError, match=r"breaks\[0\].gb_code must be a GB code"):
        document.to_baseline(bad)


def test_a_break_that_moved_in_every_stage_is_one_changed_cause():
    moved = {**_ITEM, "line": 17}
    base = _doc({"m.py::probe": {"explain": _ITEM_BROKEN, "aot_eager": _ITEM_BROKEN}})
    new = _doc({"m.py::probe": {"explain": {**_ITEM_BROKEN, "breaks": [moved]},
                                "aot_eager": {**_ITEM_BROKEN, "breaks": [moved]}}})
    cmp = comparison.compare(base, new)
    assert [(c.effect, c.description) for c in cmp.causes] == [
        ("changed", "graph break moved to gate_model.py:17 from line 14 (data-dependent, GB0124) in 1 probe × 2 stages")]


def test_the_markdown_report_lists_root_causes_and_keeps_each_change_folded():
    from tracecheck.render import markdown

    md = markdown.render(small_report(), comparison=comparison.compare(*_item_guard_docs()))
    section = md.split("## Against the baseline", 1)[1]
    causes = section.split("<details>", 1)[0]
    assert [ln.split(" | ")[0] for ln in causes.splitlines() if ln.startswith("| regressed")] == ["| regressed"] * 2
    assert ("new graph break at gate_model.py:14 (data-dependent, GB0124) | 2 probes × 4 stages; ⚪ also in export "
            "(target not required) |") in causes
    assert "Each change per probe and stage (39)" in section


def test_a_kind_a_stage_no_longer_reaches_because_it_now_stops_earlier_is_no_improvement():
    """fullgraph stops at the first break: a new break before the old one hides the old kind (hand-written)."""
    base = _doc({"m.py::p": {"fullgraph": {**_RAISES, "status": "fail", "kinds": ["graph-break"]}}})
    new = _doc({"m.py::p": {"fullgraph": {**_RAISES, "status": "fail", "kinds": ["data-dependent"]}}})
    cmp = comparison.compare(base, new)
    kinds = {(c.before, c.after): c.effect for c in cmp.changes if c.aspect == "kind"}
    assert kinds == {(None, "data-dependent"): "regressed", ("graph-break", None): "changed"}
    assert not cmp.improvements
    gone = comparison.compare(base, _doc({"m.py::p": {"fullgraph": {**_RAISES, "status": "pass", "kinds": []}}}))
    assert [c.effect for c in gone.changes if c.aspect == "kind"] == ["improved"]  # really gone: an improvement


def test_a_baseline_from_another_tracecheck_says_so_in_a_note():
    """A new tracecheck may ask more of a stage (fullgraph through AOTAutograd, 2026-12-06): its new failures read as
    the change's regressions unless the comparison says the tool changed too."""
    base = copy.deepcopy(SMALL_REPORT_BASELINE)
    new = {**copy.deepcopy(SMALL_REPORT_BASELINE), "tracecheck": "0.2.0"}
    assert comparison.compare(base, new).notes == [
        "tracecheck 0.1.0 -> 0.2.0 since the baseline: a stage may check more than it did (its release notes say "
        "what); rewrite the baseline with --update-baseline once reviewed"]
    assert comparison.compare(base, copy.deepcopy(base)).notes == []


def test_update_baseline_from_a_baseline_keeps_what_it_does_not_read(tmp_path):
    """``compare BASE NEW --update-baseline`` with a baseline as NEW writes NEW's probes as they are (a key a newer
    tracecheck wrote in a break or a probe survives) and BASE's settings."""
    from click.testing import CliRunner
    from tracecheck.cli import cli

    new = document.from_report(small_report())
    pid = next(iter(new["probes"]))
    new["probes"][pid]["from_a_newer_version"] = {"kept": True}
    for st in new["probes"][pid]["stages"].values():
        for b in st.get("breaks") or []:
            b["newer_key"] = 7
    base = {**document.empty().to_json(), "severity": {"opaque-op": "error"}}
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "new.json").write_text(json.dumps(new))
    res = CliRunner().invoke(cli, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"),
                                   "--update-baseline"])
    assert res.exit_code == 0, res.output
    written = json.loads((tmp_path / "base.json").read_text())
    assert written["probes"][pid]["from_a_newer_version"] == {"kept": True}
    assert written["probes"] == new["probes"] and written["severity"] == {"opaque-op": "error"}
