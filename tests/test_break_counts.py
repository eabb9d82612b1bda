"""Graph breaks counted as people count them (issue 52, item 3): graphs - 1 as explain() says, the distinct sites
beside it, and Dynamo's own counter, each against plain torch run in the same test."""
import copy

import pytest
import torch
from torch._dynamo.utils import counters

from plain_load import load
from tracecheck.gate import comparison, document

# one print in a block the model calls twice: two breaks (three graphs) at one line
TWICE = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        x = self.lin(x)
        print("block")
        return torch.relu(x)


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.sum()


def probe_twice():
    return M(), (torch.randn(2, 8),)
'''


def _plain(path):
    model, args = load(path, "twice_plain").probe_twice()
    torch._dynamo.reset()
    counters.clear()
    out = torch._dynamo.explain(model)(*args)
    counted = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return out.graph_count, out.graph_break_count, counted


@pytest.mark.slow
def test_breaks_at_one_line_twice_count_as_explain_counts_with_the_site_beside(tracecheck, write_probe, tmp_path):
    path = write_probe(TWICE)
    graphs, explained, counted = _plain(path)
    assert (graphs, explained) == (3, 2)  # the premise: plain torch sees two breaks
    res = tracecheck("run", str(path), "--stages", "explain,aot_eager", "--report", str(tmp_path / "r.md"))
    for stage in ("explain", "aot_eager"):
        s = res.probe("probe_twice")["stages"][stage]
        assert (s["graph_count"], s["graph_break_count"], s["graph_break_sites"],
                s["dynamo_graph_break_count"]) == (graphs, explained, 1, counted)
    assert "2 (1 site)" in res.stdout  # the table's cell
    md = (tmp_path / "r.md").read_text()
    assert "| 2 (1 site) |" in md
    assert "graphs=3 graph_breaks=2 at 1 site" in md
    assert "graph breaks: the forward's Dynamo graphs - 1" in md  # the definition, said once


def test_a_baseline_that_counted_sites_compares_equal_to_the_same_run_today():
    """A baseline written before graph_break_sites held the distinct breaks in graph_break_count; an unchanged probe
    (3 graphs, 2 breaks at 1 line) is no regression against it."""
    brk = {"kind": "graph-break", "gb_type": "Failed to trace builtin operator", "file": "m.py", "line": 11}
    old_snap = {"status": "fail", "kinds": ["graph-break"], "graph_count": 3, "graph_break_count": 1,
                "breaks": [brk], "recompiles": None, "phases": ["forward"], "target": "compile"}
    new_snap = {**old_snap, "graph_break_count": 2, "graph_break_sites": 1}
    doc = {"format": "tracecheck-baseline", "schema_version": 1, "torch": "2.13.0+cpu", "stages": ["explain"]}
    old = document.to_baseline({**doc, "probes": {"m.py::p": {"stages": {"explain": copy.deepcopy(old_snap)}}}})
    new = document.to_baseline({**doc, "probes": {"m.py::p": {"stages": {"explain": new_snap}}}})
    assert old["probes"]["m.py::p"]["stages"]["explain"]["graph_break_sites"] == 1
    assert comparison.compare(old, new).changes == []
    # one more break at a new line is still a regression of the count
    worse = copy.deepcopy(new)
    worse["probes"]["m.py::p"]["stages"]["explain"].update(graph_count=4, graph_break_count=3, graph_break_sites=2)
    worse["probes"]["m.py::p"]["stages"]["explain"]["breaks"].append({**brk, "line": 20})
    assert "graph_break_count" in {c.aspect for c in comparison.compare(old, worse).regressions}


def test_an_old_report_reads_its_break_count_as_the_sites():
    from tracecheck.model.report import StageResult

    s = StageResult.from_dict({"stage": "explain", "status": "fail", "graph_count": 3, "graph_break_count": 1})
    assert (s.graph_break_count, s.graph_break_sites) == (2, 1)


def test_more_sites_than_breaks_is_said_as_code_run_eagerly():
    """Plain explain() on the mHC autograd.Function probe: 1 graph, graph_break_count 0, and break reasons for the
    pybind11 calls Dynamo gave up on (the Function ran eagerly). Never "0 graph breaks at 2 sites"."""
    from tracecheck.model.report import StageResult
    from tracecheck.render import view

    s = StageResult("explain", "fail", graph_count=1, graph_break_count=0, graph_break_sites=2,
                    dynamo_graph_break_count=6)
    assert view.breaks_said(s) == "0 graph breaks, but 2 break sites ran eagerly outside the graphs (Dynamo's counter: 6)"
    fewer = StageResult("explain", "fail", graph_count=3, graph_break_count=2, graph_break_sites=1)
    assert view.breaks_said(fewer) == "2 graph breaks at 1 site"
