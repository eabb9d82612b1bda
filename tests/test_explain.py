"""`tracecheck explain` and advice that works after `pip install` (issue 40, item 4): the kind pages ship as package
data, every renderer names them as a command, and nothing a user sees points at a file of this repository.

Oracles: kinds.json (ids, titles), the exit-code enum, and the wheel's file list."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from report_factory import small_report
from tracecheck.cli import cli
from tracecheck.fix.pipeline import NO_CODE_FIX, FixOutcome
from tracecheck.model import taxonomy
from tracecheck.model.exitcodes import ExitCode
from tracecheck.model.report import FAIL, PASS, Finding, ProbeReport, RunReport, StageResult
from tracecheck.render import fix as fix_render
from tracecheck.render import junit, markdown, terminal

REPO = Path(__file__).resolve().parents[1]
#: what a pip-installed user does not have
REPO_PATHS = ("docs/failures", "probes/")


def _kinds_json() -> list[dict]:
    return json.loads(resources.files("tracecheck.model").joinpath("kinds.json").read_text())["kinds"]


@pytest.mark.parametrize("kind_id", sorted(taxonomy.ids()))
def test_every_kind_page_is_package_data_and_explain_prints_it(kind_id):
    page = (resources.files("tracecheck.model") / "failures" / f"{kind_id}.md").read_text(encoding="utf-8")
    assert page.startswith(f"# `{kind_id}`")
    res = CliRunner().invoke(cli, ["explain", kind_id])
    assert res.exit_code == ExitCode.OK, res.output
    kind = taxonomy.kinds()[kind_id]
    assert res.output.splitlines()[0] == f"{kind_id} ({kind.severity}): {kind.title}"
    # piped (not a terminal): the Markdown as it is, but for its links into the source tree
    first, last = page.splitlines()[0], page.rstrip().splitlines()[-1]
    assert first in res.output and (last in res.output or "](" in last)
    assert len(res.output) >= len(page) * 0.9


def test_explain_without_a_kind_lists_every_kind_with_its_severity_and_title():
    res = CliRunner().invoke(cli, ["explain"])
    assert res.exit_code == ExitCode.OK, res.output
    rows = {line.split()[0]: line for line in res.output.splitlines()[1:] if line.strip()}
    for k in _kinds_json():
        assert k["severity"] in rows[k["id"]] and k["title"] in rows[k["id"]], k["id"]


@pytest.mark.parametrize("typed, suggested", [("missing_fake", "missing-fake"), ("graph", "graph-break"),
                                              ("no-such-kind", None)])
def test_an_unknown_kind_is_one_line_naming_close_ids_and_a_usage_error(typed, suggested):
    res = CliRunner().invoke(cli, ["explain", typed])
    assert res.exit_code == ExitCode.USAGE_ERROR
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracecheck: error: unknown kind {typed!r}")
    assert (f"did you mean {suggested}" in lines[0]) if suggested else ("did you mean" not in lines[0])


def test_kinds_json_names_no_repository_file():
    text = resources.files("tracecheck.model").joinpath("kinds.json").read_text()
    for path in REPO_PATHS:
        assert path not in text
    # nor does any shipped page point at a probe file it would not have
    for kind in taxonomy.kinds().values():
        assert "probes/" not in kind.page(), kind.id


def _terminal(report: RunReport) -> str:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    terminal.render(report, console)
    return console.file.getvalue()


def test_renderers_name_the_explain_command_not_a_repository_path():
    report = small_report()
    outputs = {"terminal": _terminal(report), "markdown": markdown.render(report), "junit": junit.render(report)}
    for name, text in outputs.items():
        for path in REPO_PATHS:
            assert path not in text, name
    assert "    more: tracecheck explain graph-break\n" in outputs["terminal"]
    assert "Background: `tracecheck explain graph-break` prints the kind's page." in outputs["markdown"]
    assert "more: tracecheck explain missing-fake" in outputs["junit"]
    # a failing probe with no code fix: the next: line is the command
    f = Finding("graph-break", "s", {"gb_type": "x"}, {})
    p = ProbeReport("m.py::probe_b", "/nowhere/m.py", "probe_b",
                    {"explain": StageResult("explain", FAIL, failure=f, findings=[f])})
    ok = ProbeReport("m.py::probe_c", "/nowhere/m.py", "probe_c", {"eager": StageResult("eager", PASS)})
    steps = terminal.next_steps(RunReport([p, ok], {}, ["eager", "explain"]))
    assert any(line.startswith("tracecheck explain graph-break") for line in steps)


def test_fix_output_names_the_explain_command():
    o = FixOutcome(NO_CODE_FIX, "m.py::probe", ["opaque-op"],
                   no_code_fix={"opaque-op": taxonomy.kinds()["opaque-op"].explain_command})
    console = Console(file=io.StringIO(), width=160, color_system=None)
    fix_render.render(o, console)
    assert "opaque-op: no code fix is generated for this kind; what to do: tracecheck explain opaque-op" \
        in console.file.getvalue()


def test_package_data_globs_match_every_page():
    """pyproject's package-data is what puts the pages into a wheel; each page must match a glob there."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    base = REPO / "tracecheck" / "model"
    shipped = {p for glob in data["tracecheck.model"] for p in base.glob(glob)}
    assert {base / "failures" / f"{k}.md" for k in taxonomy.ids()} <= shipped


def test_the_built_wheel_holds_the_pages(tmp_path):
    """Built from a copy of the sources (the package, pyproject, README), so that the working tree gets no build/."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    shutil.copytree(REPO / "tracecheck", src / "tracecheck", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "whl"), str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (wheel,) = (tmp_path / "whl").glob("tracecheck-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"tracecheck/model/failures/{k}.md" for k in taxonomy.ids()} <= names


def test_a_page_as_installed_has_no_link_into_the_source_tree():
    """The pages ship without docs/ and as commands: a relative link would lead nowhere after pip install."""
    import re

    from tracecheck.model.taxonomy import kinds

    for k in kinds().values():
        links = re.findall(r"\]\(([^)]+)\)", k.page())
        assert all(link.startswith(("http://", "https://", "#")) for link in links), (k.id, links)
    assert "`tracecheck explain pybind-builtin`" in " ".join(k.page() for k in kinds().values())
