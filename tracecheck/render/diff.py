"""Terminal rendering of a baseline comparison (``run --baseline``, ``compare``): the diff table."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..gate.baseline import IMPROVED, REGRESSED, Comparison

_STYLE = {REGRESSED: "red", IMPROVED: "green"}


def table(comparison: Comparison, title: str = "against the baseline") -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("", no_wrap=True)
    t.add_column("probe", overflow="fold")
    t.add_column("stage")
    t.add_column("change", overflow="fold")
    for c in sorted(comparison.changes, key=lambda c: {REGRESSED: 0, IMPROVED: 1}.get(c.effect, 2)):
        t.add_row(Text(c.effect, style=_STYLE.get(c.effect, "dim")), c.probe, c.stage or "", c.detail)
    return t


def summary(comparison: Comparison, source: str) -> Text:
    n_reg, n_imp = len(comparison.regressions), len(comparison.improvements)
    other = len(comparison.changes) - n_reg - n_imp
    verdict = "REGRESSED" if comparison.regressed else ("improved" if n_imp else "unchanged")
    text = Text(f"baseline {source}: {verdict} — {n_reg} regression(s), {n_imp} improvement(s), "
                f"{other} other change(s) over {comparison.compared_probes} probe(s)",
                style="bold red" if comparison.regressed else "bold green")
    return text


def render(comparison: Comparison, source: str) -> Group:
    parts: list = []
    if comparison.changes:
        parts.append(table(comparison))
    parts += [Text(n, style="dim") for n in comparison.notes]
    parts.append(summary(comparison, source))
    return Group(*parts)
