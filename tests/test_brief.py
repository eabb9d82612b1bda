"""The default terminal report (render/brief.py), drawn from reports written by hand: what it says must agree with
the verdict (strict, targets not required, internal errors), name probes as the verdict view does, and stay short.
Oracles: literals written from the hand-made reports."""
import io

from rich.console import Console

from report_factory import mixed_status_report, probe, small_report
from tracecheck.classify import results, settle
from tracecheck.model.report import INTERNAL, PASS, FAIL, Finding, RunReport, StageResult
from tracecheck.render import brief


def _draw(report: RunReport, width: int = 120) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    brief.render(report, console)
    return console.file.getvalue()


def _advice_report(strict: bool) -> RunReport:
    """One probe whose aot_eager stage passes with opaque-op advice; --strict as asked, settled as api.run does."""
    f = Finding("opaque-op", "Inductor calls mylib::op as an extern kernel.", {"op": "mylib::op"})
    p = probe("m.py", "probe", "/w/m.py", {"eager": StageResult("eager", PASS),
                                            "aot_eager": StageResult("aot_eager", PASS, findings=[f])})
    report = RunReport([p], {"torch": "2.13.0"}, ["eager", "aot_eager"], strict=strict)
    settle.settle(p, strict)
    return report


def test_advice_is_advice_in_a_plain_run_and_a_failure_under_strict():
    plain = _draw(_advice_report(strict=False))
    assert "ⓘ opaque-op  advice: fails nothing unless --strict" in plain
    assert "1 probe, 0 failing" in plain
    strict = _draw(_advice_report(strict=True))
    assert "✗ opaque-op" in strict and "fails nothing unless --strict" not in strict  # what failed the probe
    assert "1 probe, 1 failing" in strict


def test_a_failure_of_a_target_not_required_says_it_gates_nothing():
    f = Finding("functorch-incompatible", "torch.func.grad refuses the probe.", {"transform": "grad"},
                {"exception_type": "RuntimeError", "message": "must override the setup_context staticmethod",
                 "user_frame": {"file": "/w/m.py", "line": 7, "code": "Fn.apply(x)"}})
    p = probe("m.py", "probe", "/w/m.py", {"eager": StageResult("eager", PASS),
                                            "vmap": StageResult("vmap", FAIL, failure=f, findings=[f])})
    report = RunReport([p], {"torch": "2.13.0"}, ["eager", "vmap"])
    settle.settle(p, False)
    out = _draw(report)
    assert "○ functorch-incompatible" in out
    assert "gates nothing: the func target is not required (--require func gates on it)" in out
    assert "1 probe, 0 failing" in out


def test_an_internal_error_is_named_with_its_probe_and_no_cause_block():
    p = probe("m.py", "probe", "/w/m.py", {"eager": StageResult("eager", PASS),
                                            "explain": StageResult("explain", INTERNAL,
                                                                   internal_error="Traceback...\nKeyError: 'x'")})
    report = RunReport([p], {"torch": "2.13.0"}, ["eager", "explain"])
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(brief.causes(report))
    causes = console.file.getvalue()
    assert "probe: explain" in causes and "internal error" in causes and "KeyError: 'x'" in causes
    assert "✗" not in causes                      # nothing about the probe was found


def test_probes_of_several_files_are_named_by_file_and_a_failed_stage_without_a_kind_keeps_its_status():
    report = mixed_status_report()  # sub/m.py::probe (pass, fail, skip, timeout, crash) and n.py::probe_two
    out = _draw(report, 60)
    assert "m.py::probe" in out and "n.py::probe_two" in out
    assert "timeout" in out and "crash" in out   # each failed stage is shown with its kind or status
    assert "not checked: aot_eager (the probe function raised) in m.py::probe" in " ".join(out.split())


def test_a_passing_run_has_no_cause_block_and_no_next_step():
    report = small_report(with_ca=False)
    report.probes = [p for p in report.probes if p.name == "probe_ok"]
    out = _draw(report)
    assert "next:" not in out and "fix:" not in out
    assert "1 probe, 0 failing" in out


def test_one_root_cause_in_two_probes_is_one_block_naming_both():
    report = small_report(with_ca=False)
    twin = probe("model.py", "probe_twin", report.probes[1].file, dict(report.probes[1].stages))
    report.probes.append(twin)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(brief.causes(report))
    out = console.file.getvalue()
    assert out.count("✗ graph-break") == 1
    assert "probe_bad, probe_twin × 2 stages: explain, aot_eager" in out
    assert out.count("✗ missing-fake") == 1


def test_a_saved_reports_next_steps_point_at_its_markdown_and_keep_a_kind_whole_at_60_columns():
    from tracecheck.render import terminal

    report = small_report(with_ca=False)
    assert terminal.next_steps(report, source="r.json")[-1] == \
        "attach to an issue: tracecheck show r.json --format md -o report.md"
    console = Console(file=io.StringIO(), width=60, color_system=None)
    terminal.print_next_steps(console, ["tracecheck fix model.py::probe_bad -o fixed_ops.py   (missing-fake)"])
    lines = console.file.getvalue().splitlines()
    assert lines[-3:] == ["next:", "  (missing-fake)", "    tracecheck fix model.py::probe_bad -o fixed_ops.py"]
