"""Turn raw stage records (model/records.StageRecord, from stages/) and process outcomes (isolate/runner.py) into
classified ``StageResult``s, and a file's load into its ``load`` result (an import failure a kind explains is a
finding; any other is the user's input error, exit 2).

The one place that decides a stage's status; pure (no torch import), like pytest's
``TestReport.from_item_and_call``.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import replace
from typing import Any, Protocol

from ..model import taxonomy
from ..model.context import Context
from . import detect, measured
from ..model.taxonomy import K
from ..model.evidence import (Evidence, ExceptionEvidence, ProcessEvidence, RecompileEvidence,
                              RegistrationEvidence, opcheck_test)
from ..model.errors import ErrorRecord
from ..model.payloads import CompiledAutogradCounts, GradcheckVerdict, OtherBackend, StageNotes
from ..model.records import (COMPILED_AUTOGRAD, DYNAMO, END_TO_END, GradcheckOutcome, OpTests, RecompileRecord,
                             Redefinition, StageRecord, read_list)
from ..model.exitcodes import UsageError
from ..model.reportio import Json
from ..model.targets import Gate
from ..model.report import (CRASH, FAIL, LOAD_STAGE, PASS, SKIP, TIMEOUT, Finding, StageResult, later_step,
                            op_name)


def build_stage_result(stage: str, raw: "Json | StageRecord", seconds: float) -> StageResult:
    """Classify one stage record. Status: fail when an error-severity finding was made, skip with a reason, else
    pass (advice findings, ``no-batching-rule`` and ``opaque-op``, are kept on a passing stage; ``settle.under_strict``
    makes them fail it). ``raw``: the stage's record (records.StageRecord, or its dict)."""
    rec = StageRecord.from_raw(raw)
    if rec.skip_reason:
        return StageResult(stage, SKIP, skip_reason=rec.skip_reason, seconds=seconds)
    findings: list[Finding] = []
    # a fake impl that disagrees with its kernel at another size (the dynamic stage) is the cause of whatever the
    # compiled run raised there: it comes first
    fakes = [f for f in _opcheck_findings(stage, rec.fake_checks) if f.kind == K.FAKE_MISMATCH]
    findings += fakes
    draft = [measured.draft_finding(d, rec.error) for d in (rec.draft_export.failures if rec.draft_export else ())]
    findings += draft
    # draft_export's report explains the export error (one finding per failure) when one of them maps to a kind
    if rec.error and rec.error.phase == "setup":  # the probe function itself, called again
        findings.append(setup_finding(rec.error, f"The probe function raises when the {stage} stage calls it "
                                                    "again (it ran when the file was loaded)."))
    elif rec.error and not any(f.kind != K.UNKNOWN for f in draft):
        findings.append(detect.classify_error(stage, rec.error))
        if fakes and findings[-1].kind in (K.UNKNOWN, K.BACKEND_ERROR):
            findings[-1] = _attributed(findings[-1], fakes[0], rec.error.batch_size)
        if rec.same_as_eager and findings[-1].kind in (K.UNKNOWN, K.BACKEND_ERROR):
            findings[-1] = detect.classify_error("eager", rec.error)  # the probe's own failure, again
        if stage == "eager" and (rec.error.step or 1) > 1:
            findings[-1] = _later_step(findings[-1], rec.error)
        ca = CompiledAutogradCounts.of(rec.extra)
        if ca is not None and ca.other_backend:  # compiled_autograd reran the failing steps with its other backend
            findings[-1] = _backend_checked(findings[-1], ca.backend, rec.error, ca.other_backend)
    breaks = [detect.classify_break(b) for b in rec.breaks or []]
    # compiled autograd runs its backward graph as exec'd code (``<string>``): a break there is in torch's code
    findings += [detect.break_finding(b, generated_strings=stage == "compiled_autograd") for b in breaks]
    findings += measured.merge_refusals([measured.transform_error_finding(stage, e)
                                         for e in rec.transform_errors])
    for m in rec.mismatches:
        findings.append(measured.transform_mismatch_finding(m, stage) if m.transform
                        else measured.mismatch_finding(m, stage))
    for msg in dict.fromkeys(rec.warnings):
        f = detect.classify_warning(msg)
        if f and not any(x.kind == f.kind for x in findings):
            findings.append(f)
    opchecked = _opcheck_findings(stage, rec.opcheck)
    grad_free = {op_name(op) for op in rec.grad_free_ops}
    grad_unused = {op_name(op) for op in rec.grad_unused_ops}
    not_needed = [f for f in opchecked if f.context.op in grad_free | grad_unused and _about_the_ops_autograd(f)]
    findings += [f for f in opchecked if f not in not_needed]
    gradient_notes: list[str] = []
    calls = [o for o in rec.gradcheck if o.name != END_TO_END]
    probe = next((o for o in rec.gradcheck if o.name == END_TO_END), None)
    # the probe's gradient decides what a call's mismatch means (stages/gradcheck.py)
    right_end_to_end = probe is not None and not (probe.mismatch or probe.error or probe.skip or probe.inconclusive)
    if probe is not None and probe.mismatch and not any(o.mismatch for o in calls):
        findings.append(measured.end_to_end_gradient_finding(probe, [o.name for o in calls if not o.skip]))
    for outcome in calls:
        # an autograd.Function may reroute its gradient by design (an adjoint solver's events); a custom op's
        # registration is a contract of its own, whatever this probe's loss reads of it
        if outcome.mismatch and right_end_to_end and outcome.function:
            gradient_notes.append(
                f"whether the backward of {outcome.name} is wrong: alone it differs from its forward's numerical "
                f"derivative (input {outcome.mismatch.input}), but the probe's gradient matches the "
                "numerical derivative of its loss (a gradient rerouted by design: no finding)")
        elif outcome.mismatch:
            findings.append(measured.gradient_finding(outcome))
        elif outcome.error:
            findings.append(detect.classify_error(stage, outcome.error, op=None if outcome.function else outcome.name))
    findings += [measured.specialization_finding(r) for r in rec.dynamic_specializations][:1]
    findings += recompile_findings(rec.steady_state_recompiles)
    findings += [measured.fallback_finding(r) for r in rec.fallback_ops]
    findings += [measured.opaque_finding(r, stage) for r in rec.opaque_ops]
    graph_count = rec.graph_count
    # a stage that raised counted the breaks up to the exception only: not a measurement of the probe
    measured_breaks = rec.breaks is not None and not rec.error
    errors = [f for f in findings if Gate().fails_on(f.kind)]  # a plain run's decision; settle.under_strict adds advice
    result = StageResult(
        stage=stage,
        status=FAIL if errors else PASS,
        failure=errors[0] if errors else None,
        findings=findings,
        graph_count=graph_count,
        graph_break_count=rec.graph_break_count if measured_breaks else None,
        graph_break_sites=len(breaks) if measured_breaks else None,
        dynamo_graph_break_count=rec.dynamo_graph_break_count if measured_breaks else None,
        breaks=breaks,
        seconds=seconds,
        phases=rec.phases,
    )
    result.extra.update(StageNotes(
        opcheck={op: {t: ("SUCCESS" if v == "SUCCESS" else "FAIL" if isinstance(v, ErrorRecord) else v)
                      for t, v in tests.items()} for op, tests in rec.opcheck.items()} or None,
        gradcheck={o.name: _gradcheck_verdict(o) for o in calls} or None,
        probe_gradient=_gradcheck_verdict(probe) if probe is not None else None,
        explain_reasons=rec.explain_reasons or None,
        registered_custom_ops=rec.registered_custom_ops or None).to_extra())
    result.extra.update(rec.extra)
    not_checked = [
        f"the autograd of {op} ({', '.join(opcheck_test(f.evidence) or '?' for f in not_needed if f.context.op == op)}"
        " failed), which this probe never uses: " + (
            "it calls the op only with gradients off (inside a torch.autograd.Function's forward, whose backward "
            "supplies the gradient, or under no_grad)" if op in grad_free else
            "no gradient reaches the op's outputs in the probe's backward (its loss does not depend on them: "
            "indices used to gather, say); register_autograd only matters once a gradient flows through the op")
        for op in dict.fromkeys(f.context.op for f in not_needed)] + gradient_notes
    if not_checked:
        result.extra.update(StageNotes(not_checked=(result.notes.not_checked or []) + not_checked).to_extra())
    return result


def _with(ev: Evidence, **changes: Any) -> Evidence:
    """An exception's evidence with ``changes`` (what classify_error made; other kinds of evidence have none of these
    fields and are kept as they are)."""
    return dataclasses.replace(ev, **changes) if isinstance(ev, ExceptionEvidence) else ev


def _about_the_ops_autograd(f: Finding) -> bool:
    """An opcheck failure about the op's own autograd: its registration, or gradients through it."""
    test = opcheck_test(f.evidence)
    return f.kind == K.MISSING_AUTOGRAD or test == "test_autograd_registration" or (
        test == "test_aot_dispatch_dynamic" and "Gradients of the operator are different" in f.evidence.message)


def _attributed(f: Finding, cause: Finding, size: int | None) -> Finding:
    """The compiled run's failure at a size where a fake impl disagrees with its kernel: that fake's kind."""
    first = f.evidence.message.strip().splitlines()
    what = next((ln for ln in first if ln and not ln.startswith("backend=")), f.kind)[:200]
    summary = (f"The compiled run at batch size {size} failed ({what}) (attributed: the fake impl of "
               f"{cause.context.op if cause.context.op is not None else '?'} disagrees with its kernel at that size).")
    return Finding(cause.kind, summary, replace(cause.context, attributed_from=f.kind), f.evidence)


def _later_step(f: Finding, error: ErrorRecord) -> Finding:
    """The eager stage's failure at a later training step (stages/eager.py ``second_step``): step 1 ran."""
    step = error.step or 1
    summary = (f"{f.summary.rstrip('.')}: eager {later_step(step, error)} (state the model keeps across "
               "steps, such as a buffer left attached to the previous step's graph, breaks the next one).")
    return Finding(f.kind, summary, replace(f.context, step=step), _with(f.evidence, step=step))


def _backend_checked(f: Finding, backend: str, error: ErrorRecord, other: OtherBackend) -> Finding:
    """A failure rerun with the other backend (compiled_autograd): the evidence says what each backend did; an
    ``unknown`` or ``backend-error`` that the other backend does not hit is this backend's (cause ``backend_only``)."""
    mine = error.headline(300)
    theirs = (f"not run: {other.not_run}" if other.not_run else
              other.error.headline(300) if other.error else "passes")
    evidence = _with(f.evidence, backends={backend: mine, other.backend: "the same" if theirs == mine else theirs})
    if theirs == "passes" and f.kind in (K.UNKNOWN, K.BACKEND_ERROR):
        ctx = replace(f.context, cause="backend_only", backend=backend, other_backend=other.backend,
                      stage="compiled_autograd")
        return Finding(K.BACKEND_ERROR, taxonomy.summary(K.BACKEND_ERROR, ctx), ctx, evidence)
    return Finding(f.kind, f.summary, replace(f.context, backend=backend), evidence)


def _opcheck_findings(stage: str, results: dict[str, OpTests]) -> list[Finding]:
    """One finding per failed opcheck test (``{op: {test: "SUCCESS" or an error record}}``)."""
    findings = []
    for op, tests in results.items():
        for test, outcome in tests.items():
            if isinstance(outcome, ErrorRecord):
                f = detect.classify_error(stage, outcome, op=op)
                f.evidence = _with(f.evidence, opcheck_test=test)
                size = outcome.batch_size
                if size is not None and f.kind == K.FAKE_MISMATCH:  # the dynamic stage's check at a new size
                    f.evidence = _with(f.evidence, batch_size=size)
                    f.context = replace(f.context, cause="size", batch_size=size)
                    f.summary = (f"{f.summary.rstrip('.')}, at batch size {size} (the probe's own "
                                 "batch size passes opcheck).")
                findings.append(f)
    return findings


def _gradcheck_verdict(o: GradcheckOutcome) -> GradcheckVerdict:
    """What the report keeps of one call's gradient check: outcome, method, and the relative errors measured."""
    status = "FAIL" if o.mismatch or o.error else "SKIP" if o.skip else \
        "INCONCLUSIVE" if o.inconclusive else "SUCCESS"
    out = GradcheckVerdict(status=status)
    if o.method:
        out["method"] = o.method
    if o.skip:
        out["skip"] = o.skip
    if o.note:
        out["note"] = o.note
    if o.relative_errors:
        out["relative_errors"] = dict(o.relative_errors)
    if o.inconclusive:
        out["inconclusive"] = dict(o.inconclusive)
    return out


def recompile_findings(records: list[RecompileRecord]) -> list[Finding]:
    """One ``recompile`` finding per steady-state cause (compiled_autograd.steady_state picked the records).

    A cause is the source plus the reason with digits masked (``self.step == 2``, ``key size 142`` change
    from step to step); for compiled autograd only the kind of cache miss before the colon counts (a new
    node each step is one cause, whichever node). The finding keeps the first reason, the user frame, the
    steps and the distinct reasons. Dynamo causes come first: they carry the user's line.
    """
    groups: dict[tuple[str, str], list[RecompileRecord]] = {}
    for r in records:
        cause = r.reason.split(":", 1)[0] if r.source == COMPILED_AUTOGRAD else r.reason
        groups.setdefault((r.source, re.sub(r"\d+", "N", cause)), []).append(r)
    findings = []
    for (source, _), rs in sorted(groups.items(), key=lambda kv: kv[0][0] != DYNAMO):
        first = rs[0]
        fr = next((r.user_frame for r in rs if r.user_frame), None)
        what = "Dynamo recompiles" if source == DYNAMO else "Compiled autograd captures a new backward graph"
        where = f" ({fr.location})" if fr else ""
        reasons = list(dict.fromkeys(r.reason for r in rs))
        evidence = RecompileEvidence(user_frame=fr, reason=first.reason,
                                     steps=tuple(sorted({r.step for r in rs})),
                                     reasons=tuple(reasons[:10]) if len(reasons) > 1 else (),
                                     user_frame_from=first.user_frame_from or None)
        short = first.reason.split(" (HINT:", 1)[0][:300]  # the hint stays in context.reason
        findings.append(Finding(
            K.RECOMPILE, f"{what} on every step after warm-up{where}: {short}",
            Context(reason=first.reason, source=source), evidence))
    return findings


def died_result(stage: str, cause: str, timed_out: bool, log_tail: str, seconds: float) -> StageResult:
    """A stage whose process never reported: ``timeout`` or ``crash``, with the cause and stderr tail."""
    kind = K.TIMEOUT if timed_out else K.CRASH
    finding = Finding(kind, f"The {stage} stage {cause}.", Context(cause=cause),
                      ProcessEvidence(stderr_tail=log_tail[-3000:], cause=cause))
    return StageResult(stage, TIMEOUT if timed_out else CRASH, failure=finding, findings=[finding], seconds=seconds)




def setup_finding(error: ErrorRecord, summary: str) -> Finding:
    """The probe function's own failure: its kind where a rule explains it, else ``eager-error`` (the probe's bug)."""
    f = detect.classify_error(LOAD_STAGE, error)
    return Finding(K.EAGER_ERROR, summary, f.context, f.evidence) if f.kind == K.UNKNOWN else f


class Surveyed(Protocol):
    """What discovery found of one probe (collect/survey.ProbeEntry, which classify does not import): the probe
    function's error and the file's import error, and the op registrations they made, as they crossed from its
    process."""

    @property
    def setup_error(self) -> Json | None: ...
    @property
    def registrations(self) -> list[Json] | None: ...
    @property
    def import_error(self) -> str | None: ...


def load_result(entry: Surveyed) -> StageResult | None:
    """Findings made while loading the file and calling the probe function (the ``load`` pseudo-stage). A file
    whose import raised (``import_error``) gets a result only when a kind marked ``at_import`` in kinds.json
    explains the exception (a custom op's registration or first call refused by torch); any other import error
    is the user's input error: UsageError with the loader's message (exit code 2). ``entry``: the file's survey
    (collect/survey.py), the probe function's error in its wire form."""
    error = ErrorRecord.of(entry.setup_error)
    setup = setup_finding(error, "The probe function itself raises.") if error else None
    if entry.import_error is not None and (setup is None or setup.kind not in taxonomy.import_ids()):
        raise UsageError(entry.import_error, error.traceback or None if error else None)
    findings: list[Finding] = []
    for r in read_list(entry.registrations, Redefinition.of):
        findings.append(Finding(
            K.OP_REDEFINED,
            f"Operator {r.op} was registered twice with different schemas; the second silently replaced "
            "the first.",
            Context(op=r.op),
            RegistrationEvidence(first_schema=r.first_schema, second_schema=r.second_schema,
                                 first_frame=r.first_frame, user_frame=r.second_frame),
        ))
    if setup is not None:
        findings.append(setup)
    if not findings:
        return None
    return StageResult(LOAD_STAGE, FAIL, failure=findings[0], findings=findings)
