"""Numerical gradient checks of custom ops and ``autograd.Function``s at the inputs a probe called them with
(the ``gradcheck`` stage; docs/readiness.md, "gradcheck").

``record_calls`` runs one eager forward and keeps, for each custom op and each ``autograd.Function`` class, its
first call with cloned inputs. ``check_call`` then compares the registered backward with numerical derivatives
of the forward, one differentiable input at a time:

* **float64**, when the call runs with its floating inputs cast to float64 and the differentiable inputs hold at
  most ``GRADCHECK_NUMEL`` elements: ``torch.autograd.gradcheck`` in fast mode (a random projection of the
  Jacobian; on a mismatch it recomputes the full Jacobians for its report, 2 forward calls per element, hence
  the size limit);
* otherwise (a kernel that only computes in float32, like the mHC extension, or a large input): a
  central-difference check along one random direction per input, in float32 (or float64). See
  ``_directional.directional`` for the step and the tolerance and why.

A mismatch is reported only when it holds up (``_directional.confirmed``): at half the step (else the forward is not smooth
along the direction: a kink or a jump), along a second random direction, and, for gradcheck, at float32 precision (a
kernel that takes float64 but computes in float32 fails float64 gradcheck with a correct backward). Otherwise the
input is ``inconclusive``, with the reason, and no finding is made.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
from torch.autograd.gradcheck import GradcheckError
from ..compat import pytree

from .. import compat
from ..evidence import exceptions
from ..evidence.oprecorder import OpRecorder
from ..model.errors import ErrorRecord
from ..model.records import END_TO_END, GradcheckOutcome, GradientMismatch
from ..model.report import op_name
from ._directional import DIRECTIONAL_RTOL, Directional, confirmed

#: gradcheck (float64) when the differentiable inputs hold at most this many elements; above, the directional
#: check (gradcheck's failure report alone would cost 2 forward calls per element)
GRADCHECK_NUMEL = 8192
#: gradcheck's own defaults (torch.autograd.gradcheck: atol=1e-5, rtol=1e-3)
GRADCHECK_ATOL, GRADCHECK_RTOL = 1e-5, 1e-3


#: ``GradcheckOutcome.skip`` of a call none of whose inputs requires grad (gradcheck.py words a stage of only these
#: apart)
NO_GRAD_INPUT = "no input of its recorded call requires grad"


@dataclass
class Call:
    """One recorded call: ``target`` is a custom op (OpOverload) or an ``autograd.Function`` subclass."""

    name: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, object]
    is_function: bool = False
    #: a custom op called with grad on whose outputs no gradient reached in the probe's backward: autograd never
    #: runs through it in this probe, so its backward (or its lack of one) is not the probe's
    unused: bool = False

    def invoke(self, args: tuple[Any, ...], kwargs: dict[str, object]) -> Any:
        return self.target.apply(*args, **kwargs) if self.is_function else self.target(*args, **kwargs)


@dataclass
class _Found:
    """What a check has found so far: each step replaces the outcome (a frozen ``GradcheckOutcome``) with one that
    says more (``set``, ``per_input``), so that a check that raises keeps what it had found beside the error."""

    now: GradcheckOutcome

    def set(self, *, skip: str | None = None, note: str | None = None, method: str | None = None,
            inputs: tuple[str, ...] | None = None, mismatch: GradientMismatch | None = None,
            error: ErrorRecord | None = None) -> None:
        """Say more: the outcome with the fields given (not None) replaced."""
        o = self.now
        self.now = replace(o, skip=o.skip if skip is None else skip, note=o.note if note is None else note,
                           method=o.method if method is None else method,
                           inputs=o.inputs if inputs is None else inputs, mismatch=mismatch or o.mismatch,
                           error=error or o.error)

    def per_input(self, label: str, relative_error: float | None = None, inconclusive: str | None = None) -> None:
        """One input's relative error, or why its check could not decide."""
        o = self.now
        if relative_error is not None:
            self.now = replace(o, relative_errors={**o.relative_errors, label: relative_error})
        if inconclusive is not None:
            self.now = replace(self.now, inconclusive={**self.now.inconclusive, label: inconclusive})


class _TopLevel(OpRecorder):
    """Records custom ops called outside any user ``autograd.Function``: inside one, the Function's backward is the
    one autograd uses, and the op's own (or its lack of one) never runs."""

    def __init__(self) -> None:
        super().__init__(track_reached=True)
        self.depth = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.depth:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def _is_user_function(cls: type) -> bool:
    # custom_op's own autograd.Function (torch._library) is checked as the op it belongs to
    return not cls.__module__.startswith("torch.")


def record_calls(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, object],
                 backward: Callable[[Any], None] | None = None) -> tuple[list[Call], Any]:
    """Run ``fn`` once in eager; the first call of each custom op and each autograd.Function class made outside
    any user Function, inputs cloned. Returns the calls and the exception the forward raised (None when it ran).
    ``backward``: runs the probe's backward of the outputs (``_execution.backward_of``), which marks the ops no gradient
    reached (``Call.unused``)."""
    functions: dict[type, tuple[tuple[Any, ...], dict[str, object]]] = {}
    rec = _TopLevel()

    def hook(cls: type, apply: Callable[..., Any], *a: Any, **k: Any) -> Any:
        if rec.busy or not _is_user_function(cls):  # busy: called while the recorder copies inputs, not the probe's
            return apply(*a, **k)
        if not rec.depth and cls not in functions:
            copied = rec.snapshot(a, k)
            if copied is not None:
                functions[cls] = copied
        rec.depth += 1
        try:
            return apply(*a, **k)
        finally:
            rec.depth -= 1

    error = None
    owner = getattr(fn, "__self__", None)
    if getattr(fn, "__name__", "") == "apply" and isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        # the probe is ``MyFn.apply`` itself, bound before the hook was installed: call it through the class
        fn = lambda *a, **k: owner.apply(*a, **k)  # noqa: E731
    out = None
    try:
        with compat.intercept_function_apply(hook), rec:
            out = fn(*args, **kwargs)
    except Exception as e:
        error = e
    unused: set[str] = set()
    if error is None and backward is not None and rec.differentiated:
        unused = rec.never_differentiated(lambda: backward(out))
    calls = [Call(f"{c.__module__}.{c.__qualname__}", c, a, k, is_function=True) for c, (a, k) in functions.items()]
    calls += [Call(str(op), op, a, k, unused=op_name(str(op)) in unused) for op, (a, k) in rec.calls.items()]
    return calls, error


def _arg_names(call: Call, n_args: int) -> list[str]:
    if call.is_function:
        import inspect
        try:
            params = list(inspect.signature(call.target.forward).parameters)
        except (TypeError, ValueError):
            params = []
        # forward(ctx, ...) unless the Function overrides setup_context (then forward(x, ...), no ctx)
        if not compat.defines_setup_context(call.target):
            params = params[1:]
    else:
        params = [a.name for a in compat.op_schema(call.target).arguments]
    return [params[i] if i < len(params) else f"arg{i}" for i in range(n_args)]


def check_call(call: Call, seed: int = 0) -> GradcheckOutcome:
    """Check one recorded call's backward against numerical derivatives (module docstring). Never raises."""
    out = _Found(GradcheckOutcome(call.name, function=call.is_function))
    try:
        _check(call, out, seed)
    except Exception as e:  # the checker's own failure: recorded, never a crash of the stage
        out.set(error=exceptions.error_record(e, "backward"))
    return out.now


def _check(call: Call, out: _Found, seed: int) -> None:
    from ._execution import seed_all

    leaves, spec = pytree.tree_flatten((call.args, call.kwargs))
    diff = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad
            and t.is_floating_point() and not _wrapped(t)]
    if not diff:
        out.set(skip=NO_GRAD_INPUT)
        return
    if call.unused:
        out.set(skip=(
            "no gradient reaches its outputs in the probe's backward (the loss does not depend on them)"))
        return
    names = _arg_names(call, len(call.args))
    labels = {i: _label(i, leaves, spec, names) for i in diff}
    keep: list[int] = []  # the outputs autograd differentiates (not mark_non_differentiable'd, not integer)

    def run(values: list[Any]) -> list[torch.Tensor]:
        seed_all()  # a random op inside the call (dropout) draws the same numbers at every evaluation
        a, k = pytree.tree_unflatten(values, spec)
        outs = pytree.tree_leaves(call.invoke(a, k))
        return [outs[j] for j in keep] if keep else outs

    try:
        first = run(leaves)
    except Exception as e:
        out.set(error=exceptions.error_record(e, "forward"))
        return
    keep[:] = [j for j, o in enumerate(first) if isinstance(o, torch.Tensor) and o.is_floating_point()
               and o.requires_grad]
    if not keep:
        out.set(skip="no floating output of its recorded call requires grad")
        return
    if not _same([first[j] for j in keep], run(leaves)):  # run() returns the kept outputs from here on
        out.set(skip=(
            "unstable: two identical calls give different outputs (a result that changes from run to run is "
            "no derivative to compare, and no finding)"))
        return
    out.set(inputs=tuple(labels[i] for i in diff))
    as64 = _cast(leaves, torch.float64)
    runs64 = _runs(run, as64)
    if runs64 and not _float64_agrees(run, as64, leaves, keep):
        runs64 = False  # checked in the dtype it runs in: a derivative of another function proves nothing
        out.set(note=(
            "its float64 outputs change from call to call or differ from its own dtype's beyond that dtype's "
            "rounding (the op does not compute in float64): checked in its own dtype"))
    numel = sum(leaves[i].numel() for i in diff)
    base, tol_dtype, gradcheck_found = as64, torch.float64, None
    if runs64 and numel <= GRADCHECK_NUMEL:
        found = _gradcheck(lambda *xs: tuple(run(_with(as64, diff, xs))), [as64[i] for i in diff])
        if isinstance(found, ErrorRecord):  # gradcheck itself raised (a backward kernel refusing float64, say)
            out.set(note=(
                f"float64 gradcheck raised {found.type.rsplit('.', 1)[-1]}; checked in float32 instead"))
            runs64 = False
        else:
            gradcheck_found = found or "pass"
            out.set(method=(
                "torch.autograd.gradcheck, float64 (fast mode), and a central difference along random "
                "directions, float64"))
    elif runs64:
        out.set(note=(
            f"{numel} differentiable elements: above gradcheck's report limit ({GRADCHECK_NUMEL})"))
    if not runs64:
        base = leaves if all(leaves[i].dtype == torch.float32 for i in diff) else _cast(leaves, torch.float32)
        if not _runs(run, base):
            low = min((leaves[i].dtype for i in diff), key=lambda d: torch.finfo(d).bits)
            out.set(skip=(
                f"the call runs in {str(low).replace('torch.', '')} only: numerical derivatives are not "
                "reliable below float32"))
            return
        tol_dtype = torch.float32
        out.set(note=out.now.note or "the call does not run with float64 inputs")
    if gradcheck_found is None:
        out.set(method=(
            f"central difference along a random direction, {str(tol_dtype).replace('torch.', '')}"))
    for i in diff:
        def f(x: torch.Tensor, i: int = i) -> list[torch.Tensor]:
            return run(_with(base, [i], (x,)))

        m = confirmed(f, base[i], tol_dtype, seed)
        out.per_input(labels[i], relative_error=m.relative_error)
        if not m.ok and not m.inconclusive and tol_dtype == torch.float64:
            at32 = confirmed(f, base[i], torch.float32, seed)  # float64 inputs, float32 step and tolerance
            if at32.ok or at32.inconclusive:
                m = replace(m, inconclusive="the float64 check fails, but the check at float32 precision passes: "
                                            "the call computes below float64 inside")
        if m.inconclusive:
            out.per_input(labels[i], inconclusive=m.inconclusive)
            continue
        if m.ok:
            continue
        output = None
        if len(keep) > 1:  # which output's gradient is wrong: each alone
            for k in range(len(keep)):
                def one(x: torch.Tensor, k: int = k, f: Callable[[torch.Tensor], list[torch.Tensor]] = f) -> \
                        list[torch.Tensor]:
                    return [f(x)[k]]
                mk = confirmed(one, base[i], tol_dtype, seed)
                if not mk.ok and not mk.inconclusive:
                    m, output = mk, _output_label(call, keep[k])
                    break
        out.set(mismatch=m.mismatch(labels[i], output))
        if gradcheck_found == "pass":
            out.set(note=(
                "float64 gradcheck (fast mode) passes: its tolerance grows with the input's size; the "
                "central difference does not"))
        return
    if isinstance(gradcheck_found, tuple):
        out.set(note=(
            f"float64 gradcheck (fast mode) reports a mismatch for input {labels[diff[gradcheck_found[1]]]} "
            "that the central-difference checks do not confirm"))


def _with(values: list[Any], idx: list[int], xs: tuple[torch.Tensor, ...]) -> list[Any]:
    values = list(values)
    for i, x in zip(idx, xs):
        values[i] = x
    return values


def _output_label(call: Call, j: int) -> str:
    """``output j``, with the schema's name for it when the op's schema names its returns."""
    if not call.is_function:
        returns = compat.op_schema(call.target).returns
        flat = len(returns) == 1 and str(returns[0].type).endswith("[]")
        if not flat and j < len(returns) and returns[j].name:
            return f"output {j} ({returns[j].name})"
    return f"output {j}"


def end_to_end(make_case: Callable[[], Any], seed: int = 0) -> GradcheckOutcome:
    """The probe's gradient as a training step gets it, against the numerical derivative of its loss: the
    ``.grad`` its leaves (inputs that require grad, trainable parameters) hold after ``loss.backward()``, along a
    random direction, compared with a central difference of the loss in the leaves' own dtype (tolerance as
    ``directional``'s, the loss's rounding from the sum of its outputs' magnitudes). What a call's own check cannot
    see shows here: a backward that also writes into an input's ``.grad`` and returns it (accumulated twice), a
    gradient a library's tape adds on its own. Two backward runs that disagree are ``unstable``: no finding. A
    mismatch is confirmed as ``confirmed`` does (half the step, a second direction). Never raises."""
    out = _Found(GradcheckOutcome(END_TO_END, function=False))
    try:
        _end_to_end(make_case, out, seed)
    except Exception as e:
        out.set(error=exceptions.error_record(e, "backward"))
    return out.now


def _end_to_end(make_case: Callable[[], Any], out: _Found, seed: int) -> None:
    from ._execution import grad_targets, loss_of, seed_all

    case = make_case()
    targets: dict[str, torch.Tensor] = {}
    for k, t in grad_targets(case).items():  # one entry per tensor: fn(x, x) hands the same leaf twice
        if t.is_floating_point() and all(t is not u for u in targets.values()):
            targets[k] = t
    if not targets:
        out.set(skip="nothing in the probe requires grad")
        return
    dtype = min((t.dtype for t in targets.values()), key=lambda d: torch.finfo(d).bits)
    if torch.finfo(dtype).bits < 32:
        out.set(skip=(
            f"its leaves are {str(dtype).replace('torch.', '')}: numerical derivatives are not reliable below float32"))
        return
    base = {k: t.detach().clone() for k, t in targets.items()}
    loss_dtype: list[torch.dtype] = []

    def grads() -> dict[str, torch.Tensor]:
        for t in targets.values():
            t.grad = None
        seed_all()
        loss = loss_of(case, case.fn(*case.args, **case.kwargs))
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            raise _NoLoss
        loss_dtype[:] = [loss.dtype]
        loss.backward()
        return {k: (t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)) for k, t in targets.items()}

    def loss_at(shift: dict[str, torch.Tensor], t: float) -> tuple[float, float]:
        with torch.no_grad():
            for k, x in targets.items():
                if k in shift:
                    x.copy_((base[k].double() + t * shift[k]).to(x.dtype))
        try:  # with gradients on, as the training step ran it (loss_of sums what requires grad)
            seed_all()
            outs = case.fn(*case.args, **case.kwargs)
            loss = loss_of(case, outs)
            size = sum((o.detach().double().abs().sum() for o in pytree.tree_leaves(outs)
                        if isinstance(o, torch.Tensor) and o.is_floating_point()), torch.zeros((), dtype=torch.float64))
        finally:
            with torch.no_grad():
                for k, x in targets.items():
                    x.copy_(base[k])
        if loss is None:
            raise _NoLoss
        return float(loss.detach()), float(size)

    try:
        first = grads()
        again = grads()
    except _NoLoss:
        out.set(skip="the probe's outputs give no differentiable loss")
        return
    except Exception as e:  # the probe's own forward or backward: its failure is the other checks' to report
        out.set(skip=f"the probe's training step raised {type(e).__name__} (see its findings)")
        return
    unstable = [k for k in first if not _equal(first[k], again[k])]
    if unstable:
        out.set(skip=(
            f"unstable: two identical backward runs give different gradients ({', '.join(unstable[:3])}): "
            "no derivative to compare (a result that changes from run to run is not a finding)"))
        return
    # the loss's own precision bounds the difference quotient (loss_of sums in float32 for a float64 probe)
    tol_dtype = min(dtype, *loss_dtype, key=lambda d: torch.finfo(d).bits)
    eps = torch.finfo(tol_dtype).eps
    out.set(method=(
        f"the leaves' .grad after loss.backward(), against a central difference of the loss, "
        f"{str(tol_dtype).replace('torch.', '')}, per input and for the parameters together"))
    out.set(inputs=tuple(targets))

    def check(group: list[str], direction_seed: int, scale: float = 1.0) -> Directional:
        gen = torch.Generator().manual_seed(direction_seed)
        shift = {}
        for k in group:  # each leaf moves in proportion to its own size
            b = base[k]
            rms = float(b.double().pow(2).mean().sqrt()) if b.numel() else 0.0
            v = torch.randn(b.shape, generator=gen, dtype=torch.float64).to(b.device)
            shift[k] = v * (rms if rms > 0 and math.isfinite(rms) else 1.0)
        t = scale * eps ** (1 / 3)
        (plus, size), (minus, _) = loss_at(shift, t), loss_at(shift, -t)
        numerical = (plus - minus) / (2 * t)
        analytical = float(sum((first[k].double() * shift[k]).sum() for k in group))
        return Directional.measured(numerical, analytical, 8 * eps * size / t, DIRECTIONAL_RTOL.get(tol_dtype, 1e-2),
                                    t)

    # each input alone (a wrong gradient of one input is not drowned by the parameters'), the parameters together
    params = [k for k in targets if k.startswith("param:")]
    groups = [[k] for k in targets if not k.startswith("param:")] + ([params] if params else [])
    for group in groups:
        label = group[0] if len(group) == 1 else "the parameters"
        m = check(group, seed)
        out.per_input(label, relative_error=m.relative_error)
        if m.ok:
            continue
        if not math.isfinite(m.numerical):
            out.per_input(label, inconclusive="the numerical derivative is not finite")
        elif abs(check(group, seed, scale=0.5).numerical - m.numerical) > m.tolerance:
            out.per_input(label, inconclusive=("the numerical derivative changes with the step: the loss is not smooth "
                                       "along the direction"))
        elif abs(m.numerical) <= m.atol and abs(m.analytical) > m.tolerance:
            out.per_input(label, inconclusive=(
                "the loss is flat along the direction while its gradient is not: a surrogate "
                "gradient by design (straight-through)"))
        elif check(group, seed + 1).ok:
            out.per_input(label, inconclusive="a second random direction agrees")
        else:
            ratio = m.analytical / m.numerical if m.numerical else float("inf")
            out.set(mismatch=m.mismatch(label, ratio=ratio))
            return


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same up to reduction order (threads may sum in another order: 1e-5 of the largest value), NaN equal to
    NaN: a run that changes more than that is unstable (a 4-bit kernel fed float64)."""
    if a.shape != b.shape:
        return False
    if torch.equal(a, b):
        return True
    a64, b64 = a.detach().double(), b.detach().double()
    scale = float(torch.nan_to_num(a64.abs(), nan=0.0, posinf=0.0).max()) if a64.numel() else 0.0
    return bool(torch.allclose(a64, b64, rtol=1e-5, atol=1e-5 * scale, equal_nan=True))


class _NoLoss(Exception):
    pass


def _gradcheck(f: Callable[..., Any], xs: list[torch.Tensor]) -> tuple[int, int] | ErrorRecord | None:
    """``torch.autograd.gradcheck`` in fast mode: None when it passes, ``(output, input)`` of its mismatch, or
    the error record when it raised something else."""
    xs = [x.detach().clone().requires_grad_() for x in xs]
    try:
        torch.autograd.gradcheck(f, tuple(xs), fast_mode=True, check_undefined_grad=False,
                                 atol=GRADCHECK_ATOL, rtol=GRADCHECK_RTOL)
    except GradcheckError as e:
        m = _GRADCHECK_MSG.search(str(e))
        return (int(m.group("out")), int(m.group("inp"))) if m else (0, 0)
    except Exception as e:
        return exceptions.error_record(e, "backward")
    return None


_GRADCHECK_MSG = re.compile(r"mismatch for output (?P<out>\d+) with respect to input (?P<inp>\d+)")


def _wrapped(t: torch.Tensor) -> bool:
    """A wrapper subclass (optimum-quanto's quantized weights): its dtype is its own (quanto refuses ``.to(dtype)``),
    and perturbing it element by element means nothing; it is neither cast nor differentiated, only passed on."""
    return compat.is_traceable_wrapper_subclass(t)


def _cast(leaves: list[Any], dtype: torch.dtype) -> list[Any]:
    """The leaves with every floating tensor in ``dtype`` (the differentiable ones as fresh leaves); a wrapper
    subclass (a quantized weight) as it is."""
    out = []
    for t in leaves:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not _wrapped(t):
            out.append(t.detach().to(dtype).requires_grad_(t.requires_grad))
        else:
            out.append(t)
    return out


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(_equal(x.detach(), y.detach()) for x, y in zip(a, b))


def _float64_agrees(run: Callable[[list[Any]], Any], as64: list[Any], leaves: list[Any], keep: list[int]) -> bool:
    """Does the call compute the same function in float64: two float64 calls agree, and each output is within 1%
    (of its norm) of the call in its own dtype? A 4-bit kernel handed float64 returns other (and changing) values."""
    with torch.no_grad():
        a, b, own = run(as64), run(as64), run(leaves)
    if not _same(a, b):
        return False
    for x, y in zip(a, own):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.is_floating_point() and x.numel():
            scale = float(y.detach().double().norm()) or 1.0
            if float((x.detach().double() - y.detach().double()).norm()) > 1e-2 * scale:
                return False
    return True


def _runs(run: Callable[[list[Any]], Any], leaves: list[Any]) -> bool:
    try:
        with torch.no_grad():
            run(leaves)
        return True
    except Exception:
        return False


def _label(i: int, leaves: list[Any], spec: Any, names: list[str]) -> str:
    """The argument a flat leaf index stands for: its name when it is a top-level positional argument."""
    n_args = len(pytree.tree_unflatten(leaves, spec)[0])
    flat_args = len(pytree.tree_leaves(pytree.tree_unflatten(leaves, spec)[0]))
    if i < flat_args and flat_args == n_args:
        return names[i]
    return f"input leaf {i}"


def old_style_functions(make_case: Callable[[], Any]) -> list[str]:
    """The user ``autograd.Function`` classes one eager forward calls whose ``forward`` takes ``ctx`` (no
    ``setup_context``): every torch.func transform refuses them."""
    try:
        case = make_case()
    except Exception:
        return []
    calls, _ = record_calls(case.fn, case.args, case.kwargs)
    return [c.name for c in calls if c.is_function and not compat.defines_setup_context(c.target)]
