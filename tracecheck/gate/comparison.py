"""Comparing a new run with a baseline: per probe, stage and aspect, what regressed, improved or only changed.

``compare`` works on two baselines (document.py; a full ``--json`` report is reduced first, ``compare_report``), so
a baseline, a report and a merged shard report all compare the same way. Its changes are one per probe, stage and
aspect; ``Comparison.causes`` groups them by root cause (causes.py), which the diff, the summary line and the GitHub
annotations count. Each probe's Dynamo metrics are checked as PyTorch's CI checks them (``MetricCheck``).

Advice kinds (taxonomy severity ``advice``: ``no-batching-rule``, ``opaque-op``) are kept apart, under a stage's
``advice``: a new one is shown but is no regression, unless the run was ``--strict`` or the baseline's
``severity`` says ``{"opaque-op": "error"}`` (``document.gated_advice``). Only stages of a required target regress:
the run's ``--require`` joined with the baseline's ``require``; a stage of another target that gets worse is a
``changed`` line, saying how to require it. Pure: no torch import.
"""
from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Sequence

from ..model.report import IMPORT_PROBE, RunReport
from ..model.reportio import Json
from ..model.targets import Gate, normalized
from ..model.verdict import FAILED, INTERNAL, PASS, decide
from ..stages import order as stage_order
from .causes import ChangeCause, group_changes
from .changes import (CAME_WITH, CAPTURED, CHANGED, COUNT_NOUNS, COUNTS_LOWER_IS_BETTER, COUNTS_NEUTRAL,
                      EAGER_FRAMES, IMPROVED, REGRESSED, Change, not_required_detail)
from .document import TOLERANCES, Baseline, as_baseline, gated_advice
from .shards import shard_from_command
from .snapshot import COVERAGE_STAGE, BreakSnapshot, CoverageCounts, ProbeSnapshot, StageSnapshot, stage_target


@dataclass
class Comparison:
    """All differences of a new run against a baseline, in probe/stage order; ``causes`` groups them."""

    changes: list[Change] = field(default_factory=list)
    compared_probes: int = 0
    notes: list[str] = field(default_factory=list)
    #: each probe's Dynamo metrics (graph_breaks, calls_captured, ...) as PyTorch's CI gates them
    metrics: list[MetricCheck] = field(default_factory=list)

    @property
    def causes(self) -> list[ChangeCause]:
        """The changes grouped by root cause (``group_changes``): what the diff table and annotations show."""
        return group_changes(self.changes)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.effect == REGRESSED]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.effect == IMPROVED]

    @property
    def regressed(self) -> bool:
        """True when anything got worse; the CLI exits 1."""
        return bool(self.regressions)

    def to_dict(self) -> Json:
        """``changes``: one per probe x stage x aspect; ``causes``: their root causes, each listing its changes
        by index into ``changes``."""
        index = {id(c): i for i, c in enumerate(self.changes)}
        return {"compared_probes": self.compared_probes, "regressed": self.regressed, "notes": self.notes,
                "changes": [c.to_dict() for c in self.changes],
                "causes": [cause.to_dict(index) for cause in self.causes],
                "metrics": [m.to_dict() for m in self.metrics]}


def compare(base: Baseline | Mapping[str, object], new: Baseline | Mapping[str, object],
            only: Iterable[str] | None = None) -> Comparison:
    """Compare two baselines (typed, or documents as written: ``document.as_baseline``).

    Per probe and stage: status, failure kinds, graph count, graph breaks (count, and each by kind, gb_type
    and relative location), recompiles and compiled-autograd counts, and the explain stage's compile coverage. A
    regression is a new failure or kind, more breaks, more graphs, more recompiles or compiled-autograd graphs,
    fewer ops captured (beyond the baseline's ``tolerance``), more frames run in eager, or a probe that went
    missing. More of the model captured outweighs new breaks and more graphs (``_outweigh``).
    ``only`` restricts the comparison to those probe ids (a shard compares the probes it ran).
    """
    base, new = as_baseline(base), as_baseline(new)
    cmp = Comparison()
    gated = gated_advice(base, new)
    tolerance = {**TOLERANCES, **base.tolerance}
    upgrades = _library_upgrades(base, new)
    cmp.notes += [f"{name} {was} -> {now} since the baseline: a new break in its files may come with the upgrade"
                  for name, (was, now) in sorted(upgrades.items())]
    if base.tracecheck and new.tracecheck and base.tracecheck != new.tracecheck:
        cmp.notes.append(f"tracecheck {base.tracecheck} -> {new.tracecheck} since the baseline: a stage may check "
                         "more than it did (its release notes say what); rewrite the baseline with --update-baseline "
                         "once reviewed")
    gate = Gate(normalized([*base.require, *new.require]))
    ids = sorted(set(base.probes) | set(new.probes))
    if only is not None:
        keep = set(only)
        ids = [i for i in ids if i in keep]
    for pid in ids:
        b, n = base.probes.get(pid), new.probes.get(pid)
        if n is None and pid.endswith(f"::{IMPORT_PROBE}"):  # the file's import failure is gone: it imports now
            cmp.changes.append(Change(pid, None, "probe", "fail", "absent", IMPROVED,
                                      "the file imports now (its import failure is gone)"))
            continue
        if n is None:
            cmp.changes.append(Change(pid, None, "probe", "present", "missing", REGRESSED,
                                      "probe went missing (not found in the new run)"))
            continue
        if b is None:
            failing = _failing_kinds(n, gated, gate)
            if failing:
                cmp.changes.append(Change(pid, None, "probe", "absent", "fail", REGRESSED,
                                          f"new probe fails: {', '.join(failing)}"))
            else:
                cmp.changes.append(Change(pid, None, "probe", "absent", "pass", CHANGED, "new probe, passes"))
            continue
        cmp.compared_probes += 1  # in both: a new probe is shown (it fails or passes), not compared
        probe_changes: list[Change] = []
        for stage in sorted(set(b.stages) | set(n.stages), key=stage_order):
            bs, ns = b.stages.get(stage), n.stages.get(stage)
            changes = _compare_stage(pid, stage, bs, ns, gated, tolerance)
            target = stage_target(stage, bs, ns)
            probe_changes += changes if gate.requires(target) else [_not_required(c, target, gate) for c in changes]
        b_cov, n_cov = b.stages.get(COVERAGE_STAGE), n.stages.get(COVERAGE_STAGE)
        probe_changes = _with_new_breaks(_outweigh(_upgraded(probe_changes, upgrades), b_cov, n_cov))
        cmp.changes += probe_changes
        cmp.metrics += _metrics(pid, b_cov, n_cov, probe_changes)
    moved = _moved_ids([c.probe for c in cmp.changes if c.aspect == "probe" and c.after == "missing"],
                       [c.probe for c in cmp.changes if c.aspect == "probe" and c.before == "absent"])
    if moved:
        cmp.notes.append(f"the probe ids moved ({moved[0][0]} -> {moved[0][1]}"
                         + (f" and {len(moved) - 1} more" if len(moved) > 1 else "") + "): the baseline was recorded "
                         "with another rootdir (the folder with pyproject.toml, setup.cfg, tox.ini, pytest.ini or .git "
                         "above the model files); run where that marker exists, or rewrite the baseline")
    return cmp


def compare_report(base: Baseline | Mapping[str, object], report: RunReport) -> Comparison:
    """Compare a run (or merged) report with a baseline.

    A shard report (run with ``--shard K/N``, read back from its command line) is compared on the probes
    it ran only; probes that went missing are caught when the merged report is compared.
    """
    shard = shard_from_command(report.command)
    only = [p.id for p in report.probes] if shard else None
    cmp = compare(base, Baseline.of(report), only=only)
    if shard:
        cmp.notes.append(f"shard {shard[0]}/{shard[1]}: compared the {len(report.probes)} probe(s) this shard ran; "
                         "compare the merged report (tracecheck merge) to catch probes that went missing")
    return cmp


def _moved_ids(missing: list[str], new: list[str]) -> list[tuple[str, str]]:
    """Missing and new probes whose ids differ only in the file's leading folders (``probes/m.py::p`` and
    ``m.py::p``): the ids' rootdir changed, not the probes."""
    out = []
    for was in missing:
        file, _, name = was.partition("::")
        for now in new:
            f2, _, n2 = now.partition("::")
            if n2 == name and f2 != file and (file.endswith("/" + f2) or f2.endswith("/" + file)):
                out.append((was, now))
                break
    return out


def _not_required(c: Change, target: str, gate: Gate) -> Change:
    """A change in a stage of a target the gate does not require: shown, never a regression."""
    if c.effect != REGRESSED:
        return c
    return replace(c, effect=CHANGED, detail=not_required_detail(c.detail, target, gate.how_to_require(target)))


def _failing_kinds(probe: ProbeSnapshot, gated: frozenset[str] = frozenset(), gate: Gate = Gate()) -> list[str]:
    """What fails a snapshot's probe: the report's own rule (model/verdict.decide) on its stages' outcomes, each
    stage's status read under the advice ``gated`` (``StageSnapshot.outcome``)."""
    return list(decide((s.outcome(stage, gated) for stage, s in probe.stages.items()), gate, gated).kinds)


def _compare_stage(pid: str, stage: str, b: StageSnapshot | None, n: StageSnapshot | None,
                   gated: frozenset[str] = frozenset(), tolerance: Mapping[str, float] = TOLERANCES) -> list[Change]:
    if n is None:
        return [Change(pid, stage, "stage", b.status if b else None, "not run", CHANGED,
                       "stage not run in the new run; not compared")]
    if b is None:
        if n.status in FAILED:
            return [Change(pid, stage, "stage", "not run", n.status, REGRESSED,
                           f"stage not in the baseline, now fails: {', '.join(n.kinds) or n.status}")]
        return [Change(pid, stage, "stage", "not run", n.status, CHANGED, "stage not in the baseline")]
    out: list[Change] = []
    bs, ns = b.status, n.status
    if INTERNAL in (bs, ns):  # a stage that failed inside tracecheck checked nothing: nothing to compare with it
        side = "the new run" if ns == INTERNAL else "the baseline"
        return [Change(pid, stage, "status", bs, ns, CHANGED,
                       f"not compared: the stage failed inside tracecheck in {side} (status internal-error)")]
    if bs != ns:
        if bs == PASS and ns in FAILED:
            effect = REGRESSED
        elif bs in FAILED and ns == PASS:
            effect = IMPROVED
        else:
            effect = CHANGED  # to/from skip, or between fail/timeout/crash (the kinds tell the rest)
        out.append(Change(pid, stage, "status", bs, ns, effect, f"status {bs} -> {ns}"))
    bk = set(b.kinds) | {k for k in b.advice if k in gated}
    nk = set(n.kinds) | {k for k in n.advice if k in gated}
    for k in sorted(nk - bk):
        out.append(Change(pid, stage, "kind", None, k, REGRESSED, f"new failure kind {k}" + (
            " (advice, gated by --strict or the baseline's severity)" if k in gated else ""), n.site_of(k)))
    # a stage that stops at its first error (fullgraph, export) and now stops earlier, at a new kind, no longer
    # reaches the old one: that is no improvement, the old kind is only hidden
    hidden = bool(nk - bk) and ns in FAILED
    for k in sorted(bk - nk):
        out.append(Change(pid, stage, "kind", k, None, CHANGED, f"failure kind {k} no longer reached (the stage "
                          f"now fails first on {', '.join(sorted(nk - bk))})") if hidden else
                   Change(pid, stage, "kind", k, None, IMPROVED, f"failure kind {k} gone", b.site_of(k)))
    ba, na = set(b.advice) - gated, set(n.advice) - gated
    for k in sorted(na - ba):
        out.append(Change(pid, stage, "advice", None, k, CHANGED, f"new advice {k} (advice: no regression)"))
    for k in sorted(ba - na):
        out.append(Change(pid, stage, "advice", k, None, CHANGED, f"advice {k} gone"))
    out += _lower_is_better(pid, stage, "graph_count", b.graph_count, n.graph_count)
    out += _lower_is_better(pid, stage, "graph_break_count", b.graph_break_count, n.graph_break_count)
    out += compare_breaks(pid, stage, b.breaks, n.breaks)
    out += _lower_is_better(pid, stage, "recompiles", b.recompiles, n.recompiles)
    if b.phases is not None and "backward" in b.phases and n.phases == ("forward",) and ns not in FAILED:
        # a stage that checked training now checks the forward only: its pass no longer covers backward
        out.append(Change(pid, stage, "phases", list(b.phases), list(n.phases or ()), REGRESSED,
                          "backward no longer runs (forward only)"))
    bca, nca = b.compiled_autograd, n.compiled_autograd
    for key in COUNTS_LOWER_IS_BETTER:
        out += _lower_is_better(pid, stage, f"compiled_autograd.{key}", bca.get(key), nca.get(key))
    for key in COUNTS_NEUTRAL:
        if key in bca and key in nca and bca[key] != nca[key]:
            out.append(Change(pid, stage, f"compiled_autograd.{key}", bca[key], nca[key], CHANGED,
                              f"compiled autograd {key.replace('_', ' ')} {bca[key]} -> {nca[key]}"))
    # compile coverage (the explain stage), a count a baseline predating it lacks is not compared (as PyTorch's gate)
    bcov, ncov = b.coverage or CoverageCounts(), n.coverage or CoverageCounts()
    out += _more_is_better(pid, stage, CAPTURED, bcov.calls_captured, ncov.calls_captured,
                           tolerance["calls_captured"])
    out += _lower_is_better(pid, stage, EAGER_FRAMES, bcov.frames_eager, ncov.frames_eager)
    return out


def _lower_is_better(pid: str, stage: str, aspect: str, before: object, after: object) -> list[Change]:
    """A count that must not grow (its noun: ``COUNT_NOUNS``): a rise regresses, a drop improves."""
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)) or before == after:
        return []
    effect = REGRESSED if after > before else IMPROVED
    return [Change(pid, stage, aspect, before, after, effect, f"{COUNT_NOUNS[aspect]} {before} -> {after}")]


def _more_is_better(pid: str, stage: str, aspect: str, before: int | None, after: int | None,
                    tolerance: float) -> list[Change]:
    """A count that must not drop (ops captured): a rise improves; a drop regresses unless it is within
    ``tolerance`` (a fraction of ``before``), which is a change."""
    if before is None or after is None or before == after:
        return []
    what = COUNT_NOUNS[aspect]
    if after > before:
        return [Change(pid, stage, aspect, before, after, IMPROVED, f"{what} {before} -> {after}")]
    drop = (before - after) / before if before else 1.0
    allowed = f"{tolerance * 100:g}%"
    if drop <= tolerance:
        why = f"-{drop:.1%}, within the baseline's tolerance of {allowed}"
        return [Change(pid, stage, aspect, before, after, CHANGED, f"{what} {before} -> {after} ({why})", why=why)]
    why = f"-{drop:.1%}; tolerance {allowed}"
    return [Change(pid, stage, aspect, before, after, REGRESSED, f"{what} {before} -> {after} ({why})", why=why)]


def _library_versions(doc: Baseline) -> dict[str, str]:
    """Library -> version, from the owners of a document's breaks (``transformers 5.24.0``)."""
    out = {}
    for probe in doc.probes.values():
        for snap in probe.stages.values():
            for b in snap.breaks:
                name, _, version = (b.owner or "").rpartition(" ")
                if name and version:
                    out[name] = version
    return out


def _library_upgrades(base: Baseline, new: Baseline) -> dict[str, tuple[str, str]]:
    """The libraries whose breaks the baseline and the new run both saw, at two versions: name -> (was, now)."""
    was, now = _library_versions(base), _library_versions(new)
    return {name: (was[name], now[name]) for name in was.keys() & now.keys() if was[name] != now[name]}


def _upgraded(changes: list[Change], upgrades: dict[str, tuple[str, str]]) -> list[Change]:
    """A new break in a library upgraded since the baseline says so: the upgrade is its likely cause."""
    out = []
    for c in changes:
        name = ((c.graph_break.owner if c.graph_break else None) or "").rpartition(" ")[0]
        if c.aspect == "break" and c.before is None and name in upgrades:
            c = replace(c, detail=f"{c.detail}, since {name} {upgrades[name][0]} -> {upgrades[name][1]}")
        out.append(c)
    return out


def _uncaptured(cov: CoverageCounts) -> int | None:
    """Torch calls the eager forward makes that no captured graph has (0 when Dynamo captured more: getitem nodes)."""
    eager, captured = cov.torch_calls_eager, cov.calls_captured
    return max(0, eager - captured) if eager is not None and captured is not None else None


def _break_site(c: Change) -> tuple[str | None, str | None, str | None, str | int | None]:
    b = c.graph_break
    return (b.kind, b.gb_type, b.file, b.code or b.line) if b else (None, None, None, None)


def _outweigh(changes: list[Change], b: StageSnapshot | None, n: StageSnapshot | None) -> list[Change]:
    """One probe's changes, where more of the same model runs inside graphs: its new breaks are changes, not
    regressions. With nested graph breaks (or a fix that lets Dynamo resume where it used to give up) a model can
    break more often while far more of it runs compiled (pytorch/pytorch#191357: ops captured 2 -> 84); a gate on
    the break count alone would fail that improvement, as PyTorch's check_graph_breaks.py does (it fails any metric
    that moves the wrong way).

    ``b``, ``n``: the explain stage's snapshots. "More of the same model": ops captured rose, the torch calls run
    outside graphs (eager calls less ops captured) fell, and no more frames run in eager; a model that only grew
    (a new layer with a print) captures more without running less outside graphs, and its new break regresses.
    Outweighed: the explain stage's new breaks, the same breaks (kind, gb_type, file, source line) in other stages,
    and the graph and break counts of a stage whose new breaks are all outweighed."""
    gain = next((c for c in changes if c.stage == COVERAGE_STAGE and c.aspect == CAPTURED and c.effect == IMPROVED),
                None)
    was = _uncaptured(b.coverage or CoverageCounts()) if b else None
    now = _uncaptured(n.coverage or CoverageCounts()) if n else None
    if gain is None or was is None or now is None or now >= was \
            or any(c.aspect == EAGER_FRAMES and c.effect == REGRESSED for c in changes):
        return changes
    new_in_explain = {_break_site(c) for c in changes if c.stage == COVERAGE_STAGE and c.aspect == "break"
                      and c.effect == REGRESSED}
    why = (f"outweighed: {COUNT_NOUNS[CAPTURED]} {gain.before} -> {gain.after}, torch calls outside graphs "
           f"{was} -> {now}")
    stages_all_outweighed = {c.stage for c in changes} - {c.stage for c in changes if c.aspect == "break"
                                                          and c.effect == REGRESSED
                                                          and _break_site(c) not in new_in_explain}

    def outweighed(c: Change) -> bool:
        if c.effect != REGRESSED:
            return False
        if c.aspect == "break":
            return _break_site(c) in new_in_explain
        return c.aspect in ("graph_count", "graph_break_count") and c.stage in stages_all_outweighed
    return [replace(c, effect=CHANGED, detail=f"{c.detail} ({why})", why=why) if outweighed(c) else c
            for c in changes]


def _at(c: Change) -> tuple[str, int]:
    """A change's place, for reading order (file, then line)."""
    return (c.location["file"] or "~", c.location["line"] or 0) if c.location else ("~", 0)


def _with_new_breaks(changes: list[Change]) -> list[Change]:
    """One probe's changes, where ops captured rose together with a new break that regresses: the line that added the
    break brought its ops along (``if h.mean().item() > 10``: one op more, one graph more), so the rise is no
    improvement; it is shown as a change that came with the break (and ``group_changes`` folds it into it)."""
    new = sorted((c for c in changes if c.stage == COVERAGE_STAGE and c.aspect == "break" and c.effect == REGRESSED),
                 key=_at)
    if not new:
        return changes
    sites = [f"{c.location['file']}:{c.location['line']}" for c in new if c.location and c.location["file"]]
    why = f"{CAME_WITH} the new graph break{'s' if len(new) > 1 else ''}" + (f" at {', '.join(sites)}" if sites else "")
    return [replace(c, effect=CHANGED, detail=f"{c.detail} ({why})", why=why)
            if c.stage == COVERAGE_STAGE and c.aspect == CAPTURED and c.effect == IMPROVED else c for c in changes]


@dataclass(frozen=True)
class MetricCheck:
    """One of a probe's Dynamo metrics against the baseline, as PyTorch's CI prints them (``graph_breaks``,
    ``calls_captured``, ``unique_graphs``, ``fallbacks_to_eager``): ``result`` is PASS, FAIL or IMPROVED, read
    from the comparison's own change for it (never a second rule); CHANGED for ``unique_graphs``, which this gate
    shows but does not weigh (graphs follow the breaks and the frames in eager, both gated)."""

    probe: str
    metric: str
    #: "lower", "higher" (is better) or "shown"
    better: str
    expected: int | None
    actual: int | None
    result: str
    note: str = ""

    def to_dict(self) -> Json:
        return dict(vars(self))


def _coverage(read: Callable[[CoverageCounts], int | None]) -> Callable[[StageSnapshot], int | None]:
    return lambda s: read(s.coverage) if s.coverage is not None else None


#: metric (PyTorch's name) -> (how the explain snapshot holds it, the change's aspect, which is better)
_METRICS: dict[str, tuple[Callable[[StageSnapshot], int | None], str | None, str]] = {
    "graph_breaks": (lambda s: s.graph_break_count, "graph_break_count", "lower"),
    "calls_captured": (_coverage(lambda c: c.calls_captured), CAPTURED, "higher"),
    "unique_graphs": (_coverage(lambda c: c.unique_graphs), None, "shown"),
    "fallbacks_to_eager": (_coverage(lambda c: c.frames_eager), EAGER_FRAMES, "lower"),
}
_RESULT = {REGRESSED: "FAIL", IMPROVED: "IMPROVED", CHANGED: "PASS"}


def _metrics(pid: str, b: StageSnapshot | None, n: StageSnapshot | None, changes: list[Change]) -> list[MetricCheck]:
    """The probe's metrics where both snapshots of its explain stage have them."""
    if b is None or n is None:
        return []
    out = []
    for metric, (read, aspect, better) in _METRICS.items():
        before, after = read(b), read(n)
        if before is None or after is None:
            continue
        if aspect is None:
            result, note = ("PASS", "") if before == after else ("CHANGED", "shown, not gated")
        else:
            change = next((c for c in changes if c.stage == COVERAGE_STAGE and c.aspect == aspect), None)
            result = _RESULT[change.effect] if change else "PASS"
            note = change.why if change else ""
        out.append(MetricCheck(pid, metric, better, before, after, result, note))
    return out


# ---------------------------------------------------------------------------------------------------------
# Graph breaks, matched by identity


def compare_breaks(pid: str, stage: str, before: Sequence[BreakSnapshot],
                   after: Sequence[BreakSnapshot]) -> list[Change]:
    """Breaks are matched by identity: kind, gb_type, file and the line's source text (``source_text``, compared as
    tokens). The same break at another line *moved* (an edit above it); a break of the same gb_type at the same
    line whose text was edited is that break edited; both are neither better nor worse. Otherwise a break with
    other code is another break (one gone, one new). A side recorded without source text (a baseline from before
    it) matches as it used to: by kind, gb_type and file, the line aside."""
    removed, added = list(before), []
    for a in after:
        match = next((r for r in removed if _site(r) == _site(a) and _unchanged(r, a)), None)
        if match is None:
            added.append(a)
        else:
            removed.remove(match)
    out: list[Change] = []
    for same in (_same_code, _either_without_code, _same_line):
        for a in list(added):
            match = next((r for r in removed if _site(r) == _site(a) and same(r, a)), None)
            if match is not None:
                removed.remove(match)
                added.remove(a)
                brk = _as_break(a, match)
                # the same gb_type at the same line, its text edited (reformatted, a name changed): the same break
                detail = (f"graph break moved: {brk.described} (was line {match.line})" if same is not _same_line else
                          f"graph break's line edited: {brk.described} (was `{match.code}`)")
                out.append(Change(pid, stage, "break", f"line {match.line}", f"line {a.line}", CHANGED, detail,
                                  a.location, brk))
    for a in added:
        brk = _as_break(a)
        out.append(Change(pid, stage, "break", None, brk.described, REGRESSED, f"new graph break {brk.described}",
                          a.location, brk))
    for r in removed:
        brk = _as_break(r)
        out.append(Change(pid, stage, "break", brk.described, None, IMPROVED, f"graph break gone: {brk.described}",
                          r.location, brk))
    return out


def _as_break(b: BreakSnapshot, other: BreakSnapshot | None = None) -> BreakSnapshot:
    """A snapshot break as a change carries it: its GB code taken from ``other``, the baseline's side, when this one
    has none (older baselines do not)."""
    return replace(b, gb_code=b.gb_code or (other.gb_code if other else None))


def _site(b: BreakSnapshot) -> tuple[str, str | None, str | None]:
    return b.kind, b.gb_type, b.file


def _tokens(code: str) -> str:
    """Source text compared as tokens: spacing and the quotes of a string do not make another line."""
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            if t.type in _NO_TEXT:
                continue
            if t.type == tokenize.STRING:
                try:
                    out.append(repr(ast.literal_eval(t.string)))
                    continue
                except (ValueError, SyntaxError):
                    pass
            out.append(t.string)
    except (tokenize.TokenError, SyntaxError):
        return " ".join(code.split())
    return " ".join(out)


_NO_TEXT = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)


def _unchanged(r: BreakSnapshot, a: BreakSnapshot) -> bool:
    """The same break at the same line (its source text the same, where both sides recorded it)."""
    return r.line == a.line and (r.code is None or a.code is None or _tokens(r.code) == _tokens(a.code))


def _same_code(r: BreakSnapshot, a: BreakSnapshot) -> bool:
    return r.code is not None and a.code is not None and _tokens(r.code) == _tokens(a.code)


def _same_line(r: BreakSnapshot, a: BreakSnapshot) -> bool:
    return r.line is not None and r.line == a.line


def _either_without_code(r: BreakSnapshot, a: BreakSnapshot) -> bool:
    return r.code is None or a.code is None
