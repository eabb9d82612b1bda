"""The ``compiled_autograd`` stage: backward graphs with and without compiled autograd, captures, recompiles.

Runs inside one stage process (see _execution.py for the record format). Three runs of the same training step
(forward, then backward on the summed outputs), each on a fresh ``Case`` so that stateful probes start from
the same state, with ``.grad`` accumulating over the steps as in a loop without ``zero_grad``:

1. eager, the reference for outputs and gradients, compared at the same step count;
2. ``torch.compile(fn, backend="aot_eager")`` with compiled autograd on (``compat.compiled_autograd``; when it
   fails, the same steps again with ``inductor``, ``extra["other_backend"]``: a failure of one backend only is
   not the model's):
   ``captures`` (compiled-autograd cache misses, ``counters["compiled_autograd"]["captures"]``), ``compiles``
   (backend compiles of captured backward graphs, counted by tracecheck's backend the way PyTorch's own
   tests count them), the Dynamo graphs made while a captured backward graph ran (per capture, and in all),
   the hooks inside the captured graph (``call_hook`` nodes by ``hook_type``), graph breaks, gradients, and
   every recompile with its reason and step;
3. the same steps without compiled autograd: ``counters["stats"]["unique_graphs"]`` and the graph breaks
   (the AOTAutograd backward follows the forward's graphs, one backward graph per forward graph). Dynamo's counts
   alone, so with static shapes compiled with backend ``eager`` (``COUNT_BACKEND``): tracing the forward with
   AOTAutograd once more would add nothing to them (run 2 and the ``aot_eager`` stage do that; 1.6 s of the tiny
   Llama's 8 s), and ``error_without_ca`` is then Dynamo's only. With ``dynamic=True`` the measured backend, as in run
   2: AOTAutograd's guards on symbolic sizes can make Dynamo recompile, which run 2's counts include.

Recompile reasons come from the structured trace (``torch.__trace``), never from stderr: the
``recompile_reasons`` artifact (Dynamo guard failures, with the user stack on 2.13) and
``compiled_autograd_compile_reasons`` (compiled-autograd cache misses, logged only while the
``compiled_autograd_verbose`` artifact is enabled, which ``compat.log_artifacts_enabled`` does silently).

A recompile is *steady state*, the ``recompile`` finding, only when every step after the warm-up
(``WARMUP_STEPS``) recompiled: the first capture and the second one (``.grad`` goes from None to defined,
or an attribute settles) are normal. When the last planned step still recompiles, up to ``CONFIRM_STEPS``
more run, so that a model that settles on the third step is not reported. With ``dynamic=True`` two more
steps follow: every tensor input whose dim 0 is the batch size, tiled ``SECOND_SHAPE_FACTOR`` times along
dim 0 (shape B), then the first shape again (A, B, A as in the compiled-autograd tutorial's 10 -> 100 ->
10); their recompiles are reported with their reasons but are not steady state.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Callable

import torch
from ..compat import pytree

from .. import compat
from ..evidence import exceptions, tracelog
from ..model.errors import ErrorRecord
from ..model.payloads import CompiledAutogradCounts, HookCounts, InputShapes, OtherBackend, StageNotes
from ..model.probe import Case
from ..model.records import COMPILED_AUTOGRAD, DYNAMO, BreakRecord, RecompileRecord, StageRecord
from ._execution import Execution, compare, draws_from_numpy, execute, grad_targets, needs_grad, phases, references, with_causes
from ._spec import StageOptions

#: Steps that may recompile without a finding: the first capture, and the one when ``.grad`` becomes defined.
WARMUP_STEPS = 2
#: Extra steps, at most, while the last step still recompiles: tells "settles late" from "never settles".
CONFIRM_STEPS = 2
#: Dim 0 of the second input shape (``dynamic=True``) is this many times the first one.
SECOND_SHAPE_FACTOR = 10
#: Structured-trace artifacts read here.
class _BackwardGraphs:
    """The compiled-autograd compiler fn: counts what happens to each captured backward graph.

    ``torch.compile(gm, backend=<counting aot_eager>)``; Dynamo compiles lazily at the first call, so the
    unique graphs and breaks made while the returned callable runs belong to the backward.
    """

    def __init__(self, backend: str = "aot_eager") -> None:
        self._inner = compat.lookup_backend(backend)
        self.compiles = 0
        self.unique_graphs = 0
        self.graphs_per_capture: list[int] = []  # Dynamo graphs each captured backward graph became
        self.hooks: list[Counter[str]] = []  # per capture: call_hook nodes by hook_type
        self.breaks: list[BreakRecord] = []

    def _backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.compiles += 1
        return self._inner(gm, example_inputs)

    def __call__(self, gm: torch.fx.GraphModule) -> Callable[..., Any]:
        counters = compat.counters()
        self.hooks.append(Counter(
            str(n.kwargs.get("hook_type")) for n in gm.graph.nodes
            if n.op == "call_function" and getattr(n.target, "__name__", "") == "call_hook"))
        compiled = torch.compile(gm, backend=self._backend)
        index = len(self.graphs_per_capture)
        self.graphs_per_capture.append(0)

        def run(*args: Any, **kwargs: Any) -> Any:
            before = counters["stats"]["unique_graphs"]
            # A fresh collector per call: it restores the trace logger's level as it found it, so the
            # stage's own collectors keep listening afterwards.
            trace = tracelog.TraceCollector()
            try:
                with trace:
                    return compiled(*args, **kwargs)
            finally:
                made = counters["stats"]["unique_graphs"] - before
                self.unique_graphs += made
                self.graphs_per_capture[index] += made
                seen = {b.site for b in self.breaks}
                self.breaks += [b for b in trace.breaks if b.site not in seen]

        return run


def _second_shape(case: Case) -> tuple[Case, str | None]:
    """``case`` with every tensor input whose dim 0 equals the batch size tiled along dim 0.

    The batch size is dim 0 of the first tensor input with a dim. Tiling keeps integer inputs (indices,
    labels) valid. Parameters are the module's and keep their shape. Returns ``(case, None)`` or
    ``(case, why not)`` when no input has a dim 0.
    """
    tensors = [t for t in pytree.tree_leaves((case.args, case.kwargs)) if isinstance(t, torch.Tensor) and t.dim()]
    if not tensors:
        return case, "no tensor input has a dim 0 to change"
    batch = tensors[0].shape[0]

    def tile(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == batch:
            new = t.detach().repeat(SECOND_SHAPE_FACTOR, *([1] * (t.dim() - 1)))
            return new.requires_grad_(t.requires_grad) if t.is_floating_point() or t.is_complex() else new
        return t

    return Case(case.fn, pytree.tree_map(tile, case.args), pytree.tree_map(tile, case.kwargs), case.grad), None


def _shapes(case: Case) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in pytree.tree_leaves((case.args, case.kwargs)) if isinstance(t, torch.Tensor))


def _hook_registrations(case: Case) -> dict[str, int]:
    """Hooks registered on the inputs and parameters before the step (what compiled autograd should capture)."""
    counts = [compat.tensor_hooks(t) for t in grad_targets(case).values()]
    return {key: sum(c[key] for c in counts) for key in ("register_hook", "register_post_accumulate_grad_hook")}


def steady_state(records: list[RecompileRecord], steady_steps: int) -> list[RecompileRecord]:
    """The records that make a ``recompile`` finding: those of steps ``WARMUP_STEPS+1 .. steady_steps``,
    and only when every one of those steps has at least one record (a recompile on every step)."""
    window = range(WARMUP_STEPS + 1, steady_steps + 1)
    if not window:
        return []
    stepped = {r.step for r in records}
    if not all(s in stepped for s in window):
        return []
    return [r for r in records if r.step in window]


def _run(fn: Callable[..., Any], cases: list[Case], schedule: list[int],
         on_step: Callable[[int], None] = lambda s: None) -> tuple[list[Execution], ErrorRecord | None]:
    """Run the step once per schedule entry (an index into ``cases``); stop at the first error."""
    execs: list[Execution] = []
    for step, which in enumerate(schedule, start=1):
        on_step(step)
        ex = execute(fn, cases[which], reseed=step == 1)  # one seed per run: later steps draw anew
        execs.append(ex)
        if ex.error:
            return execs, dataclasses.replace(ex.error, step=step)
    return execs, None


#: The backend the measured run compiles with, then the one that checks a failure before it is called the model's:
#: a failure plain torch shows with one backend and not the other is that backend's.
BACKENDS = ("aot_eager", "inductor")
#: The backend of the run without compiled autograd, which counts Dynamo's graphs and breaks only (static shapes).
COUNT_BACKEND = "eager"


def stage_compiled_autograd(make_case: Callable[[], Case], steps: int = StageOptions.steps,
                            dynamic: bool = StageOptions.dynamic,
                            backends: tuple[str, str] = BACKENDS) -> StageRecord:
    """Measure one probe with and without compiled autograd (see the module docstring). Never raises:
    an exception outside the measured steps (turning compiled autograd on or off, the counters) becomes
    the record's ``error`` with phase ``compiled_autograd``.

    ``steps``: steps with the probe's own inputs, at least ``WARMUP_STEPS + 1`` (3); up to
    ``CONFIRM_STEPS`` more run while the last one still recompiles, so that a model which settles on the
    third step is not reported. ``dynamic``: then one step with the second input shape and one with the
    first again. Returns a ``records.StageRecord``: ``error``, ``breaks``, ``warnings``, ``mismatches``,
    ``graph_count`` (Dynamo graphs of the compiled-autograd run, forward and backward), ``steady_state_recompiles``
    (the finding's subset of ``extra["recompiles"]``) and ``extra``; or a ``skip_reason`` when nothing runs backward
    or eager already fails. ``backends``: the measured run's backend, and the one
    that reruns the steps when it fails (``extra["backend"]``, ``extra["other_backend"]``).
    """
    try:
        return _measure(make_case, steps, dynamic, backends)
    except Exception as e:
        return StageRecord(error=exceptions.error_record(e, "compiled_autograd"), breaks=[])


def _measure(make_case: Callable[[], Case], steps: int, dynamic: bool, backends: tuple[str, str]) -> StageRecord:
    """The body of ``stage_compiled_autograd``."""
    counters = compat.counters()
    steps = max(int(steps), WARMUP_STEPS + 1)
    first = make_case()
    if not needs_grad(first):
        return StageRecord(skip_reason="the probe runs no backward (no floating input and no parameter of a module "
                                       "it reaches requires grad, or Case(grad=False))")

    def cases_for(case: Case) -> list[Case]:
        return [case, _second_shape(case)[0]] if dynamic else [case]

    shape_phase: list[int] = []
    dynamic_note = None
    if dynamic:
        _, dynamic_note = _second_shape(first)
        if dynamic_note is None:
            shape_phase = [1, 0]

    # 1. eager reference (again below if the compiled-autograd run takes confirmation steps)
    ref_case = make_case()
    ref_execs, ref_error = _run(ref_case.fn, cases_for(ref_case), [0] * steps + shape_phase)
    if ref_error and (ref_error.step or 0) > steps:  # the second shape itself fails in eager: drop it
        dynamic_note = f"the second input shape fails in eager ({ref_error.type}); ran the first shape only"
        shape_phase, ref_execs, ref_error = [], ref_execs[:steps], None
    if ref_error:
        from ..model.report import later_step

        where = "forward" if ref_error.phase == "forward" else "backward"
        if ref_error.step == 1:  # the eager stage's own run
            return StageRecord(skip_reason=f"the eager {where} fails ({ref_error.headline()}; see the eager stage); "
                                           "nothing to compare")
        # a later step on the same model and inputs: say which run failed, not the step that ran
        step = later_step(ref_error.step or 0, dataclasses.replace(ref_error, phase=where))
        return StageRecord(skip_reason=f"eager {step}; nothing to compare")
    if not ref_execs[-1].ran_backward:
        return StageRecord(skip_reason="no floating output requires grad, so no backward runs")

    # 2. torch.compile with compiled autograd
    compat.dynamo_reset()  # also resets compiled autograd's cache
    case_b = make_case()
    cases_b = cases_for(case_b)
    hooks_registered = _hook_registrations(case_b)
    compiled_b = torch.compile(case_b.fn, backend=backends[0])
    backward = _BackwardGraphs(backends[0])
    marks: list[int] = []  # the captures counter before each step, then after the last
    execs_b: list[Execution] = []
    error_b: ErrorRecord | None = None
    snap = {"unique": counters["stats"]["unique_graphs"], "captures": counters["compiled_autograd"]["captures"]}
    with tracelog.TraceCollector() as trace_b, exceptions.WarningCollector() as warn, tracelog.RecompileCollector() as rc, \
            compat.log_artifacts_enabled("compiled_autograd_verbose"), compat.compiled_autograd(backward):

        def step_once(which: int) -> bool:
            nonlocal error_b
            step = len(execs_b) + 1
            marks.append(counters["compiled_autograd"]["captures"])
            rc.step = step
            execs_b.append(execute(compiled_b, cases_b[which], reseed=step == 1))
            if execs_b[-1].error:
                error_b = dataclasses.replace(execs_b[-1].error, step=step)
            return error_b is None

        def recompiled(step: int) -> bool:
            return counters["compiled_autograd"]["captures"] > marks[step - 1] or \
                any(r.step == step for r in rc.records)

        ok = all(step_once(0) for _ in range(steps))
        while ok and len(execs_b) < steps + CONFIRM_STEPS and recompiled(len(execs_b)):
            ok = step_once(0)
        static_steps = len(execs_b)
        for which in shape_phase if ok else []:
            if not step_once(which):
                break
        marks.append(counters["compiled_autograd"]["captures"])
    captures_per_step = [b - a for a, b in zip(marks, marks[1:])]
    captures = counters["compiled_autograd"]["captures"] - snap["captures"]
    graphs_with_ca = counters["stats"]["unique_graphs"] - snap["unique"]
    schedule = [0] * static_steps + shape_phase
    if static_steps != steps:
        ref_case = make_case()
        ref_execs, _ = _run(ref_case.fn, cases_for(ref_case), schedule)

    # 3. torch.compile, plain autograd, the same steps
    compat.dynamo_reset()
    case_a = make_case()
    compiled_a = torch.compile(case_a.fn, backend=backends[0] if dynamic else COUNT_BACKEND)
    before = counters["stats"]["unique_graphs"]
    with tracelog.TraceCollector() as trace_a:
        _, error_a = _run(compiled_a, cases_for(case_a), schedule)
    unique_without = counters["stats"]["unique_graphs"] - before
    breaks_without = len(trace_a.breaks)

    recompiles = _recompile_records(rc.records, captures_per_step)
    clean_until = static_steps if error_b is None else min(static_steps, (error_b.step or 1) - 1)
    steady = steady_state(recompiles, clean_until)
    in_graph = backward.hooks[-1] if backward.hooks else Counter()
    counts = CompiledAutogradCounts(
        backend=backends[0],
        unique_graphs_without_ca=unique_without,
        unique_graphs_with_ca=backward.unique_graphs,
        backward_graphs_per_capture=backward.graphs_per_capture,
        unique_graphs_forward_with_ca=graphs_with_ca - backward.unique_graphs,
        graph_breaks_without_ca=breaks_without,
        backward_graph_breaks=len(backward.breaks),
        captures=captures,
        captures_per_step=captures_per_step,
        compiles=backward.compiles,
        recompiles=recompiles,
        recompile_count=len(recompiles),
        hooks_captured=sum(in_graph.values()),
        hooks=HookCounts(
            registered=hooks_registered, in_graph=dict(in_graph),
            evidence="call_hook nodes by hook_type in the last captured compiled-autograd graph "
                     "(register_hook -> tensor_pre_hook, register_post_accumulate_grad_hook -> post_acc_grad_hook)"),
        steps=len(execs_b),
        steady_shape_steps=static_steps,
        warmup_steps=WARMUP_STEPS,
    )
    if dynamic:
        counts.schedule = ["AB"[i] for i in schedule]
        counts.shapes = InputShapes(_shapes(first), _shapes(_second_shape(first)[0]) if 1 in schedule else None)
        counts.dynamic_note = dynamic_note
    if error_a:
        counts.error_without_ca = f"{error_a.type}: {error_a.message[:300]} (step {error_a.step})"

    if error_b:  # the compiled-autograd run stopped early: its counts are partial, so not measured
        counts.other_backend = _other_backend(make_case, cases_for, schedule[:error_b.step], backends[1])
        counts.unique_graphs_with_ca = counts.backward_graphs_per_capture = counts.unique_graphs_forward_with_ca = None
        counts.captures = counts.compiles = counts.hooks_captured = counts.recompile_count = None
        counts.backward_graph_breaks = None
    if error_a:
        counts.unique_graphs_without_ca = counts.graph_breaks_without_ca = None
    extra = counts.to_extra()
    record = StageRecord(
        error=error_b, breaks=trace_b.breaks, warnings=warn.messages,
        graph_count=graphs_with_ca if error_b is None else None,
        steady_state_recompiles=steady, extra=extra,  # every recompile is in counts.recompiles
        phases=phases(execs_b[-1]) if execs_b else None,
    )
    if error_b is None:
        ran = schedule[:len(execs_b)]

        def run_steps(case: Case) -> Execution | None:  # the same steps (in float64, jittered): the references
            execs, _ = _run(case.fn, cases_for(case), ran)
            return execs[-1] if len(execs) == len(ran) else None

        mismatches = compare(ref_execs[len(execs_b) - 1], execs_b[-1], **references(make_case, run_steps, first))
        if mismatches and draws_from_numpy(make_case):
            # Dynamo puts np.random on torch's generator: other numbers than eager by design (see
            # stages._compare_on_numpy_stream); the aot_eager and inductor stages compare such probes
            extra.update(StageNotes(numerics="not compared: the probe draws from NumPy's random generator, which "
                                    "compiled code replaces with torch's; the aot_eager and inductor stages compare "
                                    "it").to_extra())
            mismatches = []
        record.mismatches = with_causes(mismatches, make_case)
    return record


def _other_backend(make_case: Callable[[], Case], cases_for: Callable[[Case], list[Case]], schedule: list[int],
                   backend: str) -> OtherBackend:
    """The failing steps again, compiled (forward and compiled autograd's backward) with ``backend``: their error,
    None when they pass, or why they were not run."""
    if compat.dynamo_suppresses_errors():  # a failure would fall back to eager and read as a pass
        return OtherBackend(backend, not_run="torch._dynamo.config.suppress_errors is set")
    if backend == "inductor":  # a device Inductor cannot compile for (the emulated NPU) answers nothing about the model
        case = make_case()
        lacking = compat.devices_without_inductor({t.device.type for t in pytree.tree_leaves((case.args, case.kwargs))
                                                   if isinstance(t, torch.Tensor)})
        if lacking:
            return OtherBackend(backend, not_run=f"Inductor has no code generator for device {', '.join(lacking)}")
    compat.dynamo_reset()
    try:
        case = make_case()
        with compat.compiled_autograd(_BackwardGraphs(backend)):
            _, error = _run(torch.compile(case.fn, backend=backend), cases_for(case), schedule)
    except Exception as e:  # turning compiled autograd on or off failed: not an answer about the backend
        error = exceptions.error_record(e, "compiled_autograd")
    finally:
        compat.dynamo_reset()
    return OtherBackend(backend, error)


def _recompile_records(records: list[RecompileRecord], captures_per_step: list[int]) -> list[RecompileRecord]:
    """Recompiles in step order: every Dynamo guard failure, and every compiled-autograd capture but the
    run's first (that one is the initial compile). A capture torch logged no reason for (verbose logging
    unavailable) gets a placeholder reason, so the counts stay right.

    A capture caused by a new ``CompiledFunctionBackward`` node in a step whose forward recompiled is
    credited to that forward recompile's user frame (``user_frame_from`` says so).
    """
    out: list[RecompileRecord] = []
    for step, n_captures in enumerate(captures_per_step, start=1):
        dyn = [r for r in records if r.step == step and r.source == DYNAMO]
        ca = [r for r in records if r.step == step and r.source == COMPILED_AUTOGRAD][:n_captures]
        ca += [RecompileRecord("compiled-autograd capture (torch logged no reason)", step, COMPILED_AUTOGRAD,
                               "backward") for _ in range(n_captures - len(ca))]
        forward_frame = next((r.user_frame for r in dyn if r.graph == "forward" and r.user_frame), None)
        if forward_frame:
            ca = [dataclasses.replace(r, user_frame=forward_frame, user_frame_from="the forward recompile of the same "
                                      "step") if "CompiledFunctionBackward" in r.reason else r for r in ca]
        out += dyn + ca
    firsts = [i for i, r in enumerate(out) if r.source == COMPILED_AUTOGRAD]
    if firsts and out[firsts[0]].step == 1:
        del out[firsts[0]]
    return out
