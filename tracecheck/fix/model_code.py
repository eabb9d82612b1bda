"""``tracecheck fix`` for graph breaks in model code: source rewrites of the probe's own file, each one proven.

For every ``graph-break`` / ``data-dependent`` site in the probe's file (a finding's user frame), and every C
function the file calls straight from model code (``pybind-builtin`` outside an autograd.Function), the rewrites
that apply (rewrites.py, in registry order) are tried one at a time on the patched copy, on top of the ones
already kept. A candidate is kept when the compile target's stages show no break at the rewritten lines, fewer
breaks than before, and no stage failing that passed (a numeric mismatch included). The fix is verified when the
last copy kept passes every one of those stages and its eager outputs and gradients equal the original's. A
candidate's stages run in two groups (``VERIFY_PHASES``), the ones a rewrite is meant to change first, and the first
stage that refuses it ends its try (what still runs is stopped): trial.py. Parent side: user code runs in stage
processes only.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace

from ..model.progress import Progress
from ..model.exitcodes import UsageError
from ..model.report import ProbeReport, RunReport
from ..model.reportio import write_text_atomic
from .copies import Copies, Patch, how_to_apply
from .library import UPSTREAM_MARK
from .call_facts import CallAsk, CallSite, CCall, LibraryCall
from .outcome import FixOptions, FixOutcome, SiteOutcome, Tried
from .outputs import check_output
from .prelude import read_source
from .task_results import CallAnswer, CallsObserved, EagerRun
from ..model.taxonomy import MODEL_CODE_KINDS, K, kinds, rewrites_model_code
from .branches import branch_at
from .rewrites import KINDS, REWRITES, Candidate, c_call_at, candidates, why_none
from .sourcetext import Edit, Site, Source
from .status import NO_CODE_FIX, NOT_VERIFIED, VERIFIED
from .jobs import EagerDumpTask, ObserveCallsTask, TaskRunner
from .trial import NOT_FEWER, VERIFY_STAGES, Lines, Stages, gone, other_sites, run_stages, try_candidate
from .verify_shapes import check_shapes


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
            call = CCall(f.context.builtin or "") if f.kind == K.PYBIND_BUILTIN else None
            owner = f.evidence.owner
            # whose file it is: the upstream diff's header names it
            whose = f"{owner.name} {owner.version or ''}".strip() if owner is not None and owner.name else ""
            site = Site(frame.line, f.kind, f.evidence.gb_type or "", frame.code or "", call, owner=whose)
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
    """``found`` with what the ``custom-op`` rewrite needs for each C call (``Site.call``: c_call.py learns it in a
    stage process), or with why there is none."""
    calls = {s.line: _call_at(s, src) for s in found if s.kind == K.PYBIND_BUILTIN}
    files = {s.line: s.file for s in found if s.file and s.kind == K.PYBIND_BUILTIN}
    asks = [CallAsk(line, c, _library(line, files)) for line, c in calls.items() if isinstance(c, CallSite)]
    learnt: dict[int, CallAnswer] = {}
    if asks:
        try:
            answers = task(ObserveCallsTask(file=path, probe=name, namespace=namespace, sites=tuple(asks)),
                           "recording the C calls")
            learnt = {a.line: a for a in CallsObserved.of(answers).sites}
        except UsageError as e:  # the process died (a C function that crashed on a perturbed input): no facts
            learnt = {a.line: CallAnswer(a.line, error=f"recording the call failed ({e})") for a in asks}
    out = []
    for s in found:
        c = calls.get(s.line)
        if c is not None:
            known = s.call or CCall("")
            if isinstance(c, str):
                call = replace(known, error=c)
            else:
                answer = learnt.get(s.line)
                call = replace(known, found=c, library=_library(s.line, files),
                               op=answer.op if answer is not None else None,
                               error=(answer.error or "") if answer is not None else known.error)
            s = replace(s, call=call)
        out.append(s)
    return out


def _call_at(site: Site, probe_src: Source) -> CallSite | str:
    """The C call on the site's line, in the probe's text or the library file's (a string says why there is none)."""
    assert site.call is not None, "sites() gives a C call's site its builtin"
    builtin = site.call.builtin
    if not site.file:
        return c_call_at(probe_src, site.line, builtin)
    try:
        text = Source(read_source(site.file, utf8_only=True))
    except (UsageError, SyntaxError, ValueError) as e:
        return f"cannot read {site.file} ({e})"
    return c_call_at(text, site.line, builtin)


def _library(line: int, files: dict[int, str]) -> LibraryCall | None:
    """What c_call and the rewrite need for a C call in a library's file: the file, and the names the probe's
    file keeps its module and the original C function under; None for a call in the probe's file."""
    if line not in files:
        return None
    return LibraryCall(files[line], f"_tc_c_{line}", f"_tc_lib_{line}", _label(files[line]))


def _label(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else os.path.basename(path)


@dataclass
class _Held:
    """A candidate held for the next site (fix_model_code): its site, that site's outcome, and the candidate."""

    site: Site
    outcome: SiteOutcome
    cand: Candidate


def _same_call(site: Site, other: Site) -> bool:
    """Does the library site ``other`` rebind the same callee in the same module as ``site`` (one op serves every
    line of that library that calls it)?"""
    return bool(other.file) and None not in _callee(site) and _callee(other) == _callee(site)


def _callee(site: Site) -> tuple[str | None, str | None]:
    """The module a C call's custom op is installed in, and its callee (None where not known)."""
    c = site.call
    return (c.op.module if c is not None and c.op is not None else None,
            c.found.callee if c is not None and c.found is not None else None)


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
                   progress: Progress | None, task: TaskRunner) -> None:
    """Fill ``out`` (a pipeline.FixOutcome): sites, kept rewrites, the diff, the written files and the status.
    ``probe``: the diagnosis (a few stages); the other stages of the compile target run once on the original, so
    that a candidate is judged stage by stage against the same stages. ``task(work, what)``: one task (fix/jobs.py) in a
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
            why = site.call.error if site.call is not None else ""
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
    assert report is not None, "a copy kept with --verify comes with its stages' report (_search)"
    out.verification = report
    verdict = report.probes[0].verdict
    if verdict.status != "pass":
        out.reasons.append(f"the patched probe still fails: {', '.join(verdict.kinds)} (first at "
                           f"{verdict.first_failing_stage})")
    for site, outcome in zip(found, out.sites):
        rewrite = outcome.rewrite
        vacuous = _vacuous(src, site, rewrite, lines_run) if rewrite and not outcome.covered else None
        if vacuous:
            out.reasons.append(vacuous)
    # the custom ops written for C calls: their fakes at shapes the probe never used, as for a registration fix
    ops = [f"{opts.namespace}::{site.call.op.name}" for site, o in zip(found, out.sites)
           if o.rewrite == "custom-op" and not o.covered and site.call is not None and site.call.op is not None]
    if ops:
        check_shapes(task, patched, name, ops, out)
    out.status = NOT_VERIFIED if out.reasons else VERIFIED


def _search(opts: FixOptions, path: str, name: str, patched: str, probe: ProbeReport,
            plans: "list[tuple[Site, list[Candidate]]]", found: list[Site], out: FixOutcome, copies: Copies,
            progress: Progress | None, task: TaskRunner) -> "tuple[Patch, RunReport | None, set[int] | None]":
    """Try each site's candidates on the patched copy, on top of the ones kept so far: (what is kept, the last kept
    candidate's report, the probe file's lines the original ran). Fills each site's outcome."""
    kept = Patch()
    report: RunReport | None = None
    before: Stages = {}  # stage -> result, of the original and then of the last copy kept (set where they run)
    wrote = False
    lines_run: set[int] | None = None
    kept_at: list[tuple[Site, Candidate]] = []  # the site, and the candidate kept there
    with tempfile.TemporaryDirectory(prefix="tracecheck-fix-") as tmp:
        dump = os.path.join(tmp, "eager.pt")
        if any(c for _, c in plans) and opts.verify:
            rest = [s for s in VERIFY_STAGES if s not in probe.stages]
            before = {**probe.stages,
                      **(run_stages(path, name, rest, opts, progress, "--baseline").probes[0].stages if rest else {})}
            ref = EagerRun.of(task(EagerDumpTask(file=path, probe=name, dump=dump, lines_of=path),
                                   "running the original probe eagerly"))
            if ref.error is not None:
                out.status = NO_CODE_FIX
                out.reasons.append(f"the original probe fails eagerly ({ref.error.type}): nothing to compare a "
                                   "rewrite with")
                return kept, None, None
            lines_run = set(ref.lines)
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
            elif report is not None and gone(site, kept, copies, patched, probe, before):
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
                    others = other_sites(site, found, patch, copy_line, lib_line, patched)
                    lines = Lines.of(site, patch, copy_line, lib_line, patched)
                    run = try_candidate(lines, patched, name, before, others, opts, progress, task, dump)
                    outcome.tried.append(Tried(label, run if isinstance(run, str) else "kept"))
                    if isinstance(run, RunReport):
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
                    if base is None and held is None and run.startswith(NOT_FEWER):
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
    owners = {s.file: s.owner for s in found if s.file}
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

