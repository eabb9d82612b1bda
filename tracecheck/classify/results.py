"""Turn raw stage records (model/records.StageRecord, from stages/) and process outcomes (isolate/runner.py) into
classified ``StageResult``s, and a file's load into its ``load`` result (an import failure a kind explains is a
finding; any other is the user's input error, exit 2).

The one place that decides a stage's status; pure (no torch import), like pytest's
``TestReport.from_item_and_call``.
"""
from __future__ import annotations

import linecache
import os
import re
from typing import Any

from ..model import taxonomy
from . import detect, measured
from ..model.taxonomy import K
from ..model.payloads import CompiledAutogradCounts, GradcheckVerdict, StageNotes
from ..model.records import END_TO_END, Frame, StageRecord
from ..model.exitcodes import UsageError
from ..model.targets import Gate
from ..model.report import (CRASH, FAIL, LOAD_STAGE, PASS, SKIP, TIMEOUT, Finding, StageResult, headline, later_step,
                            op_name)


def build_stage_result(stage: str, raw: "dict[str, Any] | StageRecord", seconds: float) -> StageResult:
    """Classify one stage record. Status: fail when an error-severity finding was made, skip with a reason, else
    pass (advice findings, ``no-batching-rule`` and ``opaque-op``, are kept on a passing stage; ``apply_strict``
    makes them fail it). ``raw``: the stage's record (records.StageRecord, or its dict)."""
    rec = StageRecord.from_raw(raw)
    if rec.skip_reason:
        return StageResult(stage, SKIP, skip_reason=rec.skip_reason, seconds=seconds)
    findings: list[Finding] = []
    # a fake impl that disagrees with its kernel at another size (the dynamic stage) is the cause of whatever the
    # compiled run raised there: it comes first
    fakes = [f for f in _opcheck_findings(stage, rec.fake_checks) if f.kind == K.FAKE_MISMATCH]
    findings += fakes
    draft = [measured.draft_finding(d, rec.error) for d in rec.draft_export.get("failures", [])]
    findings += draft
    # draft_export's report explains the export error (one finding per failure) when one of them maps to a kind
    if rec.error and rec.error.get("phase") == "setup":  # the probe function itself, called again
        findings.append(setup_finding(rec.error, f"The probe function raises when the {stage} stage calls it "
                                                    "again (it ran when the file was loaded)."))
    elif rec.error and not any(f.kind != K.UNKNOWN for f in draft):
        findings.append(detect.classify_error(stage, rec.error))
        if fakes and findings[-1].kind in (K.UNKNOWN, K.BACKEND_ERROR):
            findings[-1] = _attributed(findings[-1], fakes[0], rec.error.get("batch_size"))
        if rec.same_as_eager and findings[-1].kind in (K.UNKNOWN, K.BACKEND_ERROR):
            findings[-1] = detect.classify_error("eager", rec.error)  # the probe's own failure, again
        if stage == "eager" and (rec.error.get("step") or 1) > 1:
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
        findings.append(measured.transform_mismatch_finding(m, stage) if m.get("transform")
                        else measured.mismatch_finding(m, stage))
    for msg in dict.fromkeys(rec.warnings):
        f = detect.classify_warning(msg)
        if f and not any(x.kind == f.kind for x in findings):
            findings.append(f)
    opchecked = _opcheck_findings(stage, rec.opcheck)
    grad_free = {op_name(op) for op in rec.grad_free_ops}
    grad_unused = {op_name(op) for op in rec.grad_unused_ops}
    not_needed = [f for f in opchecked if f.context.get("op") in grad_free | grad_unused and _about_the_ops_autograd(f)]
    findings += [f for f in opchecked if f not in not_needed]
    gradient_notes: list[str] = []
    calls = [o for o in rec.gradcheck if o.get("name") != END_TO_END]
    probe = next((o for o in rec.gradcheck if o.get("name") == END_TO_END), None)
    # the probe's gradient decides what a call's mismatch means (stages/gradcheck.py)
    right_end_to_end = probe is not None and not any(probe.get(k) for k in ("mismatch", "error", "skip",
                                                                             "inconclusive"))
    if probe is not None and probe.get("mismatch") and not any(o.get("mismatch") for o in calls):
        findings.append(measured.end_to_end_gradient_finding(probe, [o["name"] for o in calls if not o.get("skip")]))
    for outcome in calls:
        # an autograd.Function may reroute its gradient by design (an adjoint solver's events); a custom op's
        # registration is a contract of its own, whatever this probe's loss reads of it
        if outcome.get("mismatch") and right_end_to_end and outcome.get("function"):
            gradient_notes.append(
                f"whether the backward of {outcome['name']} is wrong: alone it differs from its forward's numerical "
                f"derivative (input {outcome['mismatch'].get('input', '?')}), but the probe's gradient matches the "
                "numerical derivative of its loss (a gradient rerouted by design: no finding)")
        elif outcome.get("mismatch"):
            findings.append(measured.gradient_finding(outcome))
        elif outcome.get("error"):
            findings.append(detect.classify_error(stage, outcome["error"],
                                                    op=None if outcome.get("function") else outcome["name"]))
    findings += [measured.specialization_finding(r) for r in rec.dynamic_specializations][:1]
    findings += recompile_findings(rec.steady_state_recompiles)
    findings += [measured.fallback_finding(r) for r in rec.fallback_ops]
    findings += [measured.opaque_finding(r, stage) for r in rec.opaque_ops]
    graph_count = rec.graph_count
    # a stage that raised counted the breaks up to the exception only: not a measurement of the probe
    measured_breaks = rec.breaks is not None and not rec.error
    errors = [f for f in findings if Gate().fails_on(f.kind)]  # a plain run's decision; apply_strict adds advice
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
        opcheck={op: {t: ("SUCCESS" if v == "SUCCESS" else "FAIL" if isinstance(v, dict) else v)
                      for t, v in tests.items()} for op, tests in rec.opcheck.items()} or None,
        gradcheck={o["name"]: _gradcheck_verdict(o) for o in calls} or None,
        probe_gradient=_gradcheck_verdict(probe) if probe is not None else None,
        explain_reasons=rec.explain_reasons or None,
        registered_custom_ops=rec.registered_custom_ops or None).to_extra())
    result.extra.update(rec.extra)
    not_checked = [
        f"the autograd of {op} ({', '.join(f.evidence.get('opcheck_test', '?') for f in not_needed if f.context['op'] == op)}"
        " failed), which this probe never uses: " + (
            "it calls the op only with gradients off (inside a torch.autograd.Function's forward, whose backward "
            "supplies the gradient, or under no_grad)" if op in grad_free else
            "no gradient reaches the op's outputs in the probe's backward (its loss does not depend on them: "
            "indices used to gather, say); register_autograd only matters once a gradient flows through the op")
        for op in dict.fromkeys(f.context["op"] for f in not_needed)] + gradient_notes
    if not_checked:
        result.extra.update(StageNotes(not_checked=(result.notes.not_checked or []) + not_checked).to_extra())
    return result


def apply_strict(stages: dict[str, StageResult]) -> None:
    """``--strict``: advice fails a stage as an error does (the first such finding becomes its failure)."""
    strict = Gate(strict=True)
    for s in stages.values():
        failing = [f for f in s.findings if strict.fails_on(f.kind)]
        if s.status == PASS and failing:
            s.status, s.failure = FAIL, failing[0]


def _about_the_ops_autograd(f: Finding) -> bool:
    """An opcheck failure about the op's own autograd: its registration, or gradients through it."""
    test = f.evidence.get("opcheck_test")
    return f.kind == K.MISSING_AUTOGRAD or test == "test_autograd_registration" or (
        test == "test_aot_dispatch_dynamic" and "Gradients of the operator are different" in str(f.evidence.get("message")))


def _attributed(f: Finding, cause: Finding, size: Any) -> Finding:
    """The compiled run's failure at a size where a fake impl disagrees with its kernel: that fake's kind."""
    first = (f.evidence.get("message") or "").strip().splitlines()
    what = next((ln for ln in first if ln and not ln.startswith("backend=")), f.kind)[:200]
    summary = (f"The compiled run at batch size {size} failed ({what}) (attributed: the fake impl of "
               f"{cause.context.get('op', '?')} disagrees with its kernel at that size).")
    return Finding(cause.kind, summary, {**cause.context, "attributed_from": f.kind}, f.evidence)


def _later_step(f: Finding, error: dict[str, Any]) -> Finding:
    """The eager stage's failure at a later training step (stages/eager.py ``second_step``): step 1 ran."""
    step = error["step"]
    summary = (f"{f.summary.rstrip('.')}: eager {later_step(step, error)} (state the model keeps across "
               "steps, such as a buffer left attached to the previous step's graph, breaks the next one).")
    return Finding(f.kind, summary, {**f.context, "step": step}, {**f.evidence, "step": step})


def _backend_checked(f: Finding, backend: str, error: dict[str, Any], other: dict[str, Any]) -> Finding:
    """A failure rerun with the other backend (compiled_autograd): the evidence says what each backend did; an
    ``unknown`` or ``backend-error`` that the other backend does not hit is this backend's (cause ``backend_only``)."""
    mine = headline(error, 300)
    theirs = (f"not run: {other['not_run']}" if other.get("not_run") else
              headline(other["error"], 300) if other.get("error") else "passes")
    evidence = {**f.evidence, "backends": {backend: mine, other["backend"]: "the same" if theirs == mine else theirs}}
    if theirs == "passes" and f.kind in (K.UNKNOWN, K.BACKEND_ERROR):
        ctx = {**f.context, "cause": "backend_only", "backend": backend, "other_backend": other["backend"],
               "stage": "compiled_autograd"}
        return Finding(K.BACKEND_ERROR, taxonomy.summary(K.BACKEND_ERROR, ctx), ctx, evidence)
    return Finding(f.kind, f.summary, {**f.context, "backend": backend}, evidence)


def _opcheck_findings(stage: str, results: dict[str, dict[str, Any]]) -> list[Finding]:
    """One finding per failed opcheck test (``{op: {test: "SUCCESS" or an error record}}``)."""
    findings = []
    for op, tests in results.items():
        for test, outcome in tests.items():
            if isinstance(outcome, dict):
                f = detect.classify_error(stage, outcome, op=op)
                f.evidence["opcheck_test"] = test
                if "batch_size" in outcome and f.kind == K.FAKE_MISMATCH:  # the dynamic stage's check at a new size
                    f.evidence["batch_size"] = outcome["batch_size"]
                    f.context.update(cause="size", batch_size=outcome["batch_size"])
                    f.summary = (f"{f.summary.rstrip('.')}, at batch size {outcome['batch_size']} (the probe's own "
                                 "batch size passes opcheck).")
                findings.append(f)
    return findings


def _gradcheck_verdict(o: dict[str, Any]) -> GradcheckVerdict:
    """What the report keeps of one call's gradient check: outcome, method, and the relative errors measured."""
    status = "FAIL" if o.get("mismatch") or o.get("error") else "SKIP" if o.get("skip") else \
        "INCONCLUSIVE" if o.get("inconclusive") else "SUCCESS"
    out = GradcheckVerdict(status=status)
    for key in ("method", "skip", "note", "relative_errors", "inconclusive"):
        if o.get(key):
            out[key] = o[key]
    return out


def recompile_findings(records: list[dict[str, Any]]) -> list[Finding]:
    """One ``recompile`` finding per steady-state cause (compiled_autograd.steady_state picked the records).

    A cause is the source plus the reason with digits masked (``self.step == 2``, ``key size 142`` change
    from step to step); for compiled autograd only the kind of cache miss before the colon counts (a new
    node each step is one cause, whichever node). The finding keeps the first reason, the user frame, the
    steps and the distinct reasons. Dynamo causes come first: they carry the user's line.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        source, reason = r.get("source", "?"), r.get("reason", "")
        cause = reason.split(":", 1)[0] if source == "compiled_autograd" else reason
        groups.setdefault((source, re.sub(r"\d+", "N", cause)), []).append(r)
    findings = []
    for (source, _), rs in sorted(groups.items(), key=lambda kv: kv[0][0] != "dynamo"):
        first = rs[0]
        frame = next((r.get("user_frame") for r in rs if r.get("user_frame")), None)
        what = "Dynamo recompiles" if source == "dynamo" else "Compiled autograd captures a new backward graph"
        where = f" ({fr.location})" if (fr := Frame.from_dict(frame)) else ""
        reasons = list(dict.fromkeys(r.get("reason", "") for r in rs))
        evidence: dict[str, Any] = {"user_frame": frame, "reason": first.get("reason", ""),
                                    "steps": sorted({r.get("step") for r in rs})}
        if len(reasons) > 1:
            evidence["reasons"] = reasons[:10]
        if first.get("user_frame_from"):
            evidence["user_frame_from"] = first["user_frame_from"]
        short = first.get("reason", "").split(" (HINT:", 1)[0][:300]  # the hint stays in context.reason
        findings.append(Finding(
            K.RECOMPILE, f"{what} on every step after warm-up{where}: {short}",
            {"reason": first.get("reason", ""), "source": source}, evidence))
    return findings


def died_result(stage: str, cause: str, timed_out: bool, log_tail: str, seconds: float) -> StageResult:
    """A stage whose process never reported: ``timeout`` or ``crash``, with the cause and stderr tail."""
    kind = K.TIMEOUT if timed_out else K.CRASH
    finding = Finding(kind, f"The {stage} stage {cause}.", {"cause": cause},
                      {"stderr_tail": log_tail[-3000:], "cause": cause})
    return StageResult(stage, TIMEOUT if timed_out else CRASH, failure=finding, findings=[finding], seconds=seconds)


_FAULT_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in ')
_OP_CALL_FILES = ("torch/_ops.py", "torch/_library/custom_ops.py")


def _crashed_calling(tail: str, op: str) -> bool:
    """Did the faulthandler stack (innermost first) die in an op call made from a user line that names ``op``, or
    made by torch while tracing the probe (the first caller outside torch is tracecheck's own stage code: Dynamo
    executes the user's lines symbolically, so no frame of theirs is on the stack)?"""
    frames = [(m.group("file"), int(m.group("line"))) for m in _FAULT_FRAME.finditer(tail)]
    short = op.split("::")[-1].split(".")[0]
    for i, (file, _) in enumerate(frames):
        if file.endswith(_OP_CALL_FILES):
            j = next((k for k in range(i + 1, len(frames)) if "/torch/" not in frames[k][0]), None)
            if j is None:
                return False
            traced = any("/torch/_dynamo/" in f for f, _ in frames[i:j])
            if traced and "/tracecheck/stages/" in frames[j][0].replace("\\", "/"):
                return True
            return short in linecache.getline(*frames[j])
    return False


def attribute_crashes(stages: dict[str, StageResult]) -> None:
    """A process that died calling a redefined op died of the redefinition.

    ``custom_op`` leaves the first handle pointing at a destroyed registration (pytorch PR #122344): calling
    it may raise or may segfault, run to run. When the faulthandler stack shows the process dying inside an
    op call made from a line that names the redefined op, the crash is labelled ``op-redefined`` (status stays
    ``crash``, signal and stack kept as evidence). Any other crash keeps the ``crash`` label.
    """
    load = stages.get(LOAD_STAGE)
    redefined = [f for f in (load.findings if load else []) if f.kind == K.OP_REDEFINED]
    for s in stages.values():
        if s.status != CRASH or not s.failure:
            continue
        tail = s.failure.evidence.get("stderr_tail", "")
        for r in redefined:
            op = r.context.get("op", "")
            if op and _crashed_calling(tail, op):
                f = Finding(K.OP_REDEFINED,
                            f"The {s.stage} stage died ({s.failure.context.get('cause')}) calling {op}, which was "
                            "redefined: the earlier handle points at a destroyed registration.",
                            {"op": op, "cause": s.failure.context.get("cause")}, dict(s.failure.evidence))
                s.failure, s.findings = f, [f]
                break


def _frame(f: Finding) -> tuple[Any, Any] | None:
    uf = f.user_frame
    return (uf.file, uf.line) if uf else None


def attribute_unknowns(stages: dict[str, StageResult]) -> None:
    """An ``unknown`` finding that repeats the eager stage's ``eager-error`` (same exception type, first message line
    and raising frame: opcheck or gradcheck running the failing code again) is that eager-error, attributed, with the
    eager finding's context (the op it re-ran is kept as ``evidence.rerun_of``). Otherwise, an ``unknown`` finding
    whose op, else user frame, is that of a root-cause finding of the same probe carries that finding's kind: opcheck's tests often fail with a bare message (``fake not written yet``) that the compile
    stages already explained. By line, a graph break counts as such a cause too (export failing where Dynamo broke
    the graph, at ``x.data_ptr()`` say). A heuristic, so it says so: ``context["first_seen_at"]`` names the stage (in stage
    order) whose finding it took, and the summary says it. ``stages`` is in stage order."""
    causes = [(s.stage, f) for s in stages.values() for f in s.findings
              if f.kind in taxonomy.root_cause_ids() and not f.context.get("warning")]  # a warning is no failure's cause
    eager = stages.get("eager")
    eager_error = next((f for f in (eager.findings if eager else []) if f.kind == K.EAGER_ERROR), None)
    # a graph break names no op, but an error at its line (export tracing into data_ptr, say) is that break's cause
    breaks = [(s.stage, f) for s in stages.values() for f in s.findings if f.kind == K.GRAPH_BREAK]
    for s in stages.values():
        for i, f in enumerate(s.findings):
            if f.kind != K.UNKNOWN:
                continue
            if eager_error is not None and _same_error(f, eager_error):
                # opcheck re-running the op, gradcheck re-running the Function: the eager failure again
                new = Finding(K.EAGER_ERROR, f"{eager_error.summary} (attributed: the {s.stage} stage ran the same "
                              "code again and hit the same error)", {**eager_error.context, "first_seen_at": "eager"},
                              {**f.evidence, "rerun_of": f.context.get("op")} if f.context.get("op") else f.evidence)
                if s.failure is f:
                    s.failure = new
                s.findings[i] = new
                continue
            op, frame = f.context.get("op"), _frame(f)
            by_op = next(((st, c) for st, c in causes if op and c.context.get("op") == op), None)
            root = by_op or next(((st, c) for st, c in causes + breaks if frame and _frame(c) == frame), None)
            if root is None:
                continue
            stage, c = root
            where = "while loading the file" if stage == LOAD_STAGE else f"at {stage}"
            new = Finding(c.kind, f"{c.summary} (attributed: the same {'op' if by_op else 'line'} failed {where})",
                          {**c.context, **f.context, "first_seen_at": stage}, f.evidence)
            if s.failure is f:
                s.failure = new
            s.findings[i] = new
    link_backward_shape(stages)
    name_by_transform(stages)
    advise_upstream(stages)


#: torch.func refusals (functorch-incompatible causes) of a construct that stops Dynamo for the same reason: a value
#: or a storage a traced tensor (FakeTensor, BatchedTensor) does not have
_SAME_OBSTACLE = frozenset({"storage", "item", "control_flow", "dynamic_shape"})


def name_by_transform(stages: dict[str, StageResult]) -> None:
    """A graph break with only the generic advice (no cause of its own: Dynamo's ``Observed exception`` at
    ``x.data_ptr()``, say) at the line where a torch.func stage's refusal names the construct (a data pointer read, an
    ``.item()``, a branch on a value: ``_SAME_OBSTACLE``) gets that construct and its fix for Dynamo (cause
    ``named_by_transform``): the same line stops both for the same reason, and the transform's words say which."""
    named = [(s.stage, f) for s in stages.values() for f in s.findings
             if f.kind == K.FUNCTORCH_INCOMPATIBLE and f.context.get("cause") in _SAME_OBSTACLE and _frame(f)]
    if not named:
        return
    for s in stages.values():
        for i, f in enumerate(s.findings):
            if f.kind != K.GRAPH_BREAK or f.context.get("cause") is not None or _frame(f) is None:
                continue
            found = next(((st, c) for st, c in named if _frame(c) == _frame(f)), None)
            if found is None:
                continue
            stage, c = found
            construct = c.context["cause"]
            refused = taxonomy.kinds()[K.FUNCTORCH_INCOMPATIBLE].refused_by_cause.get(construct, "")
            # the construct in torch.func's words; the fix in Dynamo's terms (kinds.json, graph-break's construct/*)
            ctx = {**f.context, "cause": "named_by_transform", "named_by": stage,
                   "construct": refused.lstrip(": ").replace("{", "(").replace("}", ")"),
                   "dynamo_fix": taxonomy.kinds()[K.GRAPH_BREAK].fix_by_cause[f"construct/{construct}"]}
            new = Finding(K.GRAPH_BREAK, taxonomy.summary(K.GRAPH_BREAK, ctx), ctx, f.evidence)
            if s.failure is f:
                s.failure = new
            s.findings[i] = new


#: autograd's words for a gradient whose shape is not its output's (torch/autograd/__init__.py _make_grads; the engine's
#: validate_outputs for a node's returned gradient)
_BACKWARD_SHAPE = (
    re.compile(r"Mismatch in shape: grad_output\[\d+\] has a shape of (?P<grad>torch\.Size\(\[[\d, ]*\]\)) and "
               r"output\[\d+\] has a shape of (?P<out>torch\.Size\(\[[\d, ]*\]\))"),
    re.compile(r"Function (?P<node>\w+) returned an invalid gradient at index \d+ - got (?P<grad>\[[\d, ]*\]) but "
               r"expected shape compatible with (?P<out>\[[\d, ]*\])"),
)


#: a fake-mismatch whose evidence is about shapes (opcheck's test_faketensor: ``Shapes torch.Size([..]) and
#: torch.Size([..]) are not equal``; real-tensor propagation's ``output size mismatch``): only such a fake can make a
#: backward's gradient and output shapes disagree. A dtype, stride or value mismatch, or a fake that raises, cannot.
_SHAPE_EVIDENCE = re.compile(r"Shapes torch\.Size\(\[[\d, ]*\]\) and torch\.Size\(\[[\d, ]*\]\) are not equal|"
                             r"output size mismatch|\bshape mismatch\b|mismatch(?:ed)? (?:in )?(?:shapes?|sizes?)\b", re.I)


def _about_shape(f: Finding) -> bool:
    """A fake-mismatch finding whose own evidence says the fake's output shape is not the kernel's (at the probe's
    own sizes: the dynamic stage's other batch size, cause ``size``, says nothing of the probe's)."""
    if f.context.get("cause") in ("raises", "aot_outputs", "size", "backward_shape") or "attributed_from" in f.context:
        return False
    return bool(_SHAPE_EVIDENCE.search(str(f.evidence.get("message") or "")))


def _found_by(stage: str, f: Finding) -> str:
    """Who found a fake-mismatch, in words: opcheck's test, else the stage that did."""
    test = f.evidence.get("opcheck_test")
    return f"opcheck's {test}" if test else f"the {stage} stage"


def _custom_ops_recorded(stages: dict[str, StageResult]) -> set[str]:
    """Every custom op the probe is known to call or register: opcheck's (the ops it checked), the eager stage's
    registrations, and the ops findings name."""
    ops: set[str] = set()
    for s in stages.values():
        notes = s.notes
        ops.update(op_name(op) for op in (notes.opcheck or {}))
        ops.update(op_name(op) for op in (notes.registered_custom_ops or []))
    return ops


def link_backward_shape(stages: dict[str, StageResult]) -> None:
    """A compiled run that fails on a backward shape mismatch (a ``backend-error`` or ``unknown``: autograd's
    ``Mismatch in shape: grad_output[0] ... output[0] ...``, or a node's ``invalid gradient``) in a probe where a custom
    op's fake impl was found returning the wrong shape (a ``fake-mismatch`` whose evidence is a shape mismatch,
    ``_about_shape``) is that fake-mismatch: the traced graph's shapes come from the fake. The op must be the one the
    autograd node is named after (``GeneratedBackwardFor_<ns>_<op>_<overload>Backward``), or the only custom op the
    probe is recorded to call; else nothing is linked. The finding names the op, the two shapes and who found the fake's
    mismatch (cause ``backward_shape``)."""
    fakes = [(s.stage, f) for s in stages.values() for f in s.findings
             if f.kind == K.FAKE_MISMATCH and f.context.get("op") and _about_shape(f)]
    if not fakes:
        return
    recorded = _custom_ops_recorded(stages) | {op_name(c.context["op"]) for _, c in fakes}
    for s in stages.values():
        for i, f in enumerate(s.findings):
            if f.kind not in (K.UNKNOWN, K.BACKEND_ERROR):
                continue
            message = str(f.evidence.get("message") or "")
            m = next((m for rx in _BACKWARD_SHAPE if (m := rx.search(message))), None)
            if m is None:
                continue
            node = m.groupdict().get("node") or ""
            named = [(st, c) for st, c in fakes
                     if node and f"For_{re.sub(r'[^A-Za-z0-9]+', '_', c.context['op'])}_" in node]
            only = [(st, c) for st, c in fakes if len(recorded) == 1 and op_name(c.context["op"]) in recorded]
            found = named[0] if named else only[0] if only and not node else None
            if found is None:
                continue
            stage, cause = found
            ctx = {"op": cause.context["op"], "cause": "backward_shape", "attributed_from": f.kind,
                   "mismatch": f"gradient {m.group('grad')}, output {m.group('out')}",
                   "found_by": _found_by(stage, cause), "first_seen_at": stage}
            new = Finding(K.FAKE_MISMATCH, taxonomy.summary(K.FAKE_MISMATCH, ctx), ctx, f.evidence)
            if s.failure is f:
                s.failure = new
            s.findings[i] = new
    _link_downstream_shape(stages, fakes, recorded)


#: a compiled run's error about sizes in the code that consumes an op's output (a matmul, a broadcast, a view, a
#: size check), where a fake that made up a shape shows: ``a and b must have same reduction dim, but got [4, 32] X
#: [16, 32]``, ``mat1 and mat2 shapes cannot be multiplied``, ``The size of tensor a (32) must match ...``
_SHAPE_ERROR = re.compile(r"must have same reduction dim|shapes cannot be multiplied|size mismatch|"
                          r"The size of tensor a \(.{1,40}?\) must match the size of tensor b|"
                          r"shape '\[.*?\]' is invalid for input of size|Sizes of tensors must match|"
                          r"expected size \S+==\S+|Expected size .{1,40} but got size", re.I)
#: opcheck's words for the kernel's and the fake's shape: torch compares ``compare_tensor_meta(real_out, fake_out)``
#: (torch/_subclasses/fake_utils.py ``_check_fake_real_tensors``, 2.13 and 2.14), so the real one comes first
_FAKE_SHAPES = re.compile(r"Shapes (?P<real>torch\.Size\(\[[^\]]*\]\)) and (?P<fake>torch\.Size\(\[[^\]]*\]\)) "
                          r"are not equal")


def _dims(size: str) -> list[str]:
    """``torch.Size([4, 32])`` -> ``["4", "32"]``."""
    return [d.strip() for d in size[size.index("[") + 1:size.rindex("]")].split(",") if d.strip()]


#: the shapes a size error names: ``[4, 32] X [16, 32]``, ``torch.Size([s77, 32])``, ``(4x32 and 16x32)``
_SHAPES_SAID = re.compile(r"\[([\w ,]+)\]|\((\w+(?:x\w+)+) and (\w+(?:x\w+)+)\)")


def _names_shape(message: str, fake: list[str]) -> bool:
    """Does the error name the fake's shape (a symbolic size, ``s77``, standing for any): the made-up shape reached
    the code that failed."""
    said: list[list[str]] = []
    for m in _SHAPES_SAID.finditer(message):
        if m.group(1):
            said.append([d.strip() for d in m.group(1).split(",") if d.strip()])
        else:
            said += [m.group(2).split("x"), m.group(3).split("x")]
    return any(len(dims) == len(fake) and all(d == e or re.fullmatch(r"[su]\d+", d) for d, e in zip(dims, fake))
               for dims in said)


def _link_downstream_shape(stages: dict[str, StageResult], fakes: list[tuple[str, Finding]],
                           recorded: set[str]) -> None:
    """A traced stage that fails on a size error in the code after a custom op (a ``backend-error`` or ``unknown``),
    in a probe whose eager run passes and whose one recorded custom op has a fake found returning the wrong shape,
    fails because of that fake: the graph was traced with the fake's shape, the real kernel never ran. It is that
    ``fake-mismatch``, at the fake's definition (where the fix goes), naming the op, the fake's and the kernel's
    shapes, and the line that tripped on the made-up shape (``tripped_at``: evidence, not the location; that code is
    right). The error must name the fake's shape (``_names_shape``): a size error elsewhere is not the fake's. With
    two ops whose fakes are wrong, or an eager run that fails too, nothing is linked."""
    from ..stages import REGISTRY

    eager = stages.get("eager")
    only = [(st, c) for st, c in fakes if len(recorded) == 1 and op_name(c.context["op"]) in recorded]
    if not only or eager is None or eager.status != PASS:
        return
    stage, cause = only[0]
    shapes = _FAKE_SHAPES.search(str(cause.evidence.get("message") or ""))
    if shapes is None:  # the fake's shape unknown: nothing ties a size error to it
        return
    fake_dims = _dims(shapes.group("fake"))
    mismatch = f"the fake returns {shapes.group('fake')}, the kernel {shapes.group('real')}"
    for s in stages.values():
        # a stage whose graph is traced with the ops' fakes (Dynamo's, AOTAutograd's); eager's never is
        if s.stage not in REGISTRY or not REGISTRY[s.stage].compiles or s.stage == "opcheck":
            continue
        for i, f in enumerate(s.findings):
            message = str(f.evidence.get("message") or "")
            if f.kind not in (K.UNKNOWN, K.BACKEND_ERROR) or not _SHAPE_ERROR.search(message) \
                    or not _names_shape(message, fake_dims):
                continue  # another size error (a hard-coded view at another batch size): not the fake's
            frame = f.user_frame
            tripped = (f"{os.path.relpath(frame.file) if os.path.isabs(frame.file) else frame.file}:{frame.line}"
                       if frame is not None else "the traced graph")
            ctx = {"op": cause.context["op"], "cause": "downstream_shape", "attributed_from": f.kind,
                   "mismatch": mismatch, "tripped_at": tripped, "found_by": _found_by(stage, cause),
                   "first_seen_at": stage}
            # at the fake's def; a fake with no Python def (a C++ Meta kernel) places nothing: the finding is the op's,
            # never at the line that tripped (that code is right)
            evidence = {**f.evidence, "user_frame": cause.evidence.get("user_frame")}
            new = Finding(K.FAKE_MISMATCH, taxonomy.summary(K.FAKE_MISMATCH, ctx), ctx, evidence)
            if s.failure is f:
                s.failure = new
            s.findings[i] = new


#: kinds whose code can make a compiler backend fail on a probe that runs eagerly: a custom op's fake or registration
#: that lies to the tracer, a backward that is wrong, the probe's own eager failure
_BACKEND_SUSPECTS = frozenset({K.FAKE_MISMATCH, K.MISSING_FAKE, K.MUTATES_ARGS_MISMATCH, K.MISSING_AUTOGRAD,
                               K.WRONG_GRADIENT, K.EAGER_ERROR, K.OP_REDEFINED})
#: never a suspect: a graph break is only where tracing stopped (most models have one); torch's own error is torch's;
#: an unplaced or dead stage says nothing of the code
_NEVER_SUSPECT = frozenset({K.GRAPH_BREAK, K.TORCH_INTERNAL_ERROR, K.BACKEND_ERROR, K.UNKNOWN, K.TIMEOUT, K.CRASH})


def _suspect_of(b: Finding, c: Finding) -> bool:
    """Can finding ``c`` be why the backend raised ``b``: its kind is one that makes backends fail, or it sits at the
    backend error's own user frame or names its op. Never a graph break, advice or torch's own error."""
    if c is b or c.kind in _NEVER_SUSPECT or c.kind not in taxonomy.kinds() \
            or taxonomy.kinds()[c.kind].severity != taxonomy.ERROR:
        return False
    if c.kind in _BACKEND_SUSPECTS:
        return True
    same_frame = _frame(b) is not None and _frame(c) == _frame(b)
    op = b.context.get("op")
    return same_frame or bool(op and c.context.get("op") == op)


def _suspect_where(c: Finding) -> str:
    """Where a suspect finding points: its frame, else the op it names, else its kind."""
    if c.user_frame is not None and c.user_frame.file:
        return c.user_frame.location
    return f"{c.kind} of {c.context['op']}" if c.context.get("op") else c.kind


def advise_upstream(stages: dict[str, StageResult]) -> None:
    """``backend-error``'s fix says "report upstream" only when no other finding of the probe can be why the backend
    failed (``_suspect_of``: a fake impl or registration that lies to the tracer, a wrong backward, an eager failure, or
    a finding at the backend error's own frame or op; never a graph break, advice or torch's own error): otherwise
    that code is the first suspect, and the fix says to fix it first (a new finding with cause ``suspect_code``, the
    suspects named)."""
    every = [f for s in stages.values() for f in s.findings]
    for s in stages.values():
        for i, f in enumerate(s.findings):
            if f.kind != K.BACKEND_ERROR or f.context.get("cause") is not None:
                continue
            where = ", ".join(dict.fromkeys(_suspect_where(c) for c in every if _suspect_of(f, c)))[:300]
            if not where:
                continue
            new = Finding(f.kind, f.summary, {**f.context, "cause": "suspect_code", "suspect": where}, f.evidence)
            if s.failure is f:
                s.failure = new
            s.findings[i] = new


#: an unplaced rerun is matched by its words alone only when they say something: at least this many characters and
#: words (never ``RuntimeError:`` or an empty first line)
_SPECIFIC = (24, 3)


def _same_error(f: Finding, other: Finding) -> bool:
    """The same exception: its type, the first line of its message and the frame that raised it. A re-raise with no
    frame of the user's under it (gradcheck re-running an autograd.Function whose forward raised inside torch's C
    code: save_for_backward given a float) is the same error when type and words agree and the words are specific
    (``_SPECIFIC``), or when both name the same op."""
    def line(x: Finding) -> str:
        lines = str(x.evidence.get("message") or "").strip().splitlines()
        return lines[0].strip() if lines else ""

    def key(x: Finding, frame: bool = True) -> tuple[Any, ...]:
        return x.evidence.get("exception_type"), line(x), _frame(x) if frame else None

    if not f.evidence.get("exception_type"):
        return False
    placed = _frame(f) is not None
    if not placed:
        words = line(f)
        same_op = bool(f.context.get("op")) and f.context.get("op") == other.context.get("op")
        specific = len(words) >= _SPECIFIC[0] and len(re.findall(r"[A-Za-z]{2,}", words)) >= _SPECIFIC[1]
        if not (specific or same_op):
            return False
    return key(f, placed) == key(other, placed)


def setup_finding(error: dict[str, Any], summary: str) -> Finding:
    """The probe function's own failure: its kind where a rule explains it, else ``eager-error`` (the probe's bug)."""
    f = detect.classify_error(LOAD_STAGE, error)
    return Finding(K.EAGER_ERROR, summary, f.context, f.evidence) if f.kind == K.UNKNOWN else f


def load_result(entry: dict[str, Any]) -> StageResult | None:
    """Findings made while loading the file and calling the probe function (the ``load`` pseudo-stage). A file
    whose import raised (``import_error``) gets a result only when a kind marked ``at_import`` in kinds.json
    explains the exception (a custom op's registration or first call refused by torch); any other import error
    is the user's input error: UsageError with the loader's message (exit code 2)."""
    setup = setup_finding(entry["setup_error"], "The probe function itself raises.") \
        if entry.get("setup_error") else None
    if entry.get("import_error") is not None and (setup is None or setup.kind not in taxonomy.import_ids()):
        raise UsageError(entry["import_error"], (entry.get("setup_error") or {}).get("traceback") or None)
    findings: list[Finding] = []
    for ev in entry.get("registrations", []):
        findings.append(Finding(
            K.OP_REDEFINED,
            f"Operator {ev['op']} was registered twice with different schemas; the second silently replaced "
            "the first.",
            {"op": ev["op"]},
            {"first_schema": ev["first_schema"], "second_schema": ev["second_schema"],
             "first_frame": ev.get("first_frame"), "user_frame": ev.get("second_frame")},
        ))
    if setup is not None:
        findings.append(setup)
    if not findings:
        return None
    return StageResult(LOAD_STAGE, FAIL, failure=findings[0], findings=findings)
