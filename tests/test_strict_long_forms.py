"""``--strict`` in the long forms (the terminal's ``-v``, the Markdown report), from a report written by hand.
What strict means is the oracle: advice kinds gate where their target is required, so there they are said as the
failures they are (no "advice" label, in Findings), and where only a target not required saw them they gate
nothing (said so, under "Targets not required"); an advice kind has one fix, said once per probe either way."""
import io

from rich.console import Console

from report_factory import probe
from tracecheck.classify import settle
from tracecheck.model.report import PASS, Finding, RunReport, StageResult
from tracecheck.render import markdown, terminal


def _report(strict: bool) -> RunReport:
    """One probe: opaque-op advice for lib::a and lib::b at aot_eager (compile: required), lib::c at vmap (func: not
    required)."""
    a, b, c = (Finding("opaque-op", f"Inductor calls lib::{op} as an extern kernel.", {"op": f"lib::{op}"})
               for op in "abc")
    p = probe("m.py", "probe", "/w/m.py", {"eager": StageResult("eager", PASS),
                                            "aot_eager": StageResult("aot_eager", PASS, findings=[a, b]),
                                            "vmap": StageResult("vmap", PASS, findings=[c])})
    report = RunReport([p], {"torch": "2.13.0"}, ["eager", "aot_eager", "vmap"], strict=strict)
    settle.settle(p, strict)
    return report


def _long_form(report: RunReport) -> list[str]:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    terminal.render(report, console, verbose=True)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


def test_v_under_strict_says_advice_that_gates_as_a_failure_and_its_fix_once():
    lines = _long_form(_report(strict=True))
    heads = [line.strip() for line in lines if line.startswith("  [")]
    assert heads == ["[aot_eager] opaque-op: Inductor calls lib::a as an extern kernel.",
                     "[aot_eager] opaque-op: Inductor calls lib::b as an extern kernel.",
                     "[vmap] opaque-op (func: not required): Inductor calls lib::c as an extern kernel."]
    assert "    gates nothing: the func target is not required (--require func gates on it)" in lines
    assert sum(line.startswith("    fix: ") for line in lines) == 1
    assert lines.count("    more: tracecheck explain opaque-op") == 1


def test_v_without_strict_says_advice_as_advice_and_its_fix_once():
    lines = _long_form(_report(strict=False))
    heads = [line.strip() for line in lines if line.startswith("  [")]
    assert heads == ["[aot_eager] opaque-op (advice): Inductor calls lib::a as an extern kernel.",
                     "[aot_eager] opaque-op (advice): Inductor calls lib::b as an extern kernel.",
                     "[vmap] opaque-op (advice): Inductor calls lib::c as an extern kernel."]
    assert not any("gates nothing" in line for line in lines)
    assert sum(line.startswith("    fix: ") for line in lines) == 1


def _sections(md: str) -> dict[str, list[str]]:
    """Each ``## `` section's ``#### `` headings."""
    out: dict[str, list[str]] = {}
    for line in md.splitlines():
        if line.startswith("## "):
            out[line[3:]] = []
        elif line.startswith("#### ") and out:
            out[list(out)[-1]].append(line[5:])
    return out


def test_markdown_under_strict_puts_gating_advice_in_findings_and_the_rest_under_targets_not_required():
    got = _sections(markdown.render(_report(strict=True)))
    assert got["Findings"] == ["1. `opaque-op`: Inductor calls lib::a as an extern kernel.",
                               "2. `opaque-op`: Inductor calls lib::b as an extern kernel."]
    assert "Advice" not in got
    assert got["Targets not required"] == ["N1. `opaque-op`: Inductor calls lib::c as an extern kernel."]


def test_markdown_without_strict_puts_every_advice_under_advice():
    got = _sections(markdown.render(_report(strict=False)))
    assert got["Advice"] == ["A1. `opaque-op`: Inductor calls lib::a as an extern kernel.",
                             "A2. `opaque-op`: Inductor calls lib::b as an extern kernel.",
                             "A3. `opaque-op`: Inductor calls lib::c as an extern kernel."]
    assert "Targets not required" not in got
