"""Findings from what a stage measured rather than raised: compiled-vs-eager mismatches, gradcheck outcomes,
specialized dynamic dimensions, torch.func refusals and mismatches, functorch fallbacks, opaque Inductor kernels,
draft_export failures. Pure: no torch import."""
from __future__ import annotations

import dataclasses
from typing import Any

from ..model import taxonomy
from ..model.taxonomy import K
from ..model.evidence import (DraftExportEvidence, ExceptionEvidence, FallbackEvidence, GradientEvidence,
                              NumericEvidence, OpaqueEvidence, Specialization, SpecializationEvidence, of_record)
from ..model.records import Frame
from ..model.report import Finding, op_name
from .detect import SOME_FUNCTION, classify_error, fill_summary, trim


def mismatch_finding(raw: dict[str, Any], stage: str = "compile") -> Finding:
    """One phase's compiled-vs-eager disagreement (stages/_execution.compare / stages/_numerics.judge): ``phase``, ``worst``
    (the worst tensor: ``what``, and ``detail`` or its errors), ``disagreeing`` of ``compared`` tensors,
    ``fp64_reference``, and the ``custom_ops``/``random_ops`` one eager forward called. The cause is the one
    the evidence supports: custom ops only when the probe calls one."""
    phase = raw.get("phase", "forward")
    worst = raw.get("worst") or {}
    what = worst.get("what", "?")
    if worst.get("detail") and worst.get("max_abs_diff") is None:
        how = worst["detail"]
    else:
        bits = [f"max abs diff {worst.get('max_abs_diff'):.3g}" if worst.get("max_abs_diff") is not None else "",
                f"RMSE vs {worst.get('reference_dtype') or 'float64'}: compiled {worst['rmse_compiled_vs_fp64']:.3g}, eager "
                f"{worst['rmse_eager_vs_fp64']:.3g}" if worst.get("rmse_compiled_vs_fp64") is not None
                and worst.get("rmse_eager_vs_fp64") is not None else "",
                f"cosine {worst['cos_similarity']:.4f}" if worst.get("cos_similarity") is not None else "",
                f"dtype {worst.get('dtype')}" if worst.get("dtype") else ""]
        how = ", ".join(b for b in bits if b)
    n, total = raw.get("disagreeing", 1), raw.get("compared", 1)
    tensors = "outputs" if phase == "forward" else "gradients"
    custom, random_ops = raw.get("custom_ops") or [], raw.get("random_ops") or []
    ctx: dict[str, Any] = {"what": f"{phase} {tensors}", "phase": phase, "tensor": what, "stage": stage,
                           "cause": "custom-op" if custom else "random" if random_ops else "backend"}
    if custom:
        ctx["custom_ops"] = custom
    if random_ops:
        ctx["random_ops"] = random_ops
    summary = (f"Compiled {tensors} differ from eager: {n} of {total} disagree; worst {what} ({how})."
               if n > 1 or total > 1 else f"Compiled {what} differs from eager ({how}).")
    return Finding(K.NUMERIC_MISMATCH, summary, ctx, of_record(NumericEvidence, raw))


def gradient_finding(outcome: dict[str, Any]) -> Finding:
    """One call whose backward disagrees with numerical derivatives (stages/_gradients.Outcome with a ``mismatch``)."""
    m = outcome["mismatch"]
    ctx = {"op": outcome["name"] if outcome.get("function") else op_name(outcome["name"]), "input": m.get("input", "?"), "output": m.get("output", "its outputs"),
           # an autograd.Function's qualified name, which is no op spelling (model/report.finding_key)
           **({"op_is_label": True} if outcome.get("function") else {}),
           "numerical": f"{m['numerical']:.6g}", "analytical": f"{m['analytical']:.6g}",
           "relative_error": f"{m['relative_error']:.3g}"}
    return Finding(K.WRONG_GRADIENT, fill_summary(K.WRONG_GRADIENT, ctx, "gradcheck"), ctx, _gradient(outcome))


def _gradient(outcome: dict[str, Any]) -> GradientEvidence:
    """A gradient check's mismatch (stages/_gradients.Outcome: ``method``, ``note`` and the ``mismatch`` record)."""
    return of_record(GradientEvidence, {"method": outcome.get("method"), "note": outcome.get("note"),
                                        **outcome["mismatch"]})


def end_to_end_gradient_finding(outcome: dict[str, Any], calls: list[str]) -> Finding:
    """The probe's gradient (``.grad`` after ``loss.backward()``) disagrees with the numerical derivative of its loss
    while each call's own backward agrees with its forward (stages/_gradients.end_to_end): a gradient written
    besides autograd. ``ratio``: the autograd value over the numerical one (2.0: accumulated twice)."""
    m = outcome["mismatch"]
    ratio = m.get("ratio")
    ctx = {"op": ", ".join(calls) or "the probe", "op_is_label": True, "input": m.get("input", "its leaves"),
           "output": "the loss",
           "numerical": f"{m['numerical']:.6g}", "analytical": f"{m['analytical']:.6g}",
           "relative_error": f"{m['relative_error']:.3g}", "cause": "end_to_end",
           "ratio": f"{ratio:.3g}" if isinstance(ratio, (int, float)) else "?"}
    return Finding(K.WRONG_GRADIENT, fill_summary(K.WRONG_GRADIENT, ctx, "gradcheck"), ctx, _gradient(outcome))


def specialization_finding(raw: dict[str, Any]) -> Finding:
    """A dimension compiled as dynamic (the batch dimension, marked) that still recompiles at every new size
    (stages/dynamic.py): the guard that failed (``reason``, ``user_frame``) and, when the trace saw it, the
    specialization with the frame whose code forced the constant (a fake impl's ``int(x.shape[0])``, say)."""
    spec = raw.get("specialization") or {}
    # a frame with a file (not exec'd code, ``<string>:1``): the specialization's own, else the guard's
    frame = next((f for f in (spec.get("frame"), raw.get("user_frame")) if (fr := Frame.from_dict(f)) is not None
                  and fr.file and not fr.file.startswith("<")), None) or spec.get("frame") or raw.get("user_frame")
    source = (spec.get("sources") or [None])[0] or "a dimension"
    ctx: dict[str, Any] = {"source": source, "value": spec.get("value", "a constant"), "reason": raw.get("reason", ""),
                           "guard": raw.get("reason", "").split("  #", 1)[0].strip()[:160] or "?",
                           "sizes": ", ".join(map(str, raw.get("batch_sizes") or [])) or "?",
                           "by": (f" by `{fr.code}` ({fr.location})" if fr.code and fr.code != "None" else
                                  f" at {fr.location}") if (fr := Frame.from_dict(frame)) else ""}
    if ctx["guard"].startswith("___check_metadata"):
        # Dynamo guards a tensor subclass's flatten context: the fix is in the subclass, at the guard's line
        guard_frame = Frame.from_dict(raw.get("user_frame"))
        ctx["cause"] = "subclass_metadata"
        ctx["guard_at"] = guard_frame.location if guard_frame else "the guarded call"
        frame = raw.get("user_frame") or frame
    evidence = SpecializationEvidence(reason=raw.get("reason") or "", user_frame=Frame.from_dict(frame),
                                      guard_user_frame=Frame.from_dict(raw.get("user_frame")),
                                      specialization=Specialization.of(spec or None), step=raw.get("step"))
    return Finding(K.DYNAMIC_SHAPE, fill_summary(K.DYNAMIC_SHAPE, ctx, "dynamic"), ctx, evidence)


def transform_error_finding(stage: str, raw: dict[str, Any]) -> Finding:
    """A torch.func transform that raised (stages/vmap.py: an error record with ``transform``, and ``functions``:
    the old-style autograd.Function classes the probe calls). A refusal the rules know is
    ``functorch-incompatible``; any other error is classified as usual, with the transform named."""
    transform = raw.get("transform", "vmap")
    f = classify_error(stage, raw)
    if isinstance(f.evidence, ExceptionEvidence):
        f.evidence = dataclasses.replace(f.evidence, transform=transform)
    if f.kind == K.FUNCTORCH_INCOMPATIBLE:
        functions = raw.get("functions") or []
        if functions and f.context.get("function") in (None, SOME_FUNCTION):
            f.context["function"] = ", ".join(functions)
        tb = str(raw.get("traceback", "")).replace("\\", "/")
        if f.context.get("cause") == "setup_context" and not functions:
            # torch's own old-style Functions: checkpoint(use_reentrant=True), a module's backward hooks
            for file, cause in (("torch/utils/checkpoint.py", "checkpoint"), ("torch/utils/hooks.py", "module_hook")):
                if file in tb:
                    f.context["cause"] = cause
                    f.context.pop("function", None)
                    break
        f.summary = fill_summary(f.kind, f.context, stage)
    else:
        f.context["transform"] = transform
        f.summary = f"Under torch.func.{transform}: {f.summary}"
    return f


def merge_refusals(findings: list[Finding]) -> list[Finding]:
    """vmap and grad refused for one cause at one frame (an old-style autograd.Function refuses both): one finding
    that names both transforms, instead of a second that a report would fold away as the same problem."""
    out: list[Finding] = []
    for f in findings:
        same = next((o for o in out if f.kind == o.kind == K.FUNCTORCH_INCOMPATIBLE
                     and o.context.get("cause") == f.context.get("cause")
                     and o.user_frame == f.user_frame), None)
        if same is None:
            out.append(f)
            continue
        first, second = same.context["transform"], f.context["transform"]
        same.context["transforms"] = [first, second]
        same.summary = same.summary.replace(f"torch.func.{first} refuses",
                                            f"torch.func.{first} and torch.func.{second} refuse", 1)
    return out


def transform_mismatch_finding(raw: dict[str, Any], stage: str) -> Finding:
    """torch.func.vmap's outputs against the eager loop over the batch, or torch.func.grad's gradients against
    autograd's, that disagree (a numeric-mismatch whose cause is the transform: a batching rule, say)."""
    f = mismatch_finding(raw, stage)
    transform = raw.get("transform", "vmap")
    against = "an eager loop over the batch" if transform == "vmap" else "autograd's"
    worst = (raw.get("worst") or {}).get("what", "?")
    f.context.update(cause="transform", transform=transform)
    f.summary = (f"torch.func.{transform} gives other {f.context['what']} than {against}: {raw.get('disagreeing', 1)} "
                 f"of {raw.get('compared', 1)} disagree; worst {worst}.")
    return f


def fallback_finding(raw: dict[str, Any]) -> Finding:
    """A custom op vmap runs through its per-sample fallback (stages/_torchfunc.fallback_ops)."""
    op = raw["op"]
    ctx = {"op": op}
    evidence = FallbackEvidence(
        dispatch_keys="no FuncTorchBatched kernel and no CompositeImplicitAutograd kernel",
        confirmed=bool(raw.get("confirmed")),
        confirmation="vmap stops at this op with the fallback turned off "
                     "(torch._C._functorch._set_vmap_fallback_enabled(False))" if raw.get("confirmed")
        else "with the fallback turned off, vmap stopped at another op first")
    return Finding(K.NO_BATCHING_RULE, fill_summary(K.NO_BATCHING_RULE, ctx, "vmap"), ctx, evidence)


def opaque_finding(raw: dict[str, Any], stage: str = "inductor") -> Finding:
    """A custom op Inductor's generated code calls as an extern kernel (evidence/tracelog.OutputCodeCollector)."""
    ctx = {"op": op_name(raw["op"]), "calls": raw.get("calls", 1), "kernels": raw.get("kernels", "?")}
    evidence = OpaqueEvidence(output_code=tuple(raw.get("lines", [])[:5]), graphs=tuple(raw.get("graphs") or ()),
                              generated_kernels=raw.get("kernels"))
    return Finding(K.OPAQUE_OP, fill_summary(K.OPAQUE_OP, ctx, stage), ctx, evidence)


def draft_finding(raw: dict[str, Any], error: dict[str, Any] | None) -> Finding:
    """One failure of ``torch.export.draft_export``'s report (stages/export.py: ``type``, ``kind``, ``op``, ``expr``,
    ``user_frame``, ``code``); ``error`` is what ``torch.export.export`` raised, kept as evidence."""
    mapped = raw.get("kind")
    kind = mapped if mapped in taxonomy.ids() and taxonomy.kinds()[mapped].draft_summary else K.UNKNOWN
    frame = raw.get("user_frame")
    ctx: dict[str, Any] = {k: raw[k] for k in ("op", "expr") if raw.get(k)}
    if ctx.get("op"):
        ctx["op"] = op_name(ctx["op"])
    fr = Frame.from_dict(frame)
    at = f" at `{raw.get('code') or fr.code}` ({fr.location})" if fr else ""
    template = taxonomy.kinds()[kind].draft_summary or "torch.export failed; draft_export reports {type}."
    summary = template.format_map(
        {"op": ctx.get("op", "?"), "expr": ctx.get("expr", "?"), "at": at, "type": raw.get("type", "?")})
    evidence = DraftExportEvidence(draft_export_type=raw.get("type"), user_frame=fr, reason=raw.get("reason") or None,
                                   exception_type=(error or {}).get("type"),
                                   message=trim((error or {}).get("message") or ""))
    return Finding(kind, summary, ctx, evidence)
