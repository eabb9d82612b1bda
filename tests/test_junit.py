"""JUnit XML: parsed back with xml.etree, checked against the common JUnit schema shape."""
import xml.etree.ElementTree as ET

from report_factory import mixed_status_report, small_report
from tracecheck.gate import comparison, document
from tracecheck.render import junit

#: Attributes the common JUnit schema (Jenkins junit.xsd, GitLab, GitHub test reporters) requires.
SUITE_ATTRS = {"name", "tests", "failures", "errors", "skipped", "time"}
CASE_ATTRS = {"classname", "name", "time"}


def parse(xml: str) -> ET.Element:
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ET.fromstring(xml.encode("utf-8"))


def outcome(case: ET.Element) -> str:
    children = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
    assert len(children) <= 1, children
    return children[0] if children else "passed"


def test_shape_and_counts_match_the_schema():
    root = parse(junit.render(mixed_status_report()))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["sub/m.py", "n.py"]
    for s in suites:
        assert SUITE_ATTRS <= set(s.attrib)
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == sum(outcome(c) == "failure" for c in cases)
        assert int(s.get("errors")) == sum(outcome(c) == "error" for c in cases)
        assert int(s.get("skipped")) == sum(outcome(c) == "skipped" for c in cases)
        for c in cases:
            assert CASE_ATTRS <= set(c.attrib)
            float(c.get("time"))
    assert int(root.get("tests")) == 6 and int(root.get("failures")) == 1 and int(root.get("errors")) == 2


def test_one_testcase_per_probe_and_stage_with_the_right_outcome():
    root = parse(junit.render(mixed_status_report()))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"probe[eager]", "probe[explain]", "probe[aot_eager]", "probe[inductor]",
                          "probe[fullgraph]", "probe_two[eager]"}
    assert {n: outcome(c) for n, c in cases.items()} == {
        "probe[eager]": "passed", "probe[explain]": "failure", "probe[aot_eager]": "skipped",
        "probe[inductor]": "error", "probe[fullgraph]": "error", "probe_two[eager]": "passed"}
    failure = cases["probe[explain]"].find("failure")
    assert failure.get("type") == "graph-break"
    assert "Failed to trace builtin operator" in failure.get("message")
    # the user frame relative to the rootdir (/w), as the probe id and every other CI output name files
    assert "at m.py:3 " in failure.text and "/w/" not in failure.text
    assert cases["probe[inductor]"].find("error").get("type") == "timeout"
    assert cases["probe[aot_eager]"].find("skipped").get("message") == "the probe function raised"
    assert cases["probe[explain]"].get("classname") == "sub.m"
    assert cases["probe[explain]"].get("time") == "1.250"


def test_control_characters_in_evidence_do_not_break_the_xml():
    xml = junit.render(mixed_status_report())  # the timeout's stderr tail holds ANSI escapes
    assert "\x1b" not in xml
    parse(xml)


def test_with_a_baseline_known_failures_are_skipped_and_regressions_fail():
    old = small_report(with_ca=False)
    new = small_report(with_ca=False)
    # regression: probe_ok now breaks at explain; probe_bad is unchanged (its failures are known)
    bad_explain = new.probes[1].stages["explain"]
    new.probes[0].stages["explain"] = bad_explain
    cmp = comparison.compare(document.from_report(old), document.from_report(new))
    root = parse(junit.render(new, cmp))
    by_name = {(c.get("classname"), c.get("name")): outcome(c) for c in root.iter("testcase")}
    assert by_name[("model", "probe_ok[explain]")] == "failure"
    assert by_name[("model", "probe_bad[explain]")] == "skipped"
    assert by_name[("model", "probe_bad[fullgraph]")] == "skipped"


def test_a_missing_probe_becomes_a_failing_testcase():
    old, new = small_report(with_ca=False), small_report(with_ca=False)
    new.probes = new.probes[:1]
    cmp = comparison.compare(document.from_report(old), document.from_report(new))
    root = parse(junit.render(new, cmp))
    missing = [c for c in root.iter("testcase") if c.get("name") == "probe_bad[missing]"]
    assert len(missing) == 1 and outcome(missing[0]) == "failure"


def test_a_pass_with_advice_is_a_passing_testcase_that_says_so():
    from tracecheck.model.report import PASS, Finding

    r = small_report()
    s = r.probes[0].stages["aot_eager"]
    s.findings.append(Finding("opaque-op", "Inductor calls mylib::op as an extern kernel.", {"op": "mylib::op"}))
    assert s.status == PASS
    case = next(c for c in parse(junit.render(r)).iter("testcase") if c.get("name") == "probe_ok[aot_eager]")
    assert outcome(case) == "passed"
    assert "[opaque-op] Inductor calls mylib::op" in case.find("system-out").text


def test_a_failing_stage_body_lays_out_each_finding_and_says_a_shared_fix_once():
    """The body of a failure (render/cause.lines): the facts line, whose code, the line relative to the rootdir, the
    notes, then ``fix:`` and ``more:`` once for the two breaks that share them, each traceback after its finding.
    Oracle: lines written by hand from this report."""
    from report_factory import probe
    from tracecheck.model.report import FAIL, Finding, RunReport, StageResult

    def brk(line: int, code: str) -> Finding:
        return Finding("graph-break", "Graph break: Failed to trace builtin operator.", {},
                       {"exception_type": "torch._dynamo.exc.Unsupported", "gb_type": "Failed to trace builtin operator",
                        "gb_code": "GB0059", "owner": {"who": "yours"},
                        "user_frame": {"file": "/w/sub/m.py", "line": line, "code": code},
                        "message": "Failed to trace builtin operator", "traceback": f"Traceback at {line}"})
    a, b = brk(3, 'print("a")'), brk(7, 'print("b")')
    p = probe("sub/m.py", "probe", "/w/sub/m.py", {"explain": StageResult("explain", FAIL, failure=a, findings=[a, b])})
    report = RunReport([p], {"torch": "2.13.0"}, ["explain"])
    body = parse(junit.render(report)).find(".//testcase/failure").text.splitlines()
    fix = [line for line in body if line.startswith("  fix: ")]
    assert len(fix) == 1
    assert body == [
        "[graph-break] Graph break: Failed to trace builtin operator.",
        "  exception torch._dynamo.exc.Unsupported; gb_type 'Failed to trace builtin operator' (GB0059)",
        "  whose code: yours",
        '  at sub/m.py:3  `print("a")`',
        fix[0],
        "  more: tracecheck explain graph-break",
        "Traceback at 3",
        "",
        "[graph-break] Graph break: Failed to trace builtin operator.",
        "  exception torch._dynamo.exc.Unsupported; gb_type 'Failed to trace builtin operator' (GB0059)",
        "  whose code: yours",
        '  at sub/m.py:7  `print("b")`',
        "Traceback at 7",
    ]
