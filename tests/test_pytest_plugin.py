"""The optional pytest plugin, used the way a project would: pytest in a subprocess on a tiny test file."""
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

TESTS = textwrap.dedent("""\
    import torch


    def clean(x):
        return x.sin().cos()


    def broken(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()


    def test_clean(tracecheck_baseline):
        tracecheck_baseline.assert_no_new_graph_breaks(clean, torch.randn(3))


    def test_broken(tracecheck_baseline):
        tracecheck_baseline.assert_no_new_graph_breaks(broken, torch.randn(3))
    """)
BREAK_LINE = TESTS.splitlines().index("    torch._dynamo.graph_break()") + 1


def pytest_run(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tracecheck.pytest_plugin", "-q",
                           "-p", "no:cacheprovider", "--junitxml", "out.xml", "test_model.py", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    cases = ET.parse(tmp_path / "out.xml").getroot().iter("testcase")
    outcomes = {c.get("name"): ("failed" if c.find("failure") is not None else "passed") for c in cases}
    return proc, outcomes


def test_fixture_fails_on_breaks_beyond_the_baseline_and_records_them(tmp_path):
    (tmp_path / "test_model.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text("")  # rootdir marker: keys are relative to it

    proc, outcomes = pytest_run(tmp_path, "--tracecheck-baseline", "breaks.json")
    assert outcomes == {"test_clean": "passed", "test_broken": "failed"}, proc.stdout
    assert "1 graph break(s) beyond the baseline for test_model.py::test_broken" in proc.stdout
    assert f"test_model.py:{BREAK_LINE}" in proc.stdout  # the user's line of the break
    assert "Captured log" not in proc.stdout  # the structured trace stays out of the report

    proc, outcomes = pytest_run(tmp_path, "--tracecheck-baseline", "breaks.json", "--tracecheck-update-baseline")
    assert outcomes == {"test_clean": "passed", "test_broken": "passed"}, proc.stdout
    doc = json.loads((tmp_path / "breaks.json").read_text())
    assert doc["format"] == "tracecheck-baseline"
    breaks = doc["probes"]["test_model.py::test_broken"]["stages"]["explain"]["breaks"]
    assert [(b["file"], b["line"]) for b in breaks] == [("test_model.py", BREAK_LINE)]
    assert doc["probes"]["test_model.py::test_clean"]["stages"]["explain"]["breaks"] == []

    proc, outcomes = pytest_run(tmp_path, "--tracecheck-baseline", "breaks.json")
    assert outcomes == {"test_clean": "passed", "test_broken": "passed"}, proc.stdout
