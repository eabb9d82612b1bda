"""Which ops a run calls, seen below autograd by a ``TorchDispatchMode``: the one recorder behind the opcheck
stage (the inputs of each custom op's first call), the numeric findings (which custom and random ops ran)
and ``tracecheck fix`` (the ops a probe's forward and backward call).

Traceable wrapper subclasses with their own ``__torch_dispatch__`` (optimum-quanto's packed weights, TwoTensor): the
mode sees an op called on one first and answers ``NotImplemented``, so that the subclass's ``__torch_dispatch__``
runs with the mode still on the stack and the ops it calls on its inner tensors (a custom unpack kernel) are
recorded too. (Calling ``func`` from the mode instead runs the subclass with the mode popped: its ops went unseen.)
Never for torch's own FakeTensor and FunctionalTensor, nor while a fake, functionalization or proxy mode is on
(``_subclass_dispatch``): the recorder stays transparent to a probe's own ``FakeTensorMode`` and to ``torch.compile``.

The recorder's own failures (copying a call's inputs) never pass for the probe's: the run goes on unrecorded and
leaving the ``with`` block raises ``RecorderError``, an ``InternalError`` that the stage's and the probe's
``except Exception`` do not catch, so the stage ends as ``internal-error``."""
from __future__ import annotations

from typing import Any, Callable

import torch
from ..compat import pytree

from .. import compat
from .wording import TORCH_NAMESPACES
from ..model.exitcodes import InternalError
from ..model.report import op_name


class RecorderError(InternalError):
    """The op recorder failed (not the probe): its first failure is the ``__cause__``."""


class OpRecorder(compat.TorchDispatchMode):
    """``calls``: the first call of every custom op (an op outside torch's namespaces), its inputs cloned
    before the call (which may mutate them), when ``record_args``; ``custom_ops`` and ``random_ops`` (ATen
    ops tagged ``nondeterministic_seeded``: dropout, bernoulli, rand*): their names, in call order."""

    #: torch.cond and other higher-order ops come through ``__torch_dispatch__`` too (otherwise they raise
    #: NotImplementedError under the mode), and the ops their branches call are recorded (``_run_hop``)
    supports_higher_order_operators = True

    def __init__(self, record_args: bool = True, track_reached: bool = False) -> None:
        super().__init__()
        self.record_args = record_args
        #: hook grad-on custom-op outputs to learn which a backward reaches (``never_differentiated``); off unless
        #: asked: a hook is one more thing on the probe's tensors
        self.track_reached = track_reached
        self.calls: dict[Any, tuple[tuple[Any, ...], dict[str, object]]] = {}
        self.custom_ops: list[str] = []
        self.random_ops: list[str] = []
        #: custom ops called at least once with grad mode on and an input that requires grad: the ones autograd
        #: reaches. One called only inside a torch.autograd.Function's forward (grad mode off there) or under
        #: no_grad gets its gradient, if any, from elsewhere.
        self.differentiated: set[str] = set()
        #: custom ops seen (above autograd) called with grad mode off or no input requiring grad
        self.grad_off: set[str] = set()
        #: of ``differentiated``: those whose outputs a gradient reached in a backward run after the block
        #: (``never_differentiated``): an op whose outputs the loss does not depend on (top-k indices, say) is
        #: called with grad on, yet autograd never runs through it
        self.reached: set[str] = set()
        self._above: list[_GradSeen] = []
        #: the recorder's own first failure (copying inputs): raised as RecorderError when the block ends
        self.failure: BaseException | None = None
        #: >0 while the recorder's own code runs (``snapshot``): the ops and autograd.Functions it calls (a
        #: subclass's clone may dequantize through one) are not the probe's, and are neither recorded nor copied
        self.busy = 0

    def __enter__(self) -> "OpRecorder":
        # grad mode and requires_grad as the caller sees them: below autograd, where this mode runs, they are not
        self._above.append(_GradSeen(self.differentiated, self.grad_off, self.reached if self.track_reached else None))
        self._above[-1].__enter__()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._above.pop().__exit__(*exc)
        if self.failure is not None and not self._above:  # the outermost block (``_seen`` re-enters it)
            failure, self.failure = self.failure, None
            raise RecorderError(f"tracecheck's op recorder failed: {type(failure).__name__}: "
                                f"{str(failure)[:300]}") from failure

    def never_differentiated(self, backward: Callable[[], Any]) -> set[str]:
        """The ops of ``differentiated`` whose outputs no gradient reached when ``backward`` ran (the probe's own
        backward of the recorded forward's outputs; ``track_reached`` on): autograd never runs through them in this
        probe. Empty when ``backward`` raises, the probe's loss included (nothing is known then)."""
        if not self.track_reached:
            raise ValueError("never_differentiated needs OpRecorder(track_reached=True)")
        try:
            backward()
        except Exception:
            return set()
        return self.differentiated - self.reached

    def snapshot(self, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """Copies of a call's inputs (tensors detached and cloned, a wrapper subclass through its inner tensors),
        taken before the call, which may mutate them. None when copying failed: the failure is kept (``failure``)
        and the run goes on."""
        self.busy += 1
        try:
            return pytree.tree_map(snapshot, args), pytree.tree_map(snapshot, kwargs)
        except Exception as e:  # RecursionError included: the recorder's, never the probe's
            self.failure = self.failure or e
            return None
        finally:
            self.busy -= 1

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.busy:
            return func(*args, **kwargs)
        if compat.is_higher_order_op(func):
            return self._run_hop(func, args, kwargs)
        if func.namespace not in TORCH_NAMESPACES:
            name = op_name(str(func))
            if name not in self.custom_ops:
                self.custom_ops.append(name)
            if self.record_args and func not in self.calls:
                copied = self.snapshot(tuple(args), dict(kwargs))
                if copied is not None:
                    self.calls[func] = copied
        elif torch.Tag.nondeterministic_seeded in func.tags:
            name = op_name(str(func))
            if name not in self.random_ops:
                self.random_ops.append(name)
        if _subclass_dispatch(types, args, kwargs):
            return NotImplemented  # the subclass's __torch_dispatch__ next, under this mode (module docstring)
        return func(*args, **kwargs)

    def _run_hop(self, hop: Any, args: Any, kwargs: dict[str, object]) -> Any:
        """Run a higher-order op (the mode is off here); for ``torch.cond``, whose eager kernel only calls the
        branch it takes, that branch runs with this mode back on so that the ops it calls are recorded. Other
        HOPs (while_loop, map, scan, invoke_subgraph) run, but unseen inside: their kernels may inspect their
        subgraphs, which a wrapper would hide, so the custom ops they call are not opchecked (docs/usage.md, the opcheck stage)."""
        if hop is torch.ops.higher_order.cond and len(args) == 4:
            pred, true_fn, false_fn, operands = args
            return hop(pred, self._seen(true_fn), self._seen(false_fn), operands, **kwargs)
        return hop(*args, **kwargs)

    def _seen(self, fn: Any) -> Any:
        def run(*a: Any) -> Any:
            with self:
                return fn(*a)
        return run


class _GradSeen(torch.overrides.TorchFunctionMode):
    """Above autograd: sorts every custom op call (``torch.ops.ns.op`` or ``.default``) into ``grad_on`` (grad mode on
    and an input that requires grad) or ``grad_off``; a grad-on call's outputs that require grad get a hook that adds
    the op to ``reached`` when a backward computes their gradient (it runs before the op's own backward node, so an
    op whose backward then raises is reached too)."""

    def __init__(self, grad_on: set[str], grad_off: set[str], reached: set[str] | None) -> None:
        super().__init__()
        self.grad_on, self.grad_off, self.reached = grad_on, grad_off, reached

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not (compat.is_op_overload(func) and str(func).split(".")[0] not in TORCH_NAMESPACES):
            return func(*args, **kwargs)
        name = op_name(str(func))
        on = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                             for t in pytree.tree_leaves((args, kwargs)))
        (self.grad_on if on else self.grad_off).add(name)
        out = func(*args, **kwargs)
        if on and self.reached is not None:
            reached = self.reached
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
                    try:
                        t.register_hook(lambda grad, name=name: reached.add(name))
                    except Exception:  # a tensor (subclass) that refuses hooks: counted as reached (never exempted)
                        reached.add(name)
        return out


def _subclass_dispatch(types: Any, args: Any, kwargs: Any) -> bool:
    """Should the mode answer ``NotImplemented``: an argument is a user's traceable wrapper subclass (names its
    inner tensors: optimum-quanto's QTensors, TwoTensor), and none of torch's infra modes (fake, functionalization,
    proxy) is on. Never for FakeTensor or FunctionalTensor, nor under their modes (a probe's own ``FakeTensorMode``
    block, ``torch.compile``'s tracing): with the mode active their ``__torch_dispatch__`` answers
    ``NotImplemented`` too, and the op fails with a ``TypeError``. Other subclasses with a ``__torch_dispatch__``
    run as before, through ``func`` (their inner ops unseen)."""
    if all(t is torch.Tensor or t is torch.nn.Parameter for t in types):  # ``types`` lists only those with their own
        return False
    if compat.infra_dispatch_mode_active():
        return False
    return any(compat.is_traceable_wrapper_subclass(a) and not compat.is_infra_tensor(a)
               for a in pytree.tree_leaves((args, kwargs)))


def snapshot(t: Any) -> Any:
    """A copy of a call's input as it is before the call (which may write to it): a traceable wrapper subclass
    (optimum-quanto's packed weights) copied through its inner tensors, keeping its type; ``requires_grad`` kept."""
    if not isinstance(t, torch.Tensor):
        return t
    if compat.is_traceable_wrapper_subclass(t):
        # copied through its inner tensors: its own detach/clone may run the probe's code (a dequantizing
        # fallback calling an autograd.Function), which is neither a copy nor the probe's call
        names, meta = getattr(t, "__tensor_flatten__")()  # a traceable wrapper subclass's protocol
        c = getattr(type(t), "__tensor_unflatten__")({n: snapshot(getattr(t, n)).detach() for n in names}, meta,
                                         t.size(), t.stride())
    else:
        c = t.detach().clone()
    return c.requires_grad_(t.requires_grad) if t.is_floating_point() and c.is_leaf else c


def registered_custom_ops() -> set[str]:
    """Names of the ops registered in this process outside torch's namespaces. Compared before and after loading
    a file or running a probe, the difference is the custom ops that file or run registered."""
    return {n for n in compat.all_op_names() if n.split("::")[0] not in TORCH_NAMESPACES}
