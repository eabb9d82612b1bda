"""What every renderer shows, decided once: the verdict table's columns and cells, the kinds of a stage, and
the compiled-autograd counts. The terminal, Markdown and table renderers read these, so they cannot
disagree (rich's ``Traceback.extract`` → ``Trace``, then drawing, is the model)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from ..model.payloads import BreakCost, BreakCosts, CompiledAutogradCounts, Coverage, InductorKernels, NOISY_RULE
from ..model.evidence import TORCH as TORCH_OWNER, BreakEvidence, Evidence, ExceptionEvidence
from ..model.report import FAILED, INTERNAL, LOAD_STAGE, PASS, SKIP, Finding, ProbeReport, RootCause, RunReport, StageResult
from ..stages import forward_only
from ..model.targets import TARGETS, Gate
from ..model.taxonomy import K

#: ``Cell.shown`` of a failed stage whose target the run does not require: shown, gating nothing
NOT_REQUIRED = "not-required"


def columns(report: RunReport) -> list[str]:
    """The verdict table's stage columns: ``load`` when any probe has it, then the stages that ran."""
    return ([LOAD_STAGE] if any(LOAD_STAGE in p.stages for p in report.probes) else []) + list(report.stages)


def stage_kinds(s: StageResult) -> list[str]:
    """The distinct kinds a stage found, in the order found."""
    return list(dict.fromkeys(f.kind for f in (s.findings or ([s.failure] if s.failure else []))))


@dataclass(frozen=True)
class Cell:
    """One verdict cell: ``status`` (pass, fail, skip, timeout, crash, internal-error), the kinds that failed it,
    whether a pass ran the forward only, the advice kinds of a pass, and whether the stage's target is required
    (a failure of a target not required gates nothing)."""

    status: str
    kinds: tuple[str, ...] = ()
    forward_only: bool = False
    advice: tuple[str, ...] = ()
    required: bool = True

    @property
    def shown(self) -> str:
        """What the cell's mark stands for: its status, or ``NOT_REQUIRED`` for a failure that gates nothing."""
        return NOT_REQUIRED if self.status in FAILED and not self.required else self.status

    @property
    def label(self) -> str:
        """The words of the cell: ``fwd`` for a forward-only pass, then a pass's advice kinds; the kinds of a
        failure; else nothing."""
        if self.status == PASS:
            return " ".join(x for x in ("fwd" if self.forward_only else "", ", ".join(self.advice)) if x)
        if self.status == SKIP:
            return ""
        if self.status == INTERNAL:
            return "internal error"
        return ", ".join(self.kinds) or self.status


@overload
def cell(s: StageResult, gate: Gate = ...) -> Cell: ...
@overload
def cell(s: None, gate: Gate = ...) -> None: ...
@overload
def cell(s: StageResult | None, gate: Gate = ...) -> Cell | None: ...


def cell(s: StageResult | None, gate: Gate = Gate()) -> Cell | None:
    """``gate``: the run's (``RunReport.gate``): with ``strict``, advice kinds are failures too. A stage's cell says
    whether its target gates (``Cell.required``): the renderers read that, none asks the gate."""
    if s is None:
        return None
    o = s.outcome  # the verdict's own reading of the stage (model/verdict.py)
    return Cell(o.status, o.failing(gate), o.status == PASS and forward_only(s), o.advice if o.status == PASS else (),
                gate.requires(o.target))


def gated_kinds(s: StageResult, gate: Gate) -> list[str]:
    """The kinds a stage found that fail where found, in the order found: its errors, and its advice under
    ``--strict`` (whatever the stage's status; ``StageOutcome.advice`` lists the advice)."""
    return [k for k in stage_kinds(s) if gate.fails_on(k)]


def not_checked(p: ProbeReport) -> list[str]:
    """What the probe's stages did not check, with why: skipped stages, and the parts of a stage that ran without
    them (``StageResult.notes.not_checked``: the vmap stage's torch.func.grad where torch refuses it)."""
    by_reason: dict[str | None, list[str]] = {}  # a file that failed to load skips every stage for one reason
    for stage, s in p.stages.items():
        if s.status == SKIP:
            by_reason.setdefault(s.skip_reason, []).append(stage)
    out = [f"{', '.join(stages)} ({reason})" for reason, stages in by_reason.items()]
    out += [f"{stage}: {what}" for stage, s in p.stages.items() for what in s.notes.not_checked or []]
    return out


def ca_rows(report: RunReport) -> list[tuple[ProbeReport, StageResult, CompiledAutogradCounts]]:
    """Probes whose compiled_autograd stage ran its steps, with its counts (a count None: not measured; the
    recompiles are ``StageResult.recompile_count``). A stage that was skipped or died measured nothing and has no
    row."""
    rows = []
    for p in report.probes:
        s = p.stages.get("compiled_autograd")
        ca = CompiledAutogradCounts.of(s.extra) if s is not None else None
        if s is not None and ca is not None and ca.steps:
            rows.append((p, s, ca))
    return rows


def ca_backends(rows: list[tuple[ProbeReport, StageResult, CompiledAutogradCounts]]) -> str:
    """The backend(s) the compiled_autograd rows were compiled with (old reports: aot_eager, the only one then)."""
    return ", ".join(dict.fromkeys(str(ca.backend or "aot_eager") for _, _, ca in rows))


def backends_line(ev: Evidence) -> str | None:
    """``aot_eager: fails; inductor: passes``: what each backend did with the failing steps, when both ran."""
    if not isinstance(ev, ExceptionEvidence) or not ev.backends:
        return None
    return "; ".join(f"{b}: {v}" for b, v in ev.backends.items())


def generated_line(ev: Evidence) -> str | None:
    """Where a finding sits when it is in code torch generated and no user or library frame lies under it."""
    g = ev.generated_frame if isinstance(ev, BreakEvidence) else None
    if g is None:
        return None
    code = f" `{g.code}`" if g.code else ""
    return (f"in generated code {g.location}{code} (an FX graph torch wrote, such as compiled "
            "autograd's backward graph; no user or library frame lies under it)")


def not_required_note(gate: Gate, probes: list[ProbeReport]) -> str:
    """Why a failure of a target not required fails nothing, and how to make it gate (one line, "" when none)."""
    others = [t for t in TARGETS if not gate.requires(t)
              and any(s.target == t and s.status in FAILED for p in probes for s in p.stages.values())]
    if not others:
        return ""
    return (f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} not required: shown, gating nothing; "
            f"{gate.how_to_require(*others)} gates on {'it' if len(others) == 1 else 'them'}")


def not_required_targets(p: ProbeReport, stages: list[str]) -> list[str]:
    """The targets of ``stages`` (where a finding was seen) when none of them is required, else []: such a
    finding is shown and gates nothing."""
    targets = [p.stages[s].target for s in stages if s in p.stages]
    if not targets or any(p.gate.requires(t) for t in targets):
        return []
    return list(dict.fromkeys(t for t in targets if t))


#: the one definition of the graph-break count, said once in each report's legend
BREAKS_DEFINED = ("graph breaks: the forward's Dynamo graphs - 1 under explain(), as explain() and most users count "
                  "them (a break inside a called function splits both frames); sites: distinct breaks by gb_type and "
                  "user line, where they differ (more sites than breaks: Dynamo gave up on frames, which ran eagerly)")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def breaks_cell(s: StageResult | None) -> str:
    """A stage's graph breaks in a table cell: ``3``, or ``3 (1 site)`` where the breaks are at fewer distinct sites;
    ``–`` where not counted."""
    count, sites = (s.graph_break_count, s.graph_break_sites) if s is not None else (None, None)
    if count is None and sites is None:
        return "–"
    shown = "–" if count is None else str(count)
    return shown if sites is None or sites == count else f"{shown} ({_n(sites, 'site')})"


def owner_label(f: Finding) -> str | None:
    """Whose code the finding's line is, as renderers show it; for a kind whose line is right and whose cause the
    compiler is (compile-semantics: eager runs the line), said so."""
    owner = f.evidence.owner
    if owner is None:
        return None
    if f.kind == K.COMPILE_SEMANTICS:
        return f"{owner.label} (the line; the changed value is the compiler's: eager runs it)"
    return owner.label


def probe_breaks_cell(p: ProbeReport) -> str:
    """The probe's graph breaks as the explain stage counted them, in a table cell (``breaks_cell``)."""
    return breaks_cell(p.stages.get("explain"))


def probe_breaks_said(p: ProbeReport) -> str | None:
    """The probe's graph breaks as the explain stage counted them, in words (``breaks_said``)."""
    return breaks_said(p.stages.get("explain"))


def breaks_said(s: StageResult | None) -> str | None:
    """A stage's graph breaks in words, every count beside the definition's: ``3 graph breaks at 1 site (Dynamo's
    counter: 2)``; None where not counted."""
    if s is None or (s.graph_break_count is None and s.graph_break_sites is None):
        return None
    head = (_n(s.graph_break_count, "graph break") if s.graph_break_count is not None
            else "no graph captured" if s.graph_count == 0 else "graph breaks not counted")
    return head + breaks_beside(s)


def breaks_beside(s: StageResult) -> str:
    """The other counts where they differ from the definition's: `` at 1 site (Dynamo's counter: 2)``, ``, but 2 break
    sites ran eagerly outside the graphs``, or ``""``."""
    out = ""
    sites, count = s.graph_break_sites, s.graph_break_count
    if sites is not None and count is not None and sites > count:
        # more sites than breaks: Dynamo gave up on frames (a Function's forward) that then ran eagerly, whole,
        # without splitting a graph (plain explain() says 0 breaks and lists their reasons)
        out += f", but {_n(sites, 'break site')} ran eagerly outside the graphs"
    elif sites is not None and sites != count:
        out += f" at {_n(sites, 'site')}"
    if s.dynamo_graph_break_count is not None and s.dynamo_graph_break_count != s.graph_break_count:
        out += f" (Dynamo's counter: {s.dynamo_graph_break_count})"
    return out


def explain_count_said(count: int) -> str:
    """explain()'s own break count, as a reader can take it: explain computes ``graph_count - 1``, so a frame Dynamo
    gave up on (no graph: it ran eagerly) gives -1, which is no count of breaks."""
    if count < 0:
        return f"explain() captured no graph (its graph_break_count, graph_count - 1, is {count}: the frame ran eagerly)"
    return f"explain() reported {count} graph break(s)"


def coverage(p: ProbeReport) -> Coverage | None:
    """The probe forward's compile coverage, measured by the explain stage (None: explain did not run or measure)."""
    s = p.stages.get("explain")
    return Coverage.of(s.extra) if s is not None else None


def break_costs(p: ProbeReport) -> BreakCosts | None:
    """What each of the probe forward's breaks costs, measured by the explain stage (None: not measured)."""
    s = p.stages.get("explain")
    return BreakCosts.of(s.extra) if s is not None else None


@dataclass(frozen=True)
class Cost:
    """A root cause's measured cost: the break's, in the probe where it costs the most, and how it was measured."""

    cost: BreakCost
    of: BreakCosts
    probe: str

    def text(self) -> str:
        """``60% of the forward compiled with backend='eager' (48%-62% over 7 calls, under torch.profiler)``: a share,
        not milliseconds or a ratio to eager, which the stages running beside it on a shared machine skew."""
        c, of = self.cost, self.of
        spread = f"{c.low:.0%}-{c.high:.0%}" if f"{c.low:.0%}" != f"{c.high:.0%}" else f"{c.low:.0%}"
        where = f" of {self.probe}" if self.probe else ""
        if c.noisy:
            return (f"not measurable here (noisy: {spread} of the forward{where} over {of.calls} calls; "
                    f"{NOISY_RULE})")
        return (f"{c.share:.0%} of the forward{where} compiled with backend='eager' ({spread} over {of.calls} calls, "
                f"under torch.profiler)")


def cost_of(c: RootCause, label: dict[str, str] | None = None) -> Cost | None:
    """The measured cost of a root cause at a line (a graph break the explain stage timed), the highest among the
    probes that saw it; None for a cause nothing measured. Only a cause the explain stage saw: another stage's
    finding at the same line (vmap refusing the ``.item()`` Dynamo broke at) is not what the time was lost to.
    ``label``: every probe's label in the run, to name the probe whose forward the share is of when the run has
    several."""
    frame = c.finding.user_frame
    if frame is None:
        return None
    best: Cost | None = None
    for p, stages in c.seen:
        if "explain" not in stages:
            continue
        costs = break_costs(p)
        cost = costs.of_site(frame.file, frame.line) if costs is not None else None
        if cost is not None and costs is not None and (best is None or (best.cost.noisy, cost.ms) >
                                                       (cost.noisy, best.cost.ms)):  # whose
            # a measured cost before a noisy one, then the highest; a run of several probes names whose forward
            best = Cost(cost, costs, (label or {}).get(p.id, "") if len(label or {}) > 1 else "")
    return best


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def rank(report: RunReport, causes: list[RootCause]) -> list[RootCause]:
    """"Fix these first": what fails the run first (``gates``), then the costliest breaks as measured, then as they
    were (first seen). The terminal's root causes and the source view's index read this order."""
    return sorted(by_cost(causes), key=lambda c: not gates(report.gate, c))


def by_cost(causes: list[RootCause]) -> list[RootCause]:
    """Causes with a measured cost first, costliest first; the others after them as they were ("fix these first").
    Ranked by the time a call spends after the break (under the profiler), not its share: a share of a small probe's
    forward and of a large one's are not the same time."""
    costs = {id(c): cost_of(c) for c in causes}  # a noisy cost ranks as none: it is not a measurement

    def key(c: RootCause) -> float:
        found = costs[id(c)]
        return -found.cost.ms if found is not None and not found.cost.noisy else 1.0
    return sorted(causes, key=key)


def inductor_caches(report: RunReport) -> str | None:
    """What the inductor stage's compiles took from Inductor's and AOTAutograd's caches, over every probe (a warm
    re-run of an unchanged model compiles from them): ``Inductor's caches (2 probes, inductor stage): FX graph cache 6
    hits, 0 misses; ...; a warm run: compiled from the caches``;
    None when no inductor stage counted them."""
    seen = [k for p in report.probes for k in [_kernels(p)] if k is not None and k.fxgraph_cache_hit is not None]
    if not seen:
        return None
    total = InductorKernels(**{name: sum(getattr(k, name) or 0 for k in seen) for name in (
        "fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass", "autograd_cache_hit", "autograd_cache_miss")})
    hit, miss = total.fxgraph_cache_hit, total.fxgraph_cache_miss
    run = ("a warm run: compiled from the caches" if hit and not miss else
           "a cold run: compiled afresh" if miss and not hit else
           "partly from the caches" if hit and miss else
           "the caches were not used (turned off, or bypassed)")
    probes = f"{len(seen)} probe{'s' if len(seen) != 1 else ''}"
    return f"Inductor's caches ({probes}, inductor stage): {total.cache_text()}; {run}"


def _kernels(p: ProbeReport) -> InductorKernels | None:
    s = p.stages.get("inductor")
    return InductorKernels.of(s.extra) if s is not None else None


def coverage_counts(c: Coverage) -> str:
    """``calls_captured=98 unique_graphs=1 frames_eager=0 torch_calls_eager=99 captured_share~0.99``: torch's
    counter names, as PyTorch's CI prints them; ``-`` for a count not measured."""
    def dash(v: object) -> str:
        return "-" if v is None else str(v)
    return (f"calls_captured={dash(c.calls_captured)} unique_graphs={dash(c.unique_graphs)} "
            f"frames_eager={dash(c.frames_eager)} torch_calls_eager={dash(c.torch_calls_eager)} "
            f"captured_share~{dash(c.captured_share)}")


def coverage_text(c: Coverage) -> str:
    """The coverage in words: calls captured, graphs, frames run in eager, and the share as the estimate it is."""
    graphs = "-" if c.unique_graphs is None else c.unique_graphs
    out = (f"coverage: {'-' if c.calls_captured is None else c.calls_captured} torch calls captured in {graphs} "
           f"graph(s)")
    if c.frames_eager:
        out += f", {c.frames_eager} frame(s) ran in eager"
    if c.captured_share is not None:
        out += (f"; ~{c.captured_share:.0%} of the {c.torch_calls_eager} torch calls the eager forward makes "
                f"(an estimate at torch-function level)")
    return out


#: what "graphs without CA" counts, and why it can exceed explain()'s graph count (one call of the forward)
CA_GRAPHS_NOTE = ("graphs without CA: Dynamo's unique graphs over every step of plain torch.compile "
                  "(counters[\"stats\"][\"unique_graphs\"], backend eager: no backend changes Dynamo's count; the "
                  "backend above with --dynamic): the forward graphs of all steps, recompiles included, so it can be "
                  "more than the graphs explain() or one torch.compile call counts")


def breaks_by_owner(causes: list[RootCause]) -> str | None:
    """``yours 2, transformers 5.24.0 1, torch 0``: the graph-break root causes (``model/report.root_causes``) counted
    by their owner's label (``Owner.label``); yours and torch always named, a library or ``unknown`` once it has
    one. None when no break cause has an owner (none is a break, or a report from before owners)."""
    owners = [c.finding.evidence.owner for c in causes if c.finding.evidence.gb_type]
    owned = [o for o in owners if o is not None]
    if not owned:
        return None
    counts: dict[str, int] = {"yours": 0}
    torch = next((o.label for o in owned if o.who == TORCH_OWNER), "torch")
    for o in owned:
        label = o.label if o.who != TORCH_OWNER else torch
        counts[label] = counts.get(label, 0) + 1
    counts.setdefault(torch, 0)
    ordered = ["yours", *[k for k in counts if k not in ("yours", torch)], torch]
    return ", ".join(f"{k} {counts[k]}" for k in ordered)


def gates(gate: Gate, cause: RootCause) -> bool:
    """Does a root cause fail a probe under ``gate`` (the run's, ``RunReport.gate``; a probe's ``ProbeReport.gate``
    is the same): an error (or advice under ``--strict``) seen at a stage of a required target? Every renderer asks
    this (or ``cause.standing``), so none calls a failure advice or the other way round."""
    return gate.fails_on(cause.finding.kind) and any(not not_required_targets(q, stages) for q, stages in cause.seen)
