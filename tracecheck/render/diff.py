"""Terminal rendering of a baseline comparison (``run --baseline``, ``compare``): one row per root cause
(``Comparison.causes``), the summary line counting causes; ``-v`` adds the per-stage changes."""
from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..gate.causes import ChangeCause
from ..gate.changes import IMPROVED, REGRESSED
from ..gate.comparison import Comparison, MetricCheck

_STYLE = {REGRESSED: "red", IMPROVED: "green"}
_ORDER = {REGRESSED: 0, IMPROVED: 1}
#: up to this many probe ids (stage names) are listed in a row; more are counted
_FEW = 3


def _probes(cause: ChangeCause) -> str:
    ids = cause.probes
    return "\n".join(ids) if len(ids) <= _FEW else "\n".join(ids[:_FEW]) + f"\n+{len(ids) - _FEW} more"


def _where(cause: ChangeCause) -> str:
    """``2 probes × 2 stages: explain, aot_eager``, and where it only changed (``○ also in export (target not
    required)``) on a line of its own."""
    stages = cause.stages
    text = cause.scope + (f": {', '.join(stages)}" if stages and len(stages) <= _FEW else "")
    return text + (f"\n○ {cause.also_text}" if cause.also else "")


class _Fit:
    """A table where it fits whole at the width it is drawn at (rich measures it then), else ``fallback``: a list
    that keeps every probe id whole and wraps the rest."""

    def __init__(self, table: Table, fallback: RenderableType) -> None:
        self.table, self.fallback = table, fallback

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        need = Measurement.get(console, options.update_width(10_000), self.table).minimum
        yield self.table if need <= options.max_width else self.fallback


def causes_view(comparison: Comparison, title: str = "against the baseline") -> _Fit:
    """The root causes: the table where it fits, else one block per cause."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for c in sorted(comparison.causes, key=lambda c: _ORDER.get(c.effect, 2)):
        body = Text(c.what)
        body.append(f"\nin {_where(c)}", style="dim")
        body.append("\n" + _probes(c))
        grid.add_row(Text(c.effect, style=_STYLE.get(c.effect, "dim")), body)
    return _Fit(table(comparison, title), Group(Text(title, style="italic"), grid))


def table(comparison: Comparison, title: str = "against the baseline") -> Table:
    """One row per root cause: what it is, how many probes and stages it covers, which probes."""
    t = Table(title=title, title_justify="left")
    t.add_column("", no_wrap=True)
    t.add_column("root cause", overflow="fold")
    t.add_column("in", overflow="fold")
    # a probe id is never cut: the column never wraps (the table is drawn only where it fits: causes_view)
    t.add_column("probes", no_wrap=True)
    for c in sorted(comparison.causes, key=lambda c: _ORDER.get(c.effect, 2)):
        t.add_row(Text(c.effect, style=_STYLE.get(c.effect, "dim")), c.what, _where(c), _probes(c))
    return t


def changes_table(comparison: Comparison, title: str = "per probe and stage") -> Table:
    """Every change, one row per probe x stage x aspect (what ``--json`` consumers get as ``changes``)."""
    t = Table(title=title, title_justify="left")
    t.add_column("", no_wrap=True)
    t.add_column("probe", overflow="fold")
    t.add_column("stage")
    t.add_column("change", overflow="fold")
    for c in sorted(comparison.changes, key=lambda c: _ORDER.get(c.effect, 2)):
        t.add_row(Text(c.effect, style=_STYLE.get(c.effect, "dim")), c.probe, c.stage or "", c.detail)
    return t


_RESULT_STYLE = {"FAIL": "red", "IMPROVED": "green", "PASS": "dim"}
_BETTER = {"lower": "↓", "higher": "↑", "shown": ""}


def metrics_rows(comparison: Comparison, every: bool = False) -> list[MetricCheck]:
    """The metrics worth a row: those not PASS, or with ``every`` all of them."""
    return [m for m in comparison.metrics if every or m.result != "PASS" or m.note]


def metrics_table(comparison: Comparison, every: bool = False,
                  title: str = "Dynamo metrics per probe (↓/↑: which way is better)") -> Table | None:
    """Each probe's graph_breaks, calls_captured, unique_graphs and fallbacks_to_eager against the baseline, with
    PyTorch's result words (PASS / FAIL / IMPROVED), as its CI's check_graph_breaks.py prints them; None when no
    row is worth showing."""
    rows = metrics_rows(comparison, every)
    if not rows:
        return None
    t = Table(title=title, title_justify="left")
    t.add_column("probe", no_wrap=True)
    t.add_column("metric", no_wrap=True)
    t.add_column("baseline", justify="right")
    t.add_column("now", justify="right")
    t.add_column("result", no_wrap=True)
    t.add_column("why", overflow="fold")
    for m in rows:
        t.add_row(m.probe, f"{m.metric} {_BETTER[m.better]}".strip(), str(m.expected), str(m.actual),
                  Text(m.result, style=_RESULT_STYLE.get(m.result, "")), m.note)
    return t


def metrics_view(comparison: Comparison, every: bool = False) -> _Fit | None:
    """The metrics: the table where it fits, else per probe its metrics one a line."""
    t = metrics_table(comparison, every)
    if t is None:
        return None
    parts: list[RenderableType] = [Text(str(t.title or ""), style="italic")]
    by_probe: dict[str, list[MetricCheck]] = {}
    for m in metrics_rows(comparison, every):
        by_probe.setdefault(m.probe, []).append(m)
    for probe, rows in by_probe.items():
        grid = Table.grid(padding=(0, 1))
        for _ in range(3):
            grid.add_column(no_wrap=True)
        grid.add_column()
        for m in rows:
            grid.add_row(f"  {m.metric} {_BETTER[m.better]}".rstrip(), f"{m.expected} -> {m.actual}",
                         Text(m.result, style=_RESULT_STYLE.get(m.result, "")), Text(m.note, style="dim"))
        parts += [Text(probe, style="bold"), grid]
    return _Fit(t, Group(*parts))


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def summary(comparison: Comparison, source: str) -> Text:
    """``baseline B: REGRESSED — 1 regression, 0 improvements, 1 other change, by root cause (62 per-stage
    changes; 2 probes compared)``: counts of causes, so one new break seen by every stage counts once."""
    causes = comparison.causes
    n_reg = sum(1 for c in causes if c.effect == REGRESSED)
    n_imp = sum(1 for c in causes if c.effect == IMPROVED)
    verdict = "REGRESSED" if comparison.regressed else ("improved" if n_imp else "unchanged")
    text = Text(f"baseline {source}: {verdict} — {_n(n_reg, 'regression', 'regressions')}, "
                f"{_n(n_imp, 'improvement', 'improvements')}, "
                f"{_n(len(causes) - n_reg - n_imp, 'other change', 'other changes')}, by root cause "
                f"({_n(len(comparison.changes), 'per-stage change', 'per-stage changes')}; "
                f"{_n(comparison.compared_probes, 'probe', 'probes')} compared)",
                style="bold red" if comparison.regressed else "bold green")
    return text


def render(comparison: Comparison, source: str, detail: bool = False) -> Group:
    """The root-cause table (and with ``detail`` every per-stage change), the notes, the summary line."""
    parts: list = []
    if comparison.changes:
        parts.append(causes_view(comparison))
        if detail:
            parts.append(changes_table(comparison))
    metrics = metrics_view(comparison, every=detail)
    if metrics is not None:
        parts.append(metrics)
    parts += [Text(n, style="dim") for n in comparison.notes]
    parts.append(summary(comparison, source))
    return Group(*parts)
