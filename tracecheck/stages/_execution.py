"""The machinery every stage shares: run a case (forward, backward), compare a compiled run with eager, and
the compiled stages' common body (``run_compiled``).

A stage's raw record never holds a label: ``classify.results.build_stage_result`` classifies it in the parent. Every
stage builds its own fresh ``Case`` (the probe function is called again, seeded), so a stateful probe is
compared with eager at the same step count, and no stage sees another's compile caches, counters or
warn-once state.

A stage returns its ``records.StageRecord`` (the one list of fields, each documented there), its records typed where
they are made here: an exception's ``ErrorRecord``, a comparison's ``MismatchRecord``.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, TypedDict

import torch
from ..compat import pytree

from .. import compat
from . import _numerics
from ..evidence import exceptions, tracelog
from ._numerics import BACKWARD, FORWARD
from ..model.errors import ErrorRecord
from ..model.evidence import WorstTensor
from ..model.payloads import InductorKernels, StageNotes
from ..model.probe import Case
from ..model.records import MismatchRecord, StageRecord
from ..evidence.reachable import reachable_modules, trainable_parameters


@dataclass
class Execution:
    """Result of running ``fn`` forward (and backward when the case needs gradients)."""

    outputs: Any = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    error: ErrorRecord | None = None
    ran_backward: bool = False
    #: a higher-precision reference run: its precision ("float64", or "float32" for a half-precision probe that
    #: cannot run in float64); None for any other run
    reference_dtype: str | None = None


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(plain(obj)) if isinstance(t, torch.Tensor)]


def plain(obj: Any) -> Any:
    """``obj`` with plain dataclass instances (which pytree treats as one opaque leaf) turned into dicts of
    their fields, so their tensors are compared and backpropagated. Registered pytree nodes (tuples, dicts,
    transformers' ModelOutput) are left to pytree."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and not _is_pytree_node(obj):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(plain(x) for x in obj)
    if type(obj) is dict:
        return {k: plain(v) for k, v in obj.items()}
    return obj


def tensor_outputs(outputs: Any) -> tuple[torch.Tensor, ...]:
    """The tensors among a probe's outputs, flattened: what export compares and torch.func transforms and compares.
    vmap refuses an output type that is not a pytree node (transformers' ``DynamicCache``, say) although the model
    runs, so such a leaf is dropped rather than reported; export exports the real outputs and reports it
    (``non-pytree-output``, stages/export.py)."""
    return tuple(t for t in pytree.tree_leaves(plain(outputs)) if isinstance(t, torch.Tensor))


def _is_pytree_node(obj: Any) -> bool:
    return type(obj) in pytree.SUPPORTED_NODES


def needs_grad(case: Case) -> bool:
    """Backward runs when ``case.grad`` says so, else when a floating input requires grad or a module the
    callable reaches has a parameter that does (a model handed integer token ids still trains)."""
    if isinstance(case.grad, bool):
        return case.grad
    if callable(case.grad):
        return True
    return any(t.requires_grad and t.is_floating_point() for t in _tensors((case.args, case.kwargs))) or \
        bool(trainable_parameters(case.fn))


def phases(ran: "Execution | bool") -> list[str]:
    """What a stage ran, for ``StageResult.phases``: backward counts when it ran or was attempted and raised."""
    if isinstance(ran, Execution):
        ran = ran.ran_backward or bool(ran.error and ran.error.phase == "backward")
    return [FORWARD, BACKWARD] if ran else [FORWARD]


def grad_targets(case: Case) -> dict[str, torch.Tensor]:
    """Leaf tensors whose ``.grad`` is compared: inputs that require grad, then the trainable parameters of
    every module the callable reaches (``param:<name>``; see reachable.py)."""
    targets: dict[str, torch.Tensor] = {}
    leaves, _ = pytree.tree_flatten((case.args, case.kwargs))
    for i, t in enumerate(leaves):
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf:
            targets[f"input[{i}]"] = t
    for name, p in trainable_parameters(case.fn):
        targets[f"param:{name}"] = p
    return targets


def loss_of(case: Case, outputs: Any) -> torch.Tensor | None:
    """The scalar tracecheck backpropagates: ``case.grad(outputs)``, else the sum of the floating outputs that
    require grad (None when there is none)."""
    if callable(case.grad):
        return case.grad(outputs)
    diff = [t for t in _tensors(outputs) if t.is_floating_point() and t.requires_grad]
    return functools.reduce(operator.add, (t.float().sum() for t in diff)) if diff else None


def backward_of(case: Case, outputs: Any) -> None:
    """Run the probe's backward of ``outputs`` (``loss_of``); raises ValueError when there is no differentiable loss,
    and whatever the probe's loss or the backward raises (callers that only learn from it catch those)."""
    loss = loss_of(case, outputs)
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise ValueError("no differentiable loss")
    loss.backward()


def seed_all(seed: int = 0) -> None:
    """The same random numbers for every run: torch's generators, Python's ``random`` and NumPy's global
    generator (models such as BigBird's block-sparse attention draw from NumPy)."""
    import random

    torch.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed)


def execute(fn: Callable[..., Any], case: Case, reseed: bool = True) -> Execution:
    """Forward, then backward on the sum of floating outputs (or ``case.grad(outputs)``). Never raises.

    ``reseed``: seed every generator first (``seed_all``). A run of several training steps seeds its first
    step only, so later steps draw new random numbers as a real loop does, in the same order in every run.
    """
    ex = Execution()
    if reseed:
        seed_all()
    try:
        ex.outputs = fn(*case.args, **case.kwargs)
    except Exception as e:
        ex.error = exceptions.error_record(e, "forward")
        return ex
    if not needs_grad(case):
        return ex
    try:
        loss = loss_of(case, ex.outputs)
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            return ex  # nothing differentiable came out (or the loss does not depend on it): no backward
        targets = grad_targets(case)
        # the probe may hand out the same module or leaf tensor on every call: compare this backward's
        # contribution, not whatever .grad already held
        before = {k: (t.grad.detach().clone() if t.grad is not None else None) for k, t in targets.items()}
        loss.backward()
        ex.ran_backward = True
        ex.grads = {k: _grad_delta(t.grad, before[k]) for k, t in targets.items()}
    except Exception as e:
        ex.error = exceptions.error_record(e, "backward")
    return ex


def _grad_delta(grad: torch.Tensor | None, before: torch.Tensor | None) -> torch.Tensor | None:
    if grad is None:
        return None
    grad = grad.detach().clone()
    return grad if before is None else grad - before


def structural(detail: str) -> MismatchRecord:
    """The one disagreement of outputs that cannot be paired up (their structure or number differs)."""
    return MismatchRecord(phase=FORWARD, disagreeing=1, compared=1, worst=WorstTensor(what="outputs", detail=detail))


def pairs(ref: Execution, got: Execution) -> list[_numerics.Pair] | MismatchRecord:
    """What a compiled run is compared on: each output leaf, whether backward ran, each gradient. A
    different output structure is returned as the one disagreement (there is nothing to pair up)."""
    ref_leaves, ref_spec = pytree.tree_flatten(plain(ref.outputs))
    got_leaves, got_spec = pytree.tree_flatten(plain(got.outputs))
    if ref_spec != got_spec:
        return structural(f"output structure differs: compiled {got_spec} vs eager {ref_spec}")
    out = [_numerics.Pair(f"output[{i}]", a, b) for i, (a, b) in enumerate(zip(ref_leaves, got_leaves))]
    if ref.ran_backward or got.ran_backward:  # e.g. the compiled outputs lost requires_grad
        out.append(_numerics.Pair("backward", ref.ran_backward, got.ran_backward))
    if ref.ran_backward and got.ran_backward:
        out += [_numerics.Pair(f"grad {k}", ref.grads[k], got.grads.get(k)) for k in ref.grads]
    return out


def values(ex: Execution, widen: bool = True) -> dict[str, object]:
    """An execution's outputs and gradients by the names ``pairs`` gives them (the fp64 reference; ``widen``:
    floating values as float64)."""
    outputs = plain(ex.outputs)
    leaves = pytree.tree_leaves(_numerics.as_float64_values(outputs) if widen else outputs)
    out: dict[str, object] = {f"output[{i}]": v for i, v in enumerate(leaves)}
    out.update({f"grad {k}": (g.double() if g is not None and widen else g) for k, g in ex.grads.items()})
    return out


def compare(ref: Execution, got: Execution, fp64: Callable[[], "Execution | str"] | None = None,
            jittered: Callable[[], "list[Execution]"] | None = None, batchnorm: bool = False,
            notes: list[str] | None = None) -> list[MismatchRecord]:
    """``got`` (compiled) against ``ref`` (eager), at most one record per phase (_numerics.judge).

    ``fp64`` makes the higher-precision reference run (float64; float32 for a half-precision probe that cannot run
    in float64), or returns why it cannot; it is called only when some tensor is not allclose at the dtype's
    tolerance. ``jittered`` makes the eager runs on jittered inputs and weights (``jittered_runs``), called only
    when a tensor fails the RMSE check against eager alone. ``batchnorm``: the probe trains through BatchNorm
    (``_numerics.batchnorm_training``): the per-model tolerance applies. Tensors are judged in half precision by
    their own dtype, or by the precision of ``ref``'s outputs (``_numerics.output_half``); with no reference, a
    half-precision tensor that is not allclose but shows no gross error is not judged, and ``notes`` (when given)
    gets a line saying which and why.
    """
    paired = pairs(ref, got)
    if isinstance(paired, MismatchRecord):
        return [paired]

    def make() -> dict[str, object] | str:
        ex = fp64() if fp64 is not None else "no float64 run was possible for this comparison"
        if isinstance(ex, str):
            return ex
        numeric_ref.dtype = ex.reference_dtype or "float64"
        return values(ex)

    def make_jittered() -> list[dict[str, object]]:
        return [values(ex, widen=False) for ex in (jittered() if jittered is not None else [])]

    # not named ``reference``: ``make`` above would read as this module's ``reference()`` to a type checker
    numeric_ref = _numerics.Reference(make, make_jittered=make_jittered,
                                      half=_numerics.output_half(_tensors(ref.outputs)))
    if batchnorm:
        numeric_ref.relative_floor = _numerics.BATCHNORM_FLOOR
        numeric_ref.floor_reason = "the probe trains through BatchNorm: the runner's vision-training tolerance"
    records = _numerics.judge(paired, numeric_ref)
    if numeric_ref.not_judged and notes is not None:
        shown = ", ".join(numeric_ref.not_judged[:5]) + (f" and {len(numeric_ref.not_judged) - 5} more"
                                                          if len(numeric_ref.not_judged) > 5 else "")
        notes.append(f"numerics not judged for {len(numeric_ref.not_judged)} half-precision tensor(s) not allclose to "
                     f"eager ({shown}): no higher-precision reference ({numeric_ref.unavailable}); half-precision "
                     "rounding is not judged by allclose alone (checked against eager for a gross error only: cosine "
                     f"similarity and an RMSE within {_numerics.NO_REFERENCE_RMSE:g} of eager's RMS)")
    return records


def float64_run(make_case: Callable[[], Case], run: Callable[[Case], "Execution | None"] | None = None,
                case: Case | None = None) -> Callable[[], "Execution | str"]:
    """A thunk for ``compare``: a fresh case in float64 (its reachable modules cast in place and restored),
    run by ``run`` (default: ``execute`` once, seeded). Returns why not when the probe fails in float64. A probe
    that holds half-precision tensors (``half_precision``: of ``case``, a case of the probe already built, else of
    the first fresh one; asked once) and fails in float64 is run in float32 instead."""
    holds_half: list[torch.dtype | None] = [half_precision(case)] if case is not None else []

    def once(dtype: torch.dtype) -> Execution | str:
        name = str(dtype).removeprefix("torch.")
        cast = _numerics.to_float64 if dtype == torch.float64 else _numerics.to_float32
        try:
            case = make_case()
            if not holds_half:
                holds_half.append(half_precision(case))
            casted = Case(case.fn, cast(case.args), cast(case.kwargs), case.grad)
            with _numerics.cast([m for _, m in reachable_modules(case.fn)], dtype), _numerics.Float32Draws():
                ex = run(casted) if run is not None else execute(casted.fn, casted)
        except Exception as e:
            return f"the probe does not run in {name} ({type(e).__name__}: {exceptions.safe_str(e)[:200]})"
        if ex is None or ex.error:
            err = ex.error if ex is not None and ex.error is not None else ErrorRecord("?")
            return f"the probe does not run in {name} ({err.headline()})"
        ex.reference_dtype = name
        return ex

    def thunk() -> Execution | str:
        ex = once(torch.float64)
        if not isinstance(ex, str):
            return ex
        if not holds_half or holds_half[0] is None:
            return ex  # a float32 run of a probe that holds no half-precision tensor is eager again: no reference
        # a half-precision probe that cannot run in float64 (a custom kernel without a float64 path): float32 is the
        # higher-precision reference, as for the benchmark runner's --amp/--bfloat16 runs against fp32
        ex32 = once(torch.float32)
        if not isinstance(ex32, str):
            return ex32
        return ex + f"; nor in float32 {ex32.removeprefix('the probe does not run in float32 ')}"

    return thunk


class References(TypedDict):
    """What ``compare`` judges a compiled run against (its keyword arguments): ``references`` makes them."""

    fp64: Callable[[], "Execution | str"]
    jittered: Callable[[], "list[Execution]"]
    batchnorm: bool


def references(make_case: Callable[[], Case], run: Callable[[Case], "Execution | None"] | None = None,
               case: Case | None = None) -> References:
    """What ``compare`` judges a compiled run against, for one probe: the float64 run, the jittered eager runs (both
    made lazily, by ``run``), and whether the per-model tolerance of training through BatchNorm applies (read from
    ``case``, a case of the probe already built, else a fresh one)."""
    case = case if case is not None else make_case()
    return {"fp64": float64_run(make_case, run, case), "jittered": jittered_runs(make_case, run),
            "batchnorm": trains_batchnorm(case)}


def half_precision(case: Case) -> torch.dtype | None:
    """Does the probe hold half-precision tensors (a bfloat16/float16 input, parameter or buffer; None if none): a
    float32 run is then a reference (``float64_run``)."""
    try:
        return _numerics.half_precision((case.args, case.kwargs), [m for _, m in reachable_modules(case.fn)])
    except Exception:
        return None


def trains_batchnorm(case: Case) -> bool:
    """Does the probe train (backward runs) through a BatchNorm module in training mode?"""
    return needs_grad(case) and _numerics.batchnorm_training([m for _, m in reachable_modules(case.fn)])


def jittered_runs(make_case: Callable[[], Case],
                  run: Callable[[Case], "Execution | None"] | None = None) -> Callable[[], "list[Execution]"]:
    """A thunk for ``compare``: ``_numerics.JITTER_RUNS`` eager runs of fresh cases whose floating inputs and
    reachable parameters are jittered by ``_numerics.JITTER`` (seeded), run by ``run`` (default: ``execute`` once).
    Runs that fail are left out."""
    def thunk() -> list[Execution]:
        out = []
        for j in range(_numerics.JITTER_RUNS):
            gen = torch.Generator().manual_seed(j)
            try:
                case = make_case()
                casej = Case(case.fn, _numerics.jitter(case.args, _numerics.JITTER, gen),
                             _numerics.jitter(case.kwargs, _numerics.JITTER, gen), case.grad)
                with _numerics.jittered([m for _, m in reachable_modules(case.fn)], _numerics.JITTER, gen):
                    ex = run(casej) if run is not None else execute(casej.fn, casej)
            except Exception:  # the probe refuses a jittered input: that run measures nothing
                continue
            if ex is not None and not ex.error:
                out.append(ex)
        return out

    return thunk


def with_causes(mismatches: list[MismatchRecord], make_case: Callable[[], Case]) -> list[MismatchRecord]:
    """Add the custom ops and random ops one eager forward calls to each mismatch record (only when there is
    one: the inventory costs a run under a dispatch mode)."""
    if not mismatches:
        return mismatches
    try:
        case = make_case()
    except Exception:
        return mismatches

    def forward() -> None:
        seed_all()
        case.fn(*case.args, **case.kwargs)

    ops = _numerics.inventory(forward)
    return [dataclasses.replace(m, custom_ops=tuple(ops.custom_ops), random_ops=tuple(ops.random_ops))
            for m in mismatches]


# ---------------------------------------------------------------------------------------------------------
# Stages


def reference(make_case: Callable[[], Case], backward: bool = True) -> Execution:
    """The eager run a stage compares against (or, with ``backward=False``, only checks that it runs)."""
    case = make_case()
    if not backward:
        case = dataclasses.replace(case, grad=False)
    return execute(case.fn, case)


def forward_fails(ref: Execution) -> bool:
    """When eager cannot even run forward, a compiled stage has nothing to diagnose that eager didn't."""
    return bool(ref.error and ref.error.phase == "forward")


def run_compiled(make_case: Callable[[], Case], backend: str | Callable[..., Any],
                 fullgraph: bool = False) -> StageRecord:
    """``torch.compile(fn, backend=..., fullgraph=...)`` forward+backward, compared with eager.

    Random ops draw the same numbers as eager: each run is seeded alike, and inductor falls back to ATen's
    RNG (``fallback_random``) instead of generating its own. The compiled run comes first (the probe's first call).
    Graph counts are kept only for a run that completed: a compile that raised measured nothing (``None``, never a
    partial 0).
    """
    # the compiled run is the probe's first call, as in a user's program (a library that fills a Python cache on its
    # first call breaks the graph then only); the eager reference comes after, from a fresh case
    case = make_case()
    with compat.inductor_config_patch(fallback_random=True):
        compiled = torch.compile(case.fn, backend=backend, fullgraph=fullgraph)
        counted_before = compat.graph_break_counter()
        with tracelog.TraceCollector() as trace, exceptions.WarningCollector() as w, \
                tracelog.OutputCodeCollector() as code:
            got = execute(compiled, case)
    ref = reference(make_case)
    if forward_fails(ref):
        return StageRecord(skip_reason="the eager forward fails (see the eager stage); nothing to compare")
    from ..evidence.wording import TORCH_NAMESPACES

    counters = compat.counters()

    record = StageRecord(
        error=got.error, breaks=trace.breaks, warnings=w.messages,
        graph_count=int(counters["stats"]["unique_graphs"]) if got.error is None else None,
        # one forward call's Dynamo graphs (the backward's are AOTAutograd's, not Dynamo's): breaks are graphs - 1
        graph_break_count=int(counters["stats"]["unique_graphs"]) - 1
        if got.error is None and counters["stats"]["unique_graphs"] else None,
        dynamo_graph_break_count=compat.graph_break_counter() - counted_before if got.error is None else None,
        phases=phases(got),
    )
    if code.codes and got.error is None:  # inductor: the custom ops its generated code calls as extern kernels
        kernels = code.kernel_count()
        record.opaque_ops = code.extern_ops(TORCH_NAMESPACES, kernels)
        record.extra = InductorKernels(
            graphs=len(code.codes), generated_kernels=kernels, extern_custom_ops=len(record.opaque_ops),
            **{k: int(counters[group][k]) for group, keys in (
                ("inductor", ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")),
                ("aot_autograd", ("autograd_cache_hit", "autograd_cache_miss"))) for k in keys}).to_extra()
    if got.error is None:
        notes: list[str] = []
        mismatches = compare(ref, got, **references(make_case, case=case), notes=notes)
        if mismatches and draws_from_numpy(make_case):
            notes.clear()
            again = _compare_on_numpy_stream(make_case, backend, fullgraph, ref, record, notes)
            mismatches = mismatches if again is None else again
        record.mismatches = with_causes(mismatches, make_case)
        if notes:
            record.extra.update(StageNotes(not_checked=[*record.extra.get("not_checked", []), *notes]).to_extra())
    elif ref.error and ref.error.type == got.error.type and ref.error.phase == got.error.phase:
        record.same_as_eager = True  # the compiled run fails exactly where eager does
    return record


def draws_from_numpy(make_case: Callable[[], Case]) -> bool:
    """Does one eager forward draw from NumPy's global generator (its state changes)?"""
    np = sys.modules.get("numpy")
    if np is None:
        return False
    case = make_case()
    seed_all()
    before = np.random.get_state()[1].copy()
    try:
        case.fn(*case.args, **case.kwargs)
    except Exception:
        return False
    return not np.array_equal(before, np.random.get_state()[1])


def _compare_on_numpy_stream(make_case: Callable[[], Case], backend: str | Callable[..., Any], fullgraph: bool,
                             ref: Execution, record: StageRecord,
                             notes: list[str] | None = None) -> list[MismatchRecord] | None:
    """Dynamo traces ``np.random`` calls onto torch's generator (``use_numpy_random_stream=False``, the
    default), so a compiled model draws other random numbers than eager by design, not by a bug. Compare
    again with ``use_numpy_random_stream=True`` (those calls run on NumPy's stream), in a fresh compile whose
    graphs are not counted: the counts above are plain torch.compile's."""
    compat.dynamo_reset()
    case = make_case()
    with compat.inductor_config_patch(fallback_random=True), compat.dynamo_config_patch(use_numpy_random_stream=True):
        again = execute(torch.compile(case.fn, backend=backend, fullgraph=fullgraph), case)
    if again.error is not None:
        return None  # the first comparison stands
    record.extra.update(StageNotes(numerics=(
        "the probe draws from NumPy's random generator; compared with torch._dynamo.config."
        "use_numpy_random_stream=True so that the compiled run draws the same numbers as eager")).to_extra())
    return compare(ref, again, **references(make_case, case=case), notes=notes)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more characters]"




