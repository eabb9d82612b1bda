"""Stage implementations. Each runs inside a fresh stage process and returns a raw, plain-data record.

A record never holds a label: ``results.build_stage_result`` classifies it in the parent. Every stage builds
its own fresh ``Case`` (the probe function is called again, seeded), so a stateful probe is compared with
eager at the same step count, and no stage sees another's compile caches, counters or warn-once state.

Record fields: ``error`` (capture.error_record), ``breaks`` (capture.TraceCollector.breaks),
``warnings`` (messages), ``mismatches`` (compiled vs eager), ``graph_count``,
``explain_graph_break_count``, ``skip_reason``, ``opcheck`` (per op: per test util, "SUCCESS" or an error
record), ``recompiles`` and ``steady_state_recompiles`` (compiled_autograd.py: ``{"reason", "step",
"source", "user_frame"}``; the second list makes ``recompile`` findings), ``extra`` (copied into
``StageResult.extra``). The ``compiled_autograd`` stage lives in compiled_autograd.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from . import capture, compat
from .classify import TORCH_NAMESPACES
from .probe import Case


#: allclose tolerances per dtype (rtol, atol): loose enough for inductor's reordered reductions, tight enough
#: that the silent failures tracecheck hunts (e.g. pytorch#153389-style 1e-1 differences) cannot pass.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}


class StageSetupError(Exception):
    """The probe function raised or returned a bad shape; ``record`` is its error record."""

    def __init__(self, record: dict[str, Any]):
        super().__init__(record["message"])
        self.record = record


@dataclass
class Execution:
    """Result of running ``fn`` forward (and backward when the case needs gradients)."""

    outputs: Any = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    ran_backward: bool = False


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(obj) if isinstance(t, torch.Tensor)]


def needs_grad(case: Case) -> bool:
    if isinstance(case.grad, bool):
        return case.grad
    if callable(case.grad):
        return True
    return any(t.requires_grad and t.is_floating_point() for t in _tensors((case.args, case.kwargs)))


def grad_targets(case: Case) -> dict[str, torch.Tensor]:
    """Leaf tensors whose ``.grad`` is compared: inputs that require grad, then module parameters."""
    targets: dict[str, torch.Tensor] = {}
    leaves, _ = pytree.tree_flatten((case.args, case.kwargs))
    for i, t in enumerate(leaves):
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf:
            targets[f"input[{i}]"] = t
    if isinstance(case.fn, torch.nn.Module):
        for name, p in case.fn.named_parameters():
            if p.requires_grad:
                targets[f"param:{name}"] = p
    return targets


def loss_of(case: Case, outputs: Any) -> torch.Tensor | None:
    """The scalar tracecheck backpropagates: ``case.grad(outputs)``, else the sum of the floating outputs that
    require grad (None when there is none)."""
    if callable(case.grad):
        return case.grad(outputs)
    diff = [t for t in _tensors(outputs) if t.is_floating_point() and t.requires_grad]
    return sum(t.float().sum() for t in diff) if diff else None


def execute(fn: Callable[..., Any], case: Case) -> Execution:
    """Forward, then backward on the sum of floating outputs (or ``case.grad(outputs)``). Never raises."""
    ex = Execution()
    torch.manual_seed(0)
    try:
        ex.outputs = fn(*case.args, **case.kwargs)
    except Exception as e:
        ex.error = capture.error_record(e, "forward")
        return ex
    if not needs_grad(case):
        return ex
    try:
        loss = loss_of(case, ex.outputs)
        if loss is None:
            return ex  # nothing differentiable came out: no backward to run
        targets = grad_targets(case)
        # the probe may hand out the same module or leaf tensor on every call: compare this backward's
        # contribution, not whatever .grad already held
        before = {k: (t.grad.detach().clone() if t.grad is not None else None) for k, t in targets.items()}
        loss.backward()
        ex.ran_backward = True
        ex.grads = {k: _grad_delta(t.grad, before[k]) for k, t in targets.items()}
    except Exception as e:
        ex.error = capture.error_record(e, "backward")
    return ex


_PLAIN = (int, float, bool, str, bytes, type(None), torch.dtype, torch.Size)


def _grad_delta(grad: torch.Tensor | None, before: torch.Tensor | None) -> torch.Tensor | None:
    if grad is None:
        return None
    grad = grad.detach().clone()
    return grad if before is None else grad - before


def compare(ref: Execution, got: Execution) -> list[dict[str, Any]]:
    """Outputs (tensors with dtype-aware allclose, other leaves with ==) and gradients of ``got`` vs ``ref``."""
    ref_leaves, ref_spec = pytree.tree_flatten(ref.outputs)
    got_leaves, got_spec = pytree.tree_flatten(got.outputs)
    if ref_spec != got_spec:
        return [{"what": "outputs", "detail": f"output structure differs: compiled {got_spec} vs eager {ref_spec}"}]
    pairs: list[tuple[str, Any, Any]] = [(f"output[{i}]", a, b) for i, (a, b) in enumerate(zip(ref_leaves, got_leaves))]
    out = []
    if ref.ran_backward != got.ran_backward:  # e.g. the compiled outputs lost requires_grad
        out.append({"what": "backward", "detail": f"backward ran in eager: {ref.ran_backward}, "
                                                  f"in the compiled run: {got.ran_backward}"})
    if ref.ran_backward and got.ran_backward:
        pairs += [(f"grad {k}", ref.grads[k], got.grads.get(k)) for k in ref.grads]
    for what, a, b in pairs:
        m = _mismatch(what, a, b)
        if m:
            out.append(m)
    return out


def _mismatch(what: str, a: Any, b: Any) -> dict[str, Any] | None:
    if a is None and b is None:
        return None
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        # plain values only: other objects compare by identity and would always "differ"
        if not isinstance(a, _PLAIN) or not isinstance(b, _PLAIN) or a == b:
            return None
        return {"what": what, "detail": f"eager {a!r:.80} vs compiled {b!r:.80}"}
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return {"what": what, "detail": f"eager {type(a).__name__} vs compiled {type(b).__name__}"}
    base = {"what": what, "dtype": str(a.dtype)}
    if a.shape != b.shape or a.dtype != b.dtype:
        return {**base, "detail": f"eager {tuple(a.shape)} {a.dtype} vs compiled {tuple(b.shape)} {b.dtype}"}
    if not a.is_floating_point() and not a.is_complex():
        return None if torch.equal(a.cpu(), b.cpu()) else {**base, "detail": "integer/bool values differ"}
    rtol, atol = TOLERANCES.get(a.dtype, (1e-4, 1e-4))
    a, b = a.detach().cpu(), b.detach().cpu()
    if torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return None
    diff = (a - b).abs().double().nan_to_num(nan=float("inf"), posinf=float("inf"))
    worst = float(diff.max())
    return {**base, "rtol": rtol, "atol": atol,
            "max_abs_diff": worst if worst != float("inf") else None,  # JSON has no Infinity
            **({} if worst != float("inf") else {"detail": "NaN or Inf where the other side is finite"})}


# ---------------------------------------------------------------------------------------------------------
# Stages


def stage_eager(make_case: Callable[[], Case]) -> dict[str, Any]:
    with capture.WarningCollector() as w:
        case = make_case()
        ex = execute(case.fn, case)
    return {"error": ex.error, "warnings": w.messages, "ran_backward": ex.ran_backward}


def _reference(make_case: Callable[[], Case], backward: bool = True) -> Execution:
    """The eager run a stage compares against (or, with ``backward=False``, only checks that it runs)."""
    case = make_case()
    if not backward:
        case = dataclasses.replace(case, grad=False)
    return execute(case.fn, case)


def _forward_fails(ref: Execution) -> bool:
    """When eager cannot even run forward, a compiled stage has nothing to diagnose that eager didn't."""
    return bool(ref.error and ref.error["phase"] == "forward")


def stage_compile(make_case: Callable[[], Case], backend: str, fullgraph: bool = False) -> dict[str, Any]:
    """``torch.compile(fn, backend=..., fullgraph=...)`` forward+backward, compared with eager."""
    ref = _reference(make_case)
    if _forward_fails(ref):
        return {"skip_reason": "the eager forward fails (see the eager stage); nothing to compare"}
    case = make_case()
    compiled = torch.compile(case.fn, backend=backend, fullgraph=fullgraph)
    with capture.TraceCollector() as trace, capture.WarningCollector() as w:
        got = execute(compiled, case)
    from torch._dynamo.utils import counters

    record: dict[str, Any] = {
        "error": got.error, "breaks": trace.breaks, "warnings": w.messages,
        "graph_count": int(counters["stats"]["unique_graphs"]),
        "ran_backward": got.ran_backward,
    }
    if got.error is None:
        record["mismatches"] = compare(ref, got)
    elif ref.error and ref.error["type"] == got.error["type"] and ref.error["phase"] == got.error["phase"]:
        record["same_as_eager"] = True  # the compiled run fails exactly where eager does
    return record


def stage_explain(make_case: Callable[[], Case]) -> dict[str, Any]:
    """``torch._dynamo.explain`` (forward only) plus tracecheck's own break count from the trace."""
    if _forward_fails(_reference(make_case, backward=False)):  # explain is forward-only: no eager backward
        return {"skip_reason": "the eager forward fails (see the eager stage)"}
    case = make_case()
    with capture.TraceCollector() as trace:
        try:
            out = compat.explain(case.fn, *case.args, **case.kwargs)
        except Exception as e:
            return {"error": capture.error_record(e, "forward"), "breaks": trace.breaks}
    return {
        "breaks": trace.breaks,
        "graph_count": out.graph_count,
        "explain_graph_break_count": out.graph_break_count,
        "explain_reasons": [_clip(str(getattr(b, "reason", b)), 2000) for b in out.break_reasons][:20],
    }


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more characters]"


class OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the first call of every custom op (inputs cloned before the call, which may mutate them)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[Any, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace not in TORCH_NAMESPACES and func not in self.calls:
            def snap(t: Any) -> Any:
                if isinstance(t, torch.Tensor):
                    c = t.detach().clone()
                    return c.requires_grad_(t.requires_grad) if t.is_floating_point() else c
                return t

            self.calls[func] = (pytree.tree_map(snap, tuple(args)), pytree.tree_map(snap, dict(kwargs)))
        return func(*args, **kwargs)


def opcheck_utils(device: str) -> list[str]:
    """opcheck's autograd-registration test only runs on CPU/CUDA/XPU tensors (NotImplementedError elsewhere)."""
    utils = ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]
    return utils if device.split(":")[0] in ("cpu", "cuda", "xpu") else [u for u in utils if "autograd" not in u]


def stage_opcheck(make_case: Callable[[], Case], device: str) -> dict[str, Any]:
    """``torch.library.opcheck`` on every custom op the probe calls, with the inputs it called them with."""
    case = make_case()
    rec = OpRecorder()
    try:
        with rec:
            case.fn(*case.args, **case.kwargs)
    except Exception as e:
        if not rec.calls:
            return {"skip_reason": f"the eager forward fails before any custom op ran ({type(e).__name__})"}
    if not rec.calls:
        return {"skip_reason": "the probe calls no custom op"}
    results: dict[str, dict[str, Any]] = {}
    for op, (args, kwargs) in rec.calls.items():
        res = torch.library.opcheck(op, args, kwargs, test_utils=opcheck_utils(device), raise_exception=False)
        results[str(op)] = {
            test: (v if isinstance(v, str) else capture.error_record(v, test)) for test, v in res.items()
        }
    return {"opcheck": results}
