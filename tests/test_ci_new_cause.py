"""docs/ci.md's flow as a CI system sees it (issue 53): a model with a known graph break is baselined, then one new
break is added; the JUnit XML (the ``failure`` element's attributes, what GitHub's and GitLab's test views show) and
the GitHub annotations must name the new cause only: no improvement beside it, no failure of a target that is not
required, no absolute path. A change that removes the known break improves; one that only moves it changes nothing.
Real runs of the CLI in subprocesses; the stages are limited to keep it short (vmap and export: targets not
required)."""
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

STAGES = "explain,aot_eager,vmap,export"

MODEL = textwrap.dedent("""\
    import torch


    class Block(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = torch.nn.Linear(n, n)

        def forward(self, x):
            h = self.lin(x).relu()
            print("block output ready")
            h = h + 1
            return h.sum(-1)


    def probe_small():
        return Block(8), (torch.randn(4, 8),)


    def probe_large():
        return Block(32), (torch.randn(16, 32),)
    """)
PRINT_LINE = MODEL.splitlines().index('        print("block output ready")') + 1
#: the new break, added under ``h = h + 1``
GUARD = "        if h.mean().item() > 10.0:\n            h = h * 0.5\n"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE")}
    env.update(COLUMNS="200", GITHUB_ACTIONS="true", GITHUB_WORKSPACE=str(cwd))
    return subprocess.run([sys.executable, "-m", "tracecheck", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def gate(cwd: Path, source: str) -> tuple[subprocess.CompletedProcess, dict[str, ET.Element], list[str]]:
    """Write the model, run it against the baseline as docs/ci.md's workflow does; the run, its JUnit testcases
    by name and its annotations."""
    (cwd / "gate_model.py").write_text(source)
    for old in ("junit.xml", "report.md", "new.json"):
        (cwd / old).unlink(missing_ok=True)
    r = cli(cwd, "run", "gate_model.py", "--stages", STAGES, "-j", "2", "--baseline", "base.json",
            "--json", "new.json", "--junit-xml", "junit.xml", "--report", "report.md")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    cases = {c.get("name"): c for c in ET.parse(cwd / "junit.xml").getroot().iter("testcase")}
    return r, cases, [line for line in r.stdout.splitlines() if line.startswith("::")]


def failed(cases: dict[str, ET.Element]) -> dict[str, ET.Element]:
    """The testcases a CI test view shows as failed: a ``failure`` or ``error`` child."""
    return {name: el for name, c in cases.items()
            for el in (c.find("failure"), c.find("error")) if el is not None}


@pytest.fixture(scope="module")
def baselined(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("gate")
    (cwd / "gate_model.py").write_text(MODEL)
    r = cli(cwd, "run", "gate_model.py", "--stages", STAGES, "-j", "2", "--baseline", "base.json",
            "--update-baseline")
    assert r.returncode == 0, r.stdout + r.stderr
    base = json.loads((cwd / "base.json").read_text())
    # the known break is in the baseline, at the print
    assert [(b["file"], b["line"]) for b in base["probes"]["gate_model.py::probe_small"]["stages"]["explain"]
            ["breaks"]] == [("gate_model.py", PRINT_LINE)]
    return cwd


@pytest.mark.slow
def test_a_new_break_is_what_junit_and_the_annotations_name(baselined):
    guarded = MODEL.replace("        h = h + 1\n", "        h = h + 1\n" + GUARD)
    new_line = guarded.splitlines().index("        if h.mean().item() > 10.0:") + 1
    r, cases, notes = gate(baselined, guarded)
    assert r.returncode == 1, r.stdout
    root = str(baselined)

    # JUnit: the required stages of both probes fail, each naming the new break, never the known print
    bad = failed(cases)
    assert set(bad) == {"probe_small[explain]", "probe_small[aot_eager]", "probe_large[explain]",
                        "probe_large[aot_eager]"}, {n: (e.tag, e.get("message")) for n, e in bad.items()}
    for name, el in bad.items():
        assert el.tag == "failure" and el.get("type") == "data-dependent", (name, el.attrib)
        message = el.get("message")
        assert f"gate_model.py:{new_line}" in message and "GB0124" in message, message
        assert "print" not in message and "builtin" not in message, message
        body = el.text
        # the known break stays in the body, said to be known; the new one comes first
        assert body.index("Regressed against the baseline") < body.index("Known in the baseline") < \
            body.index(f"gate_model.py:{PRINT_LINE}"), body
    # vmap and export fail too, but their targets are not required: no failed testcase
    for stage in ("vmap", "export"):
        assert cases[f"probe_small[{stage}]"].find("skipped") is not None
    xml = (baselined / "junit.xml").read_text()
    assert root not in xml and "/gate_model.py" not in xml.replace('"gate_model.py', ""), "an absolute path"

    # one annotation, at the new line, for the required stages only
    assert len(notes) == 1, notes
    assert notes[0].startswith(f"::error file=gate_model.py,line={new_line},"), notes[0]
    assert "data-dependent" in notes[0] and "stages: explain, aot_eager]" in notes[0]
    for word in ("export", "vmap", "print", root):
        assert word not in notes[0], (word, notes[0])

    # the terminal: one row, the regression; the ops the line added are no improvement
    assert "REGRESSED — 1 regression, 0 improvements, 0 other changes" in r.stdout, r.stdout
    assert not [line for line in r.stdout.splitlines() if line.startswith(("│ improved", "│ changed"))]
    assert "○ also in vmap, export (targets not required)" in r.stdout
    # and one fix command for the causes both probes share
    assert r.stdout.count("tracecheck fix gate_model.py::") == 1, r.stdout

    # the same comparison from the saved files (tracecheck compare) reads the same in JUnit
    c = cli(baselined, "compare", "base.json", "new.json", "--junit-xml", "compare.xml")
    assert c.returncode == 1
    again = failed({x.get("name"): x for x in ET.parse(baselined / "compare.xml").getroot().iter("testcase")})
    assert {n: (e.get("type"), e.get("message")) for n, e in again.items()} == \
        {n: (e.get("type"), e.get("message")) for n, e in bad.items()}


@pytest.mark.slow
def test_removing_the_known_break_improves_and_moving_it_changes_nothing(baselined):
    r, cases, notes = gate(baselined, MODEL.replace('        print("block output ready")\n', ""))
    assert r.returncode == 0, r.stdout
    assert "baseline base.json: improved — 0 regressions" in r.stdout, r.stdout
    assert not failed(cases) and notes == []

    moved = MODEL.replace("    def forward(self, x):\n", "    def forward(self, x):\n        # scaled below\n\n")
    r, cases, notes = gate(baselined, moved)
    assert r.returncode == 0, r.stdout
    assert "baseline base.json: unchanged — 0 regressions, 0 improvements" in r.stdout, r.stdout
    assert not failed(cases) and notes == []
