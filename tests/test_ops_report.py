"""``tracecheck ops``' report (issue 56): ``RunReport.ops`` through JSON, the terminal brief, Markdown and JUnit, and
the command's usage errors. The report is made by hand here; the command end to end is tests/test_ops_audit.py's."""
import io
import json
import re
import xml.etree.ElementTree as ET

from rich.console import Console

from report_factory import missing_fake
from test_bad_input import assert_usage_error
from tracecheck.model.frame import Frame
from tracecheck.model.ops import FUNCTION, OP, AuditEntry, CommandResult, OpsAudit, RecordedCall, Uncovered
from tracecheck.model.records import Redefinition
from tracecheck.model.report import FAIL, PASS, ProbeReport, RunReport, StageResult, load_report
from tracecheck.render import brief, junit, markdown

ROOT = "/home/alice/proj"
WORK = f"{ROOT}/.tracecheck-ops/tcopslib"
MODULE = f"{WORK}/ops_probes.py"
ARGV = ("python", "-m", "pytest", "-q", "tests")
TAIL = "FAILED tests/test_ops.py::test_scale - AssertionError: 2 != 3\n1 failed, 4 passed in 3.21s"
UNCALLED_WHY = "no test calls it"
LOCAL_WHY = "it is defined inside a function: the probe module cannot import it"


def ops_audit() -> OpsAudit:
    good = RecordedCall("tcops::good.default", OP, "f32[2d]@cpu+grad", (((2, 3),), ((4, 3),)),
                        "inputs/aaa.pt", None, "tests/test_ops.py::test_good", 7)
    nofake = RecordedCall("tcops::nofake.default", OP, "f32[1d]@cpu, 2", (((5,),),), "inputs/bbb.pt", None,
                          "tests/test_ops.py::test_nofake", 1)
    fn = RecordedCall("tcopslib.fns:Scale", FUNCTION, "f32[2d]@cpu+grad, 0.5", (((2, 2),),), "inputs/ccc.pt")
    return OpsAudit(
        package="tcopslib", namespaces=("tcops",),
        command=CommandResult(ARGV, 1, 12.34, TAIL, f"{WORK}/command.log"),
        probe_module=MODULE,
        entries=(AuditEntry("ops::tcops::good", "probe_tcops__good", good),
                 AuditEntry("ops::tcops::nofake", "probe_tcops__nofake", nofake),
                 AuditEntry("ops::tcopslib.fns.Scale", "probe_tcopslib_fns__Scale", fn)),
        not_covered=(Uncovered("tcops::unused", OP, UNCALLED_WHY), Uncovered("tcopslib.fns:Local", FUNCTION, LOCAL_WHY)),
        processes=2,
        redefinitions=(Redefinition("tcops::twice", "twice(Tensor x) -> Tensor", "twice(Tensor x, int n) -> Tensor",
                                    Frame(f"{ROOT}/tcopslib/a.py", 3), Frame(f"{ROOT}/tcopslib/b.py", 5)),),
        record_dir=".tracecheck-ops/tcopslib/record-0a1b2c3d")


def ops_report() -> RunReport:
    mf = missing_fake(f"{ROOT}/tcopslib/ops.py", 9)
    ok = {"eager": StageResult("eager", PASS), "fullgraph": StageResult("fullgraph", PASS)}
    bad = {"eager": StageResult("eager", PASS), "fullgraph": StageResult("fullgraph", FAIL, failure=mf, findings=[mf])}
    probes = [ProbeReport("ops::tcops::good", MODULE, "probe_tcops__good", ok),
              ProbeReport("ops::tcops::nofake", MODULE, "probe_tcops__nofake", bad),
              ProbeReport("ops::tcopslib.fns.Scale", MODULE, "probe_tcopslib_fns__Scale", dict(ok))]
    env = {"torch": "2.13.0+cpu", "python": "3.11.7", "platform": "Linux-x86_64", "device": "cpu", "torch_npu": None,
           "npu_note": "torch_npu is not installed"}
    return RunReport(probes=probes, environment=env, stages=["eager", "fullgraph"],
                     command=["tracecheck", "ops", "--package", "tcopslib", "--", *ARGV], rootdir=ROOT,
                     tracecheck_version="0.1.0", seconds=30.5, ops=ops_audit())


#: the JSON ``"ops"`` of ``ops_audit()``, written out by hand (docs/report-schema.md)
OPS_JSON = {
    "package": "tcopslib", "namespaces": ["tcops"],
    "command": {"argv": ["python", "-m", "pytest", "-q", "tests"], "exit_code": 1, "seconds": 12.34, "tail": TAIL,
                "log": f"{WORK}/command.log", "signal": None},
    "probe_module": MODULE,
    "entries": [
        {"probe_id": "ops::tcops::good", "probe": "probe_tcops__good",
         "call": {"target": "tcops::good.default", "what": "op", "signature": "f32[2d]@cpu+grad",
                  "shapes": [[[2, 3]], [[4, 3]]], "inputs": "inputs/aaa.pt", "why_not": None,
                  "test": "tests/test_ops.py::test_good", "calls": 7}},
        {"probe_id": "ops::tcops::nofake", "probe": "probe_tcops__nofake",
         "call": {"target": "tcops::nofake.default", "what": "op", "signature": "f32[1d]@cpu, 2", "shapes": [[[5]]],
                  "inputs": "inputs/bbb.pt", "why_not": None, "test": "tests/test_ops.py::test_nofake", "calls": 1}},
        {"probe_id": "ops::tcopslib.fns.Scale", "probe": "probe_tcopslib_fns__Scale",
         "call": {"target": "tcopslib.fns:Scale", "what": "function", "signature": "f32[2d]@cpu+grad, 0.5",
                  "shapes": [[[2, 2]]], "inputs": "inputs/ccc.pt", "why_not": None, "test": None, "calls": 1}},
    ],
    "not_covered": [{"target": "tcops::unused", "what": "op", "why": UNCALLED_WHY},
                    {"target": "tcopslib.fns:Local", "what": "function", "why": LOCAL_WHY}],
    "processes": 2,
    "redefinitions": [{"op": "tcops::twice", "first_schema": "twice(Tensor x) -> Tensor",
                       "second_schema": "twice(Tensor x, int n) -> Tensor",
                       "first_frame": {"file": f"{ROOT}/tcopslib/a.py", "line": 3, "function": None, "code": None},
                       "second_frame": {"file": f"{ROOT}/tcopslib/b.py", "line": 5, "function": None, "code": None}}],
    "record_dir": ".tracecheck-ops/tcopslib/record-0a1b2c3d",
}


def test_the_json_report_keeps_every_field_of_ops(tmp_path):
    doc = ops_report().to_dict()
    assert doc["ops"] == OPS_JSON
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    back = load_report(str(path))
    assert back.ops is not None and back.ops.to_json() == OPS_JSON
    assert back.ops == ops_audit()  # typed again: frozen records equal field by field
    assert [p.id for p in back.probes] == ["ops::tcops::good", "ops::tcops::nofake", "ops::tcopslib.fns.Scale"]


def test_a_report_of_a_run_has_no_ops_key_and_reads_back_without_one(tmp_path):
    report = ops_report()
    report.ops = None
    doc = report.to_dict()
    assert "ops" not in doc
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert load_report(str(path)).ops is None


def _brief(report: RunReport, verbose: bool = False) -> str:
    buf = io.StringIO()
    brief.render(report, Console(file=buf, width=80, color_system=None), verbose=verbose)
    return buf.getvalue()


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_brief_says_the_test_commands_result_what_was_checked_and_what_not_at_80_columns():
    text = _brief(ops_report())
    # every line fits, but a command (``next:``), which is printed whole for copying: the terminal folds it
    lines = [line for line in text.splitlines() if not line.startswith("    tracecheck ")]
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    said = _words(text)
    assert ("tests: `python -m pytest -q tests` exited 1 in 12.3 s (their own result; not tracecheck's verdict)"
            in said)
    assert "checked: 3 calls of 3 ops and Functions (2 ops, 1 Function;" in said
    assert f"not covered: tcops::unused (op): {UNCALLED_WHY}" in said
    assert f"not covered: tcopslib.fns:Local (Function): {LOCAL_WHY}" in said
    assert "registered twice: tcops::twice" in said
    assert "1 failed, 4 passed" not in said  # the command's output: under -v only
    # the probes are named by their ops ids; the fix names the generated module's probe
    assert "│ ops::tcops::nofake " in text
    assert re.search(r"^    tracecheck fix \S*\.tracecheck-ops/tcopslib/ops_probes\.py::probe_tcops__nofake ", text, re.M)
    assert [line for line in text.splitlines() if line.strip()][-1] == \
        "3 probes, 1 failing (compile), 2 not covered, 30.5 s"


def test_the_brief_under_v_shows_the_end_of_the_test_commands_output():
    text = _brief(ops_report(), verbose=True)
    assert "FAILED tests/test_ops.py::test_scale - AssertionError: 2 != 3" in _words(text)
    assert "1 failed, 4 passed in 3.21s" in text
    assert f"not covered: tcops::unused (op): {UNCALLED_WHY}" in _words(text)


def test_the_brief_of_a_run_has_no_ops_lines():
    report = ops_report()
    report.ops = None
    text = _brief(report)
    assert "tests: `" not in text and "not covered" not in text and "\nchecked: " not in text


def test_the_markdown_has_the_ops_section():
    md = markdown.render(ops_report(), home="/home/alice")
    section = md[md.index("## Ops of `tcopslib`, called by its tests"):]
    section = section[:section.index("\n## ")]
    assert "`python -m pytest -q tests` exited 1 in 12.3 s (their own result; not tracecheck's verdict)" in section
    assert "Checked: 3 calls of 3 ops and Functions" in section
    assert f"| `tcops::unused` | op | {UNCALLED_WHY} |" in section
    assert f"| `tcopslib.fns:Local` | Function | {LOCAL_WHY} |" in section
    assert "| `ops::tcops::nofake` | `probe_tcops__nofake` | `f32[1d]@cpu, 2` | 1 | " in section
    assert "1 failed, 4 passed in 3.21s" in section  # the command's output, collapsed
    assert md.startswith("# tracecheck report: 3 probe(s) of the ops of `tcopslib`, 1 failing")
    assert "2 not covered" in md.splitlines()[0]
    # the repro command names the generated module's probe (relative to the rootdir), not the ops id
    assert "tracecheck run .tracecheck-ops/tcopslib/ops_probes.py::probe_tcops__nofake" in md


def test_the_junit_xml_has_one_skipped_testcase_per_target_not_covered():
    root = ET.fromstring(junit.render(ops_report()))
    cases = root.iter("testcase")
    not_covered = [c for c in root.iter("testcase") if c.get("classname") == "tracecheck.ops.not_covered"]
    assert [c.get("name") for c in not_covered] == ["tcops::unused", "tcopslib.fns:Local"]
    assert [c.find("skipped").get("message") for c in not_covered] == [f"not covered: {UNCALLED_WHY}",
                                                                       f"not covered: {LOCAL_WHY}"]
    assert all(c.find("failure") is None and c.find("error") is None for c in not_covered)
    probes = {c.get("name"): c for c in cases if c.get("classname") == "tracecheck.ops"}
    assert set(probes) == {f"{t}[{s}]" for t in ("tcops::good", "tcops::nofake", "tcopslib.fns.Scale")
                           for s in ("eager", "fullgraph")}
    assert probes["tcops::nofake[fullgraph]"].find("failure").get("type") == "missing-fake"
    assert root.get("tests") == "8" and root.get("skipped") == "2" and root.get("failures") == "1"


def test_not_covered_fails_nothing():
    report = ops_report()
    report.probes = [p for p in report.probes if p.id != "ops::tcops::nofake"]
    assert report.passed  # two targets not covered, and the run passes: they are listed, never a failure


def test_ops_without_a_command_or_a_package_or_with_a_bad_package_name_is_a_usage_error(tracecheck):
    assert_usage_error(tracecheck("ops", "--package", "tcopslib", json_report=False), "no test command")
    assert_usage_error(tracecheck("ops", "--", "python", "-c", "pass", json_report=False), "--package")
    assert_usage_error(tracecheck("ops", "--package", "not-a-name!", "--", "python", "-c", "pass",
                                  json_report=False), "not-a-name!", "not a module name")
    assert_usage_error(tracecheck("ops", "--package", "tcopslib", "--namespace", "a.b", "--", "python", "-c", "pass",
                                  json_report=False), "--namespace", "a.b")


def test_options_after_the_separator_belong_to_the_command(tracecheck, tmp_path):
    """``-q`` and ``-k`` after ``--`` are the test command's, not tracecheck's: ``sh`` gets them (and, no Python
    process with the recorder, the run stops with one line saying so)."""
    res = tracecheck("ops", "--package", "tcopslib", "--work-dir", str(tmp_path / "w"), "--", "sh", "-c",
                     "echo ran: $0 $1", "-q", "-k", json_report=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("tracecheck: error: "), res.stderr
    assert "ran no Python process" in res.stderr
    assert "ran: -q -k" in (tmp_path / "w" / "command.log").read_text()
