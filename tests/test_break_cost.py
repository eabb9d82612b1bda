"""What each graph break costs (issue 41, item 4): stages/_break_cost.py and the ``break_costs`` payload.

Oracles: the attribution rules on a profiler timeline written by hand, with the microseconds each break is owed
counted by hand, against a source file whose functions' first lines are read by hand; on a real run, the lines and
gb_types of a model's two breaks read off its source (a ``print``, and an ``.item()`` inside a loop, which makes
Dynamo give up on the loop's frame). Which break costs more is timing, so it is not asserted here: the benchmark
``benchmarks/bench_break_cost.py`` repeats the run and prints the order and its noise.
"""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tracecheck import compat
from tracecheck.model.payloads import BESIDE, BreakCost, BreakCosts
from tracecheck.model.records import BreakRecord
from tracecheck.stages import _break_cost as bc


# -- the attribution, on a timeline written by hand -------------------------------------------------------------

@dataclass
class _Event:
    name: str
    start: float
    end: float
    cpu_parent: "_Event | None" = None


SOURCE = """import torch


class M(torch.nn.Module):
    def forward(self, x):
        h = x + 1
        print(h)
        for _ in range(3):
            if h.sum().item() > 0:
                h = h * 2
        return h


class Block(torch.nn.Module):
    @torch.no_grad()
    def forward(self, x):
        print(x)
        return x
"""
#: by hand from SOURCE: M.forward's code starts at line 5, Block.forward's at its decorator, line 15
PRINT, ITEM, BLOCK_PRINT = 7, 9, 17


@pytest.fixture
def model(tmp_path) -> str:
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    return os.path.realpath(path)


def _frames(model: str) -> bc._Frames:
    """The breaks as the explain stage's trace collector records them (file and line)."""
    return bc._Frames([BreakRecord(file=model, line=n, gb_type=f"gb{n}") for n in (PRINT, ITEM, BLOCK_PRINT)])


def _timeline() -> list[_Event]:
    """One call of 100 us: graph 0 (10-30 us) ends at the print (line 7); then the resume function Dynamo gave up
    on (its loop holds the .item() at line 9) runs relu (45-50) and sum (52-60, with a nested op) in eager."""
    call = _Event(bc._CALL + "0", 0, 100)
    forward = _Event("model.py(5): forward", 1, 99, call)
    graph = _Event(bc._GRAPH + "0", 10, 30, forward)
    resume = _Event("model.py(7): torch_dynamo_resume_in_forward_at_7", 40, 95, forward)
    total = _Event("aten::sum", 52, 60, resume)
    return [call, forward, graph, _Event("aten::linear", 12, 28, graph), resume, _Event("aten::relu", 45, 50, resume),
            total, _Event("aten::sum_inner", 53, 55, total), _Event("aten::empty", 53, 54, total)]


def test_time_outside_graphs_goes_to_the_break_it_followed(model):
    """By hand: 0-10 before the first graph is no break's (10 us); 30-45 (the print, Dynamo's re-entry) the
    print's (15 us); relu, sum and the gaps between them and the tail 60-100, in the frame the .item() made Dynamo
    give up on, the .item()'s (5 + 2 + 8 + 40 = 55 us). 10 + 15 + 55 + the graph's 20 = 100."""
    got = bc._attribute(_timeline(), [(model, PRINT)], _frames(model))
    assert got == {bc._CALL + "0": (100, {None: 10, (model, PRINT): 15, (model, ITEM): 55})}


def test_an_op_in_the_breaks_own_frame_is_the_break_that_ended_the_graph(model):
    """A ``torch.compiler.disable``d helper called at the break: its ops (in a frame with no break of its own, under
    the break's frame) are that break's, not the first break of the calling frame."""
    call = _Event(bc._CALL + "0", 0, 50)
    forward = _Event("model.py(5): forward", 0, 50, call)
    graph = _Event(bc._GRAPH + "0", 5, 15, forward)
    helper = _Event("helpers.py(3): helper", 20, 40, forward)
    events = [call, forward, graph, helper, _Event("mylib::scale", 25, 35, helper)]  # a custom op is an op too
    got = bc._attribute(events, [(model, ITEM)], _frames(model))
    assert got == {bc._CALL + "0": (50, {None: 5, (model, ITEM): 35})}


def test_a_break_before_any_graph_is_owed_the_time_before_its_resume_functions_graph(model):
    """A print as the forward's first statement: no graph ends at it (nothing was captured before it), so the time
    until the graph of the function that resumes after it (``..._at_7``) is its; after that graph ends at a return,
    the rest is no break's. By hand: 0-50 the print's, 80-100 no break's."""
    call = _Event(bc._CALL + "0", 0, 100)
    forward = _Event("model.py(5): forward", 0, 100, call)
    resume = _Event("model.py(7): torch_dynamo_resume_in_forward_at_7", 40, 95, forward)
    graph = _Event(bc._GRAPH + "0", 50, 80, resume)
    got = bc._attribute([call, forward, resume, graph], [None], _frames(model))
    assert got == {bc._CALL + "0": (100, {None: 20, (model, PRINT): 50})}


def test_two_functions_of_one_name_in_one_file_hold_their_own_breaks(model):
    frames = _frames(model)
    assert frames.breaks_in("model.py", 5, "forward") == [(model, PRINT), (model, ITEM)]
    assert frames.breaks_in("model.py", 15, "forward") == [(model, BLOCK_PRINT)]  # Block.forward: its decorator's line
    # an op in Block.forward, which Dynamo gave up on, after a graph that ended at M.forward's print
    assert frames.owner([("model.py", 15, "forward"), ("model.py", 5, "forward")], (model, PRINT)) == (model, BLOCK_PRINT)


def test_a_resume_function_holds_the_breaks_after_its_line_only(model):
    frames = _frames(model)
    assert frames.breaks_in("model.py", 7, "torch_dynamo_resume_in_forward_at_7") == [(model, ITEM)]
    assert frames.breaks_in("model.py", 9, "torch_dynamo_resume_in_forward_at_9") == []
    assert frames.breaks_in("other.py", 5, "forward") == []  # another file
    tail = os.path.join(os.path.basename(os.path.dirname(model)), "model.py")
    assert frames.breaks_in(tail, 5, "forward") == [(model, PRINT), (model, ITEM)]  # a longer tail of the same path


def test_events_at_equal_times_nest_call_graph_frame_op(monkeypatch):
    """Kineto's timestamps are coarse: a graph range and the op it runs can start and end together; the graph encloses
    the op whatever order the raw events come in."""
    raw = [("aten::mm", 10_000, 20_000, 1), (bc._GRAPH + "0", 10_000, 20_000, 1),
           (bc._CALL + "0", 0, 30_000, 1), ("aten::add", 25_000, 26_000, 2)]  # thread 2: an intra-op thread's
    monkeypatch.setattr(compat, "profiler_events", lambda prof: iter(raw))
    events = {e.name: e for e in bc._events(None)}
    assert set(events) == {"aten::mm", bc._GRAPH + "0", bc._CALL + "0"}
    assert events["aten::mm"].cpu_parent is events[bc._GRAPH + "0"]
    assert events[bc._GRAPH + "0"].cpu_parent is events[bc._CALL + "0"]


def test_odd_break_costs_in_a_report_read_as_not_measured():
    """A hand-edited report: what is no measure reads as not measured, so no renderer prints "nan%" or "750%"."""
    good = {"file": "/m.py", "line": 3, "ms": 0.1, "share": 0.5, "low": 0.4, "high": 0.6}
    extra = {"break_costs": {"calls": 7, "compiled_ms": -1, "eager_ms": 0.1, "compiled_spread": float("nan"),
                             "unattributed": 7.5,
                             "breaks": [good, {**good, "line": "3"}, {**good, "line": 4, "share": "x"},
                                        {**good, "line": 5, "share": 7.5, "high": 9}, {**good, "line": 6, "low": 0.9},
                                        {**good, "line": 7, "ms": float("inf")}, "junk"]}}
    costs = BreakCosts.of(extra)
    assert (costs.compiled_ms, costs.eager_ms, costs.compiled_spread, costs.unattributed) == (None, 0.1, None, None)
    assert costs.breaks == [BreakCost("/m.py", 3, None, 0.1, 0.5, 0.4, 0.6)]
    assert costs.of_site("/m.py", 3) is costs.breaks[0] and costs.of_site("/m.py", 4) is None
    for calls in ("7", -1, 0, True):  # no call measured: nothing to rank by
        assert BreakCosts.of({"break_costs": {**extra["break_costs"], "calls": calls}}) is None
    assert BreakCosts.of({}) is None and BESIDE["explain"] == (BreakCosts,)


def test_odd_cache_counts_in_a_report_read_as_not_counted():
    from tracecheck.model.payloads import InductorKernels

    k = InductorKernels.of({"inductor": {"graphs": 1, "fxgraph_cache_hit": "5", "fxgraph_cache_miss": -1,
                                         "autograd_cache_hit": 2.5, "autograd_cache_miss": 3}})
    assert (k.fxgraph_cache_hit, k.fxgraph_cache_miss, k.autograd_cache_hit, k.autograd_cache_miss) == \
        (None, None, None, 3)


# -- on a real run ------------------------------------------------------------------------------------------------

#: the benchmark's model (benchmarks/bench_break_cost.py), a probe without a break beside it
MODEL = (Path(__file__).resolve().parents[1] / "benchmarks" / "models" / "print_and_item.py").read_text() + \
    "\n\n@tracecheck.probe\ndef probe_no_break():\n    return tracecheck.Case(torch.nn.Linear(4, 4), (torch.randn(2, 4),))\n"
#: the breaks' lines, read off the source
PRINT_LINE, ITEM_LINE = (MODEL.splitlines().index(next(ln for ln in MODEL.splitlines() if ln.endswith(mark))) + 1
                         for mark in ("# the cheap break", "# the expensive break"))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("cost")
    (folder / "model.py").write_text(MODEL)
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", "model.py", "--stages", "explain,vmap",
                           "--json", "r.json", "--report", "r.md", "--html", "html"], capture_output=True,
                          text=True, timeout=600, cwd=folder, env={**os.environ, "COLUMNS": "200"})
    report = json.loads((folder / "r.json").read_text())
    extra = {p["id"].split("::")[1]: p["stages"]["explain"]["extra"] for p in report["probes"]}
    return {"extra": extra, "stdout": proc.stdout, "md": (folder / "r.md").read_text(), "folder": folder}


def test_both_breaks_are_measured_at_their_lines(run):
    costs = BreakCosts.of(run["extra"]["probe_print_and_item"])
    model = str((run["folder"] / "model.py").resolve())
    assert {(c.file, c.line, c.gb_type) for c in costs.breaks} == {
        (model, PRINT_LINE, "Failed to trace builtin operator"),
        (model, ITEM_LINE, "Unsupported Tensor.item() call with capture_scalar_outputs=False")}
    assert costs.calls >= bc.MIN_CALLS and costs.compiled_ms > 0 and costs.eager_ms > 0
    for c in costs.breaks:
        assert 0 < c.low <= c.share <= c.high < 1 and c.ms > 0
    # the shares are parts of one call, with the graphs' time and the unattributed time beside them
    assert sum(c.share for c in costs.breaks) + costs.unattributed < 1


def test_a_probe_without_a_break_has_no_costs(run):
    assert BreakCosts.of(run["extra"]["probe_no_break"]) is None


def test_every_renderer_says_the_cost_costliest_first(run):
    """The terminal's root-cause blocks, the Markdown's graph counts and the source view's index list the breaks in
    the order of their measured time, whichever that is on this run; the share is said of the probe's forward."""
    costs = BreakCosts.of(run["extra"]["probe_print_and_item"])
    # a cost too spread to be a measurement (BreakCost.noisy, on a busy machine) is said so and ranks nothing
    measured = [c for c in costs.breaks if not c.noisy]
    order = [c.line for c in sorted(measured, key=lambda c: -c.ms)]
    lines = run["stdout"].splitlines()
    heads = [n for ln in lines for n in order if f"model.py:{n}  (" in ln and "vmap)" not in ln]  # the breaks' blocks
    assert heads[:len(order)] == order
    # two breaks, and no cost beside vmap's finding at the .item() line: vmap refusing it is not what time was lost to
    assert "functorch-incompatible  model.py:" in run["stdout"]
    assert sum("costs: " in ln for ln in lines) == 2
    assert sum("costs: " in ln and "of the forward of probe_print_and_item compiled with backend='eager' (" in ln
               and " calls, under torch.profiler)" in ln for ln in lines) == len(measured)
    assert sum("costs: not measurable here (noisy: " in ln for ln in lines) == 2 - len(measured)
    md_order = [int(ln.split(".py:")[1].split(":")[0]) for ln in run["md"].splitlines() if ln.startswith("break at ")]
    assert md_order[:len(order)] == order
    index = (run["folder"] / "html" / "index.html").read_text()
    assert [n for n in sorted(order, key=lambda n: index.index(f"model.py:{n}<"))] == order
    assert index.count("compiled with backend=&#39;eager&#39;") == len(measured)
    assert index.count('class="cost">-<') == 1  # vmap's



def test_a_cost_spread_wider_than_itself_is_not_measurable_and_ranks_nothing():
    """Issue 52: "3% ... (1%-72% over 7 calls)" is noise printed as a measurement. The rule (BreakCost.noisy): the
    calls' shares range wider than the median share and than 10 points; numbers written by hand."""
    from tracecheck.model.report import Finding, ProbeReport, RootCause, StageResult
    from tracecheck.render import view

    assert BreakCost("/m.py", 3, None, 0.2, 0.03, 0.01, 0.72).noisy  # the 3% (1%-72%)
    assert BreakCost("/m.py", 3, None, 0.2, 0.02, 0.01, 0.51).noisy
    assert not BreakCost("/m.py", 3, None, 0.2, 0.60, 0.48, 0.62).noisy  # 60% (48%-62%): a measurement
    assert not BreakCost("/m.py", 3, None, 0.2, 0.10, 0.07, 0.10).noisy
    assert not BreakCost("/m.py", 3, None, 0.2, 0.50, 0.30, 0.70).noisy  # 40 points, under the 50% share

    def probe(name, line, share, low, high, ms):
        extra = {"break_costs": {"calls": 7, "breaks": [
            {"file": "/m.py", "line": line, "ms": ms, "share": share, "low": low, "high": high}]}}
        p = ProbeReport(f"m.py::{name}", "/m.py", name,
                        {"explain": StageResult("explain", "fail", extra=extra)})
        f = Finding("graph-break", "break", {}, {"user_frame": {"file": "/m.py", "line": line, "function": "f"}})
        return RootCause(f, [(p, ["explain"])])

    noisy, quiet = probe("a", 3, 0.03, 0.01, 0.72, 9.0), probe("b", 5, 0.10, 0.07, 0.10, 1.0)
    text = view.cost_of(noisy).text()
    assert text.startswith("not measurable here (noisy: 1%-72% of the forward over 7 calls;") and "3%" not in text
    assert view.by_cost([noisy, quiet]) == [quiet, noisy]  # the noisy one's larger time ranks nothing
