"""The default terminal report, short: the environment line, the verdicts laid out for the terminal's width, one
block per root cause (kind, where, one line of evidence, what a break costs where measured, the fix, which probes
and stages it covers; the costliest breaks first), ``next:`` and
the summary. The long form (every finding of every probe, the compiled-autograd table, tracebacks) is ``-v``:
terminal.render."""
from __future__ import annotations

import os

from rich.console import Console, Group
from rich.padding import Padding
from rich.text import Text

from ..model.report import INTERNAL, Finding, RootCause, RunReport, root_causes
from ..model.taxonomy import fix_text, kinds
from ..stages import order as stage_order
from . import terminal, view
from .evidence import numeric_lines

#: the longest evidence line shown; the whole message is in ``-v``, ``--json`` and ``--report``
EVIDENCE_CHARS = 160


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
    terminal.print_next_steps(console, terminal.next_steps(report, attachment, source) if advise else [])
    console.print(Text("(-v: every finding of every probe, with its traceback and the compiled-autograd counts)",
                       style="dim"))
    caches = view.inductor_caches(report)
    if caches:
        console.print(Text(caches, style="dim"))
    console.print(terminal.summary_line(report))


def causes(report: RunReport) -> Group:
    """One block per root cause (model/report.root_causes: a kind at one user frame or op): what fails a probe first
    (view.gating: an error, or advice under --strict, at a required target), then what targets not required found;
    advice once per kind (its ops or lines listed); a fix printed once (a later cause with the same fix says so);
    tracecheck's own failures; what went unchecked, each reason once."""
    found = root_causes(report.probes)
    labels = terminal.probe_labels(report)
    parts: list = []
    fixes: dict[str, str] = {}  # fix text -> the cause that showed it first
    errors = [c for c in found if report.gate.fails_on(c.finding.kind)]
    for c in view.rank(report, errors):  # what gates first, then the costliest breaks, then as first seen
        parts.append(_block(report, c, labels, not view.gating(report, c), fixes))
    advice: dict[str, list[RootCause]] = {}
    for c in found:
        if not report.gate.fails_on(c.finding.kind):
            advice.setdefault(c.finding.kind, []).append(c)
    for kind, cs in advice.items():
        parts.append(_advice_block(kind, cs, labels))
    for p in report.probes:
        for stage, s in p.stages.items():
            if s.status == INTERNAL:
                parts.append(terminal.internal_text(f"{labels[p.id]}: {stage}", s, False))
    unchecked = _not_checked(report, labels)
    if unchecked:
        parts.append(Text(""))
        parts += [Text(f"not checked: {line}", style="dim") for line in unchecked]
    return Group(*parts)


def _block(report: RunReport, c: RootCause, labels: dict[str, str], not_required: bool,
           fixes: dict[str, str]) -> Group:
    f = c.finding
    mark, style = ("○", "yellow") if not_required else ("✗", "red")
    head = Text("\n")
    head.append(f"{mark} {f.kind}", style=f"bold {style}")
    # a cause keyed by its op (model/report.finding_key) is the op's in every probe: its line only when one probe saw it
    where = f.cx.op if f.cx.op and len({p.id for p, _ in c.seen}) > 1 else _where(f)
    if where:
        head.append(f"  {where}", style="cyan")
    head.append(f"  ({_seen(c, labels)})", style="dim")
    body = Text(f.summary)
    if not_required:
        targets = sorted({p.stages[s].target or "" for p, stages in c.seen for s in stages})
        body.append(f"\ngates nothing: the {', '.join(targets)} target is not required "
                    f"({report.gate.how_to_require(*targets)} gates on it)", style="dim")
    for line in numeric_lines(f) or [_evidence(f)]:  # what a numeric comparison measured is its evidence
        if line:
            body.append(f"\n{line}", style="dim")
    owner = view.owner_label(f)
    if owner is not None and f.user_frame is not None:
        body.append(f"\nwhose code: {owner}", style="dim")
    cost = view.cost_of(c, labels)
    if cost is not None:
        body.append(f"\ncosts: {cost.text()}", style="dim")
    kind = kinds().get(f.kind)
    if kind:
        fix = fix_text(f)
        if fix in fixes:
            body.append(f"\nfix: the same as for the {fixes[fix]} above")
        else:
            fixes[fix] = f"{f.kind} at {where}" if where else f.kind
            body.append(f"\nfix: {fix}")
            body.append(f"\nmore: {kind.explain_command}", style="dim")
    return Group(head, Padding(body, (0, 0, 0, 2), expand=False))


def _advice_block(kind: str, cs: list[RootCause], labels: dict[str, str]) -> Group:
    """Advice of one kind, once: what it is about (ops or lines), the probes and stages, its fix."""
    head = Text("\n")
    head.append(f"ⓘ {kind}", style="bold yellow")
    head.append("  advice: fails nothing unless --strict", style="dim")
    about = list(dict.fromkeys(_where(c.finding) for c in cs if _where(c.finding)))
    seen = RootCause(cs[0].finding, [ps for c in cs for ps in c.seen])
    body = Text(f"{', '.join(about) or cs[0].finding.summary}", style="cyan")
    body.append(f"  ({_seen(seen, labels)})", style="dim")
    body.append(f"\n{cs[0].finding.summary}" + (f" (and {len(cs) - 1} more like it)" if len(cs) > 1 else ""))
    k = kinds().get(kind)
    if k:
        body.append(f"\nfix: {fix_text(cs[0].finding)}")
        body.append(f"\nmore: {k.explain_command}", style="dim")
    return Group(head, Padding(body, (0, 0, 0, 2), expand=False))


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _where(f: Finding) -> str:
    """The user's line (relative to the working directory when under it), else the op, else nothing."""
    frame = f.user_frame
    if frame is not None:
        rel = os.path.relpath(frame.file) if os.path.isabs(frame.file) else frame.file
        return f"{frame.file if rel.startswith('..') else rel}:{frame.line}"
    return f.cx.op or f.cx.builtin or ""


def _evidence(f: Finding) -> str:
    """One line: Dynamo's gb_type and GB code, else the exception and its root cause's first line, else opcheck's
    test."""
    ev = f.ev
    if ev.gb_type:
        return f"gb_type {ev.gb_type!r}" + (f" ({ev.gb_code})" if ev.gb_code else "")
    said = ev.headline()
    if ev.exception_type:
        return _cut(f"{ev.exception_type}: {said}") if said else ev.exception_type
    if ev.opcheck_test:
        return f"opcheck {ev.opcheck_test}"
    return _cut(said)


def _cut(text: str) -> str:
    """``text`` in EVIDENCE_CHARS at most, cut at a word with ``…`` (never inside a name)."""
    if len(text) <= EVIDENCE_CHARS:
        return text
    return text[:EVIDENCE_CHARS].rsplit(" ", 1)[0] + " …"


def _seen(c: RootCause, labels: dict[str, str]) -> str:
    """``probe_a: explain, aot_eager`` for one probe; ``probe_a, probe_b × 6 stages: ...`` for a few, ``5 probes × ...``
    for more (probes named as the verdict view names them)."""
    probes = list(dict.fromkeys(labels.get(p.id, p.id) for p, _ in c.seen))
    stages = sorted({s for _, st in c.seen for s in st}, key=stage_order)
    if len(probes) == 1:
        return f"{probes[0]}: {', '.join(stages)}"
    who = ", ".join(probes) if len(probes) <= 3 else _count(len(probes), "probe")
    return f"{who} × {_count(len(stages), 'stage')}: {', '.join(stages)}"


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
