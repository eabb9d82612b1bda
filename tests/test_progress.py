"""What a run shows while it runs: each probe's verdict as soon as its required targets' stages are done (a line in
a CI log), and on a terminal the probes x stages board filling in. Oracles: literals written by hand from the probes'
code (a print in forward is a graph break; vmap is the func target, not required by default)."""
import io
import re

import pytest

from rich.console import Console

from tracecheck.render.live import LiveProgress
from tracecheck.model.report import FAIL, PASS, Finding, ProbeReport, StageResult

PROBES = """
import torch
import tracecheck


@tracecheck.probe
def probe_clean():
    return tracecheck.Case(lambda x: x.sin() * 2, (torch.randn(4, 3),))


@tracecheck.probe
def probe_prints():
    def f(x):
        print("stats", x.shape)
        return x.cos()
    return tracecheck.Case(f, (torch.randn(4, 3),))
"""


def test_each_verdict_is_said_before_the_stages_of_targets_not_required_end(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(PROBES)), "--stages", "eager,explain,vmap", "-j", "1", json_report=False)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.splitlines()

    def at(text: str) -> int:
        found = [i for i, line in enumerate(lines) if text in line]
        assert len(found) == 1, (text, lines)
        return found[0]

    clean = at("model.py::probe_clean verdict (compile): pass; still running: vmap (targets not required)")
    prints = at("model.py::probe_prints verdict (compile): fail (graph-break; first at explain); still running: vmap")
    # -j 1: one stage at a time, the compile target's first: both verdicts come before either vmap stage ends
    assert max(clean, prints) < min(at("model.py::probe_clean [vmap]"), at("model.py::probe_prints [vmap]"))
    assert max(at("model.py::probe_clean [explain]"), at("model.py::probe_prints [explain]")) < min(clean, prints)


def test_a_late_opcheck_is_awaited_before_the_verdict(tracecheck, write_probe):
    """An op registered while the probe runs (not at import): opcheck waits for eager, and the verdict for opcheck."""
    src = """
    import torch
    import tracecheck


    @tracecheck.probe
    def probe_lazy():
        lib = torch.library.Library("lazy_ns", "DEF")
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        probe_lazy.lib = lib
        return tracecheck.Case(lambda x: torch.ops.lazy_ns.twice(x), (torch.randn(3),))
    """
    res = tracecheck("run", str(write_probe(src)), "--stages", "eager,opcheck", "-j", "1", json_report=False)
    lines = res.stderr.splitlines()
    verdict = [i for i, line in enumerate(lines) if "probe_lazy verdict (compile)" in line]
    opcheck = [i for i, line in enumerate(lines) if "probe_lazy [opcheck]" in line]
    assert len(verdict) == 1 and len(opcheck) == 1, lines
    assert opcheck[0] < verdict[0]


def _board_text(progress: LiveProgress) -> str:
    out = Console(file=io.StringIO(), width=120, force_terminal=False)
    for renderable in progress.bar.get_renderables():
        out.print(renderable)
    return out.file.getvalue()


def test_the_board_fills_in_as_stages_finish_and_shows_verdicts():
    console = Console(file=io.StringIO(), width=120, force_terminal=True)
    live = LiveProgress(console)
    live.planned(3)
    live.started("m.py::probe_a", "eager")
    live.started("m.py::probe_a", "explain")
    text = _board_text(live)
    assert "probe_a" in text and text.count("…") == 3  # two running stages and the verdict to come
    live.finished("m.py::probe_a", StageResult("eager", PASS))
    brk = Finding(kind="graph-break", summary="print", evidence={})
    live.finished("m.py::probe_a", StageResult("explain", FAIL, failure=brk, findings=[brk]))
    probe = ProbeReport("m.py::probe_a", "m.py", "probe_a", stages={
        "eager": StageResult("eager", PASS, target="compile"),
        "explain": StageResult("explain", FAIL, failure=brk, findings=[brk], target="compile")})
    live.verdict(probe, ["vmap"])
    row = next(line for line in _board_text(live).splitlines() if "probe_a" in line)
    assert "✓" in row and "✗ graph-break" in row and row.rstrip().endswith("fail")


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_the_live_board_names_every_probe_and_never_cuts_a_kind(width):
    """The board's table where it fits the width, else a line per probe: either way every probe named and every
    kind whole (the mHC-like report of test_render_fit, written by hand)."""
    import io

    from rich.cells import cell_len
    from rich.console import Console

    from test_render_fit import REPORT
    from tracecheck.render.live import Board
    from tracecheck.render import terminal

    console = Console(file=io.StringIO(), width=width, height=40, color_system=None)
    board = Board(console=console, auto_refresh=False)
    for p in REPORT.probes:
        board.cells[p.id] = {stage: terminal.cell(s, REPORT.gate) for stage, s in p.stages.items()}
    console.print(board._view())
    out = console.file.getvalue()
    assert all(cell_len(line) <= width for line in out.splitlines())
    assert not re.search(r"[\w-]…", out), out  # a bare … is a verdict still pending, never a cut word
    for p in REPORT.probes:
        assert p.name in out
        for s in p.stages.values():
            for f in s.findings:
                assert re.search(rf"(?<![\w-]){re.escape(f.kind)}(?![\w-])", out), (width, f.kind)


def test_each_run_on_one_display_counts_its_own_stages():
    """``tracecheck fix`` runs the diagnosis, then each candidate, on one display: the bar says how many of *this*
    run's stages are done (it once said 13/5)."""
    live = LiveProgress(Console(file=io.StringIO(), force_terminal=True, width=80))
    for n_stages, done in ((5, 5), (4, 2)):
        live.discovered(1)
        live.planned(n_stages)
        for i in range(done):
            live.started("m.py::p", f"s{i}")
            live.finished("m.py::p", StageResult(f"s{i}", PASS))
    (task,) = live.bar.tasks
    assert (task.completed, task.total) == (2, 4)


def test_the_board_says_no_kind_it_does_not_know_and_draws_a_target_not_required_as_not_failing():
    """Issue 52, item 7: a kind that a stage still running may change is shown pending, then revised once it is
    known (not left as ``✗ …`` to the end); a failure of a target the run does not require is ○, never ✗."""
    from tracecheck.model.payloads import StageNotes
    from tracecheck.model.targets import Gate

    live = LiveProgress(Console(file=io.StringIO(), width=200, height=40, force_terminal=True))
    live.layout(["eager", "explain", "aot_eager", "vmap"], Gate())
    live.planned(3)
    unknown = Finding(kind="unknown", summary="?", evidence={})
    pending = StageResult("aot_eager", FAIL, failure=unknown, findings=[unknown], target="compile",
                          extra=StageNotes(kind_pending=True).to_extra())
    live.finished("m.py::probe_a", pending)
    assert live.bar.cells["m.py::probe_a"]["aot_eager"].plain == "✗ …"  # no kind stated
    fake = Finding(kind="fake-mismatch", summary="the fake's shape", evidence={})
    live.revised("m.py::probe_a", StageResult("aot_eager", FAIL, failure=fake, findings=[fake], target="compile"))
    assert live.bar.cells["m.py::probe_a"]["aot_eager"].plain == "✗ fake-mismatch"
    refused = Finding(kind="functorch-incompatible", summary="vmap", evidence={})
    live.finished("m.py::probe_a", StageResult("vmap", FAIL, failure=refused, findings=[refused], target="func"))
    assert live.bar.cells["m.py::probe_a"]["vmap"].plain == "○ functorch-incompatible"


@pytest.mark.parametrize("stages,width,mode", [(["eager", "explain"], 120, "table"),
                                               (["eager", "explain", "aot_eager", "inductor", "fullgraph", "opcheck",
                                                 "compiled_autograd", "gradcheck", "dynamic", "vmap", "export"], 120,
                                                "list")])
def test_the_board_keeps_one_layout_for_the_whole_run(stages, width, mode):
    """Issue 52, item 7: the board chose the table or the list once, from the run's stages, and keeps it whatever
    the cells that fill in (it used to switch from the table to the list mid-run)."""
    from tracecheck.model.targets import Gate

    console = Console(file=io.StringIO(), width=width, height=40, force_terminal=True)
    live = LiveProgress(console)
    live.layout(stages, Gate())
    assert live.bar.mode == mode
    for i in range(6):
        for s in stages:
            f = Finding(kind="functorch-incompatible", summary="x", evidence={})
            live.finished(f"m.py::probe_{i}", StageResult(s, FAIL, failure=f, findings=[f], target="compile"))
            console.print(live.bar._view())
            assert live.bar.mode == mode
