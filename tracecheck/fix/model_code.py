"""``tracecheck fix`` for graph breaks in model code: source rewrites of the probe's own file, each one proven.

For every ``graph-break`` / ``data-dependent`` site in the probe's file (a finding's user frame), and every C
function the file calls straight from model code (``pybind-builtin`` outside an autograd.Function), the rewrites
that apply (rewrites.py, in registry order) are tried one at a time on the patched copy, on top of the ones
already kept. A candidate is kept when the compile target's stages show no break at the rewritten lines, fewer
breaks than before, and no stage failing that passed (a numeric mismatch included). The fix is verified when the
last copy kept passes every one of those stages and its eager outputs and gradients equal the original's. A
candidate's stages run in two groups (``VERIFY_PHASES``), the ones a rewrite is meant to change first, and the first
stage that refuses it ends its try (what still runs is stopped). Parent side: user code runs in stage processes
only.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from .. import api
from ..model.exitcodes import UsageError
from ..model.report import CRASH, INTERNAL, LOAD_STAGE, SKIP, ProbeReport, RunReport, StageResult
from ..model.reportio import write_text_atomic
from ..model.targets import COMPILE
from ..stages import STAGES, target_of
from ..stages import order as stage_order
from .copies import Copies, Patch, how_to_apply
from .library import UPSTREAM_MARK
from .outcome import FixOptions, FixOutcome
from .outputs import check_output
from .prelude import read_source
from ..model.taxonomy import MODEL_CODE_KINDS, K, kinds, rewrites_model_code
from .branches import branch_at
from .rewrites import REWRITES, Candidate, c_call_at, candidates, why_none
from .sourcetext import Edit, Site, Source, new_span
from .status import NO_CODE_FIX, NOT_VERIFIED, VERIFIED
from .tasks import EagerCompareTask, EagerDumpTask, ObserveCallsTask
from .verify_shapes import check_shapes

if TYPE_CHECKING:
    from ..model.tasks import ProcessTask

#: one task (fix/tasks.py) in a stage process, and what it returned (pipeline._one)
TaskRunner = Callable[["ProcessTask", str], "dict[str, Any]"]
#: a line of the rewritten probe text -> its line in the patched copy; a library file's rewritten line -> the copy's
CopyLine = Callable[[int], int]
LibLine = Callable[[str, int], "int | None"]

#: the kinds this module handles (a C call only outside an autograd.Function: taxonomy.rewrites_model_code)
KINDS = (*MODEL_CODE_KINDS, K.PYBIND_BUILTIN)
#: what a candidate runs: every stage of the compile target (torch.cond, say, traces under explain and fails only
#: under compiled autograd)
VERIFY_STAGES = [s for s in STAGES if target_of(s) == COMPILE]
#: the groups a candidate's stages run in, the second (and the eager comparison) only when the first did not refuse
#: it: first where Dynamo stops and the break count, what a rewrite is meant to change (most refusals come from
#: these), then the rest. They are the groups the original's stages ran in (the diagnosis, then the baseline), so
#: that a finding is classified alike on both sides (classify settles a run's findings across its stages).
_FIRST = ("eager", "explain", "fullgraph", "opcheck")
VERIFY_PHASES = [[s for s in VERIFY_STAGES if s in _FIRST], [s for s in VERIFY_STAGES if s not in _FIRST]]


@dataclass(frozen=True)
class Tried:
    """One candidate rewrite tried at a site, and what came of it: ``kept``, or why it was not."""

    rewrite: str
    result: str


@dataclass
class SiteOutcome:
    """What happened to one break site: the rewrite kept (if any), and every candidate tried with why it failed."""

    line: int
    kind: str
    gb_type: str
    code: str
    rewrite: str | None = None
    note: str = ""
    doc: str = ""
    tried: list[Tried] = field(default_factory=list)
    #: the rewrite kept for an earlier site took this one in (its lines were rewritten with that site's)
    covered: bool = False
    #: the library file the line is in ("" for the probe's own file)
    file: str = ""


def sites(path: str, probe: ProbeReport) -> tuple[list[Site], list[str], list[str]]:
    """The break sites (one per line of a file, first finding wins): the probe file's, then other files' (a C call a
    library makes, a break in a library's function); the break locations no fix answers; and the C calls left for a
    later run (one a line number: a C call's op is named by its line)."""
    found: dict[int, Site] = {}
    library: dict[tuple[str, int], Site] = {}
    outside: list[str] = []
    here = os.path.realpath(path)
    for result in probe.stages.values():
        for f in result.findings:
            frame = f.user_frame
            if f.kind not in KINDS or frame is None or frame.line is None:
                continue
            if not rewrites_model_code(f, path):
                if frame.location not in outside and f.kind in MODEL_CODE_KINDS:
                    outside.append(frame.location)
                continue
            facts = {"builtin": f.context.get("builtin") or ""} if f.kind == K.PYBIND_BUILTIN else {}
            owner = f.ev.owner
            if owner is not None and owner.name:  # whose file it is: the upstream diff's header names it
                facts["owner"] = f"{owner.name} {owner.version or ''}".strip()
            site = Site(frame.line, f.kind, f.evidence.get("gb_type") or "", frame.code or "", facts or None)
            if os.path.realpath(frame.file) == here:
                found.setdefault(frame.line, site)
            else:
                library.setdefault((os.path.realpath(frame.file), frame.line), replace(site, file=frame.file))
    out = [found[k] for k in sorted(found)]
    taken = {s.line for s in out if s.kind == K.PYBIND_BUILTIN}
    waiting: list[str] = []
    for _, s in sorted(library.items()):
        if s.kind == K.PYBIND_BUILTIN:
            if s.line in taken:
                waiting.append(f"{s.file}:{s.line}: a C call on the same line number as another one's; run fix again "
                               "on the patched copy for it")
                continue
            taken.add(s.line)
        out.append(s)
    return out, outside, waiting


def _c_calls(found: list[Site], src: Source, path: str, name: str, namespace: str,
             task: TaskRunner) -> list[Site]:
    """``found`` with the facts the ``custom-op`` rewrite needs for each C call (c_call.py learns them in a stage
    process), or with why there are none."""
    calls = {s.line: _call_at(s, src) for s in found if s.kind == K.PYBIND_BUILTIN}
    files = {s.line: s.file for s in found if s.file and s.kind == K.PYBIND_BUILTIN}
    asks = [{"line": line, **{k: v for k, v in c.items() if k != "span"}, **_library_ask(line, files)}
            for line, c in calls.items() if isinstance(c, dict)]
    learnt: dict[int, dict[str, Any]] = {}
    if asks:
        try:
            learnt = {r["line"]: r for r in task(ObserveCallsTask(file=path, probe=name, namespace=namespace,
                                                                  sites=tuple(asks)), "recording the C calls")["sites"]}
        except UsageError as e:  # the process died (a C function that crashed on a perturbed input): no facts
            learnt = {a["line"]: {"error": f"recording the call failed ({e})"} for a in asks}
    out = []
    for s in found:
        c = calls.get(s.line)
        if c is not None:
            facts = {"error": c} if isinstance(c, str) else {**c, **_library_ask(s.line, files),
                                                              **learnt.get(s.line, {})}
            s = replace(s, facts={**s.facts, **facts})
        out.append(s)
    return out


def _call_at(site: Site, probe_src: Source) -> dict[str, Any] | str:
    """The C call on the site's line, in the probe's text or the library file's (a string says why there is none)."""
    if not site.file:
        return c_call_at(probe_src, site.line, site.facts["builtin"])
    try:
        text = Source(read_source(site.file, utf8_only=True))
    except (UsageError, SyntaxError, ValueError) as e:
        return f"cannot read {site.file} ({e})"
    return c_call_at(text, site.line, site.facts["builtin"])


def _library_ask(line: int, files: dict[int, str]) -> dict[str, Any]:
    """What c_call and the rewrite need for a C call in a library's file: the file, and the names the probe's
    file keeps its module and the original C function under."""
    if line not in files:
        return {}
    return {"file": files[line], "call_as": f"_tc_c_{line}", "module_alias": f"_tc_lib_{line}",
            "file_label": _label(files[line])}


def _label(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else os.path.basename(path)


def _breaks(stages: dict[str, Any]) -> int:
    """The distinct breaks explain saw (sites): graphs - 1 would reward a rewrite that makes Dynamo skip the frame
    (no graph, so "no break")."""
    explain = stages.get("explain")
    return explain.graph_break_sites if explain is not None and explain.graph_break_sites is not None else 0


def _run(path: str, name: str, stages: list[str], opts: FixOptions, progress: api.Progress | None,
         tag: str) -> RunReport:
    report = api.run(api.RunOptions([path], stages=stages, only=name, jobs=opts.jobs, timeout_s=opts.timeout_s,
                                    command=["fix", tag, path]), progress)
    if report.internal_errors:  # tracecheck's own bug: the CLI exits 3, never "not kept"
        p, s = report.internal_errors[0]
        last = (s.internal_error or "").strip().splitlines()[-1:] or ["?"]
        raise RuntimeError(f"fixing model code: the {s.stage} stage failed inside tracecheck: {last[0]}")
    return report


def _first(result: Any) -> str:
    f = result.failure
    if f is None:
        return result.status
    ev = f.evidence
    what = ev.get("gb_type") or ev.get("exception_type") or ""
    return f"{f.kind}{': ' + what if what else ''}"


def _signatures(result: Any, skip: "set[tuple[str, int]]" = frozenset()) -> set[tuple[str, str]]:
    """What a stage failed with, independent of line numbers (which differ between the original and the copy).
    ``skip``: (real path, line) of the other known break sites, in the copy or a library (once one break is gone,
    fullgraph reaches the next one: that is no new failure)."""
    # fullgraph stops at the first break left: which one that is says nothing new (explain counts them all)
    out = {(f.kind, f.evidence.get("gb_type") or f.evidence.get("exception_type") or "") for f in result.findings
           if not (f.kind in KINDS and (result.stage == "fullgraph" or f.user_frame is not None and
                                        f.user_frame.line is not None and
                                        (os.path.realpath(f.user_frame.file), f.user_frame.line) in skip))}
    return out | ({(result.status, "")} if result.status in ("timeout", "crash") else set())


@dataclass(frozen=True)
class _Lines:
    """Where a candidate's site is in its copy: ``(file, first, last)`` ranges Dynamo must no longer stop in."""

    ranges: tuple[tuple[str, int, int], ...]

    @classmethod
    def of(cls, site: Site, patch: Patch, copy_line: CopyLine, lib_line: LibLine, copy: str) -> "_Lines":
        if not site.file:
            lo, hi = (copy_line(n) for n in new_span(patch.edits, site.line, site.line))
            return cls(((os.path.realpath(copy), lo, hi),))
        # a library's line, which the probe's file does not edit: Dynamo must not stop there any more, nor at the
        # same line of the function the copy puts in place of the library's
        first, last = (site.facts or {}).get("first", site.line), (site.facts or {}).get("last", site.line)
        ranges = [(os.path.realpath(site.file), first, last)]
        lo, hi = new_span(patch.lib_edits(site.file), site.line, site.line)
        a, b = lib_line(site.file, lo), lib_line(site.file, hi)
        if a is not None and b is not None:
            ranges.append((os.path.realpath(copy), a, b))
        return cls(tuple(ranges))

    def hold(self, frame: Any) -> bool:
        return frame is not None and frame.line is not None and any(
            lo <= frame.line <= hi and os.path.realpath(frame.file) == here for here, lo, hi in self.ranges)


def _other_sites(site: Site, found: list[Site], patch: Patch, copy_line: CopyLine, lib_line: LibLine,
                 copy: str) -> "set[tuple[str, int]]":
    """Where the other known break sites are in this candidate's copy: the probe's in the copy, a library's in its
    file and in the function the copy puts in its place."""
    out: set[tuple[str, int]] = set()
    here = os.path.realpath(copy)
    for o in found:
        if o is site:
            continue
        if not o.file:
            out.add((here, copy_line(new_span(patch.edits, o.line, o.line)[0])))
            continue
        out.add((os.path.realpath(o.file), o.line))
        moved = lib_line(o.file, new_span(patch.lib_edits(o.file), o.line, o.line)[0])
        if moved is not None:
            out.add((here, moved))
    return out


def _judge(lines: _Lines, copy: str, before: dict[str, Any],
           after: dict[str, Any], others: "set[tuple[str, int]]" = frozenset(), settled: bool = True) -> str | None:
    """Why the candidate is not kept, or None when it is (so far: ``after`` holds the stages run yet). ``lines``:
    where its site is in the copy; ``before``: stage -> result with the edits kept so far.
    ``settled=False``: stage results as they finish, before their run classifies them across stages, which may
    rename a crash's or an ``unknown`` finding (never a status): such a result fails anew only by status."""
    if LOAD_STAGE in after:
        return f"the patched copy does not load ({_first(after[LOAD_STAGE])})"
    for r in after.values():
        for f in r.findings:
            if f.kind in KINDS and lines.hold(f.user_frame):
                return f"Dynamo still stops at the rewritten lines ({r.stage}: {f.evidence.get('gb_type') or f.kind})"
    worse = [f"{name}: {_first(r)}" for name, r in after.items() if r.status not in ("pass", "skip") and (
             name not in before or before[name].status in ("pass", "skip")
             or (settled or _final(r)) and _signatures(r, others) - _signatures(before[name]))]
    if worse:
        return "a stage fails that passed, or fails in a new way: " + "; ".join(worse)
    if _breaks(before) and "explain" in after and _breaks(after) >= _breaks(before):
        return f"{NOT_FEWER} ({_breaks(before)} -> {_breaks(after)})"
    return None


#: the one refusal a candidate may be held after (model_code.fix_model_code): Dynamo no longer stops at its lines,
#: but the break moved on (an ``.item()`` captured, its ``if`` breaking now), so only another site's rewrite with it
#: can lower the count
NOT_FEWER = "the graph breaks did not go down"


@dataclass
class _Held:
    """A candidate held for the next site (fix_model_code): its site, that site's outcome, and the candidate."""

    site: Site
    outcome: SiteOutcome
    cand: Candidate


class _Refused(Exception):
    """A finished stage refused the candidate: the rest of its run is not needed."""


class _Watch(api.Progress):
    """The live display's progress, and the candidate judged as each stage finishes: ``judge(stages)`` says why
    not, and ``_Refused`` then leaves ``api.run`` (its Runner kills the stage processes still running)."""

    def __init__(self, inner: api.Progress | None, judge: Any) -> None:
        self.inner, self.judge = inner or api.Progress(), judge
        self.stages: dict[str, Any] = {}
        self.running: list[tuple[str, str]] = []

    def discovered(self, n_files: int) -> None:
        self.inner.discovered(n_files)

    def loading(self, path: str) -> None:
        self.inner.loading(path)

    def note(self, line: str) -> None:
        self.inner.note(line)

    def planned(self, n_tasks: int) -> None:
        self.inner.planned(n_tasks)

    def layout(self, stages: list[str], gate: Any) -> None:
        self.inner.layout(stages, gate)

    def revised(self, probe_id: str, result: StageResult) -> None:
        self.inner.revised(probe_id, result)

    def started(self, probe_id: str, stage: str) -> None:
        self.running.append((probe_id, stage))
        self.inner.started(probe_id, stage)

    def finished(self, probe_id: str, result: StageResult) -> None:
        if (probe_id, result.stage) in self.running:
            self.running.remove((probe_id, result.stage))
        self.inner.finished(probe_id, result)
        if result.status == INTERNAL:  # tracecheck's own bug: the run ends and _run says so (exit 3), no refusal
            return
        self.stages[result.stage] = result
        why = self.judge(self.stages)
        if why is not None:
            for pid, stage in self.running:  # the display's cells for them end too
                self.inner.finished(pid, StageResult(stage, SKIP, skip_reason="stopped: the candidate was refused"))
            raise _Refused(why)

    def verdict(self, probe: ProbeReport, running: list[str]) -> None:
        self.inner.verdict(probe, running)


def _final(result: StageResult) -> bool:
    """Settling the run leaves this result's findings as they are (classify.results: attribute_crashes renames a
    crash's, attribute_unknowns an ``unknown``)."""
    return result.status != CRASH and all(f.kind != K.UNKNOWN for f in result.findings)


def _try(lines: _Lines, patched: str, name: str, before: dict[str, Any],
         others: "set[tuple[str, int]]", opts: FixOptions, progress: api.Progress | None, task: TaskRunner,
         dump: str) -> tuple[str | None, RunReport | None]:
    """Run a written candidate group by group (``VERIFY_PHASES``), the eager comparison after the first, and stop
    at the first refusal: (why it is not kept, None), or (None, one report of every stage)."""
    runs: list[RunReport] = []
    stages: dict[str, Any] = {}
    for i, phase in enumerate(VERIFY_PHASES):
        watch = _Watch(progress, lambda done: _judge(lines, patched, before, done, others, settled=False))
        try:
            runs.append(_run(patched, name, phase, opts, watch, "--try"))
        except UsageError as e:  # the copy does not import: this candidate's fault, not the user's input
            return f"the patched copy does not load ({e})", None
        except _Refused as e:
            return str(e), None
        stages.update(runs[-1].probes[0].stages)
        why = _judge(lines, patched, before, stages, others)
        if why is None and i == 0:
            why = _eager_differs(task, patched, name, dump)
        if why is not None:
            return why, None
    last = runs[-1]
    probe = replace(last.probes[0], stages=dict(sorted(stages.items(), key=lambda kv: stage_order(kv[0]))))
    return None, replace(last, probes=[probe], stages=list(VERIFY_STAGES),
                         seconds=round(sum(r.seconds for r in runs), 2))


def _gone(site: Site, kept: Patch, copies: Copies, patched: str, probe: ProbeReport, now: dict[str, Any]) -> bool:
    """Has what is kept already taken the site's break away: the explain stage saw it in the original (which records
    every break, where fullgraph stops at the first), and no stage of the last kept copy stops at its lines?"""
    explain = probe.stages.get("explain")
    seen = explain is not None and any(
        f.kind in KINDS and f.user_frame is not None and f.user_frame.line == site.line and
        os.path.realpath(f.user_frame.file) == os.path.realpath(site.file or copies.path) for f in explain.findings)
    if not seen or "explain" not in now:
        return False
    _, copy_line, lib_line = copies.runnable(kept, patched)
    lines = _Lines.of(site, kept, copy_line, lib_line, patched)
    return not any(f.kind in KINDS and lines.hold(f.user_frame) for r in now.values() for f in r.findings)


def _same_call(site: Site, other: Site) -> bool:
    """Does the library site ``other`` rebind the same callee in the same module as ``site`` (one op serves every
    line of that library that calls it)?"""
    key = lambda s: ((s.facts or {}).get("module"), (s.facts or {}).get("callee"))  # noqa: E731
    return bool(other.file) and None not in key(site) and key(other) == key(site)


def _owner(site: Site, kept_at: "list[tuple[Site, Candidate]]") -> "tuple[Site, Candidate] | None":
    """The kept rewrite that took ``site`` in: one that replaced its line (an .item() and the `if` on its scalar), in
    the probe's file or in the same library function, or the custom op of the same library callee."""
    for other, c in kept_at:
        if not site.file and not other.file and _covers(c.edits, site.line):
            return other, c
        if site.file and os.path.realpath(other.file or "") == os.path.realpath(site.file) and (
                _covers(c.library, site.line) or (c.rewrite == "custom-op" and _same_call(site, other))):
            return other, c
    return None


def _covers(edits: "tuple[Edit, ...]", line: int) -> bool:
    """Do ``edits`` replace text on ``line`` (an insertion replaces nothing)?"""
    return any(e.start != e.end and e.start[0] <= line and (line < e.end[0] or (line == e.end[0] and e.end[1] > 0))
               for e in edits)


def _vacuous(src: Source, site: Site, rewrite: str, lines_run: set[int] | None) -> str | None:
    """Why the eager comparison says nothing about a kept branch rewrite at the probe's inputs: ``compile-guard``
    skips a branch those inputs never take; ``branchless`` changes eager itself, which no set of inputs settles."""
    if rewrite not in ("compile-guard", "branchless") or site.file:
        return None
    node = branch_at(src, site)  # (a site on the .item() line before it: the `if` it tests)
    if node is None or not node.body:
        return None
    taken = lines_run is not None and node.body[0].lineno in lines_run
    if rewrite == "compile-guard" and lines_run is not None and not taken:
        return f"line {node.lineno}: the probe's inputs never take this branch, so skipping it while compiling was " \
               "compared with nothing (add a probe whose inputs take it)"
    if rewrite == "branchless":  # eager changes wherever the transform is not the identity while the test is false
        return f"line {node.lineno}: the branch now runs for every input, in eager too; it matched the original at " \
               "the probe's inputs" + (" (which take the branch anyway)" if taken else "") + ", not for every " \
               "input: review it (e.g. a NaN clean-up guarded by an inf test)"
    return None


def fix_model_code(opts: FixOptions, path: str, name: str, patched: str, probe: ProbeReport, out: FixOutcome,
                   progress: api.Progress | None, task: TaskRunner) -> None:
    """Fill ``out`` (a pipeline.FixOutcome): sites, kept rewrites, the diff, the written files and the status.
    ``probe``: the diagnosis (a few stages); the other stages of the compile target run once on the original, so
    that a candidate is judged stage by stage against the same stages. ``task(work, what)``: one task (fix/tasks.py) in a
    stage process (pipeline._one)."""
    found, outside, waiting = sites(path, probe)
    if not found:  # (a break inside a library called from the probe's file has a site at that call too)
        out.status = NO_CODE_FIX
        out.no_code_fix = {k: kinds()[k].explain_command for k in out.kinds if k in kinds()}
        out.reasons = [f"the break at {where} is one no setting or rewrite of tracecheck's answers (a C function "
                       "called from a library's code, a skipped or unsupported call)" for where in outside] or \
            [f"no graph break of {os.path.basename(path)} has a user frame in it to rewrite"]
        return
    try:
        text = read_source(path, utf8_only=True)
    except UsageError as e:
        out.status, out.reasons = NO_CODE_FIX, [str(e)]
        return
    stem = os.path.splitext(os.path.basename(patched))[0].removesuffix("_fixed")
    src, copies = Source(text), Copies(path, text, stem=stem)
    found = _c_calls(found, src, path, name, opts.namespace, task)
    plans = [(site, candidates(src, site, copies.library(site.file) if site.file else None)) for site in found]
    for site, cands in plans:
        here = copies.library(site.file) if site.file else src
        why = "" if cands else copies.unreadable(site.file) if here is None else why_none(here, site)
        out.sites.append(SiteOutcome(site.line, site.kind, site.gb_type, site.code,
                                     file=copies.where(site.file) if site.file else "", note=why))
    kept, report, lines_run = _search(opts, path, name, patched, probe, plans, found, out, copies, progress, task)
    if out.status == NO_CODE_FIX:  # (the original fails eagerly: nothing was tried)
        return
    out.reasons += waiting
    for site, s in zip(found, out.sites):
        if s.rewrite is None:
            why = (site.facts or {}).get("error") or ""
            out.reasons.append(f"{s.file + ':' if s.file else 'line '}{s.line} ({s.gb_type or s.kind}): " + (
                f"no rewrite applies{': ' + why if why else ' (why: above)' if s.note else ''}" if not s.tried else
                f"no candidate was kept (tried {', '.join(t.rewrite for t in s.tried)}; why: above)"))
    if not kept:
        out.status = NO_CODE_FIX
        return
    _write(opts, path, patched, kept, copies, found, out)
    if not opts.verify:
        out.status = NOT_VERIFIED
        out.reasons.append("--no-verify: the rewritten copy was not run")
        return
    out.verification = report
    verdict = report.probes[0].verdict
    if verdict.status != "pass":
        out.reasons.append(f"the patched probe still fails: {', '.join(verdict.kinds)} (first at "
                           f"{verdict.first_failing_stage})")
    for site, outcome in zip(found, out.sites):
        why = _vacuous(src, site, outcome.rewrite, lines_run) if outcome.rewrite and not outcome.covered else None
        if why:
            out.reasons.append(why)
    # the custom ops written for C calls: their fakes at shapes the probe never used, as for a registration fix
    ops = [f"{opts.namespace}::{site.facts['name']}" for site, o in zip(found, out.sites)
           if o.rewrite == "custom-op" and not o.covered and site.facts and "name" in site.facts]
    if ops:
        check_shapes(task, patched, name, ops, out)
    out.status = NOT_VERIFIED if out.reasons else VERIFIED


def _search(opts: FixOptions, path: str, name: str, patched: str, probe: ProbeReport,
            plans: "list[tuple[Site, list[Candidate]]]", found: list[Site], out: FixOutcome, copies: Copies,
            progress: api.Progress | None, task: TaskRunner) -> "tuple[Patch, RunReport | None, set[int] | None]":
    """Try each site's candidates on the patched copy, on top of the ones kept so far: (what is kept, the last kept
    candidate's report, the probe file's lines the original ran). Fills each site's outcome."""
    kept = Patch()
    report = None
    wrote = False
    lines_run = None
    kept_at: list[tuple[Site, Candidate]] = []  # the site, and the candidate kept there
    with tempfile.TemporaryDirectory(prefix="tracecheck-fix-") as tmp:
        dump = os.path.join(tmp, "eager.pt")
        if any(c for _, c in plans) and opts.verify:
            rest = [s for s in VERIFY_STAGES if s not in probe.stages]
            before = {**probe.stages,
                      **(_run(path, name, rest, opts, progress, "--baseline").probes[0].stages if rest else {})}
            ref = task(EagerDumpTask(file=path, probe=name, dump=dump, lines_of=path),
                       "running the original probe eagerly")
            if "error" in ref:
                out.status = NO_CODE_FIX
                out.reasons.append(f"the original probe fails eagerly ({ref['error']['type']}): nothing to compare a "
                                   "rewrite with")
                return kept, None, None
            lines_run = set(ref["lines"])
        # a candidate that cleared its own site without lowering the count (NOT_FEWER), held for the next site's
        # candidates to be tried with it: two rewrites that only work together (an `.item()` captured and the `if`
        # on it as torch.cond) are kept together; a held candidate no later site completes is dropped
        held: _Held | None = None
        for (site, cands), outcome in zip(plans, out.sites):
            # one rewrite may take in two sites (an .item() and the `if` on its scalar): this one is done
            owner = _owner(site, kept_at)
            if owner is not None:
                outcome.rewrite, outcome.note = owner[1].rewrite, f"rewritten with line {owner[0].line}"
                outcome.covered = True
            elif report is not None and _gone(site, kept, copies, patched, probe, before):
                # a setting kept for an earlier site (ignore_logging_functions) took this break away too
                last = kept_at[-1]
                outcome.rewrite, outcome.note = last[1].rewrite, f"gone with the rewrites kept before it " \
                                                                 f"(the last: line {last[0].line}'s {last[1].rewrite})"
                outcome.covered = True
            bases = [held, None] if held is not None else [None]
            for base in bases if not outcome.covered else ():
                for cand in cands:
                    under = kept.with_(base.cand, base.site.file) if base else kept
                    label = cand.rewrite + (f" with {base.cand.rewrite} at line {base.site.line}" if base else "")
                    if under.overlaps(cand, site.file):
                        outcome.tried.append(Tried(label, "it overlaps a rewrite already kept"))
                        continue
                    patch = under.with_(cand, site.file)
                    try:
                        compile(copies.rewritten(patch), path, "exec")
                    except (SyntaxError, ValueError) as e:  # (TabError is a SyntaxError) never run a copy that cannot parse
                        outcome.tried.append(Tried(label, f"not valid Python here ({e})"))
                        continue
                    if not opts.verify:  # the first candidate of each site, unproven
                        kept, outcome.rewrite, outcome.note = patch, cand.rewrite, cand.note
                        kept_at.append((site, cand))
                        break
                    runnable, copy_line, lib_line = copies.runnable(patch, patched)
                    write_text_atomic(patched, runnable)
                    wrote = True
                    others = _other_sites(site, found, patch, copy_line, lib_line, patched)
                    lines = _Lines.of(site, patch, copy_line, lib_line, patched)
                    why, run = _try(lines, patched, name, before, others, opts, progress, task, dump)
                    outcome.tried.append(Tried(label, why or "kept"))
                    if why is None:
                        kept, before, report = patch, run.probes[0].stages, run
                        outcome.rewrite, outcome.note = cand.rewrite, cand.note
                        kept_at.append((site, cand))
                        if base is not None:  # the held candidate is kept with this one
                            base.outcome.rewrite = base.cand.rewrite
                            base.outcome.note = f"{base.cand.note} (kept together with line {site.line}'s " \
                                                f"{cand.rewrite}: neither lowers the break count alone)"
                            base.outcome.doc = REWRITES[base.cand.rewrite].doc
                            base.outcome.tried = [Tried(t.rewrite, "kept") if t.rewrite == base.cand.rewrite
                                                  and t.result.startswith(NOT_FEWER) else t for t in base.outcome.tried]
                            kept_at.append((base.site, base.cand))
                        break
                    if base is None and held is None and why.startswith(NOT_FEWER):
                        held = _Held(site, outcome, cand)
                if outcome.rewrite:
                    break
            if held is not None and (held.site is not site or outcome.rewrite):
                held = None  # tried with one site's candidates, or its own site kept another: no further
            if outcome.rewrite:
                outcome.doc = REWRITES[outcome.rewrite].doc
    if not kept and wrote and os.path.exists(patched):  # the last candidate this run tried: not a fix
        os.remove(patched)
    return kept, report, lines_run


def _write(opts: FixOptions, path: str, patched: str, kept: Patch, copies: Copies, found: list[Site],
           out: FixOutcome) -> None:
    """The patched copy, the diff of the probe's file (``--diff``), the upstream diff of each other file whose
    function the copy replaces (beside the copy; only a file tracecheck wrote is overwritten), and how to apply each
    in the user's own code (``out.apply``)."""
    out.diff = copies.diff(kept, _label(path))
    write_text_atomic(patched, copies.runnable(kept, patched)[0])
    out.written = [patched]
    if opts.diff:
        write_text_atomic(opts.diff, out.diff)
        out.written.append(opts.diff)
    owners = {s.file: (s.facts or {}).get("owner", "") for s in found if s.file}
    folder = os.path.dirname(os.path.abspath(patched))
    for fname, text in copies.upstream(kept, owners).items():
        target = os.path.join(folder, fname)
        try:
            check_output(target, "upstream diff", UPSTREAM_MARK, module=False, suffix="", first_lines=1)
        except UsageError as e:
            out.notes.append(f"not written: {e}")
            continue
        write_text_atomic(target, text)
        out.written.append(os.path.relpath(target))
        out.upstream[fname] = text
    out.apply = how_to_apply(kept, copies, opts.diff, patched, list(out.upstream))


def _eager_differs(task: TaskRunner, copy: str, name: str, dump: str) -> str | None:
    """Why the copy's eager outputs and gradients are not the original's (``dump``), or None when they are."""
    got = task(EagerCompareTask(file=os.path.abspath(copy), probe=name, dump=dump), "running the patched probe eagerly")
    if "error" in got:
        return f"the rewritten probe fails eagerly: {got['error']['type']}: {got['error']['message'][:200]}"
    if got.get("mismatches"):
        return f"its eager outputs/gradients differ from the original's ({len(got['mismatches'])} mismatches)"
    return None
