"""Numerical gradient checks of custom ops and ``autograd.Function``s at the inputs a probe called them with
(the ``gradcheck`` stage; docs/stages.md, "gradcheck").

``record_calls`` runs one eager forward and keeps, for each custom op and each ``autograd.Function`` class, its
first call with cloned inputs. ``check_call`` then compares the registered backward with numerical derivatives
of the forward, one differentiable input at a time:

* **float64**, when the call runs with its floating inputs cast to float64 and the differentiable inputs hold at
  most ``GRADCHECK_NUMEL`` elements: ``torch.autograd.gradcheck`` in fast mode (a random projection of the
  Jacobian; on a mismatch it recomputes the full Jacobians for its report, 2 forward calls per element, hence
  the size limit);
* otherwise (a kernel that only computes in float32, like the mHC extension, or a large input): a
  central-difference check along one random direction per input, in the dtype the call accepts. See
  ``directional`` for the step and the tolerance and why.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.autograd.gradcheck import GradcheckError
from torch.utils import _pytree as pytree

from . import capture
from .oprecorder import OpRecorder, _snap

#: gradcheck (float64) when the differentiable inputs hold at most this many elements; above, the directional
#: check (gradcheck's failure report alone would cost 2 forward calls per element)
GRADCHECK_NUMEL = 8192
#: float32 machine epsilon; the central-difference step is its cube root (the step that balances the
#: truncation error h^2/6 |L'''| against the rounding error eps |L| / h)
FP32_EPS = torch.finfo(torch.float32).eps
#: relative tolerance of the float32 directional check: the central difference at step eps^(1/3) is accurate
#: to about eps^(2/3) ~ 2.4e-5 relative for a smooth function of unit scale; 1e-2 leaves 400x for curvature and
#: rounding accumulated over large sums, and still refuses a backward off by any constant factor (>= 1.01)
DIRECTIONAL_RTOL = {torch.float32: 1e-2, torch.float64: 1e-3}
#: gradcheck's own defaults (torch.autograd.gradcheck: atol=1e-5, rtol=1e-3)
GRADCHECK_ATOL, GRADCHECK_RTOL = 1e-5, 1e-3


@dataclass
class Call:
    """One recorded call: ``target`` is a custom op (OpOverload) or an ``autograd.Function`` subclass."""

    name: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    is_function: bool = False

    def invoke(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.target.apply(*args, **kwargs) if self.is_function else self.target(*args, **kwargs)


@dataclass
class Outcome:
    """The check of one call: ``method`` ("gradcheck float64" or "directional float32"...), the inputs checked,
    and at most one mismatch (``input``, ``output``, ``numerical``, ``analytical``, ``relative_error``,
    ``tolerance``), or ``error`` (an error record) when the forward or backward raised, or ``skip``."""

    name: str
    #: the call is an autograd.Function's (``name`` is its class), not a custom op's
    function: bool = False
    method: str = ""
    inputs: list[str] = field(default_factory=list)
    mismatch: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    skip: str = ""
    note: str = ""
    #: per input checked by the directional check: |numerical - analytical| / max(|numerical|, |analytical|)
    relative_errors: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", None, [], {}, False)}


def record_calls(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Call], Any]:
    """Run ``fn`` once in eager; the first call of each custom op and each autograd.Function, inputs cloned.
    Returns the calls and the exception the forward raised (None when it ran)."""
    functions: dict[type, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    original = torch.autograd.Function.__dict__["apply"]

    def apply(cls: type, *a: Any, **k: Any) -> Any:
        if cls not in functions:
            functions[cls] = (pytree.tree_map(_snap, a), pytree.tree_map(_snap, k))
        return original.__func__(cls, *a, **k)

    rec = OpRecorder()
    error = None
    torch.autograd.Function.apply = classmethod(apply)  # type: ignore[method-assign]
    try:
        with rec:
            fn(*args, **kwargs)
    except Exception as e:
        error = e
    finally:
        torch.autograd.Function.apply = original  # type: ignore[method-assign]
    # custom_op's own autograd.Function (torch._library) is checked as the op it belongs to
    calls = [Call(f"{c.__module__}.{c.__qualname__}", c, a, k, is_function=True) for c, (a, k) in functions.items()
             if not c.__module__.startswith("torch.")]
    calls += [Call(str(op), op, a, k) for op, (a, k) in rec.calls.items()]
    return calls, error


def _arg_names(call: Call, n_args: int) -> list[str]:
    if call.is_function:
        import inspect
        try:
            params = list(inspect.signature(call.target.forward).parameters)[1:]  # after ctx
        except (TypeError, ValueError):
            params = []
    else:
        params = [a.name for a in call.target._schema.arguments]
    return [params[i] if i < len(params) else f"arg{i}" for i in range(n_args)]


def check_call(call: Call, seed: int = 0) -> Outcome:
    """Check one recorded call's backward against numerical derivatives (module docstring). Never raises."""
    leaves, spec = pytree.tree_flatten((call.args, call.kwargs))
    diff = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.requires_grad
            and t.is_floating_point()]
    out = Outcome(call.name, function=call.is_function)
    if not diff:
        out.skip = "no input of its recorded call requires grad"
        return out
    names = _arg_names(call, len(call.args))
    labels = {i: _label(i, leaves, spec, names) for i in diff}

    keep: list[int] = []  # the outputs autograd differentiates (not mark_non_differentiable'd, not integer)

    def run(values: list[Any]) -> list[torch.Tensor]:
        a, k = pytree.tree_unflatten(values, spec)
        outs = pytree.tree_leaves(call.invoke(a, k))
        return [outs[j] for j in keep]

    def with_diff(values: list[Any], xs: tuple[torch.Tensor, ...]) -> list[Any]:
        values = list(values)
        for i, x in zip(diff, xs):
            values[i] = x
        return values

    try:
        a, k = pytree.tree_unflatten(leaves, spec)
        first = pytree.tree_leaves(call.invoke(a, k))
    except Exception as e:
        out.error = capture.error_record(e, "forward")
        return out
    keep[:] = [j for j, o in enumerate(first) if isinstance(o, torch.Tensor) and o.is_floating_point()
               and o.requires_grad]
    if not keep:
        out.skip = "no floating output of its recorded call requires grad"
        return out
    out.inputs = [labels[i] for i in diff]
    as64 = _float64(leaves)
    runs64 = as64 is not None and _runs(run, as64)
    numel = sum(leaves[i].numel() for i in diff)
    if runs64 and numel <= GRADCHECK_NUMEL:
        out.method = "torch.autograd.gradcheck, float64 (fast mode)"
        _gradcheck(out, call, keep, lambda *xs: tuple(run(with_diff(as64, xs))), [as64[i] for i in diff],
                   [labels[i] for i in diff])
        return out
    base = as64 if runs64 else leaves
    dtype = torch.float64 if runs64 else torch.float32
    out.method = f"central difference along a random direction, {str(dtype).replace('torch.', '')}"
    if not runs64:
        out.note = "the call does not run with float64 inputs"
    elif numel > GRADCHECK_NUMEL:
        out.note = f"{numel} differentiable elements: above gradcheck's report limit ({GRADCHECK_NUMEL})"
    gen = torch.Generator().manual_seed(seed)
    for i in diff:
        others = list(base)

        def f(x: torch.Tensor, i: int = i, others: list[Any] = others) -> list[torch.Tensor]:
            others[i] = x
            return run(others)

        try:
            m = directional(f, base[i], gen, dtype)
            out.relative_errors[labels[i]] = m["relative_error"]
            if not m["ok"] and len(keep) > 1:  # which output's gradient is wrong: each alone
                alone = (directional(lambda x, k=k, f=f: [f(x)[k]], base[i], gen, dtype) for k in range(len(keep)))
                m = next(({**mk, "output": keep[k]} for k, mk in enumerate(alone) if not mk["ok"]), m)
        except Exception as e:
            out.error = capture.error_record(e, "backward")
            return out
        if not m.pop("ok"):
            out.mismatch = {"input": labels[i], **m}
            if "output" in out.mismatch:
                out.mismatch["output"] = _output_label(call, out.mismatch["output"])
            return out
    return out


def _output_label(call: Call, j: int) -> str:
    """``output j``, with the schema's name for it when the op's schema names its returns."""
    if not call.is_function:
        returns = call.target._schema.returns
        flat = len(returns) == 1 and str(returns[0].type).endswith("[]")
        if not flat and j < len(returns) and returns[j].name:
            return f"output {j} ({returns[j].name})"
    return f"output {j}"


def directional(f: Callable[[torch.Tensor], list[torch.Tensor]], x: torch.Tensor, gen: torch.Generator,
                dtype: torch.dtype) -> dict[str, Any]:
    """Compare d/dt L(x + t v) at t=0, numerically (central difference) and by autograd, where
    L = sum_k <u_k, out_k> with random cotangents u_k and a random direction v (both standard normal).

    Step h = eps^(1/3) * max(1, rms(x)) (eps of ``dtype``), the step that balances truncation and rounding
    error. Tolerance: |num - ana| <= atol + rtol * max(|num|, |ana|), with rtol = DIRECTIONAL_RTOL[dtype]
    and atol = 8 * eps * S / h, the rounding error of the difference quotient, where S = sum |u_k| |out_k| is
    the magnitude of the terms L sums. Returns both derivatives, their relative error and the tolerance; ``ok``.
    """
    eps = torch.finfo(dtype).eps
    x = x.detach()
    scale = max(1.0, float(x.double().pow(2).mean().sqrt())) if x.numel() else 1.0
    h = eps ** (1 / 3) * scale
    v = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)
    x0 = x.clone().requires_grad_()
    outs = f(x0)
    us = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outs]

    def loss(os: list[torch.Tensor]) -> torch.Tensor:
        return sum(((u * o.double()).sum() for u, o in zip(us, os)), torch.zeros((), dtype=torch.float64))

    (g,) = torch.autograd.grad(loss(outs), x0, allow_unused=True)
    analytical = float((g.double() * v.double()).sum()) if g is not None else 0.0
    with torch.no_grad():
        plus, minus = f((x + h * v).to(x.dtype)), f((x - h * v).to(x.dtype))
        numerical = float(loss(plus) - loss(minus)) / (2 * h)
        magnitude = float(sum(((u.abs() * o.double().abs()).sum() for u, o in zip(us, outs)),
                              torch.zeros((), dtype=torch.float64)))
    atol = 8 * eps * magnitude / h
    rtol = DIRECTIONAL_RTOL.get(dtype, 1e-2)
    err = abs(numerical - analytical)
    tol = atol + rtol * max(abs(numerical), abs(analytical))
    return {"ok": math.isfinite(err) and err <= tol, "numerical": numerical, "analytical": analytical,
            "relative_error": err / max(abs(numerical), abs(analytical), 1e-30), "tolerance": tol, "step": h}


_GRADCHECK_MSG = re.compile(r"mismatch for output (?P<out>\d+) with respect to input (?P<inp>\d+),\s*"
                            r"numerical:\s*(?P<num>\S+)\s*analytical:\s*(?P<ana>\S+)")


def _gradcheck(out: Outcome, call: Call, keep: list[int], f: Callable[..., Any], xs: list[torch.Tensor],
               labels: list[str]) -> None:
    xs = [x.detach().clone().requires_grad_() for x in xs]
    try:
        torch.autograd.gradcheck(f, tuple(xs), fast_mode=True, check_undefined_grad=False,
                                 atol=GRADCHECK_ATOL, rtol=GRADCHECK_RTOL)
    except GradcheckError as e:
        m = _GRADCHECK_MSG.search(str(e))
        if m is None:
            out.error = capture.error_record(e, "backward")
            return
        num, ana = _number(m.group("num")), _number(m.group("ana"))
        out.mismatch = {
            "input": labels[int(m.group("inp"))], "output": _output_label(call, keep[int(m.group("out"))]), "numerical": num, "analytical": ana,
            "relative_error": abs(num - ana) / max(abs(num), abs(ana), 1e-30),
            "tolerance": GRADCHECK_ATOL + GRADCHECK_RTOL * abs(num)}
    except Exception as e:
        out.error = capture.error_record(e, "backward")


def _number(text: str) -> float:
    m = re.search(r"-?[\d.]+(?:e[-+]?\d+)?", text)
    return float(m.group(0)) if m else float("nan")


def _float64(leaves: list[Any]) -> list[Any] | None:
    """The leaves with every floating tensor in float64 (the differentiable ones as fresh leaves)."""
    out = []
    for t in leaves:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            out.append(t.detach().double().requires_grad_(t.requires_grad))
        else:
            out.append(t)
    return out


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
