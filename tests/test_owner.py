"""Whose code a finding's frame or a graph break is (tracecheck/evidence/owner.py, model/evidence.Owner; issue 41).

Oracles independent of tracecheck: the installed packages' own ``__file__``, ``__version__`` and
``importlib.metadata``; for the end-to-end break, the file ``torch._dynamo.explain`` itself names."""
from __future__ import annotations

import importlib.metadata
import io
import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from rich.console import Console

from tracecheck.evidence.owner import owner_of
from tracecheck.model.evidence import Owner, read as read_evidence
from tracecheck.model.report import Finding, GraphBreak, ProbeReport, RunReport, StageResult
from tracecheck.render import terminal, view
from tracecheck.render.markdown import render as render_markdown


# -- unit: one file each -------------------------------------------------------------------------------------------

def test_a_file_under_the_rootdir_is_yours(tmp_path):
    file = tmp_path / "pkg" / "helper.py"
    file.parent.mkdir()
    file.write_text("x = 1\n")
    assert Owner.of(owner_of(str(file), str(tmp_path))) == Owner("yours")
    assert Owner("yours").label == "yours"


def test_a_site_packages_folder_under_the_rootdir_is_not_yours():
    """A virtual environment inside the project: its packages are still libraries."""
    transformers = pytest.importorskip("transformers")
    site = Path(transformers.__file__).parents[1]
    owner = Owner.of(owner_of(transformers.__file__, str(site.parent)))
    assert owner is not None and owner.who == "library"


def test_torch_is_torch_with_its_own_version(tmp_path):
    linear = Path(torch.__file__).parent / "nn" / "modules" / "linear.py"
    assert linear.is_file()
    owner = Owner.of(owner_of(str(linear), str(tmp_path)))
    assert owner == Owner("torch", "torch", torch.__version__)
    assert owner.label == f"torch {torch.__version__}"


def test_an_installed_library_is_named_with_its_distributions_version(tmp_path):
    transformers = pytest.importorskip("transformers")
    file = Path(transformers.__file__).parent / "modeling_utils.py"
    owner = Owner.of(owner_of(str(file), str(tmp_path)))
    version = importlib.metadata.version("transformers")
    assert owner == Owner("library", "transformers", version)
    assert owner.label == f"transformers {version}"


def test_a_file_outside_the_rootdir_in_no_distribution_is_unknown(tmp_path):
    """Not "yours": nothing says the user wrote ``/tmp/x.py`` or can change it (a PYTHONPATH folder, a generated or
    vendored file), and the label must not claim more than is known."""
    root = tmp_path / "project"
    root.mkdir()
    owner = Owner.of(owner_of(str(tmp_path / "x.py"), str(root)))
    assert owner == Owner("unknown") and owner.label == "unknown"
    assert Owner.of(owner_of("<eval_with_key>.3", str(root))).who == "torch"  # code torch generated
    assert owner_of(None, str(root)) is None


def test_old_reports_have_no_owner_and_a_bad_record_reads_as_none():
    assert read_evidence({"gb_type": "x"}).owner is None
    assert Owner.of({"who": "someone"}) is None and Owner.of("yours") is None
    b = GraphBreak.from_dict({"kind": "graph-break", "gb_type": "x", "gb_code": None, "file": "/m.py", "line": 1})
    assert b.owner is None


def test_a_break_and_a_finding_keep_their_owner_through_json():
    owner = {"who": "library", "name": "transformers", "version": "5.24.0"}
    f = Finding("graph-break", "s", {}, {"gb_type": "x", "user_frame": {"file": "/l.py", "line": 3}, "owner": owner})
    b = GraphBreak("graph-break", "x", None, "/l.py", 3, owner=Owner.of(owner))
    s = StageResult("explain", "fail", failure=f, findings=[f], breaks=[b])
    report = RunReport(probes=[ProbeReport("m.py::p", "m.py", "p", {"explain": s})], environment={}, stages=["explain"])
    back = RunReport.from_dict(json.loads(json.dumps(report.to_dict())))
    s2 = back.probes[0].stages["explain"]
    assert s2.breaks[0].owner == Owner("library", "transformers", "5.24.0")
    assert s2.findings[0].evidence.owner.label == "transformers 5.24.0"


def _cause(owner: dict | None, line: int) -> Finding:
    ev = {"gb_type": "x", "user_frame": {"file": "/m.py", "line": line}}
    return Finding("graph-break", "s", {}, {**ev, "owner": owner} if owner else ev)


def test_breaks_by_owner_counts_root_causes():
    from tracecheck.model.report import RootCause
    yours, lib = {"who": "yours"}, {"who": "library", "name": "transformers", "version": "5.24.0"}
    causes = [RootCause(_cause(yours, 1), []), RootCause(_cause(lib, 2), []), RootCause(_cause(yours, 3), [])]
    assert view.breaks_by_owner(causes) == "yours 2, transformers 5.24.0 1, torch 0"
    assert view.breaks_by_owner([RootCause(_cause(None, 1), [])]) is None  # a report from before owners


# -- end to end: a break in a local helper module ------------------------------------------------------------------

HELPER = '''
import torch


def noisy(x):
    print("helper says hi")  # a graph break, in the helper's file
    return x.sin()
'''

MODEL = '''
import torch

import tracecheck
from helpers.noisy import noisy


class M(torch.nn.Module):
    def forward(self, x):
        return noisy(x * 2) + 1


@tracecheck.probe
def m():
    return tracecheck.Case(M(), (torch.randn(4),))
'''


def _torchs_break_file(model: Path) -> str:
    """The oracle: the file of the break's innermost user frame, as ``torch._dynamo.explain`` names it."""
    sys.path.insert(0, str(model.parent))
    try:
        spec = importlib.util.spec_from_file_location("owner_e2e_model", model)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        torch._dynamo.reset()
        out = torch._dynamo.explain(module.M())(torch.randn(4))
        # explain may count the one print twice (it re-traces the frame after the break); each names the same line
        files = {r.user_stack[-1].filename for r in out.break_reasons}
        assert len(files) == 1, out.break_reasons
        return files.pop()
    finally:
        sys.path.remove(str(model.parent))
        sys.modules.pop("helpers.noisy", None), sys.modules.pop("helpers", None)
        torch._dynamo.reset()


def test_a_break_in_a_local_helper_is_yours_and_names_the_helper(tmp_path, tracecheck):
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "noisy.py").write_text(textwrap.dedent(HELPER))
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent(MODEL))
    torch_file = _torchs_break_file(model)
    assert os.path.realpath(torch_file) == os.path.realpath(tmp_path / "helpers" / "noisy.py")

    result = tracecheck("run", str(model), "--stages", "explain")
    assert result.report is not None, result.stderr
    report = RunReport.from_dict(result.report)
    s = report.probes[0].stages["explain"]
    assert len(s.breaks) == 1, s.breaks
    b = s.breaks[0]
    assert os.path.realpath(b.file) == os.path.realpath(torch_file)
    assert b.owner == Owner("yours")
    finding = next(f for f in s.findings if f.evidence.gb_type)
    assert finding.evidence.owner == Owner("yours")
    md = render_markdown(report)
    assert "- **Owner:** `yours`" in md
    assert "Breaks by owner: yours 1, torch 0" in md
    long_form = io.StringIO()
    terminal.render(report, Console(file=long_form, width=200, color_system=None), verbose=True)
    assert "whose code: yours" in long_form.getvalue()
