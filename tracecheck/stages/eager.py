"""``eager``: the reference outputs and gradients; a missing autograd formula shows here, at backward.

A probe that trains (the first step ran backward) then runs a second training step on the same model and inputs,
as a training loop does: a step that fails only the second time because of the model's own state (a buffer or
cached tensor left attached to the first step's graph: "Trying to backward through the graph a second time") is
this stage's finding, with ``step: 2`` in its evidence. The stages that run several steps (compiled_autograd,
dynamic) would otherwise only skip on it. A second step that fails for any other reason (a graph the probe's
closure holds, which a plain two-step loop trips on too) is a note (``not_checked``), never a failure:
``second_step`` says how it is told apart."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..model.errors import ErrorRecord
from ..model.payloads import StageNotes
from ..model.records import StageRecord
from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> StageRecord:
    from ..collect import casemaker
    from ..evidence import exceptions
    from ..evidence.oprecorder import registered_custom_ops
    from ._execution import execute, phases

    before = registered_custom_ops()
    with exceptions.WarningCollector() as w:
        case = ctx.make_case()
        ex = execute(case.fn, case)
        # a loop's next step, only after a first step that trained
        error, note = (ex.error, None) if ex.error or not ex.ran_backward else second_step(ctx.make_case, case)
    # the probe's first call, when its template made it before this process forked: what it warned (an import it
    # made, a warn-once) and registered is this stage's, as when this process makes the first call
    first = casemaker.first_call()
    warnings = list(dict.fromkeys([*(first.warnings if first else ()), *w.messages]))
    # a custom op registered only now (an extension loaded on first call): api.py runs opcheck after all
    lazy = sorted(registered_custom_ops() - before | set(first.registered if first else ()))
    return StageRecord(error=error, warnings=warnings, phases=phases(ex), registered_custom_ops=lazy,
                       extra=StageNotes(not_checked=[note]).to_extra() if note else {})


#: autograd's words for a step that runs into the previous step's graph (torch/csrc/autograd): what state kept
#: attached to that graph raises on the next step
GRAPH_REUSE = ("Trying to backward through the graph a second time",
               "modified by an inplace operation")


def second_step(make_case: Callable[[], Any], case: Any) -> tuple[ErrorRecord | None, str | None]:
    """A second training step on ``case`` (its first ran forward and backward), as a training loop's next one:
    ``(error, None)`` when it fails from the model's own state, an error record with ``step: 2``; ``(None, note)``
    when it fails otherwise (the note says why it is not the model's failure); ``(None, None)`` when it runs.

    The failure is the model's only when it is autograd's (``GRAPH_REUSE``), a fresh case (``make_case()``) fails
    the same way after its own first step, and a third fresh case passes its second step once the tensors its
    modules keep (buffers, tensor attributes) are detached after the first: the graph autograd complains about is
    held by the model. A graph held elsewhere (a tensor the probe's closure built with an autograd history, that
    a loop reusing it would trip on too), a forward that fails on being called again for another reason (it
    registers something per call, reads ``.grad``) or a failure that does not reproduce is noted, not reported."""
    error = _step_two(case)
    if error is None:
        return None, None
    why = _not_the_models(make_case, error)
    if why is None:
        return dataclasses.replace(error, step=2), None
    return None, (f"whether the model survives a second training step: that step, on the same model and inputs, "
                  f"fails ({error.headline()}), {why}; not counted as the model's failure")


def _step_two(case: Any) -> ErrorRecord | None:
    """The error record of a second step on ``case``, None when it runs. An input that carries an autograd history
    of its own (a non-leaf that requires grad, built by the probe) is detached into a leaf first: that history is
    the probe's set-up, which a training loop builds anew each step, not state the model keeps."""
    import torch

    from ..compat import pytree
    from ._execution import execute

    def leaf(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf:
            return t.detach().requires_grad_()
        return t

    again = dataclasses.replace(case, args=pytree.tree_map(leaf, case.args), kwargs=pytree.tree_map(leaf, case.kwargs))
    ex = execute(again.fn, again, reseed=False)  # as a loop's next step: new random draws, no reseed
    return ex.error


def _reuse(error: ErrorRecord) -> str | None:
    """Which of autograd's ``GRAPH_REUSE`` messages ``error`` (or an exception it wraps) says, else None."""
    texts = [error.message] + [c.message for c in error.chain]
    return next((words for words in GRAPH_REUSE if any(words in t for t in texts)), None)


def _not_the_models(make_case: Callable[[], Any], error: ErrorRecord) -> str | None:
    """Why a second step's ``error`` is not the model's own state breaking it (``second_step``), None when it is."""
    from ._execution import execute

    words = _reuse(error)
    if words is None:
        return "not autograd running into the previous step's graph"

    def first_step() -> Any:
        fresh = make_case()
        ex = execute(fresh.fn, fresh)  # seeded, as the eager stage's own first step
        return fresh if ex.error is None and ex.ran_backward else None

    try:
        again = first_step()
        repeated = _step_two(again) if again is not None else None
        if repeated is None or _reuse(repeated) != words or repeated.type != error.type:
            return "and a fresh case does not fail the same way after its own first step"
        detached = first_step()
        if detached is None:
            return "and a fresh case's first step does not run again"
        if not detach_model_state(detached.fn):
            return ("and no module of the probe keeps a tensor attached to the graph: the graph is held outside the "
                    "model (a tensor with an autograd history that the probe built once, held by its closure or "
                    "set-up, would fail a plain two-step loop too)")
        if _step_two(detached) is not None:
            return ("and it fails still with the tensors the model keeps detached: the graph is held outside the model "
                    "(a tensor with an autograd history that the probe built once, held by its closure or set-up)")
    except Exception as e:  # the probe function itself, called again: its failure is not step 2's
        return f"and checking it on a fresh case raised {type(e).__name__}"
    return None


def detach_model_state(fn: Callable[..., Any]) -> list[str]:
    """Detach, in place of the originals, the tensors attached to an autograd graph that the modules ``fn`` reaches
    keep: buffers and tensor attributes, also in a list, tuple or dict attribute. Returns their names."""
    import torch

    from ..compat import pytree
    from ..evidence.reachable import reachable_modules

    def attached(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.grad_fn is not None

    def detach(t: Any) -> Any:
        return t.detach() if attached(t) else t

    names: list[str] = []
    for path, top in reachable_modules(fn):
        for prefix, m in top.named_modules(prefix=path):
            for name, b in list(m._buffers.items()):
                if attached(b):
                    m._buffers[name] = b.detach()
                    names.append(f"{prefix}.{name}")
            for name, v in list(vars(m).items()):
                if name in ("_buffers", "_parameters", "_modules"):
                    continue
                if attached(v) or (isinstance(v, (dict, list, tuple)) and
                                   any(attached(t) for t in pytree.tree_leaves(v))):
                    # a container is rebuilt only when it holds one (torch's own hook dicts are left as they are)
                    object.__setattr__(m, name, detach(v) if attached(v) else pytree.tree_map(detach, v))
                    names.append(f"{prefix}.{name}")
    return names


SPEC = StageSpec(
    name="eager", order=10, cost=0, run=run, compiles=False,
    summary="the reference outputs and gradients; a missing autograd formula shows here, at backward",
    repro='_repro_step(_repro_fn)')
