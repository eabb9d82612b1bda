"""Report data classes: JSON round trip, verdict rules, atomic write."""
import json

import pytest

from tracecheck import stages
from tracecheck.model.report import FAIL, PASS, SKIP, Finding, GraphBreak, ProbeReport, RunReport, StageResult
from tracecheck.model.reportio import write_json_atomic


def sample() -> RunReport:
    f = Finding("pybind-builtin", "s", {"builtin": "ext.fwd"}, {"gb_code": "GB0007"})
    b = GraphBreak("pybind-builtin", "Attempted to call function marked as skipped", "GB0007", "m.py", 3)
    p = ProbeReport("m.py::probe", "/abs/m.py", "probe", {
        "eager": StageResult("eager", PASS),
        "explain": StageResult("explain", FAIL, failure=f, findings=[f], graph_count=2, graph_break_count=1,
                               breaks=[b]),
        "opcheck": StageResult("opcheck", SKIP, skip_reason="no custom op"),
    })
    return RunReport([p], {"torch": "2.13.0"}, ["eager", "explain", "opcheck"])


def test_a_report_reads_back_field_by_field():
    d = json.loads(json.dumps(sample().to_dict()))
    assert d["schema_version"] == 4
    # the JSON holds what sample() wrote by hand
    explain = d["probes"][0]["stages"]["explain"]
    assert (explain["status"], explain["graph_count"], explain["graph_break_count"]) == ("fail", 2, 1)
    assert explain["findings"][0]["kind"] == "pybind-builtin"
    assert explain["findings"][0]["context"] == {"builtin": "ext.fwd"}
    assert explain["breaks"][0]["gb_code"] == "GB0007" and explain["breaks"][0]["line"] == 3
    # and reads back into the same typed values
    p = RunReport.from_dict(d).probes[0]
    assert (p.id, p.file, p.name) == ("m.py::probe", "/abs/m.py", "probe")
    s = p.stages["explain"]
    assert isinstance(s.failure, Finding) and (s.failure.kind, s.failure.summary) == ("pybind-builtin", "s")
    assert s.failure.evidence.gb_code == "GB0007" and s.findings == [s.failure]
    b = s.breaks[0]
    assert isinstance(b, GraphBreak)
    assert (b.kind, b.gb_type, b.gb_code, b.file, b.line) == (
        "pybind-builtin", "Attempted to call function marked as skipped", "GB0007", "m.py", 3)
    assert (p.stages["opcheck"].status, p.stages["opcheck"].skip_reason) == ("skip", "no custom op")
    assert p.verdict.status == "fail"


def test_verdict_first_failing_stage_and_kinds():
    v = sample().probes[0].verdict
    assert (v.status, v.first_failing_stage, v.kinds) == ("fail", "explain", ("pybind-builtin",))


def test_skips_do_not_fail():
    p = ProbeReport("a::b", "a", "b", {"eager": StageResult("eager", PASS), "opcheck": StageResult("opcheck", SKIP)})
    assert p.verdict.status == "pass" and p.verdict.kinds == ()


def test_other_schema_version_is_refused():
    d = sample().to_dict()
    d["schema_version"] = 99
    with pytest.raises(ValueError, match="schema_version"):
        RunReport.from_dict(d)


def test_atomic_write(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_same_op_seen_by_compile_and_opcheck_is_one_finding():
    from tracecheck.model.report import group_findings

    compile_f = Finding("missing-fake", "s", {"op": "tc::myop"}, {"user_frame": {"file": "m.py", "line": 3}})
    opcheck_f = Finding("missing-fake", "s", {"op": "tc.myop.default"}, {"opcheck_test": "test_faketensor"})
    other = Finding("missing-fake", "s", {"op": "tc.other.default"}, {})
    p = ProbeReport("a::b", "a", "b", {
        "explain": StageResult("explain", FAIL, compile_f, [compile_f]),
        "opcheck": StageResult("opcheck", FAIL, opcheck_f, [opcheck_f, other]),
    })
    groups = group_findings(p)
    assert [stages for stages, _ in groups] == [["explain", "opcheck"], ["opcheck"]]


def test_crash_calling_a_redefined_op_is_op_redefined(tmp_path):
    from tracecheck.classify import results, settle

    model = tmp_path / "m.py"
    model.write_text("def head(x):\n    return soft_clip(x, 5.0) * 0.5\n\ndef other(x):\n    return crashy(x)\n")
    stack = ('Fatal Python error: Segmentation fault\n\n'
             'File "/v/torch/_ops.py", line 875 in __call__\n'
             'File "/v/torch/_library/custom_ops.py", line 863 in __call__\n'
             f'File "{model}", line {{line}} in head\n')
    redefined = Finding("op-redefined", "s", {"op": "ns::soft_clip"}, {})
    load = StageResult("load", FAIL, redefined, [redefined])

    def crash(stage, line):
        return results.died_result(stage, "process killed by SIGSEGV", False, stack.format(line=line), 1.0)

    stages = {"load": load, "eager": crash("eager", 2), "explain": crash("explain", 5)}
    stages = settle.crashes_attributed(stages)
    assert stages["eager"].status == "crash" and stages["eager"].failure.kind == "op-redefined"
    assert "SIGSEGV" in stages["eager"].failure.summary
    # a crash in a call of another op is not blamed on the redefinition
    assert stages["explain"].failure.kind == "crash"
    alone = {"eager": crash("eager", 2)}
    alone = settle.crashes_attributed(alone)
    assert alone["eager"].failure.kind == "crash"  # no redefinition in this probe
    # the compiled run calls it first: Dynamo executes the user's lines symbolically, so the op call's first caller
    # outside torch is tracecheck's stage code, reached through Dynamo
    traced = ('Fatal Python error: Segmentation fault\n\n'
              'File "/v/torch/_ops.py", line 916 in __call__\n'
              'File "/v/torch/_subclasses/fake_tensor.py", line 1606 in __torch_dispatch__\n'
              'File "/v/torch/_dynamo/symbolic_convert.py", line 1493 in call_function\n'
              'File "/v/torch/_dynamo/eval_frame.py", line 1446 in _fn\n'
              'File "/x/tracecheck/stages/_execution.py", line 132 in execute\n')
    compiled = {"load": load, "inductor": results.died_result("inductor", "process killed by SIGSEGV", False, traced,
                                                              1.0)}
    compiled = settle.crashes_attributed(compiled)
    assert compiled["inductor"].failure.kind == "op-redefined"
    untraced = {"load": load, "opcheck": results.died_result(
        "opcheck", "killed", False, traced.replace("/torch/_dynamo/", "/torch/_library/"), 1.0)}
    untraced = settle.crashes_attributed(untraced)
    assert untraced["opcheck"].failure.kind == "crash"  # tracecheck calling an op itself names no op: not claimed


def test_forward_only_passes_are_marked_in_every_renderer():
    import io

    from rich.console import Console

    from tracecheck.render import markdown, tables, terminal

    p = ProbeReport("m.py::probe", "/abs/m.py", "probe", {
        "eager": StageResult("eager", PASS, phases=["forward"]),
        "explain": StageResult("explain", PASS, graph_count=1, graph_break_count=0, phases=["forward"]),
        "aot_eager": StageResult("aot_eager", PASS, phases=["forward", "backward"]),
    })
    r = RunReport([p], {"torch": "2.13.0"}, ["eager", "explain", "aot_eager"], rootdir="/abs")
    assert [terminal.cell(p.stages[s]).plain for s in r.stages] == ["✓ fwd", "✓", "✓"]
    assert [markdown.verdict_cell(p.stages[s]) for s in r.stages] == ["✅ fwd", "✅", "✅"]
    assert tables.verdict_frame(r).loc["m.py::probe"].tolist() == ["pass (fwd)", "pass", "pass"]
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(terminal.verdict_view(r, 160))
    assert "✓ fwd" in console.file.getvalue()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["rootdir"] == "/abs"
    assert d["probes"][0]["stages"]["eager"]["phases"] == ["forward"]
    assert stages.forward_only(RunReport.from_dict(d).probes[0].stages["eager"])


def test_counts_not_measured_show_a_dash_not_zero():
    import io

    from rich.console import Console

    from tracecheck.render import markdown, terminal

    p = ProbeReport("m.py::probe", "/abs/m.py", "probe", {
        "explain": StageResult("explain", SKIP, skip_reason="the eager forward fails"),
        "compiled_autograd": StageResult("compiled_autograd", SKIP, skip_reason="no backward"),
    })
    r = RunReport([p], {"torch": "2.13.0"}, ["explain", "compiled_autograd"])
    assert p.graph_breaks is None
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(terminal.verdict_view(r, 160))
    drawn = console.file.getvalue().splitlines()
    assert drawn[0].strip() == "tracecheck verdicts: m.py"  # one file: named once, rows by probe name
    row = next(line for line in drawn if line.strip("│┃ ").startswith("probe") and "explain" not in line)
    assert row.rstrip(" │").endswith("–") and " 0 " not in row
    assert terminal.compiled_autograd_table(r) is None              # the stage did not run: no row
    md = markdown.render(r)
    assert "## Compiled autograd" not in md
    assert "| `probe` | ➖ | ➖ | – |" in md


def test_a_report_with_a_kind_this_version_does_not_know_still_reads():
    d = sample().to_dict()
    d["probes"][0]["stages"]["explain"]["findings"][0]["kind"] = "from-the-future"
    d["probes"][0]["stages"]["explain"]["breaks"][0]["kind"] = "from-the-future"
    r = RunReport.from_dict(d)
    f = r.probes[0].stages["explain"].findings[0]
    assert (f.kind, f.context.reported_kind) == ("unknown", "from-the-future")
    assert r.probes[0].stages["explain"].breaks[0].kind == "unknown"


def test_next_steps_name_the_fix_command_or_the_kinds_page(tmp_path, monkeypatch):
    from tracecheck.render import terminal

    monkeypatch.chdir(tmp_path)
    f = Finding("pybind-builtin", "s", {"builtin": "ext.fwd", "in_autograd_function": True}, {})  # what fix rewrites
    g = Finding("graph-break", "s", {"gb_type": "x"}, {})
    fixable = ProbeReport("m.py::probe_a", str(tmp_path / "m.py"), "probe_a",
                          {"explain": StageResult("explain", FAIL, failure=f, findings=[f])})
    other = ProbeReport("m.py::probe_b", str(tmp_path / "m.py"), "probe_b",
                        {"explain": StageResult("explain", FAIL, failure=g, findings=[g])})
    ok = ProbeReport("m.py::probe_c", str(tmp_path / "m.py"), "probe_c", {"eager": StageResult("eager", PASS)})
    lines = terminal.next_steps(RunReport([fixable, other, ok], {}, ["eager", "explain"]))
    assert lines == [
        "tracecheck fix m.py::probe_a -o fixed_ops.py   (pybind-builtin)",
        "tracecheck explain graph-break   (m.py::probe_b)",
        "attach to an issue: rerun with --report report.md (a Markdown file under GitHub's size limit)",
    ]
    with_report = terminal.next_steps(RunReport([fixable, other, ok], {}, ["eager", "explain"]), "out/r.md")
    assert with_report[-1] == "attach to an issue: out/r.md (--report)"
    # a graph break whose user frame is in the probe's own file: fix rewrites that file (a diff, no -o module)
    here = Finding("graph-break", "s", {"gb_type": "x"}, {"user_frame": {"file": str(tmp_path / "m.py"), "line": 3}})
    mine = ProbeReport("m.py::probe_d", str(tmp_path / "m.py"), "probe_d",
                       {"explain": StageResult("explain", FAIL, failure=here, findings=[here])})
    assert terminal.next_steps(RunReport([mine], {}, ["explain"]))[0] == \
        "tracecheck fix m.py::probe_d --diff m.diff   (graph-break)"
    # two fixes in one file: run as printed, one after the other, neither overwrites what the other wrote
    assert terminal.next_steps(RunReport([fixable, mine], {}, ["explain"]))[:2] == [
        "tracecheck fix m.py::probe_a -o fixed_ops_probe_a.py --patched m_probe_a_fixed.py   (pybind-builtin)",
        "tracecheck fix m.py::probe_d --diff m_probe_d.diff --patched m_probe_d_fixed.py   (graph-break)"]


def test_an_unknown_takes_the_root_cause_of_the_same_op_before_one_of_the_same_line():
    from tracecheck.classify import settle

    frame = {"user_frame": {"file": "/p/m.py", "line": 9}}
    by_line = Finding("data-dependent", "Control flow depends on data.", {}, dict(frame))
    by_op = Finding("missing-fake", "Custom op ns::f has no fake impl.", {"op": "ns::f"}, {})
    rec = Finding("recompile", "Recompiles.", {"op": "ns::f"}, dict(frame))  # a symptom: never a cause
    bare = Finding("unknown", "Unclassified failure at stage opcheck.", {"op": "ns::f"},
                   {"phase": "test_faketensor", **frame})
    stages = {"explain": StageResult("explain", FAIL, failure=by_line, findings=[by_line, rec]),
              "fullgraph": StageResult("fullgraph", FAIL, failure=by_op, findings=[by_op]),
              "opcheck": StageResult("opcheck", FAIL, failure=bare, findings=[bare])}
    stages = settle.attributed(stages)
    got = stages["opcheck"].failure
    assert (got.kind, got.context.first_seen_at) == ("missing-fake", "fullgraph")
    assert got.summary.endswith("(attributed: the same op failed at fullgraph)")
    assert got.evidence.phase == "test_faketensor"  # its own evidence stays
    lone = Finding("unknown", "Unclassified.", {}, dict(frame))
    stages["opcheck"] = StageResult("opcheck", FAIL, failure=lone, findings=[lone])
    stages = settle.attributed(stages)
    assert stages["opcheck"].failure.kind == "data-dependent"
    assert stages["opcheck"].failure.summary.endswith("(attributed: the same line failed at explain)")


def test_a_stage_with_advice_only_passes_and_every_renderer_shows_the_advice():
    """Advice (taxonomy severity) does not fail a stage; --strict (settle.strict) makes it the failure."""
    from tracecheck.classify import results, settle
    from tracecheck.render import markdown, tables, terminal

    raw = {"phases": ["forward", "backward"],
           "opaque_ops": [{"op": "mylib::rms_norm", "calls": 2, "graphs": [0], "lines": [], "kernels": 3}]}
    s = results.build_stage_result("inductor", raw, 1.0)
    assert s.status == PASS and s.failure is None and [f.kind for f in s.findings] == ["opaque-op"]
    assert s.findings[0].summary.startswith("Inductor calls mylib::rms_norm as an extern kernel")
    from tracecheck.render.excerpts import numeric_lines

    assert numeric_lines(s.findings[0]) == [
        "2 extern call(s) of mylib::rms_norm in 1 compiled graph(s); Inductor generated 3 kernel(s) for the rest"]
    p = ProbeReport("m.py::probe", "/abs/m.py", "probe", {"eager": StageResult("eager", PASS), "inductor": s})
    r = RunReport([p], {"torch": "2.13.0"}, ["eager", "inductor"])
    assert p.verdict.status == PASS and p.verdict.kinds == () and p.verdict.advice == ("opaque-op",)
    assert r.passed
    assert terminal.cell(s).plain == "✓ opaque-op"
    assert markdown.verdict_cell(s) == "✅ opaque-op"
    assert tables.verdict_frame(r).loc["m.py::probe"].tolist() == ["pass", "pass; advice opaque-op"]
    md = markdown.render(r)
    assert "## Advice" in md and "#### A1. `opaque-op`: Inductor calls mylib::rms_norm" in md
    vm = StageResult("vmap", PASS, extra={"not_checked": ["torch.func.grad: torch refuses it"]})
    p2 = ProbeReport("m.py::probe2", "/abs/m.py", "probe2", {"vmap": vm})
    md2 = markdown.render(RunReport([p2], {"torch": "2.13.0"}, ["vmap"]))
    assert "**Not checked**" in md2 and "vmap: torch.func.grad: torch refuses it" in md2
    assert "0 failing, 0 finding(s)" in md
    p.stages = {name: settle.under_strict(st) for name, st in p.stages.items()}
    s = p.stages["inductor"]
    strict = RunReport([p], {"torch": "2.13.0"}, ["eager", "inductor"], strict=True)
    assert s.status == FAIL and s.failure.kind == "opaque-op"
    assert p.verdict.status == FAIL and p.verdict.kinds == ("opaque-op",) and not strict.passed
    assert terminal.cell(s, gate=strict.gate).plain == "✗ opaque-op"
    back = RunReport.from_dict(json.loads(json.dumps(strict.to_dict())))
    assert back.strict and back.probes[0].verdict.kinds == ("opaque-op",)
    assert back.probes[0].verdict.advice == ("opaque-op",)


def test_next_steps_offer_fix_for_a_wrong_fake_but_not_for_one_that_returns_values(tmp_path, monkeypatch):
    """fix regenerates a fake's shapes (fake-mismatch, issue 37); a fake whose outputs carry values into the graph
    (cause aot_outputs: a float the op returns, baked in as a constant) is not answered by new shapes: its page."""
    from tracecheck.render import terminal

    monkeypatch.chdir(tmp_path)

    def probe(cause):
        f = Finding("fake-mismatch", "s", {"op": "ns::op", **({"cause": cause} if cause else {})}, {})
        return ProbeReport(f"m.py::probe_{cause}", str(tmp_path / "m.py"), f"probe_{cause}",
                           {"opcheck": StageResult("opcheck", FAIL, failure=f, findings=[f])})

    lines = terminal.next_steps(RunReport([probe("size"), probe("aot_outputs")], {}, ["opcheck"]))
    assert lines[:2] == ["tracecheck fix m.py::probe_size -o fixed_ops.py   (fake-mismatch)",
                         "tracecheck explain fake-mismatch   (m.py::probe_aot_outputs)"]


def test_the_report_and_its_baseline_decide_a_strict_probe_by_the_same_rule():
    """A stage that passes with advice only: a plain run passes the probe; --strict fails the stage and the probe on
    that advice kind; the baseline's snapshot of the plain run, gated by its severity setting, fails it on the same
    kind, and not without the setting (literals)."""
    from tracecheck.classify import settle
    from tracecheck.gate import comparison, snapshot
    from tracecheck.model.report import Finding, ProbeReport, StageResult
    from tracecheck.model.targets import Gate

    def probe() -> ProbeReport:
        s = StageResult("aot_eager", "pass", findings=[Finding("opaque-op", "advice", {"op": "mylib::op"})])
        return ProbeReport("m.py::p", "/x/m.py", "p", {"aot_eager": s})

    plain = probe()
    settle.settle(plain, strict=False)
    assert (plain.verdict.status, plain.verdict.kinds, plain.verdict.advice) == ("pass", (), ("opaque-op",))
    strict = probe()
    strict.gate = Gate(strict=True)
    assert strict.verdict.status == "pass"  # unsettled: the stage passed, so nothing failed yet
    settle.settle(strict, strict=True)      # --strict fails the stage on its advice
    assert (strict.verdict.status, strict.verdict.kinds, strict.verdict.first_failing_stage) == \
        ("fail", ("opaque-op",), "aot_eager")
    assert strict.verdict.targets == {"compile": "fail"}
    snap = snapshot.ProbeSnapshot({"aot_eager": snapshot.StageSnapshot.of(plain.stages["aot_eager"], plain)})
    assert comparison._failing_kinds(snap) == []
    assert comparison._failing_kinds(snap, frozenset({"opaque-op"})) == ["opaque-op"]


def test_a_verdict_follows_a_stage_changed_after_it_was_read():
    from tracecheck.model.report import Finding, ProbeReport, StageResult
    from tracecheck.model.targets import Gate

    p = ProbeReport("m.py::p", "/x/m.py", "p", {"eager": StageResult("eager", "pass", target="compile")})
    assert p.verdict.status == "pass"
    p.stages["inductor"] = StageResult("inductor", "fail", findings=[Finding("graph-break", "a break")],
                                       target="compile")
    assert (p.verdict.status, p.verdict.kinds) == ("fail", ("graph-break",))
    p.stages["inductor"].status = "pass"                  # changed in place
    assert (p.verdict.status, p.verdict.kinds) == ("pass", ())
    p.stages["export"] = StageResult("export", "fail", findings=[Finding("graph-break", "b")], target="export")
    assert p.verdict.status == "pass" and p.verdict.not_required == ("graph-break",)
    p.gate = Gate(require=("compile", "export"))          # the gate changed: export now fails the probe
    assert (p.verdict.status, p.verdict.first_failing_stage) == ("fail", "export")


def test_a_findings_context_reads_as_typed_fields_and_a_wrong_shape_as_missing():
    from tracecheck.model.report import Finding

    cx = Finding("opaque-op", "s", {"op": "mylib::op", "calls": 3, "kernels": "2", "warning": True,
                                    "argument": ["x"], "builtin": True}).context
    assert (cx.op, cx.calls, cx.kernels, cx.warning, cx.argument, cx.builtin) == ("mylib::op", 3, None, True,
                                                                                   None, None)
    assert Finding("opaque-op", "s", {"warning": "false"}).context.warning is False  # only a JSON true is a warning


def test_one_kind_at_one_user_line_is_one_root_cause_whatever_gb_type_each_stage_saw():
    """explain's break of an .item() branch carries Dynamo's gb_type; fullgraph's error at the same line none: one
    problem (literals written by hand)."""
    from tracecheck.model.report import Finding, ProbeReport, StageResult, root_causes

    frame = {"file": "/w/m.py", "line": 25, "code": "if y.mean().item() > 0.5:"}
    brk = Finding("data-dependent", "a", {}, {"gb_type": "Data-dependent branching", "gb_code": "GB0170",
                                            "user_frame": frame})
    err = Finding("data-dependent", "b", {}, {"exception_type": "torch._dynamo.exc.UserError", "user_frame": frame})
    other = Finding("data-dependent", "c", {}, {"gb_type": "Data-dependent branching", "user_frame": {**frame,
                                                                                                    "line": 31}})
    p = ProbeReport("m.py::p", "/w/m.py", "p", {
        "explain": StageResult("explain", "fail", findings=[brk, other]),
        "fullgraph": StageResult("fullgraph", "fail", findings=[err])})
    causes = root_causes([p])
    assert [(c.finding.user_frame.line, c.seen[0][1]) for c in causes] == [(25, ["explain", "fullgraph"]),
                                                                          (31, ["explain"])]
