"""``vmap``: torch.func readiness. ``torch.func.vmap`` over a batch of two copies of the probe's tensor inputs,
compared with an eager loop over them, with the ops that vmap runs through its per-sample fallback; and
``torch.func.grad`` of the probe's loss, compared with autograd (``_torchfunc`` has the batch rule).

Per-sample gradients, ensembling and Jacobians go through these transforms; an ``autograd.Function`` written the
old way, or a C++ kernel handed a BatchedTensor, is refused by them (``functorch-incompatible``), and a custom op
without a batching rule runs once per sample (``no-batching-rule``, advice). The machinery is ``_torchfunc``.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..model.targets import FUNC
from ..model.payloads import StageNotes, VmapRun
from ..model.records import StageRecord
from ._spec import StageContext, StageSpec

if TYPE_CHECKING:  # imports torch: the registry reads this module without it
    from ._torchfunc import TransformCheck


def run(ctx: StageContext) -> StageRecord:
    from . import _numerics
    from ._gradients import old_style_functions
    from . import _torchfunc as transforms
    from ._execution import BACKWARD, FORWARD, execute, float64_run, forward_fails, loss_of, values

    case = ctx.make_case()
    ref = execute(case.fn, case)  # one eager run: the forward must work, and its gradients are grad's reference
    if forward_fails(ref):
        return StageRecord(skip_reason="the eager forward fails (see the eager stage)")
    v = transforms.check_vmap(ctx.make_case)
    trains = ref.ran_backward
    g = transforms.TransformCheck(skip_reason="the probe does not train (nothing requires grad)")
    hooks = transforms.gradient_hooks(case) if trains else []
    if trains:
        fp64 = float64_run(ctx.make_case)

        def fp64_values() -> Any:
            ex = fp64()
            return ex if isinstance(ex, str) else values(ex)

        g = transforms.check_grad(ctx.make_case, ref.grads, loss_of, _numerics.Reference(fp64_values))
    not_checked = list(v.not_checked)
    if hooks and not g.error:  # autograd runs them and torch.func.grad does not: not meant to agree
        g.mismatches = []
        g.compared, g.not_compared = 0, "the probe has gradient hooks torch.func.grad does not run"
        not_checked.append(f"torch.func.grad's values (the probe has gradient hooks torch.func.grad does not run: "
                           f"{'; '.join(hooks[:4])}; it ran, and its gradients and autograd's are not meant to agree)")
    for name, r in (("vmap", v), ("grad", g)):
        if r.error:
            functions = old_style_functions(ctx.make_case) if "setup_context" in r.error.message else []
            r.error = dataclasses.replace(r.error, functions=tuple(functions))
            if transforms.refused_by_torch(r.error, r.error.functions):  # torch's limitation, not the probe's
                r.error = None
                r.skip_reason = transforms.CUSTOM_OP_AUTOGRAD_REFUSED
                not_checked.append(f"torch.func.{name}: {transforms.CUSTOM_OP_AUTOGRAD_REFUSED}")
    if v.skip_reason and g.skip_reason:
        return StageRecord(skip_reason=f"vmap: {v.skip_reason}; grad: {g.skip_reason}")
    # one transform ran and the other did not: a pass must not hide that (a probe that does not train is "✓ fwd")
    if v.skip_reason and v.skip_reason != transforms.CUSTOM_OP_AUTOGRAD_REFUSED:
        not_checked.append(f"torch.func.vmap: {v.skip_reason}")
    if trains and g.skip_reason and g.skip_reason != transforms.CUSTOM_OP_AUTOGRAD_REFUSED:
        not_checked.append(f"torch.func.grad: {g.skip_reason}")
    record = StageRecord(extra=StageNotes(not_checked=not_checked or None).to_extra())
    for name, r in (("vmap", v), ("grad", g)):
        if r.error:
            record.transform_errors.append(r.error)
        record.mismatches += [dataclasses.replace(m, transform=name) for m in r.mismatches]
    # backward counts only where gradients were compared: a refusal checked none (and a baseline would otherwise
    # call the move to a torch-refused custom op "backward no longer runs")
    record.phases = [FORWARD, BACKWARD] if g.compared else [FORWARD]
    record.fallback_ops = v.fallback_ops
    record.extra.update(VmapRun(
        batch=transforms.BATCH, vmap=_summary(v), grad=_summary(g), randomness=v.randomness, compared=v.compared,
        batched_inputs=v.batched_inputs, perturbed=v.perturbed,
        **({"grad_wrt": g.wrt, "grads_compared": g.compared} if g.wrt else {})).to_extra())
    return record


def _summary(r: "TransformCheck") -> str:
    """One word per transform for the report: what came of it."""
    if r.skip_reason:
        return f"skipped: {r.skip_reason}"
    if r.error:
        return "refused"
    if r.mismatches:
        return "differs"
    if r.not_compared:
        return f"ran (not compared: {r.not_compared})"
    if r.compared is False:
        return "ran (not compared: the probe draws random numbers)"
    return "matches"


SPEC = StageSpec(
    target=FUNC,
    name="vmap", order=88, cost=1, run=run, compiles=False,
    summary="torch.func.vmap over two perturbed copies of the tensor inputs vs an eager loop (ops without a "
            "batching rule named), and torch.func.grad vs autograd")
