"""Findings from what a stage measured rather than raised: compiled-vs-eager mismatches, gradcheck outcomes,
specialized dynamic dimensions, torch.func refusals and mismatches, functorch fallbacks, opaque Inductor kernels,
draft_export failures. Pure: no torch import."""
from __future__ import annotations

import dataclasses
from dataclasses import replace

from ..model import taxonomy
from ..model.context import Context
from ..model.taxonomy import K
from ..model.errors import ErrorRecord
from ..model.evidence import (DraftExportEvidence, ExceptionEvidence, FallbackEvidence, GradientEvidence,
                              NumericEvidence, OpaqueEvidence, SpecializationEvidence)
from ..model.records import (DraftFailure, FallbackOp, GradcheckOutcome, GradientMismatch, MismatchRecord, OpaqueOp,
                             SpecializedDimension)
from ..model.report import Finding, op_name
from .detect import SOME_FUNCTION, classify_error, fill_summary, trim


def mismatch_finding(raw: MismatchRecord, stage: str = "compile") -> Finding:
    """One phase's compiled-vs-eager disagreement (stages/_execution.compare / stages/_numerics.judge): ``phase``,
    ``worst`` (the worst tensor: ``what``, and ``detail`` or its errors), ``disagreeing`` of ``compared`` tensors,
    ``fp64_reference``, and the ``custom_ops``/``random_ops`` one eager forward called. The cause is the one the
    evidence supports: custom ops only when the probe calls one."""
    phase = raw.phase
    worst = raw.worst
    what = worst.what or "?"
    if worst.detail and worst.max_abs_diff is None:
        how = worst.detail
    else:
        bits = [f"max abs diff {worst.max_abs_diff:.3g}" if worst.max_abs_diff is not None else "",
                f"RMSE vs {worst.reference_dtype or 'float64'}: compiled {worst.rmse_compiled_vs_fp64:.3g}, eager "
                f"{worst.rmse_eager_vs_fp64:.3g}" if worst.rmse_compiled_vs_fp64 is not None
                and worst.rmse_eager_vs_fp64 is not None else "",
                f"cosine {worst.cos_similarity:.4f}" if worst.cos_similarity is not None else "",
                f"dtype {worst.dtype}" if worst.dtype else ""]
        how = ", ".join(b for b in bits if b)
    n, total = raw.disagreeing, raw.compared
    tensors = "outputs" if phase == "forward" else "gradients"
    custom, random_ops = list(raw.custom_ops or ()), list(raw.random_ops)
    ctx = Context(what=f"{phase} {tensors}", phase=phase, tensor=what, stage=stage,
                  cause="custom-op" if custom else "random" if random_ops else "backend",
                  custom_ops=tuple(custom), random_ops=tuple(random_ops))
    summary = (f"Compiled {tensors} differ from eager: {n} of {total} disagree; worst {what} ({how})."
               if n > 1 or total > 1 else f"Compiled {what} differs from eager ({how}).")
    evidence = NumericEvidence.carrying(raw, phase=phase or None)
    return Finding(K.NUMERIC_MISMATCH, summary, ctx, evidence)


def gradient_finding(outcome: GradcheckOutcome) -> Finding:
    """One call whose backward disagrees with numerical derivatives (stages/_gradients: an outcome with a
    ``mismatch``)."""
    m = _mismatch(outcome)
    ctx = Context(op=outcome.name if outcome.function else op_name(outcome.name), input=m.input,
                  output=m.output or "its outputs",
                  # an autograd.Function's qualified name, which is no op spelling (model/report.finding_key)
                  op_is_label=bool(outcome.function),
                  numerical=f"{m.numerical:.6g}", analytical=f"{m.analytical:.6g}",
                  relative_error=f"{m.relative_error:.3g}")
    return Finding(K.WRONG_GRADIENT, fill_summary(K.WRONG_GRADIENT, ctx, "gradcheck"), ctx, _gradient(outcome, m))


def _mismatch(outcome: GradcheckOutcome) -> GradientMismatch:
    if outcome.mismatch is None:
        raise ValueError(f"{outcome.name}: a gradient finding of an outcome with no mismatch")
    return outcome.mismatch


def _gradient(outcome: GradcheckOutcome, m: GradientMismatch) -> GradientEvidence:
    """A gradient check's mismatch (stages/_gradients: the outcome's ``method``, ``note`` and its ``mismatch``)."""
    return GradientEvidence(method=outcome.method or None, note=outcome.note or None, input=m.input or None,
                            output=m.output, ratio=m.ratio, numerical=m.numerical, analytical=m.analytical,
                            relative_error=m.relative_error, tolerance=m.tolerance, atol=m.atol, step=m.step)


def end_to_end_gradient_finding(outcome: GradcheckOutcome, calls: list[str]) -> Finding:
    """The probe's gradient (``.grad`` after ``loss.backward()``) disagrees with the numerical derivative of its loss
    while each call's own backward agrees with its forward (stages/_gradients.end_to_end): a gradient written
    besides autograd. ``ratio``: the autograd value over the numerical one (2.0: accumulated twice)."""
    m = _mismatch(outcome)
    ctx = Context(op=", ".join(calls) or "the probe", op_is_label=True, input=m.input, output="the loss",
                  numerical=f"{m.numerical:.6g}", analytical=f"{m.analytical:.6g}",
                  relative_error=f"{m.relative_error:.3g}", cause="end_to_end",
                  ratio=f"{m.ratio:.3g}" if m.ratio is not None else "?")
    return Finding(K.WRONG_GRADIENT, fill_summary(K.WRONG_GRADIENT, ctx, "gradcheck"), ctx, _gradient(outcome, m))


def specialization_finding(raw: SpecializedDimension) -> Finding:
    """A dimension compiled as dynamic (the batch dimension, marked) that still recompiles at every new size
    (stages/dynamic.py): the guard that failed (``reason``, ``user_frame``) and, when the trace saw it, the
    specialization with the frame whose code forced the constant (a fake impl's ``int(x.shape[0])``, say)."""
    spec, guard = raw.specialization, raw.guard
    # a frame with a file (not exec'd code, ``<string>:1``): the specialization's own, else the guard's
    frames = (spec.frame if spec else None, guard.user_frame)
    frame = next((f for f in frames if f is not None and f.file and not f.file.startswith("<")), None) \
        or frames[0] or frames[1]
    source = (spec.sources[0] if spec and spec.sources else None) or "a dimension"
    guarded = guard.reason.split("  #", 1)[0].strip()[:160] or "?"
    ctx = Context(source=source, value=(spec.value or "") if spec else "a constant", reason=guard.reason,
                  guard=guarded, sizes=", ".join(map(str, raw.batch_sizes)) or "?",
                  by=(f" by `{frame.code}` ({frame.location})" if frame.code and frame.code != "None" else
                      f" at {frame.location}") if frame else "")
    if guarded.startswith("___check_metadata"):
        # Dynamo guards a tensor subclass's flatten context: the fix is in the subclass, at the guard's line
        ctx = replace(ctx, cause="subclass_metadata",
                      guard_at=guard.user_frame.location if guard.user_frame else "the guarded call")
        frame = guard.user_frame or frame
    evidence = SpecializationEvidence(reason=guard.reason, user_frame=frame, guard_user_frame=guard.user_frame,
                                      specialization=spec, step=guard.step)
    return Finding(K.DYNAMIC_SHAPE, fill_summary(K.DYNAMIC_SHAPE, ctx, "dynamic"), ctx, evidence)


def transform_error_finding(stage: str, raw: ErrorRecord) -> Finding:
    """A torch.func transform that raised (stages/vmap.py: an error record with ``transform``, and ``functions``:
    the old-style autograd.Function classes the probe calls). A refusal the rules know is
    ``functorch-incompatible``; any other error is classified as usual, with the transform named."""
    transform = raw.transform or "vmap"
    f = classify_error(stage, raw)
    if isinstance(f.evidence, ExceptionEvidence):
        f.evidence = dataclasses.replace(f.evidence, transform=transform)
    if f.kind == K.FUNCTORCH_INCOMPATIBLE:
        functions = list(raw.functions)
        if functions and f.context.function in (None, SOME_FUNCTION):
            f.context = replace(f.context, function=", ".join(functions))
        tb = raw.traceback.replace("\\", "/")
        if f.context.cause == "setup_context" and not functions:
            # torch's own old-style Functions: checkpoint(use_reentrant=True), a module's backward hooks
            for file, cause in (("torch/utils/checkpoint.py", "checkpoint"), ("torch/utils/hooks.py", "module_hook")):
                if file in tb:
                    f.context = replace(f.context, cause=cause, function=None)
                    break
        f.summary = fill_summary(f.kind, f.context, stage)
    else:
        f.context = replace(f.context, transform=transform)
        f.summary = f"Under torch.func.{transform}: {f.summary}"
    return f


def merge_refusals(findings: list[Finding]) -> list[Finding]:
    """vmap and grad refused for one cause at one frame (an old-style autograd.Function refuses both): one finding
    that names both transforms, instead of a second that a report would fold away as the same problem."""
    out: list[Finding] = []
    for f in findings:
        same = next((o for o in out if f.kind == o.kind == K.FUNCTORCH_INCOMPATIBLE
                     and o.context.cause == f.context.cause
                     and o.user_frame == f.user_frame), None)
        if same is None:
            out.append(f)
            continue
        first, second = same.context.transform, f.context.transform
        same.context = replace(same.context, transforms=(first or "", second or ""))
        same.summary = same.summary.replace(f"torch.func.{first} refuses",
                                            f"torch.func.{first} and torch.func.{second} refuse", 1)
    return out


def transform_mismatch_finding(raw: MismatchRecord, stage: str) -> Finding:
    """torch.func.vmap's outputs against the eager loop over the batch, or torch.func.grad's gradients against
    autograd's, that disagree (a numeric-mismatch whose cause is the transform: a batching rule, say)."""
    f = mismatch_finding(raw, stage)
    transform = raw.transform or "vmap"
    against = "an eager loop over the batch" if transform == "vmap" else "autograd's"
    worst = raw.worst.what or "?"
    f.context = replace(f.context, cause="transform", transform=transform)
    f.summary = (f"torch.func.{transform} gives other {f.context.what} than {against}: {raw.disagreeing} "
                 f"of {raw.compared} disagree; worst {worst}.")
    return f


def fallback_finding(raw: FallbackOp) -> Finding:
    """A custom op vmap runs through its per-sample fallback (stages/_torchfunc.fallback_ops)."""
    ctx = Context(op=raw.op)
    evidence = FallbackEvidence(
        dispatch_keys="no FuncTorchBatched kernel and no CompositeImplicitAutograd kernel",
        confirmed=raw.confirmed,
        confirmation="vmap stops at this op with the fallback turned off "
                     "(torch._C._functorch._set_vmap_fallback_enabled(False))" if raw.confirmed
        else "with the fallback turned off, vmap stopped at another op first")
    return Finding(K.NO_BATCHING_RULE, fill_summary(K.NO_BATCHING_RULE, ctx, "vmap"), ctx, evidence)


def opaque_finding(raw: OpaqueOp, stage: str = "inductor") -> Finding:
    """A custom op Inductor's generated code calls as an extern kernel (evidence/tracelog.OutputCodeCollector)."""
    # kernels not counted: no key (the summary's placeholder reads "?")
    ctx = Context(op=op_name(raw.op), calls=raw.calls, kernels=raw.kernels)
    evidence = OpaqueEvidence(output_code=raw.lines[:5], graphs=raw.graphs, generated_kernels=raw.kernels)
    return Finding(K.OPAQUE_OP, fill_summary(K.OPAQUE_OP, ctx, stage), ctx, evidence)


def draft_finding(raw: DraftFailure, error: ErrorRecord | None) -> Finding:
    """One failure of ``torch.export.draft_export``'s report (stages/export.py); ``error`` is what
    ``torch.export.export`` raised, kept as evidence."""
    mapped = raw.kind
    kind = mapped if mapped is not None and mapped in taxonomy.ids() and taxonomy.kinds()[mapped].draft_summary \
        else K.UNKNOWN
    ctx = Context(op=op_name(raw.op) if raw.op else None, expr=raw.expr or None)
    fr = raw.user_frame
    at = f" at `{raw.code or fr.code}` ({fr.location})" if fr else ""
    template = taxonomy.kinds()[kind].draft_summary or "torch.export failed; draft_export reports {type}."
    summary = template.format_map(
        {"op": ctx.op if ctx.op is not None else "?", "expr": ctx.expr if ctx.expr is not None else "?", "at": at,
         "type": raw.type})
    evidence = DraftExportEvidence(draft_export_type=raw.type or None, user_frame=fr, reason=raw.reason or None,
                                   exception_type=error.type or None if error else None,
                                   message=trim(error.message if error else ""))
    return Finding(kind, summary, ctx, evidence)
