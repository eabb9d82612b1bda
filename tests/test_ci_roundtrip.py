"""The CI gate through the real CLI, in subprocesses: baseline, a graph break added and removed, JUnit XML,
GitHub annotations, Markdown report, shards and merge, usage errors. Stages limited to keep it short."""
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

STAGES = "explain,aot_eager"

PROBE = textwrap.dedent("""\
    import torch


    def block(x):
        y = x * 2
        return y.sin()


    def probe_block():
        return block, (torch.randn(4),)
    """)


def cli(cwd: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE")}
    environ.update(env or {}, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "tracecheck", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environ)


def test_baseline_round_trip(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(PROBE)

    # 1. a clean run writes the baseline (it does not exist yet) and the full report
    r = cli(tmp_path, "run", "model.py", "--stages", STAGES, "-j", "1", "--json", "base.json",
            "--baseline", "baseline.json", "--update-baseline")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "baseline.json").read_text())
    assert doc["format"] == "tracecheck-baseline"
    assert list(doc["probes"]) == ["model.py::probe_block"]
    assert "seconds" not in json.dumps(doc) and str(tmp_path) not in json.dumps(doc)

    # 2. a graph break goes into the probe's function: exit 1, and the regression is named
    broken = PROBE.replace("    y = x * 2\n", "    y = x * 2\n    torch._dynamo.graph_break()\n")
    model.write_text(broken)
    break_line = broken.splitlines().index("    torch._dynamo.graph_break()") + 1
    r = cli(tmp_path, "run", "model.py", "--stages", STAGES, "-j", "1", "--baseline", "baseline.json",
            "--json", "new.json", "--junit-xml", "junit.xml", "--report", "report.md",
            env={"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(tmp_path)})
    assert r.returncode == 1, r.stdout + r.stderr
    # one root cause: the break, with the status, kind and counts it changed in both stages
    assert "REGRESSED — 1 regression, 0 improvements, 0 other changes, by root cause" in r.stdout
    regressions = [line for line in r.stdout.splitlines() if line.startswith("│ regressed")]
    assert len(regressions) == 1, r.stdout
    assert f"new graph break at model.py:{break_line} `torch._dynamo.graph_break()` (graph-break, " in regressions[0]
    assert "1 probe × 2 stages: explain, aot_eager" in regressions[0] and "model.py::probe_block" in regressions[0]
    annotations = [line for line in r.stdout.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 1 and annotations[0].startswith(f"::error file=model.py,line={break_line},")
    assert "Call to `torch._dynamo.graph_break()`" in annotations[0]
    assert "probes: model.py::probe_block; stages: explain, aot_eager" in annotations[0]

    suites = ET.parse(tmp_path / "junit.xml").getroot()
    cases = {c.get("name"): c for c in suites.iter("testcase")}
    assert set(cases) == {"probe_block[explain]", "probe_block[aot_eager]"}
    assert all(c.find("failure") is not None and c.find("failure").get("type") == "graph-break"
               for c in cases.values())

    md = (tmp_path / "report.md").read_text()
    assert len(md) < 65536
    for heading in ("## Environment", "## Verdicts", "## Against the baseline", "## Findings"):
        assert heading in md
    assert f"model.py:{break_line}" in md and "tracecheck run model.py::probe_block --stages explain" in md

    # the same verdict from two saved reports
    r = cli(tmp_path, "compare", "base.json", "new.json")
    assert r.returncode == 1 and "REGRESSED — 1 regression," in r.stdout
    # -v: the per-stage changes under the root cause
    r = cli(tmp_path, "compare", "base.json", "new.json", "-v")
    per_stage = [line for line in r.stdout.splitlines() if line.startswith("│ regressed")]
    assert r.returncode == 1 and len(per_stage) == 1 + 2 * 5, r.stdout  # status, kind, graphs, breaks, the break

    # 3. the break is removed again: exit 0 against the broken run, and the improvement is reported
    model.write_text(PROBE)
    r = cli(tmp_path, "run", "model.py", "--stages", STAGES, "-j", "1", "--baseline", "new.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "improved" in r.stdout and f"graph break gone at model.py:{break_line}" in r.stdout
    assert "0 regressions, 1 improvement, 0 other changes" in r.stdout


def test_shards_and_merge(tmp_path):
    (tmp_path / "zoo.py").write_text(textwrap.dedent("""\
        import torch

        def probe_a():
            return torch.sin, (torch.randn(2),)

        def probe_b():
            return torch.cos, (torch.randn(2),)

        def probe_c():
            return torch.tan, (torch.randn(2),)
        """))
    ids = {}
    for k in (1, 2):
        r = cli(tmp_path, "run", "zoo.py", "--stages", "eager", "-j", "1", "--shard", f"{k}/2",
                "--json", f"shard{k}.json")
        assert r.returncode == 0, r.stderr
        ids[k] = [p["id"] for p in json.loads((tmp_path / f"shard{k}.json").read_text())["probes"]]
    assert ids == {1: ["zoo.py::probe_a", "zoo.py::probe_c"], 2: ["zoo.py::probe_b"]}
    r = cli(tmp_path, "merge", "shard1.json", "shard2.json", "-o", "all.json")
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "all.json").read_text())
    assert [p["id"] for p in merged["probes"]] == ["zoo.py::probe_a", "zoo.py::probe_b", "zoo.py::probe_c"]
    r = cli(tmp_path, "show", "all.json", "--format", "csv")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("probe,file,name,stage,status")
    assert len(r.stdout.splitlines()) == 4
    # a shard compared with the whole baseline is compared on its own probes only
    r = cli(tmp_path, "compare", "all.json", "shard2.json")
    assert r.returncode == 0 and "shard 2/2" in r.stdout
    # and the merged report catches a probe that went missing
    r = cli(tmp_path, "merge", "shard1.json", "-o", "partial.json")  # shard 2 never arrived
    assert r.returncode == 0, r.stderr
    r = cli(tmp_path, "compare", "all.json", "partial.json")
    assert r.returncode == 1 and "probe went missing" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["run", "model.py", "--shard", "3/2"], "--shard 3/2: K must be between 1 and N"),
    (["run", "model.py", "--update-baseline"], "--update-baseline needs --baseline"),
    (["run", "model.py", "--baseline", "missing.json"], "--baseline missing.json: no such file"),
    (["compare", "missing.json", "x.json"], "BASE missing.json: no such file"),
    (["show", "missing.json"], "report missing.json: no such file"),
    (["merge", "missing.json", "-o", "all.json"], "report missing.json: no such file"),
    (["run", "model.py::probe_nope", "--stages", "eager"],
     "model.py::probe_nope: no such probe in the file (its probes: probe_block)"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "model.py").write_text(PROBE)
    r = cli(tmp_path, *args, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    # the error is one line, the last; progress lines (piped: not a terminal) may come before it
    assert lines[-1] == f"tracecheck: error: {lines[-1].split('error: ', 1)[1]}" and message in lines[-1]
    assert all(line.startswith(("tracecheck: ", "loading ", "running ")) for line in lines[:-1]), r.stderr
    assert "Traceback" not in r.stderr


def test_baseline_recorded_in_one_folder_gates_a_run_from_another(tmp_path):
    (tmp_path / ".git").mkdir()                      # the project root (a rootdir marker)
    (tmp_path / "models").mkdir()
    broken = PROBE.replace("    y = x * 2\n", "    y = x * 2\n    torch._dynamo.graph_break()\n")
    (tmp_path / "models" / "model.py").write_text(broken)
    r = cli(tmp_path, "run", "models/model.py", "--stages", "explain", "-j", "1", "--json", "base.json")
    assert r.returncode == 1, r.stderr               # the graph break is a finding, recorded in the baseline
    report = json.loads((tmp_path / "base.json").read_text())
    assert report["rootdir"] == str(tmp_path)
    assert [p["id"] for p in report["probes"]] == ["models/model.py::probe_block"]
    # the same file, run from inside models/ and from an unrelated folder: same ids, no regression, exit 0
    for cwd, path in ((tmp_path / "models", "model.py"), (tmp_path.parent, str(tmp_path / "models" / "model.py"))):
        r = cli(cwd, "run", path, "--stages", "explain", "-j", "1", "--baseline", str(tmp_path / "base.json"),
                "--report", str(tmp_path / "r.md"))
        assert r.returncode == 0, (cwd, r.stdout, r.stderr)
        assert "went missing" not in r.stdout
    # the report's repro command, pasted in the rootdir, runs that probe again
    md = (tmp_path / "r.md").read_text()
    repro = next(line for line in md.splitlines() if line.startswith("tracecheck run "))
    assert repro == "tracecheck run models/model.py::probe_block --stages explain"
    r = cli(tmp_path, *repro.split()[1:], "--json", "again.json")
    assert r.returncode == 1, r.stderr
    assert [p["id"] for p in json.loads((tmp_path / "again.json").read_text())["probes"]] == \
        ["models/model.py::probe_block"]


def test_a_node_id_runs_that_probe_only(tmp_path):
    """``file.py::name`` selects exactly one probe, where ``-k name`` would also match ``name_other``."""
    (tmp_path / "model.py").write_text(PROBE + "\n\ndef probe_block_other():\n    return block, (torch.randn(4),)\n")
    r = cli(tmp_path, "run", "model.py::probe_block", "--stages", "eager", "-j", "1", "--json", "one.json")
    assert r.returncode == 0, r.stderr
    assert [p["id"] for p in json.loads((tmp_path / "one.json").read_text())["probes"]] == ["model.py::probe_block"]
    r = cli(tmp_path, "run", "model.py", "-k", "probe_block", "--stages", "eager", "-j", "1", "--json", "k.json")
    assert len(json.loads((tmp_path / "k.json").read_text())["probes"]) == 2


def test_piped_output_says_what_runs_from_the_start(tmp_path):
    """Not a terminal (a CI log): plain progress lines, the first before any stage process starts."""
    (tmp_path / "model.py").write_text(PROBE)
    r = cli(tmp_path, "run", "model.py", "--stages", "eager", "-j", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "tracecheck: 1 model file(s); starting the stage processes (torch preloads once)"
    assert lines[1] == "loading model.py (its imports run; a C++ extension may build now)"
    assert "model.py::probe_block [eager] pass" in r.stderr
