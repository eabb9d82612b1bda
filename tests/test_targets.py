"""Targets: each stage belongs to compile, export or func; only the required targets (compile, and --require's) fail a
probe, the exit code and a baseline, while the others' findings are shown with their evidence.

Unit tests on hand-built reports (the verdict, the baseline, every renderer), then the CLI on a model whose only
problem is torch.func's (an old-style autograd.Function that torch.compile handles): plain torch.compile and
torch.func, run in the test, are the oracles."""
import json
import xml.etree.ElementTree as ET

import pytest
import torch

from tracecheck.gate import comparison, document
from tracecheck import stages
from tracecheck.model import targets
from tracecheck.model.exitcodes import UsageError
from tracecheck.render import junit, markdown, tables, terminal
from tracecheck.model.report import FAIL, PASS, Finding, ProbeReport, RunReport, StageResult

REFUSAL = Finding("functorch-incompatible", "torch.func.vmap refuses the probe.", {"cause": "setup_context"},
                  {"exception_type": "RuntimeError", "message": "it must override the setup_context staticmethod",
                   "user_frame": {"file": "/abs/m.py", "line": 7, "code": "return Old.apply(x)"}})


def _report(require=("compile",), vmap_status=FAIL, strict=False) -> RunReport:
    vmap = StageResult("vmap", vmap_status, failure=REFUSAL if vmap_status == FAIL else None,
                       findings=[REFUSAL] if vmap_status == FAIL else [], target="func")
    p = ProbeReport("m.py::probe", "/abs/m.py", "probe", {
        "eager": StageResult("eager", PASS, target="compile"),
        "inductor": StageResult("inductor", PASS, target="compile"), "vmap": vmap})
    return RunReport([p], {"torch": "2.13.0"}, ["eager", "inductor", "vmap"], require=tuple(require), strict=strict)


def test_every_stage_has_the_target_the_issue_names():
    assert {name: spec.target for name, spec in stages.REGISTRY.items()} == {
        "eager": "compile", "explain": "compile", "aot_eager": "compile", "inductor": "compile",
        "fullgraph": "compile", "opcheck": "compile", "compiled_autograd": "compile", "gradcheck": "compile",
        "dynamic": "compile", "vmap": "func", "export": "export"}


def test_require_always_holds_compile_and_refuses_unknown_targets():
    assert targets.parse_require("") == ("compile",)
    assert targets.parse_require("func,export") == ("compile", "export", "func")
    with pytest.raises(UsageError, match="unknown target.*vmap.*choose from compile, export, func"):
        targets.parse_require("vmap")


def test_a_failure_of_a_target_not_required_fails_nothing_and_is_kept():
    r = _report()
    v = r.probes[0].verdict
    assert (v.status, v.kinds, v.not_required) == (PASS, (), ("functorch-incompatible",))
    assert v.targets == {"compile": "pass", "func": "fail"} and r.passed
    required = _report(require=("compile", "func"))
    v = required.probes[0].verdict
    assert (v.status, v.first_failing_stage, v.kinds, v.not_required) == (FAIL, "vmap", ("functorch-incompatible",), ())
    assert not required.passed


def test_the_json_round_trip_keeps_require_and_targets():
    r = _report(require=("compile", "func"))
    back = RunReport.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.require == ("compile", "func") and back.probes[0].stages["vmap"].target == "func"
    assert back.probes[0].verdict.status == FAIL


def test_a_report_from_before_targets_gates_on_every_stage():
    doc = _report().to_dict()
    doc["schema_version"] = 2
    del doc["require"]
    for s in doc["probes"][0]["stages"].values():
        del s["target"]
    old = RunReport.from_dict(doc)
    assert old.probes[0].verdict.status == FAIL  # what version 2 said about it


def test_every_renderer_shows_the_failure_and_says_it_is_not_required():
    r = _report()
    assert terminal.cell(r.probes[0].stages["vmap"], gate=r.gate).plain == "○ functorch-incompatible"
    assert markdown.verdict_cell(r.probes[0].stages["vmap"], r.gate) == "⚪ functorch-incompatible"
    assert tables.verdict_frame(r).loc["m.py::probe", "vmap"] == "not required: functorch-incompatible"
    csv = tables.stages_frame(r)
    assert csv.set_index("stage").loc["vmap", ["target", "required"]].tolist() == ["func", False]
    md = markdown.render(r)
    assert "0 failing, 0 finding(s)" in md and "## Targets not required" in md and "#### N1. `functorch-incompatible`" in md
    assert "**Gates nothing:** the func target is not required (--require func gates on it)" in md
    case = next(c for c in ET.fromstring(junit.render(r)).iter("testcase") if c.get("name") == "probe[vmap]")
    assert case.find("failure") is None and "target func not required" in case.find("system-out").text


def test_a_baseline_gates_only_on_required_targets():
    base = document.from_report(_report(vmap_status=PASS))
    worse = document.from_report(_report())
    cmp = comparison.compare(base, worse)
    assert not cmp.regressed
    assert any("target func not required" in c.detail for c in cmp.changes)
    # the baseline's own "require" (kept by --update-baseline) makes func gate
    gated = comparison.compare({**base, "require": ["compile", "func"]}, worse)
    assert gated.regressed and {c.stage for c in gated.regressions} == {"vmap"}
    assert document.require_setting({"require": ["func"]}) == ("compile", "func")
    with pytest.raises(ValueError, match="'vmap' is not a target"):
        document.require_setting({"require": ["vmap"]})


# --- end to end ----------------------------------------------------------------------------------------------

OLD_STYLE = '''
import torch


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def probe_old_style_function():
    return (lambda x: Double.apply(x).sin()), (torch.randn(4, 8, requires_grad=True),)
'''


@pytest.mark.slow
def test_a_compile_clean_old_style_function_passes_unless_func_is_required(tracecheck, write_probe):
    model = write_probe(OLD_STYLE)
    stages_ = "eager,explain,aot_eager,vmap"
    res = tracecheck("run", str(model), "--stages", stages_)
    v = res.probe("probe_old_style_function")["verdict"]
    assert res.returncode == 0, res.stdout[-3000:]
    assert v["status"] == "pass" and v["not_required"] == ["functorch-incompatible"]
    assert "gates nothing: the func target is not required (--require func gates on it)" in res.stdout
    required = tracecheck("run", str(model), "--stages", stages_, "--require", "func")
    assert required.returncode == 1
    assert required.probe("probe_old_style_function")["verdict"]["kinds"] == ["functorch-incompatible"]
    bad = tracecheck("run", str(model), "--require", "vmap", json_report=False)
    assert bad.returncode == 2 and "unknown target(s) vmap" in bad.stderr and "Traceback" not in bad.stderr
    # the oracles: plain torch.compile runs it forward and backward in one graph; torch.func refuses it
    from torch._dynamo.testing import CompileCounter

    ns: dict = {}
    exec(OLD_STYLE, ns)
    fn, (x,) = ns["probe_old_style_function"]()
    counter = CompileCounter()
    torch._dynamo.reset()
    torch.compile(fn, backend=counter)(x).sum().backward()
    assert counter.frame_count == 1
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.vmap(fn)(x.detach().unsqueeze(0))


def test_an_internal_error_of_a_target_not_required_exits_3_but_fails_no_probe():
    from tracecheck.cli import _exit_code
    from tracecheck.model.exitcodes import ExitCode
    from tracecheck.model.report import INTERNAL

    r = _report(vmap_status=PASS)
    r.probes[0].stages["vmap"] = StageResult("vmap", INTERNAL, target="func", internal_error="Traceback ...\nKeyError: 'x'")
    assert r.probes[0].verdict.status == PASS and r.probes[0].verdict.targets["func"] == INTERNAL
    assert _exit_code(r, None, False) == ExitCode.INTERNAL_ERROR                       # tracecheck's bug, always said
    case = next(c for c in ET.fromstring(junit.render(r)).iter("testcase") if c.get("name") == "probe[vmap]")
    assert case.find("error").get("type") == "internal-error"


def test_shards_of_different_require_do_not_merge_and_a_written_baseline_keeps_its_own_require(tmp_path):
    from tracecheck.gate import shards

    other = _report(require=("compile", "func"))
    other.probes[0].id = "m.py::probe_2"
    with pytest.raises(UsageError, match="require different targets"):
        shards.merge([_report(), other], ["a.json", "b.json"])
    path = tmp_path / "base.json"
    document.write_baseline(str(path), _report(require=("compile", "func")))     # a one-off --require func
    assert "require" not in json.loads(path.read_text())                        # ... is not recorded
    document.write_baseline(str(path), _report(), keep={"require": ["compile", "export"]})
    assert json.loads(path.read_text())["require"] == ["compile", "export"]      # the file's own setting stays


def test_a_required_target_whose_stages_do_not_run_is_a_usage_error():
    from tracecheck import api

    with pytest.raises(UsageError, match="--require func: no stage of that target is in --stages \\(add vmap\\)"):
        api.run(api.RunOptions(paths=["nowhere.py"], stages=["eager", "explain"], require=("compile", "func")))
