"""The default terminal report, short: the environment line, the verdicts laid out for the terminal's width, one
block per root cause (kind, where, one line of evidence, what a break costs where measured, the fix, which probes
and stages it covers; the costliest breaks first), ``next:`` and
the summary. The long form (every finding of every probe, the compiled-autograd table, tracebacks) is ``-v``:
terminal.render."""
from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from ..model.report import INTERNAL, RunReport
from ..stages import order as stage_order
from . import cause, terminal, view


def render(report: RunReport, console: Console, verbose: bool = False, attachment: str | None = None,
           advise: bool = True, source: str | None = None) -> None:
    """``verbose``: the long form (terminal.render); ``advise=False``: no ``next:`` lines (as terminal.render);
    ``source``: the saved report shown (``tracecheck show``), whose Markdown needs no rerun."""
    if verbose:
        terminal.render(report, console, verbose=True, attachment=attachment, advise=advise, source=source)
        return
    console.print(terminal.environment_line(report))
    console.print(terminal.verdict_view(report, console.width))
    console.print(causes(report))
    ops = terminal.ops_block(report)
    if ops is not None:
        console.print(ops)
    terminal.print_next_steps(console, terminal.next_steps(report, attachment, source) if advise else [])
    console.print(Text("(-v: every finding of every probe, with its traceback and the compiled-autograd counts)",
                       style="dim"))
    caches = view.inductor_caches(report)
    if caches:
        console.print(Text(caches, style="dim"))
    console.print(terminal.summary_line(report))


def causes(report: RunReport) -> Group:
    """One block per root cause (render/cause.views): what fails a probe first, then what targets not required found;
    advice once per kind (its ops or lines listed); a fix printed once (a later cause with the same fix says so);
    tracecheck's own failures; what went unchecked, each reason once."""
    labels = terminal.probe_labels(report)
    found = cause.views(report, labels)
    parts: list[RenderableType] = []
    fixes: dict[str, str] = {}  # fix text -> the cause that showed it first
    parts += [_block(v, fixes) for v in found if v.standing != cause.ADVICE]
    advice: dict[str, list[cause.CauseView]] = {}
    for v in found:
        if v.standing == cause.ADVICE:
            advice.setdefault(v.kind, []).append(v)
    parts += [_advice_block(vs) for vs in advice.values()]
    for p in report.probes:
        for stage, s in p.stages.items():
            if s.status == INTERNAL:
                parts.append(terminal.internal_text(f"{labels[p.id]}: {stage}", s, False))
    unchecked = _not_checked(report, labels)
    if unchecked:
        parts.append(Text(""))
        parts += [Text(f"not checked: {line}", style="dim") for line in unchecked]
    return Group(*parts)


def _block(v: cause.CauseView, fixes: dict[str, str]) -> Group:
    mark, style = ("✗", "red") if v.standing == cause.GATES else ("○", "yellow")
    head = Text("\n")
    head.append(f"{mark} {v.kind}", style=f"bold {style}")
    if v.where:
        head.append(f"  {v.where}", style="cyan")
    head.append(f"  ({v.reach.text()})", style="dim")
    body = Text(v.summary)
    if v.gates_nothing:
        body.append(f"\ngates nothing: {v.gates_nothing}", style="dim")
    for line in v.numeric or (v.evidence,):  # what a numeric comparison measured is its evidence
        if line:
            body.append(f"\n{line}", style="dim")
    if v.whose is not None:
        body.append(f"\nwhose code: {v.whose}", style="dim")
    if v.cost is not None:
        body.append(f"\ncosts: {v.cost.text()}", style="dim")
    if v.fix is not None:
        if v.fix in fixes:
            body.append(f"\nfix: the same as for the {fixes[v.fix]} above")
        else:
            fixes[v.fix] = f"{v.kind} at {v.where}" if v.where else v.kind
            body.append(f"\nfix: {v.fix}")
            body.append(f"\nmore: {v.more}", style="dim")
    return Group(head, Padding(body, (0, 0, 0, 2), expand=False))


def _advice_block(vs: list[cause.CauseView]) -> Group:
    """Advice of one kind, once: what it is about (ops or lines), the probes and stages, its fix."""
    first = vs[0]
    head = Text("\n")
    head.append(f"ⓘ {first.kind}", style="bold yellow")
    head.append("  advice: fails nothing unless --strict", style="dim")
    about = list(dict.fromkeys(cause.where_of(v.finding) for v in vs if cause.where_of(v.finding)))
    reach = cause.Reach(tuple(dict.fromkeys(p for v in vs for p in v.reach.probes)),
                        tuple(sorted({s for v in vs for s in v.reach.stages}, key=stage_order)))
    body = Text(f"{', '.join(about) or first.summary}", style="cyan")
    body.append(f"  ({reach.text()})", style="dim")
    body.append(f"\n{first.summary}" + (f" (and {len(vs) - 1} more like it)" if len(vs) > 1 else ""))
    if first.fix is not None:
        body.append(f"\nfix: {first.fix}")
        body.append(f"\nmore: {first.more}", style="dim")
    return Group(head, Padding(body, (0, 0, 0, 2), expand=False))


def _not_checked(report: RunReport, labels: dict[str, str]) -> list[str]:
    """What went unchecked across the run, each reason once with the probes it concerns (a file that failed to load
    says its reason once, not once per stage and probe; view.not_checked is one probe's)."""
    by_reason: dict[str, list[tuple[str, str | None]]] = {}  # reason -> (probe, stage skipped)
    for p in report.probes:
        for stage, s in p.stages.items():
            if s.skip_reason:
                by_reason.setdefault(s.skip_reason, []).append((labels[p.id], stage))
            for what in s.notes.not_checked or []:
                by_reason.setdefault(f"{stage}: {what}", []).append((labels[p.id], None))
    out = []
    for reason, where in by_reason.items():
        probes = list(dict.fromkeys(probe for probe, _ in where))
        stages = sorted({stage for _, stage in where if stage}, key=stage_order)
        scope = ", ".join(probes) if len(probes) <= 3 else f"{len(probes)} probes"
        out.append(f"{', '.join(stages)} ({reason}) in {scope}" if stages else f"{reason} (in {scope})")
    return out
