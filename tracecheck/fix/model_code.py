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

import difflib
import os
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

from .. import api
from ..model.exitcodes import UsageError
from ..model.report import CRASH, INTERNAL, LOAD_STAGE, SKIP, ProbeReport, RunReport, StageResult
from ..model.reportio import write_text_atomic
from ..model.targets import COMPILE
from ..stages import STAGES, target_of
from ..stages import order as stage_order
from .prelude import read_source, source_lines, with_prelude
from ..model.taxonomy import MODEL_CODE_KINDS, K, kinds, rewrites_model_code
from .rewrites import (REWRITES, Candidate, Edit, Site, Source, apply, branch_at, c_call_at, candidates,
                       new_span, overlap)
from .status import NO_CODE_FIX, NOT_VERIFIED, VERIFIED
from .tasks import EagerCompareTask, EagerDumpTask, ObserveCallsTask
from .verify_shapes import check_shapes

#: the first line of every diff ``fix`` writes: only such a file is ever overwritten by ``--diff``
DIFF_MARK = "# tracecheck fix: a rewrite of"
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


def sites(path: str, probe: ProbeReport) -> tuple[list[Site], list[str]]:
    """The break sites (one per line, first finding wins): the probe file's, then the C calls a library makes (the
    probe's file installs a custom op there); and the break locations outside the probe's file left alone."""
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
            facts = {"builtin": f.context.get("builtin") or ""} if f.kind == K.PYBIND_BUILTIN else None
            site = Site(frame.line, f.kind, f.evidence.get("gb_type") or "", frame.code or "", facts)
            if os.path.realpath(frame.file) == here:
                found.setdefault(frame.line, site)
            else:
                library.setdefault((os.path.realpath(frame.file), frame.line), replace(site, file=frame.file))
    # (a library line that shares its number with another site waits for a later run: outcomes are told apart by
    # line)
    extra: dict[int, Site] = {}
    for _, s in sorted(library.items()):
        if s.line not in found:
            extra.setdefault(s.line, s)
    return [found[k] for k in sorted(found)] + list(extra.values()), outside


def _c_calls(found: list[Site], src: Source, path: str, name: str, namespace: str, task: Any) -> list[Site]:
    """``found`` with the facts the ``custom-op`` rewrite needs for each C call (c_call.py learns them in a stage
    process), or with why there are none."""
    calls = {s.line: _call_at(s, src) for s in found if s.kind == K.PYBIND_BUILTIN}
    files = {s.line: s.file for s in found if s.file}
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
    explain = stages.get("explain")
    return explain.graph_break_count if explain is not None and explain.graph_break_count is not None else 0


class _Copies:
    """Patched copies of the probe file: the rewritten text (for the diff) and the runnable copy (the prelude that
    finds the original's imports, then the rewritten text)."""

    def __init__(self, path: str, text: str):
        self.path, self.text = path, text

    def rewritten(self, edits: list[Edit]) -> str:
        return apply(self.text, edits)

    def runnable(self, edits: list[Edit], where: str) -> tuple[str, Any]:
        """The copy to write at ``where``, and a map from a rewritten line to its line in that copy."""
        text, at, added = with_prelude(self.rewritten(edits), self.path, where)
        return text, lambda line: line + added if line >= at else line

    def diff(self, edits: list[Edit], label: str) -> str:
        """A unified diff from the original to the rewritten text (``git apply`` / ``patch -p1``), after a first
        line that says what wrote it (both tools skip text before the first ``---``)."""
        lines = difflib.unified_diff(source_lines(self.text, keepends=True),
                                     source_lines(self.rewritten(edits), keepends=True), f"a/{label}", f"b/{label}")
        # a last line without its newline gets the marker diff(1) writes, or git apply calls the patch corrupt
        body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
        return f"{DIFF_MARK} {label}\n{body}"


def _run(path: str, name: str, stages: list[str], opts: Any, progress: api.Progress | None, tag: str) -> RunReport:
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


def _signatures(result: Any, skip: set[int] = frozenset(), copy: str = "") -> set[tuple[str, str]]:
    """What a stage failed with, independent of line numbers (which differ between the original and the copy).
    ``skip``: lines of ``copy`` where other known break sites are (once one break is gone, fullgraph reaches the
    next one: that is no new failure)."""
    here = os.path.realpath(copy) if copy else ""
    out = {(f.kind, f.evidence.get("gb_type") or f.evidence.get("exception_type") or "") for f in result.findings
           if not (f.kind in KINDS and f.user_frame is not None and f.user_frame.line in skip
                   and os.path.realpath(f.user_frame.file) == here)}
    return out | ({(result.status, "")} if result.status in ("timeout", "crash") else set())


def _judge(site: Site, edits: list[Edit], copy_line: Any, copy: str, before: dict[str, Any],
           after: dict[str, Any], others: set[int] = frozenset(), settled: bool = True) -> str | None:
    """Why the candidate is not kept, or None when it is (so far: ``after`` holds the stages run yet). ``copy_line``
    maps a rewritten line to its line in ``copy``; ``before``: stage -> result with the edits kept so far.
    ``settled=False``: stage results as they finish, before their run classifies them across stages, which may
    rename a crash's or an ``unknown`` finding (never a status): such a result fails anew only by status."""
    if LOAD_STAGE in after:
        return f"the patched copy does not load ({_first(after[LOAD_STAGE])})"
    if site.file:  # a library's line, which the probe's file does not edit: Dynamo must not stop there any more
        first, last = (site.facts or {}).get("first", site.line), (site.facts or {}).get("last", site.line)
        lo, hi, here = first, last, os.path.realpath(site.file)
    else:
        lo, hi = (copy_line(n) for n in new_span(edits, site.line, site.line))
        here = os.path.realpath(copy)
    for r in after.values():
        for f in r.findings:
            frame = f.user_frame
            if f.kind in KINDS and frame is not None and frame.line is not None and lo <= frame.line <= hi \
                    and os.path.realpath(frame.file) == here:
                return f"Dynamo still stops at the rewritten lines ({r.stage}: {f.evidence.get('gb_type') or f.kind})"
    worse = [f"{name}: {_first(r)}" for name, r in after.items() if r.status not in ("pass", "skip") and (
             name not in before or before[name].status in ("pass", "skip")
             or (settled or _final(r)) and _signatures(r, others, copy) - _signatures(before[name]))]
    if worse:
        return "a stage fails that passed, or fails in a new way: " + "; ".join(worse)
    if _breaks(before) and "explain" in after and _breaks(after) >= _breaks(before):
        return f"the graph breaks did not go down ({_breaks(before)} -> {_breaks(after)})"
    return None


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


def _try(site: Site, edits: list[Edit], copy_line: Any, patched: str, name: str, before: dict[str, Any],
         others: set[int], opts: Any, progress: api.Progress | None, task: Any,
         dump: str) -> tuple[str | None, RunReport | None]:
    """Run a written candidate group by group (``VERIFY_PHASES``), the eager comparison after the first, and stop
    at the first refusal: (why it is not kept, None), or (None, one report of every stage)."""
    runs: list[RunReport] = []
    stages: dict[str, Any] = {}
    for i, phase in enumerate(VERIFY_PHASES):
        watch = _Watch(progress, lambda done: _judge(site, edits, copy_line, patched, before, done, others,
                                                     settled=False))
        try:
            runs.append(_run(patched, name, phase, opts, watch, "--try"))
        except UsageError as e:  # the copy does not import: this candidate's fault, not the user's input
            return f"the patched copy does not load ({e})", None
        except _Refused as e:
            return str(e), None
        stages.update(runs[-1].probes[0].stages)
        why = _judge(site, edits, copy_line, patched, before, stages, others)
        if why is None and i == 0:
            why = _eager_differs(task, patched, name, dump)
        if why is not None:
            return why, None
    last = runs[-1]
    probe = replace(last.probes[0], stages=dict(sorted(stages.items(), key=lambda kv: stage_order(kv[0]))))
    return None, replace(last, probes=[probe], stages=list(VERIFY_STAGES),
                         seconds=round(sum(r.seconds for r in runs), 2))


def _same_call(site: Site, found: list[Site], line: int) -> bool:
    """Does the library site kept at ``line`` rebind the same callee in the same module as ``site`` (one op serves
    every line of that library that calls it)?"""
    other = next((s for s in found if s.line == line and s.file), None)
    key = lambda s: ((s.facts or {}).get("module"), (s.facts or {}).get("callee"))  # noqa: E731
    return other is not None and None not in key(site) and key(other) == key(site)


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


def fix_model_code(opts: Any, path: str, name: str, patched: str, probe: ProbeReport, out: Any,
                   progress: api.Progress | None, task: Any) -> None:
    """Fill ``out`` (a pipeline.FixOutcome): sites, kept rewrites, the diff, the written files and the status.
    ``probe``: the diagnosis (a few stages); the other stages of the compile target run once on the original, so
    that a candidate is judged stage by stage against the same stages. ``task(work, what)``: one task (fix/tasks.py) in a
    stage process (pipeline._one)."""
    found, outside = sites(path, probe)
    if not found:  # (a break inside a library called from the probe's file has a site at that call too)
        out.status = NO_CODE_FIX
        out.no_code_fix = {k: kinds()[k].explain_command for k in out.kinds if k in kinds()}
        out.reasons = [f"the break at {where} is outside {os.path.basename(path)}; tracecheck rewrites the probe's "
                       "own file only" for where in outside] or \
            [f"no graph break of {os.path.basename(path)} has a user frame in it to rewrite"]
        return
    try:
        text = read_source(path, utf8_only=True)
    except UsageError as e:
        out.status, out.reasons = NO_CODE_FIX, [str(e)]
        return
    src, copies = Source(text), _Copies(path, text)
    found = _c_calls(found, src, path, name, opts.namespace, task)
    plans = [(site, candidates(src, site)) for site in found]
    for site, _ in plans:
        out.sites.append(SiteOutcome(site.line, site.kind, site.gb_type, site.code,
                                     file=_label(site.file) if site.file else ""))
    with tempfile.TemporaryDirectory(prefix="tracecheck-fix-") as tmp:
        dump = os.path.join(tmp, "eager.pt")
        lines_run = None
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
                return
            lines_run = set(ref["lines"])
        kept: list[Edit] = []
        report = None
        wrote = False
        kept_at: list[tuple[int, Candidate]] = []  # (site line, the candidate kept there)
        for (site, cands), outcome in zip(plans, out.sites):
            # one rewrite may take in two sites (an .item() and the `if` on its scalar): this one is done
            owner = next(((line, c) for line, c in kept_at if _same_call(site, found, line)), None) if site.file \
                else next(((line, c) for line, c in kept_at if _covers(c.edits, site.line)), None)
            if owner is not None:
                outcome.rewrite, outcome.note = owner[1].rewrite, f"rewritten with line {owner[0]}"
                outcome.covered = True
            for cand in cands if owner is None else ():
                if overlap(kept, cand.edits):
                    outcome.tried.append(Tried(cand.rewrite, "it overlaps a rewrite already kept"))
                    continue
                edits = _merge(kept, cand)
                try:
                    compile(copies.rewritten(edits), path, "exec")
                except (SyntaxError, ValueError) as e:  # (TabError is a SyntaxError) never run a copy that cannot parse
                    outcome.tried.append(Tried(cand.rewrite, f"not valid Python here ({e})"))
                    continue
                if not opts.verify:  # the first candidate of each site, unproven
                    kept, outcome.rewrite, outcome.note = edits, cand.rewrite, cand.note
                    kept_at.append((site.line, cand))
                    break
                runnable, copy_line = copies.runnable(edits, patched)
                write_text_atomic(patched, runnable)
                wrote = True
                others = {copy_line(new_span(edits, o.line, o.line)[0]) for o in found if o is not site and not o.file}
                why, run = _try(site, edits, copy_line, patched, name, before, others, opts, progress, task, dump)
                outcome.tried.append(Tried(cand.rewrite, why or "kept"))
                if why is None:
                    kept, before, report = edits, run.probes[0].stages, run
                    outcome.rewrite, outcome.note = cand.rewrite, cand.note
                    kept_at.append((site.line, cand))
                    break
            if outcome.rewrite:
                outcome.doc = REWRITES[outcome.rewrite].doc
    site_facts = {s.line: s.facts for s in found}
    for s in out.sites:
        if s.rewrite is None:
            why = (site_facts.get(s.line) or {}).get("error")
            out.reasons.append(f"{s.file + ':' if s.file else 'line '}{s.line} ({s.gb_type or s.kind}): " + (
                f"no rewrite applies{': ' + why if why else ''}" if not s.tried else
                f"no candidate was kept (tried {', '.join(t.rewrite for t in s.tried)}; why: above)"))
    if not kept:
        if wrote and os.path.exists(patched):  # the last candidate this run tried: not a fix
            os.remove(patched)
        out.status = NO_CODE_FIX
        return
    label = _label(path)
    out.diff = copies.diff(kept, label)
    write_text_atomic(patched, copies.runnable(kept, patched)[0])
    out.written = [patched]
    if opts.diff:
        write_text_atomic(opts.diff, out.diff)
        out.written.append(opts.diff)
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


def _eager_differs(task: Any, copy: str, name: str, dump: str) -> str | None:
    """Why the copy's eager outputs and gradients are not the original's (``dump``), or None when they are."""
    got = task(EagerCompareTask(file=os.path.abspath(copy), probe=name, dump=dump), "running the patched probe eagerly")
    if "error" in got:
        return f"the rewritten probe fails eagerly: {got['error']['type']}: {got['error']['message'][:200]}"
    if got.get("mismatches"):
        return f"its eager outputs/gradients differ from the original's ({len(got['mismatches'])} mismatches)"
    return None


def _merge(kept: list[Edit], cand: Candidate) -> list[Edit]:
    """The kept edits plus the candidate's, a module setting or import added once."""
    return kept + [e for e in cand.edits if e not in kept]
