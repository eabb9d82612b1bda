"""A candidate rewrite's trial (model_code.py): its patched copy's stages run group by group (``VERIFY_PHASES``), each
stage judged as it finishes against the stages of the copy kept so far, and the eager comparison after the first
group; the first refusal ends the trial (the stage processes still running are stopped). Parent side: user code
runs in stage processes only."""
from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Callable

from .. import api
from ..model.progress import Progress, Relay
from ..model.exitcodes import UsageError
from ..model.records import Frame
from ..model.report import CRASH, INTERNAL, LOAD_STAGE, SKIP, ProbeReport, RunReport, StageResult
from ..model.targets import COMPILE
from ..model.taxonomy import K
from ..stages import STAGES, target_of
from ..stages import order as stage_order
from .copies import Copies, Patch
from .outcome import FixOptions
from .task_results import EagerComparison
from .rewrites import KINDS
from .sourcetext import Site, new_span
from .jobs import EagerCompareTask, TaskRunner

#: a line of the rewritten probe text -> its line in the patched copy; a library file's rewritten line -> the copy's
CopyLine = Callable[[int], int]
LibLine = Callable[[str, int], "int | None"]
#: stage -> its result, for one copy
Stages = dict[str, StageResult]
#: (real path, line) of break sites
Places = Collection[tuple[str, int]]

#: what a candidate runs: every stage of the compile target (torch.cond, say, traces under explain and fails only
#: under compiled autograd)
VERIFY_STAGES = [s for s in STAGES if target_of(s) == COMPILE]
#: the groups a candidate's stages run in, the second (and the eager comparison) only when the first did not refuse
#: it: first where Dynamo stops and the break count, what a rewrite is meant to change (most refusals come from
#: these), then the rest. They are the groups the original's stages ran in (the diagnosis, then the baseline), so
#: that a finding is classified alike on both sides (classify settles a run's findings across its stages).
_FIRST = ("eager", "explain", "fullgraph", "opcheck")
VERIFY_PHASES = [[s for s in VERIFY_STAGES if s in _FIRST], [s for s in VERIFY_STAGES if s not in _FIRST]]


#: the one refusal a candidate may be held after (model_code.fix_model_code): Dynamo no longer stops at its lines,
#: but the break moved on (an ``.item()`` captured, its ``if`` breaking now), so only another site's rewrite with it
#: can lower the count
NOT_FEWER = "the graph breaks did not go down"


def _breaks(stages: Stages) -> int:
    """The distinct breaks explain saw (sites): graphs - 1 would reward a rewrite that makes Dynamo skip the frame
    (no graph, so "no break")."""
    explain = stages.get("explain")
    return explain.graph_break_sites if explain is not None and explain.graph_break_sites is not None else 0


def run_stages(path: str, name: str, stages: list[str], opts: FixOptions, progress: Progress | None,
               tag: str) -> RunReport:
    """``stages`` of the probe ``name`` in ``path``; raises RuntimeError where tracecheck itself failed."""
    report = api.run(api.RunOptions([path], stages=stages, only=name, jobs=opts.jobs, timeout_s=opts.timeout_s,
                                    command=["fix", tag, path]), progress)
    if report.internal_errors:  # tracecheck's own bug: the CLI exits 3, never "not kept"
        _, s = report.internal_errors[0]
        last = (s.internal_error or "").strip().splitlines()[-1:] or ["?"]
        raise RuntimeError(f"fixing model code: the {s.stage} stage failed inside tracecheck: {last[0]}")
    return report


def _first(result: StageResult) -> str:
    f = result.failure
    if f is None:
        return result.status
    what = f.evidence.gb_type or f.evidence.exception_type or ""
    return f"{f.kind}{': ' + what if what else ''}"


def _signatures(result: StageResult, skip: Places = frozenset()) -> set[tuple[str, str]]:
    """What a stage failed with, independent of line numbers (which differ between the original and the copy).
    ``skip``: (real path, line) of the other known break sites, in the copy or a library (once one break is gone,
    fullgraph reaches the next one: that is no new failure)."""
    # fullgraph stops at the first break left: which one that is says nothing new (explain counts them all)
    out = {(f.kind, f.evidence.gb_type or f.evidence.exception_type or "") for f in result.findings
           if not (f.kind in KINDS and (result.stage == "fullgraph" or f.user_frame is not None and
                                        f.user_frame.line is not None and
                                        (os.path.realpath(f.user_frame.file), f.user_frame.line) in skip))}
    return out | ({(result.status, "")} if result.status in ("timeout", "crash") else set())


@dataclass(frozen=True)
class Lines:
    """Where a candidate's site is in its copy: ``(file, first, last)`` ranges Dynamo must no longer stop in."""

    ranges: tuple[tuple[str, int, int], ...]

    @classmethod
    def of(cls, site: Site, patch: Patch, copy_line: CopyLine, lib_line: LibLine, copy: str) -> "Lines":
        if not site.file:
            lo, hi = (copy_line(n) for n in new_span(patch.edits, site.line, site.line))
            return cls(((os.path.realpath(copy), lo, hi),))
        # a library's line, which the probe's file does not edit: Dynamo must not stop there any more, nor at the
        # same line of the function the copy puts in place of the library's
        found = site.call.found if site.call is not None else None
        first, last = (found.first, found.last) if found is not None else (site.line, site.line)
        ranges = [(os.path.realpath(site.file), first, last)]
        lo, hi = new_span(patch.lib_edits(site.file), site.line, site.line)
        a, b = lib_line(site.file, lo), lib_line(site.file, hi)
        if a is not None and b is not None:
            ranges.append((os.path.realpath(copy), a, b))
        return cls(tuple(ranges))

    def hold(self, frame: Frame | None) -> bool:
        """Is ``frame`` (a finding's user frame) in these lines?"""
        line = frame.line if frame is not None else None
        return frame is not None and line is not None and any(
            lo <= line <= hi and os.path.realpath(frame.file) == here for here, lo, hi in self.ranges)


def other_sites(site: Site, found: list[Site], patch: Patch, copy_line: CopyLine, lib_line: LibLine,
                copy: str) -> set[tuple[str, int]]:
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


def _judge(lines: Lines, copy: str, before: Stages, after: Stages, others: Places = frozenset(),
           settled: bool = True) -> str | None:
    """Why the candidate is not kept, or None when it is (so far: ``after`` holds the stages run yet). ``lines``:
    where its site is in the copy; ``before``: stage -> result with the edits kept so far.
    ``settled=False``: stage results as they finish, before their run classifies them across stages, which may
    rename a crash's or an ``unknown`` finding (never a status): such a result fails anew only by status."""
    if LOAD_STAGE in after:
        return f"the patched copy does not load ({_first(after[LOAD_STAGE])})"
    for r in after.values():
        for f in r.findings:
            if f.kind in KINDS and lines.hold(f.user_frame):
                return f"Dynamo still stops at the rewritten lines ({r.stage}: {f.evidence.gb_type or f.kind})"
    worse = [f"{name}: {_first(r)}" for name, r in after.items() if r.status not in ("pass", "skip") and (
             name not in before or before[name].status in ("pass", "skip")
             or (settled or _final(r)) and _signatures(r, others) - _signatures(before[name]))]
    if worse:
        return "a stage fails that passed, or fails in a new way: " + "; ".join(worse)
    if _breaks(before) and "explain" in after and _breaks(after) >= _breaks(before):
        return f"{NOT_FEWER} ({_breaks(before)} -> {_breaks(after)})"
    return None


class _Refused(Exception):
    """A finished stage refused the candidate: the rest of its run is not needed."""


class _Watch(Relay):
    """The live display's progress, and the candidate judged as each stage finishes: ``judge(stages)`` says why
    not, and ``_Refused`` then leaves ``api.run`` (its Runner kills the stage processes still running)."""

    def __init__(self, inner: Progress | None, judge: Callable[[Stages], str | None]) -> None:
        super().__init__(inner)
        self.judge = judge
        self.stages: Stages = {}
        self.running: list[tuple[str, str]] = []

    def started(self, probe_id: str, stage: str) -> None:
        self.running.append((probe_id, stage))
        self.inner.started(probe_id, stage)

    def finished(self, probe_id: str, result: StageResult) -> None:
        if (probe_id, result.stage) in self.running:
            self.running.remove((probe_id, result.stage))
        self.inner.finished(probe_id, result)
        if result.status == INTERNAL:  # tracecheck's own bug: the run ends and run_stages says so (exit 3), no refusal
            return
        self.stages[result.stage] = result
        why = self.judge(self.stages)
        if why is not None:
            for pid, stage in self.running:  # the display's cells for them end too
                self.inner.finished(pid, StageResult(stage, SKIP, skip_reason="stopped: the candidate was refused"))
            raise _Refused(why)


def _final(result: StageResult) -> bool:
    """Settling the run leaves this result's findings as they are (classify/attribute: crashes renames a
    crash's, unknowns an ``unknown``)."""
    return result.status != CRASH and all(f.kind != K.UNKNOWN for f in result.findings)


def try_candidate(lines: Lines, patched: str, name: str, before: Stages, others: Places, opts: FixOptions,
                  progress: Progress | None, task: TaskRunner, dump: str) -> str | RunReport:
    """Run a written candidate group by group (``VERIFY_PHASES``), the eager comparison after the first, and stop
    at the first refusal: why it is not kept, or one report of every stage."""
    runs: list[RunReport] = []
    stages: Stages = {}
    for i, phase in enumerate(VERIFY_PHASES):
        watch = _Watch(progress, lambda done: _judge(lines, patched, before, done, others, settled=False))
        try:
            runs.append(run_stages(patched, name, phase, opts, watch, "--try"))
        except UsageError as e:  # the copy does not import: this candidate's fault, not the user's input
            return f"the patched copy does not load ({e})"
        except _Refused as e:
            return str(e)
        stages.update(runs[-1].probes[0].stages)
        why = _judge(lines, patched, before, stages, others)
        if why is None and i == 0:
            why = _eager_differs(task, patched, name, dump)
        if why is not None:
            return why
    last = runs[-1]
    probe = replace(last.probes[0], stages=dict(sorted(stages.items(), key=lambda kv: stage_order(kv[0]))))
    return replace(last, probes=[probe], stages=list(VERIFY_STAGES), seconds=round(sum(r.seconds for r in runs), 2))


def _eager_differs(task: TaskRunner, copy: str, name: str, dump: str) -> str | None:
    """Why the copy's eager outputs and gradients are not the original's (``dump``), or None when they are."""
    got = EagerComparison.of(task(EagerCompareTask(file=os.path.abspath(copy), probe=name, dump=dump),
                                  "running the patched probe eagerly"))
    if got.error is not None:
        return f"the rewritten probe fails eagerly: {got.error.type}: {got.error.message[:200]}"
    if got.mismatches:
        return f"its eager outputs/gradients differ from the original's ({len(got.mismatches)} mismatches)"
    return None


def gone(site: Site, kept: Patch, copies: Copies, patched: str, probe: ProbeReport, now: Stages) -> bool:
    """Has what is kept already taken the site's break away: the explain stage saw it in the original (which records
    every break, where fullgraph stops at the first), and no stage of the last kept copy stops at its lines?"""
    explain = probe.stages.get("explain")
    seen = explain is not None and any(
        f.kind in KINDS and f.user_frame is not None and f.user_frame.line == site.line and
        os.path.realpath(f.user_frame.file) == os.path.realpath(site.file or copies.path) for f in explain.findings)
    if not seen or "explain" not in now:
        return False
    _, copy_line, lib_line = copies.runnable(kept, patched)
    lines = Lines.of(site, kept, copy_line, lib_line, patched)
    return not any(f.kind in KINDS and lines.hold(f.user_frame) for r in now.values() for f in r.findings)

