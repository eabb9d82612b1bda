"""torch.func readiness, the ``vmap`` stage's machinery: does ``torch.func.vmap`` batch the probe, and how; does
``torch.func.grad`` differentiate it as autograd does.

The batch rule: every tensor input gets a new leading dimension of size 2 holding two copies, the probe's own
values and a perturbed copy (floating tensors times ``1 + 0.01·N(0,1)``, seeded: signs, zeros and masks
survive; integer and bool tensors, token ids say, are copied as they are). Module parameters and buffers are
not batched (the per-sample-gradient pattern: shared weights, batched data). ``vmap`` of the probe's forward
runs under ``torch.no_grad()`` (as inference and ensembling do; gradients are ``torch.func.grad``'s question) and
is compared with an eager loop over the two copies, stacked. Every run (each loop step, vmap, the float64 loop)
calls the probe function afresh, so a module that counts calls in a buffer starts from the same state in each.

An op that has neither a ``FuncTorchBatched`` kernel (a batching rule) nor a ``CompositeImplicitAutograd``
decomposition runs through functorch's fallback, one call per sample; such ops are named from their dispatcher
kernels, then confirmed by running ``vmap`` again with the fallback turned off (it must stop at one of them), so a
candidate vmap never reached is not reported.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from ..compat import pytree

from .. import compat
from . import _numerics
from ..evidence import exceptions
from ..evidence.wording import TORCH_NAMESPACES
from ..evidence.oprecorder import OpRecorder
from ..model.errors import ErrorRecord
from ..model.probe import Case
from ..model.records import FallbackOp, MismatchRecord
from ..evidence.reachable import reachable_modules
from ._execution import seed_all, structural, tensor_outputs

#: the size of the batch vmap maps over: the probe's inputs and one perturbed copy
BATCH = 2
#: relative size of the perturbation of the second copy
PERTURBATION = 1e-2

_RANDOMNESS_ERROR = "called random operation while in randomness error mode"


def _copies(leaves: list[Any], seed: int = 0) -> list[list[Any]]:
    """``BATCH`` versions of the flat inputs: the first the probe's own values, the others perturbed."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for b in range(BATCH):
        row = []
        for t in leaves:
            if not isinstance(t, torch.Tensor):
                row.append(t)
                continue
            c = t.detach().clone()
            if b and c.is_floating_point() and c.numel():
                noise = torch.randn(c.shape, generator=gen, dtype=torch.float32).to(c.device, c.dtype)
                c = c * (1 + PERTURBATION * noise)
            row.append(c)
        out.append(row)
    return out


@dataclasses.dataclass
class _Batched:
    """The flat inputs of a case (``leaves``, ``spec``; ``positions``: the tensor leaves' indices), and a fresh
    probe for every run (``make_case``)."""

    make_case: Callable[[], Case]
    leaves: list[Any]
    spec: Any
    positions: list[int]

    @classmethod
    def of(cls, make_case: Callable[[], Case]) -> "_Batched":
        case = make_case()
        leaves, spec = pytree.tree_flatten((case.args, case.kwargs))
        return cls(make_case, leaves, spec, [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)])

    def call(self, leaves: list[Any]) -> tuple[torch.Tensor, ...]:
        """A fresh probe called on ``leaves`` (its own arguments replaced), its tensor outputs."""
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return tensor_outputs(self.make_case().fn(*args, **kwargs))

    def vmapped(self, randomness: str) -> Callable[..., tuple[torch.Tensor, ...]]:
        """``torch.func.vmap`` of a fresh probe's forward, under no_grad, over the tensor leaves (in_dims 0)."""
        fn = self.make_case().fn

        def f(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            leaves = list(self.leaves)
            for i, t in zip(self.positions, tensors):
                leaves[i] = t
            args, kwargs = pytree.tree_unflatten(leaves, self.spec)
            with torch.no_grad():
                return tensor_outputs(fn(*args, **kwargs))

        return torch.func.vmap(f, randomness=randomness)


@dataclass
class TransformCheck:
    """What one torch.func transform made of the probe (``check_vmap``, ``check_grad``): skipped (``skip_reason``),
    refused (``error``, an error record with ``transform``), or ran and compared (``mismatches``)."""

    skip_reason: str = ""
    error: ErrorRecord | None = None
    mismatches: list[MismatchRecord] = field(default_factory=list)
    #: vmap: whether its values were compared with the eager loop; grad: how many gradients were (None: neither ran)
    compared: bool | int | None = None
    #: grad: why its values were not compared, when they were not
    not_compared: str = ""
    #: what was not checked, each with why
    not_checked: list[str] = field(default_factory=list)
    #: vmap: the ops it ran through the per-sample fallback, its ``randomness``, the inputs batched and perturbed
    fallback_ops: list[FallbackOp] = field(default_factory=list)
    randomness: str | None = None
    batched_inputs: int | None = None
    perturbed: int | None = None
    #: grad: what the gradients were taken with respect to (``input[i]``, ``param:name``)
    wrt: list[str] = field(default_factory=list)


def check_vmap(make_case: Callable[[], Case]) -> TransformCheck:
    """Refused (vmap raised: ``error``), or the comparison: ``mismatches`` (_numerics.judge records), ``fallback_ops``,
    ``randomness``, ``compared``, ``batched_inputs``, ``perturbed`` (floating inputs the second copy perturbs),
    ``not_checked``; a ``skip_reason`` when there is nothing to batch."""
    b = _Batched.of(make_case)
    if not b.positions:
        return TransformCheck(skip_reason="the probe takes no tensor input to batch")
    copies = _copies(b.leaves)
    loop = []
    for i, row in enumerate(copies):
        seed_all()
        try:
            with torch.no_grad():
                loop.append(b.call(_clone(row)))  # a probe may write its inputs: every run gets its own
        except Exception as e:  # the perturbed copy is outside what the probe takes: nothing to compare
            what = f"on its inputs perturbed by {PERTURBATION:g}" if i else "again under torch.no_grad()"
            return TransformCheck(skip_reason=f"the probe does not run {what} "
                                              f"({type(e).__name__}: {exceptions.safe_str(e)[:200]})")
    if not loop[0]:
        return TransformCheck(skip_reason="the probe returns no tensor")
    def stacked() -> list[torch.Tensor]:
        return [torch.stack([row[i] for row in copies]) for i in b.positions]

    perturbed = sum(1 for i in b.positions if b.leaves[i].is_floating_point() and b.leaves[i].numel())
    record = TransformCheck(compared=True, randomness="error", batched_inputs=len(b.positions), perturbed=perturbed)
    if not perturbed:
        record.not_checked.append("whether vmap keeps samples apart (no floating input to perturb: the two "
                                     "copies are equal)")
    for randomness in ("error", "different"):
        seed_all()
        try:
            got = b.vmapped(randomness)(*stacked())
            break
        except Exception as e:
            if randomness != "error" or _RANDOMNESS_ERROR not in exceptions.safe_str(e):
                return TransformCheck(error=_refused(e, "vmap", "forward"))
        # dropout in training mode, say: per-sample draws differ from the loop's by design; check that it runs
        record.compared, record.randomness = False, "different"
        record.not_checked.append("torch.func.vmap's values (the probe draws random numbers: vmap ran with "
                                     "randomness='different', which the eager loop cannot reproduce)")
    ragged = _ragged(loop)
    if ragged:  # the perturbed copy changed the output's shape (a threshold, a count): no batch to compare with
        record.compared = False
        record.not_checked.append(f"torch.func.vmap's values ({ragged})")
    if record.compared:
        if len(got) != len(loop[0]):
            record.mismatches = [structural(f"vmap returned {len(got)} tensors, the eager loop {len(loop[0])}")]
        else:
            pairs = [_numerics.Pair(f"output[{i}]", torch.stack([o[i] for o in loop]), g) for i, g in enumerate(got)]
            record.mismatches = _numerics.judge(pairs, _numerics.Reference(lambda: _float64_loop(b, copies)))
    randomness = record.randomness or "error"
    record.fallback_ops = fallback_ops(_custom_ops(b, copies[0]), lambda: b.vmapped(randomness)(*stacked()))
    return record


def _custom_ops(b: _Batched, row: list[Any]) -> list[str]:
    """The custom ops one eager forward calls (the no-batching-rule candidates). Recorded last, after the loop and
    vmap ran: on torch 2.13, torch.cond run once under a dispatch mode fails on its next call (a recompile of its
    inner graph reads the mode stack), so a recorder run first would turn the loop's second copy into an error."""
    rec = OpRecorder(record_args=False)
    seed_all()
    try:
        with torch.no_grad(), rec:
            b.call(_clone(row))
    except Exception:  # nothing more to learn: the probe ran above
        pass
    return rec.custom_ops


def _clone(row: list[Any]) -> list[Any]:
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in row]


def _ragged(loop: list[tuple[torch.Tensor, ...]]) -> str:
    """Why the eager loop's outputs do not stack into a batch, or ""."""
    if len({len(o) for o in loop}) > 1:
        return f"the probe returned {len(loop[0])} tensors on one copy and {len(loop[1])} on the other"
    for i, outs in enumerate(zip(*loop)):
        if len({tuple(t.shape) for t in outs}) > 1:
            return (f"output[{i}] has shape {tuple(outs[0].shape)} on the probe's inputs and "
                    f"{tuple(outs[1].shape)} on the perturbed copy: its shape depends on the values")
    return ""


def _refused(e: BaseException, transform: str, phase: str) -> ErrorRecord:
    """The error record of a transform that raised; its frame, when no user frame is found, the innermost outside
    torch (a transformers model's line)."""
    record = exceptions.error_record(e, phase)
    return dataclasses.replace(record, transform=transform,
                               user_frame=record.user_frame or exceptions.frame_outside_torch(e))


def _float64_loop(b: _Batched, copies: list[list[Any]]) -> dict[str, torch.Tensor] | str:
    """The eager loop in float64, by the names ``check_vmap`` pairs (``output[i]``), or why not."""
    outs = []
    try:
        for row in copies:
            case = b.make_case()
            args, kwargs = pytree.tree_unflatten(_numerics.to_float64(_clone(row)), b.spec)
            with _numerics.float64([m for _, m in reachable_modules(case.fn)]), _numerics.Float32Draws(), \
                    torch.no_grad():
                seed_all()
                outs.append(tensor_outputs(case.fn(*args, **kwargs)))
    except Exception as e:
        return f"the probe does not run in float64 ({type(e).__name__}: {exceptions.safe_str(e)[:200]})"
    return {f"output[{i}]": torch.stack([o[i] for o in outs]).double() for i in range(len(outs[0]))}


def gradient_hooks(case: Case) -> list[str]:
    """The hooks on the tensors whose gradients are compared (``_execution.grad_targets``: inputs that require grad,
    trainable parameters) that change what lands in ``.grad``: tensor hooks (``register_hook``) and
    post-accumulate-grad hooks. Autograd runs them; torch.func.grad differentiates with respect to other tensors (the
    parameters swapped in by functional_call, detached inputs) and runs neither. Read after the eager run, so hooks a
    forward registers on first call are seen. (Hooks on intermediate tensors run under torch.func.grad too; module
    backward hooks make torch.func refuse the probe, which the stage reports.)"""
    from ._execution import grad_targets

    found = []
    for name, t in grad_targets(case).items():
        hooks = compat.tensor_hooks(t)
        if hooks["register_hook"]:
            found.append(f"a tensor hook (register_hook) on {name}")
        if hooks["register_post_accumulate_grad_hook"]:
            found.append(f"a post-accumulate-grad hook on {name}")
    return found


def has_batching_rule(op: str) -> bool | None:
    """Does vmap batch ``ns::op[.overload]`` itself: a ``FuncTorchBatched`` kernel (register_vmap, a C++ batching
    rule) or a ``CompositeImplicitAutograd`` decomposition into ops that have one. None: the dispatcher does not
    know the name (then nothing is claimed)."""
    try:
        return compat.has_dispatch_kernel(op, "FuncTorchBatched") or \
            compat.has_dispatch_kernel(op, "CompositeImplicitAutograd")
    except RuntimeError:
        return None


_FALLBACK_DISABLED = " hit the vmap fallback which is currently disabled"


def fallback_ops(custom_ops: list[str], run: Callable[[], Any]) -> list[FallbackOp]:
    """The custom ops (``ns::op`` or ``ns::op.overload``, as ``report.op_name`` spells them) that vmap runs
    through its per-sample fallback.

    Candidates are the ops without a batching rule (``has_batching_rule``). ``run`` (the vmap call) runs again
    with the fallback off: if it then succeeds, vmap never reached a candidate and none is reported; if it
    stops at one, that op is ``confirmed`` and the others stay candidates (the first stop hides the rest)."""
    candidates = list(dict.fromkeys(op for op in custom_ops if has_batching_rule(op) is False))
    if not candidates:
        return []
    try:
        with compat.vmap_fallback_disabled():
            run()
        return []
    except Exception as e:
        msg = exceptions.safe_str(e)
        stopped = msg.split(_FALLBACK_DISABLED, 1)[0].strip().split()[-1] if _FALLBACK_DISABLED in msg else None
    if stopped is not None and stopped.split("::")[0] in TORCH_NAMESPACES:
        stopped = None  # torch's own op without a batching rule: not the user's to fix
    return [FallbackOp(op, stopped is not None and _same_op(op, stopped)) for op in candidates]


def _same_op(a: str, b: str) -> bool:
    """``ns::op`` and ``ns::op.default`` (the fallback's spelling of a default overload) name one op."""
    def norm(name: str) -> str:
        return name[: -len(".default")] if name.endswith(".default") else name

    return norm(a) == norm(b)


def check_grad(make_case: Callable[[], Case], reference_grads: dict[str, torch.Tensor | None],
               loss_of: Callable[[Case, Any], Any], fp64: _numerics.Reference) -> TransformCheck:
    """``torch.func.grad`` of the probe's loss with respect to its inputs that require grad (or, for a module
    probe with none, its parameters through ``torch.func.functional_call``), compared with autograd's
    ``reference_grads`` (keys as ``_execution.grad_targets`` names them; ``fp64`` the float64 eager run, by
    ``grad <key>``). Refused (``error``, with ``transform``), compared (``mismatches``, ``wrt``, ``compared``: the
    gradients paired with autograd's), or a ``skip_reason``."""
    case = make_case()
    leaves, spec = pytree.tree_flatten((case.args, case.kwargs))
    wrt = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]
    module = case.fn if isinstance(case.fn, torch.nn.Module) else None
    names = [f"input[{i}]" for i in wrt]

    def loss(outputs: Any) -> torch.Tensor:
        value = loss_of(case, outputs)
        if not isinstance(value, torch.Tensor):
            raise _NoLoss()
        return value.reshape(()) if value.numel() == 1 else value  # backward() takes a 1-element loss; grad a scalar

    if wrt:
        # every tensor input is an argument, the ones that require grad differentiated: a tensor grad saw only as a
        # captured value could not be written in place (a probe that updates a counter input)
        tensors = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]

        def f(*xs: torch.Tensor) -> torch.Tensor:
            flat = list(leaves)
            for i, x in zip(tensors, xs):
                flat[i] = x
            args, kwargs = pytree.tree_unflatten(flat, spec)
            return loss(case.fn(*args, **kwargs))

        inputs: tuple[Any, ...] = tuple(leaves[i].detach() for i in tensors)
        argnums: Any = tuple(tensors.index(i) for i in wrt)
    elif module is not None and any(p.requires_grad for p in module.parameters()):
        params = {k: p.detach() for k, p in module.named_parameters() if p.requires_grad}
        names = [f"param:{k}" for k in params]

        def f(p: dict[str, torch.Tensor]) -> torch.Tensor:  # type: ignore[misc]
            return loss(torch.func.functional_call(module, p, case.args, case.kwargs))

        inputs, argnums = (params,), 0
    else:
        return TransformCheck(skip_reason="no input requires grad (the parameters of modules a function reaches are "
                                          "not passed to torch.func.grad)")
    seed_all()
    try:
        got = torch.func.grad(f, argnums=argnums)(*inputs)
    except _NoLoss:
        return TransformCheck(skip_reason="no floating output requires grad")
    except Exception as e:
        return TransformCheck(error=_refused(e, "grad", "backward"))
    flat_got = list(got.values()) if isinstance(got, dict) else list(got)
    pairs = [_numerics.Pair(f"grad {n}", reference_grads.get(n), g) for n, g in zip(names, flat_got)
             if reference_grads.get(n) is not None]
    return TransformCheck(mismatches=_numerics.judge(pairs, fp64), wrt=names, compared=len(pairs))


#: torch's own refusal: the autograd.Function that torch.library.custom_op generates (register_autograd or not)
#: has no setup_context, so torch.func.grad/vjp/jacrev refuse every such op (pytorch/pytorch#168393, #179652; open
#: on 2.13.0 and 2.14.1; checked with and without register_autograd). The user's registration is as torch documents it.
CUSTOM_OP_AUTOGRAD_REFUSED = ("torch refuses it for every torch.library.custom_op, with or without "
                              "register_autograd (the autograd.Function torch generates for the op has no "
                              "setup_context; pytorch/pytorch#168393)")


def refused_by_torch(error: ErrorRecord, user_functions: tuple[str, ...]) -> bool:
    """Is this torch.func refusal torch's own (``CUSTOM_OP_AUTOGRAD_REFUSED``), not the user's code: the
    setup_context message, raised through torch/_library/autograd.py, with no old-style Function of the user's."""
    message, tb = error.message, error.traceback
    return ("must override the setup_context staticmethod" in message and not user_functions
            and "_library/autograd.py" in tb.replace("\\", "/"))


class _NoLoss(Exception):
    """The probe's outputs give no differentiable loss under torch.func.grad."""
