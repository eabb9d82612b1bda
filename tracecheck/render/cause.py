"""One root cause as every renderer shows it, decided once (``CauseView``): its kind and whether it gates the run, where
it is and whose code that is, one line of evidence (and its long form), what it costs, the fix, and which probes and
stages saw it. The brief, the Markdown report, the source view, the terminal's long form (``-v``) and JUnit lay these
fields out; none composes them again. The two per-finding long forms (``-v`` and JUnit's bodies) take their lines
from ``lines``, in one order, and only indent and style them."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from ..gate.snapshot import relative_location
from ..model.evidence import opcheck_test
from ..model.report import Finding, ProbeReport, RootCause, RunReport, root_causes
from ..model.targets import Gate
from ..model.taxonomy import K, fix_text, is_advice, kinds
from ..stages import order as stage_order
from . import view
from .excerpts import numeric_lines

#: how a cause stands against the run's gate: it fails a probe; it failed only targets the run does not require;
#: it is advice (fails nothing unless --strict)
GATES, NOT_REQUIRED, ADVICE = "gates", "not-required", "advice"

#: the longest evidence line shown; the whole message is in ``-v``, ``--json`` and ``--report``
EVIDENCE_CHARS = 160


def gates_nothing(targets: Sequence[str], gate: Gate) -> str:
    """Why a failure of targets the run does not require gates nothing, and how to make it gate: the one wording,
    which every renderer puts after its own ``gates nothing`` label."""
    return f"the {', '.join(targets)} target is not required ({gate.how_to_require(*targets)} gates on it)"


@dataclass(frozen=True)
class Reach:
    """Which probes (as the verdict view labels them) and stages (in stage order) saw a cause."""

    probes: tuple[str, ...]
    stages: tuple[str, ...]

    def text(self) -> str:
        """``probe_a: explain, aot_eager`` for one probe; ``probe_a, probe_b × 6 stages: ...`` for a few, ``5 probes
        × ...`` for more."""
        if len(self.probes) == 1:
            return f"{self.probes[0]}: {', '.join(self.stages)}"
        who = ", ".join(self.probes) if len(self.probes) <= 3 else _count(len(self.probes), "probe")
        return f"{who} × {_count(len(self.stages), 'stage')}: {', '.join(self.stages)}"


@dataclass(frozen=True)
class Site:
    """The user's line a cause points at, as each output names it."""

    #: ``file:line`` relative to the working directory when under it (``where_of``): the terminal's
    here: str
    #: the file relative to the rootdir, as probe ids name files: every CI output's (gate/snapshot.relative_location);
    #: None, as the line, where the frame lacks it
    ci_file: str | None
    line: int | None
    #: the line's source, stripped; None where it was not read
    code: str | None

    @property
    def ci_location(self) -> str:
        """``file:line`` as every CI output names it (``ci_file``)."""
        return f"{self.ci_file}:{self.line}"


@dataclass(frozen=True)
class CauseView:
    """One root cause (model/report.root_causes), every field a renderer shows (module docstring)."""

    cause: RootCause
    kind: str
    summary: str
    #: GATES, NOT_REQUIRED or ADVICE (``standing``)
    standing: str
    #: the kind's severity is advice (taxonomy.is_advice), whatever the gate: under ``--strict`` such a cause gates,
    #: and its fix is still the kind's one fix
    advice: bool
    #: NOT_REQUIRED: the targets it failed, none of them required
    targets: tuple[str, ...]
    #: NOT_REQUIRED: why it gates nothing (``gates_nothing``)
    gates_nothing: str | None
    #: the user's line (relative to the working directory when under it), else the op or builtin, else ""
    where: str
    #: whose code the line is (view.owner_label), None where no frame places it
    whose: str | None
    #: one line: Dynamo's gb_type and GB code, else the exception and its root cause, else opcheck's test
    evidence: str
    #: what a numeric comparison measured (its evidence, in place of ``evidence``)
    numeric: tuple[str, ...]
    #: the evidence line's long form, each fact whole: the exception's type, Dynamo's gb_type and GB code, opcheck's test
    facts: tuple[str, ...]
    #: the root cause's words (``Evidence.headline``) where an exception made the finding, else ""
    message: str
    #: what else the evidence says, one labelled line each: what each backend did, the generated code it sits in, the
    #: gb_type's page
    notes: tuple[str, ...]
    #: the longest account of it (``Evidence.detail``: the traceback, else the message)
    detail: str
    #: the user's line, None where no frame places it
    site: Site | None
    #: the fix and the command that prints the kind's page; None for a kind this version does not know
    fix: str | None
    more: str | None
    reach: Reach
    cost: view.Cost | None

    @property
    def finding(self) -> Finding:
        return self.cause.finding


def of(report: RunReport, c: RootCause, labels: dict[str, str]) -> CauseView:
    """The view of one root cause of ``report`` (``labels``: each probe's label, terminal.probe_labels)."""
    return _of(report.gate, c, labels)


def sighting(p: ProbeReport, stages: Sequence[str], f: Finding) -> CauseView:
    """One probe's finding at ``stages``, as the per-probe long forms (the terminal's ``-v``, JUnit's testcases) lay it
    out, gated by the probe's gate (``ProbeReport.gate``: the run's)."""
    return _of(p.gate, RootCause(f, [(p, list(stages))]), {p.id: p.name})


def _of(gate: Gate, c: RootCause, labels: dict[str, str]) -> CauseView:
    f = c.finding
    ev = f.evidence
    targets = tuple(sorted({t for p, stages in c.seen for t in view.not_required_targets(p, stages)}))
    stands = standing(gate, c)
    kind = kinds().get(f.kind)
    # a cause keyed by its op (model/report.finding_key) is the op's in every probe: its line only when one probe saw it
    where = f.context.op if f.context.op and len({p.id for p, _ in c.seen}) > 1 else where_of(f)
    return CauseView(
        cause=c, kind=f.kind, summary=f.summary, standing=stands, advice=is_advice(f.kind), targets=targets,
        gates_nothing=gates_nothing(targets, gate) if stands == NOT_REQUIRED and targets else None,
        where=where, whose=view.owner_label(f) if f.user_frame is not None else None,
        evidence=evidence_line(f), numeric=tuple(numeric_lines(f)), facts=evidence_facts(f),
        # an exception's words (a data-dependent TypeError from NumPy as much as an unknown), past a wrapper's header
        message=ev.headline() if ev.exception_type or f.kind in (K.EAGER_ERROR, K.BACKEND_ERROR, K.UNKNOWN) else "",
        notes=_notes(f), detail=ev.detail().strip(), site=site(f, c.seen[0][0]) if c.seen else None,
        fix=fix_text(f) if kind else None, more=kind.explain_command if kind else None,
        reach=Reach(tuple(dict.fromkeys(labels.get(p.id, p.id) for p, _ in c.seen)),
                    tuple(sorted({s for _, st in c.seen for s in st}, key=stage_order))),
        cost=view.cost_of(c, labels))


def standing(gate: Gate, c: RootCause) -> str:
    """How a root cause stands against ``gate`` (the run's; a probe's ``ProbeReport.gate`` is the same): GATES where
    it fails a probe (view.gates), NOT_REQUIRED where it fails only stages of targets not required, ADVICE where its
    kind fails nothing (advice without ``--strict``)."""
    return ADVICE if not gate.fails_on(c.finding.kind) else GATES if view.gates(gate, c) else NOT_REQUIRED


def label(v: CauseView) -> str:
    """What the kind is said with where it gates nothing: `` (advice)``, `` (vmap: not required)``; "" where it
    gates (an advice kind under ``--strict`` too, as the brief says it)."""
    return " (advice)" if v.standing == ADVICE else \
        f" ({', '.join(v.targets)}: not required)" if v.standing == NOT_REQUIRED else ""


@dataclass(frozen=True)
class Line:
    """One line of a finding's long form (``lines``)."""

    text: str
    #: what to do (``fix:``, ``more:``), shown plain; every other line is a fact, shown dim
    action: bool = False


def lines(v: CauseView, location: str, message: bool, fix: bool = True) -> list[Line]:
    """A finding's long form under its head line, in the one order both long forms use (the terminal's ``-v``,
    JUnit's bodies): ``gates nothing:``, the evidence's facts, ``whose code:``, ``message:`` (``message``: where no
    traceback follows, which holds it), ``at <location>  `source```, the notes (backends, generated code, gb_type
    doc), what a numeric comparison measured, ``costs:``, ``fix:`` and ``more:`` (``fix``: said here; each renderer
    says a fix once). ``location``: the site as the output names files (``Site.here`` or ``Site.ci_location``). The
    whole account (``detail``) is the renderer's to add after them."""
    out = [f"gates nothing: {v.gates_nothing}"] if v.gates_nothing else []
    out += ["; ".join(v.facts)] if v.facts else []
    out += [f"whose code: {v.whose}"] if v.whose is not None else []
    out += [f"message: {v.message[:200]}"] if v.message and message else []
    out += [f"at {location}" + (f"  `{v.site.code}`" if v.site.code else "")] if v.site is not None else []
    out += [*v.notes, *v.numeric] + ([f"costs: {v.cost.text()}"] if v.cost is not None else [])
    said = [Line(x) for x in out]
    if v.fix is not None and fix:
        # ``more:`` a line of its own: copied whole, never wrapped mid-command
        said += [Line(f"fix: {v.fix}", action=True)] + ([Line(f"more: {v.more}", action=True)] if v.more else [])
    return said


def views(report: RunReport, labels: dict[str, str]) -> list[CauseView]:
    """Every root cause of ``report``: what fails it first (view.rank: what gates, then the costliest breaks, then as
    first seen), advice last in the order found."""
    found = root_causes(report.probes)
    errors = [c for c in found if report.gate.fails_on(c.finding.kind)]
    advice = [c for c in found if not report.gate.fails_on(c.finding.kind)]
    return [of(report, c, labels) for c in view.rank(report, errors) + advice]


def where_of(f: Finding) -> str:
    """The user's line (relative to the working directory when under it), else the op, else nothing."""
    frame = f.user_frame
    if frame is not None:
        rel = os.path.relpath(frame.file) if os.path.isabs(frame.file) else frame.file
        return f"{frame.file if rel.startswith('..') else rel}:{frame.line}"
    return f.context.op or f.context.builtin or ""


def site(f: Finding, p: ProbeReport) -> Site | None:
    """The user's line of ``p``'s finding ``f``, None where no frame places it."""
    frame = f.user_frame
    if frame is None:
        return None
    return Site(where_of(f), relative_location(frame.file, p), frame.line, frame.code or None)


def _notes(f: Finding) -> tuple[str, ...]:
    ev = f.evidence
    backends, generated = view.backends_line(ev), view.generated_line(ev)
    return tuple(x for x in (f"backends: {backends}" if backends else "", generated or "",
                             f"gb_type doc: {ev.doc}" if ev.doc else "") if x)


def evidence_facts(f: Finding) -> tuple[str, ...]:
    """The evidence line's long form, each fact whole: ``exception T``, ``gb_type '...' (GBxxxx)``, ``opcheck
    test_faketensor`` (``evidence_line`` keeps the one that says most)."""
    ev = f.evidence
    test = opcheck_test(ev)
    return tuple(x for x in (f"exception {ev.exception_type}" if ev.exception_type else "",
                             f"gb_type {ev.gb_type!r}" + (f" ({ev.gb_code})" if ev.gb_code else "") if ev.gb_type else "",
                             f"opcheck {test}" if test else "") if x)


def evidence_line(f: Finding) -> str:
    """One line: Dynamo's gb_type and GB code, else the exception and its root cause's first line, else opcheck's
    test."""
    ev = f.evidence
    if ev.gb_type:
        return f"gb_type {ev.gb_type!r}" + (f" ({ev.gb_code})" if ev.gb_code else "")
    said = ev.headline()
    if ev.exception_type:
        return _cut(f"{ev.exception_type}: {said}") if said else ev.exception_type
    test = opcheck_test(ev)
    if test:
        return f"opcheck {test}"
    return _cut(said)


def _cut(text: str) -> str:
    """``text`` in EVIDENCE_CHARS at most, cut at a word with ``…`` (never inside a name)."""
    if len(text) <= EVIDENCE_CHARS:
        return text
    return text[:EVIDENCE_CHARS].rsplit(" ", 1)[0] + " …"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"
