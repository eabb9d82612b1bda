"""``dynamic``: ``torch.compile(backend="aot_eager")`` with the batch dimension marked dynamic, called at the probe's
batch size and at three more (tracecheck/stages/_batch.py says which dimension and which sizes), forward and
backward, each compared with eager.

The batch dimension only (``torch._dynamo.maybe_mark_dynamic(x, 0)`` on each input it resizes), not
``dynamic=True``: that makes every dimension of every input symbolic (and int arguments), while the stage varies the
batch alone; AOTAutograd's symbolic trace of all of them cost the tiny Llama 7.6 s against 2.9 s with the batch alone
(torch 2.13.0, one thread, forward and backward). ``maybe_``: code that forces the size to a constant specializes it,
as under ``dynamic=True``, instead of raising as ``mark_dynamic`` does.

aot_eager, not inductor: what this stage asks (do dims stay symbolic, what specializes them, do fakes hold at
other sizes) is Dynamo's and AOTAutograd's, and Inductor's codegen is the ``inductor`` stage's. Measured on the tiny
Llama of benchmarks/models (torch 2.13.0, 2 cores): 11.7 s with aot_eager against 34.9 s with inductor on empty
caches, the state of a first run and of CI.

Findings: a fake impl wrong at a new size only (``fake-mismatch``: opcheck's test_faketensor there; the compiled
run then fails downstream); each of the last two sizes recompiles, i.e. the batch dimension was specialized (``dynamic-shape``,
with the guard that failed and the frame whose code forced a constant: ``SpecializationCollector``); compiled
values differ from eager at some size (``numeric-mismatch``).
"""
from __future__ import annotations

import re
from typing import Any

from ..model.errors import ErrorRecord
from ..model.evidence import Specialization
from ..model.payloads import DynamicRun, SpecializationSite
from ..model.records import DYNAMO, BreakRecord, MismatchRecord, OpTests, SpecializedDimension, StageRecord
from ._spec import StageContext, StageSpec

#: a guard failure on a tensor's size or stride (2.13: "tensor 'x' size mismatch at index 0. expected 2, actual
#: 3"; a guard expression on ``.size()[i]``); another reason is a plain recompile, not a specialized dimension
_SIZE_GUARD = re.compile(r"size mismatch|stride mismatch|\.size\(\)\[\d+\]|\.stride\(\)\[\d+\]")


def run(ctx: StageContext) -> StageRecord:
    import dataclasses

    import torch

    from . import _batch
    from .. import compat
    from ..evidence import exceptions, tracelog
    from ._execution import compare, draws_from_numpy, execute, phases, reference

    own = reference(ctx.make_case)
    if own.error:  # the probe's own size fails in eager (forward or backward): nothing to compare with
        return StageRecord(skip_reason=f"the eager {own.error.phase} fails ({own.error.headline()}; see the eager "
                                       "stage)")
    case, ref_case = ctx.make_case(), ctx.make_case()
    b = _batch.batch_size(case.args, case.kwargs)
    if b is None:
        return _at_own_inputs(ctx, own, "no tensor input has a batch dimension that can vary")
    plan = _batch.sizes(b)

    def at(c: Any, n: int) -> Any:
        args, kwargs = _batch.resize(c.args, c.kwargs, b, n, mark_dynamic=True)
        return dataclasses.replace(c, args=args, kwargs=kwargs)

    refs: list[Any] = []
    for n in plan:  # eager first: a size the probe itself cannot take is no finding (the first is ``own``'s size)
        try:
            ex = execute(ref_case.fn, at(ref_case, n))
        except Exception as e:  # resizing a tensor type index_select does not take (sparse, nested)
            ex = type(own)(error=exceptions.error_record(e, "forward"))
        if ex.error:
            why, the_size = _eager_fails(ctx.make_case, at, plan[: len(refs)], n, ex.error)
            # a probe that does not survive repeated steps is the eager stage's finding; one whose dim 0 is no batch
            # dimension still gets dynamic=True's answer at its own inputs
            return _at_own_inputs(ctx, own, why) if the_size else StageRecord(skip_reason=why)
        refs.append(ex)
    compiled = torch.compile(case.fn, backend="aot_eager")  # the batch dimension only is symbolic (``at``)
    mismatches: list[MismatchRecord] = []
    error: ErrorRecord | None = None
    failed_at: int | None = None
    ran_backward = False
    # Dynamo moves np.random calls onto torch's generator by default: a probe that draws from NumPy (BigBird's
    # random blocks) keeps NumPy's stream, so that compiled and eager draw the same numbers (as run_compiled does)
    numpy_stream = draws_from_numpy(ctx.make_case)
    with compat.dynamo_config_patch(use_numpy_random_stream=numpy_stream), tracelog.RecompileCollector() as rc, \
            tracelog.SpecializationCollector() as spec, tracelog.TraceCollector() as trace, \
            exceptions.WarningCollector() as w:
        for step, (n, ref) in enumerate(zip(plan, refs)):
            rc.step = spec.step = step
            got = execute(compiled, at(case, n))
            ran_backward = ran_backward or got.ran_backward
            if got.error:
                error, failed_at = dataclasses.replace(got.error, batch_size=n), n
                break
            found = compare(ref, got)
            if found and n != plan[0] and _unreproducible(ctx.make_case, at, n, ref):
                return _at_own_inputs(ctx, own, f"eager at batch size {n} gives other outputs on each run (an op "
                                                "reads what the added rows leave unset?): dim 0 of the inputs is not "
                                                "a batch dimension this probe can vary")
            mismatches += [dataclasses.replace(m, batch_size=n) for m in found]
    breaks = list(trace.breaks)
    every_dim = None
    if error is None:
        new, said = _every_dimension(ctx.make_case, {x.site for x in breaks})
        breaks += new
        every_dim = said
    fakes = _check_fakes(ref_case, b, plan[0], plan[1])
    dynamo = [r for r in rc.records if r.source == DYNAMO]
    steps = len(plan) - 1, len(plan) - 2
    # steady state: each of the last two sizes recompiled (a branch on the size, `if x.shape[0] > 3`, recompiles
    # once and then serves the larger sizes: no finding)
    steady = [r for r in dynamo if r.step == steps[0]] if all(any(r.step == s for r in dynamo) for s in steps) else []
    # a specialization of the batch dimension to the size just called (a weight's in_features is specialized at
    # every compile, and says nothing about the batch)
    specialized = [s for s in spec.records if s.step == steps[0] and s.value == str(plan[-1])
                   and any(src.endswith(".size()[0]") for src in s.sources)]
    size_guards = [r for r in steady if specialized or _SIZE_GUARD.search(r.reason)]
    return StageRecord(
        fake_checks=fakes, error=error, breaks=breaks, warnings=w.messages,
        mismatches=mismatches[:3], phases=phases(ran_backward),
        dynamic_specializations=[SpecializedDimension(r, _pick(specialized), tuple(plan)) for r in size_guards],
        steady_state_recompiles=[r for r in steady if r not in size_guards],
        extra=DynamicRun(batch_sizes=plan[: plan.index(failed_at) + 1] if failed_at is not None else plan,
                         symbolic=error is None and not dynamo,
                         recompiles=dynamo,
                         specializations=list({(b.sources, b.value, b.at): b for b in
                                               map(SpecializationSite.of_specialization, spec.records)}.values())[:10],
                         every_dimension=every_dim).to_extra(),
    )


def _at_own_inputs(ctx: StageContext, own: Any, why: str) -> StageRecord:
    """Where the batch cannot vary (``why``), still what ``torch.compile(dynamic=True)`` says at the probe's own
    inputs: every dimension symbolic, backend aot_eager as the batch run, forward and backward against eager. Its
    error, breaks and mismatches are this stage's, as plain dynamic=True's would be the user's."""
    import torch

    from .. import compat
    from ..evidence import exceptions, tracelog
    from ._execution import compare, draws_from_numpy, execute, phases

    compat.dynamo_reset()
    case = ctx.make_case()
    with compat.dynamo_config_patch(use_numpy_random_stream=draws_from_numpy(ctx.make_case)), \
            tracelog.TraceCollector() as trace, exceptions.WarningCollector() as w:
        got = execute(torch.compile(case.fn, backend="aot_eager", dynamic=True), case)
    said = f"dynamic=True at the probe's own inputs only (backend aot_eager): {why}"
    return StageRecord(error=got.error, breaks=list(trace.breaks), warnings=w.messages,
                       mismatches=[] if got.error else compare(own, got)[:3], phases=phases(got.ran_backward),
                       extra=DynamicRun(every_dimension=said).to_extra())


def _every_dimension(make_case: Any, seen: set[tuple[str | None, str | None, int | None]]) -> \
        tuple[list[BreakRecord], str]:
    """What ``dynamic=True`` (every dimension of every input symbolic, and int arguments) finds that the batch alone
    did not: Dynamo's graph breaks at the probe's own inputs, forward and backward, with backend ``eager`` (what
    breaks is Dynamo's decision; AOTAutograd's symbolic trace of every dimension is the cost the batch-only run
    avoids: 7.6 s against 2.9 s on the tiny Llama). A break no other dimension causes (an f-string of a size, GB0021
    ``BUILD_STRING type error`` in kornia's canny) is a finding of this stage. The new breaks (``seen``: the sites of
    the batch run's), and a line for the report."""
    from .. import compat
    from ..evidence import tracelog
    from ._execution import execute

    import torch

    compat.dynamo_reset()
    case = make_case()
    try:
        with tracelog.TraceCollector() as trace:
            got = execute(torch.compile(case.fn, backend="eager", dynamic=True), case)
    except Exception as e:  # tracecheck's own trouble here must not lose the batch-only answer
        return [], f"not checked ({type(e).__name__})"
    new = [x for x in trace.breaks if x.site not in seen]
    said = (f"{len(new)} graph break(s) that the batch dimension alone does not cause" if new else
            "no graph break that the batch dimension alone does not cause")
    if got.error:  # an error there is not this pass's finding (the batch-only run compiled): said, not classified
        said += f"; the run raised {got.error.type} (backend eager, dynamic=True)"
    return new, f"dynamic=True at the probe's inputs (backend eager): {said}"


def _unreproducible(make_case: Any, at: Any, n: int, ref: Any) -> bool:
    """Does eager at batch size ``n``, again on a fresh case (forward only: a stateful probe's gradients accumulate over
    the sizes before), give other outputs than ``ref``, the first eager run there? Then the compiled run's difference
    from it says nothing about the compiler: the made-up size is no valid input (a quantized buffer's dim 0, which an
    op reads past what the repeated rows define)."""
    import dataclasses

    from ._execution import Execution, compare, execute

    fresh = make_case()
    again = execute(fresh.fn, dataclasses.replace(at(fresh, n), grad=False))
    return again.error is None and bool(compare(Execution(outputs=ref.outputs), Execution(outputs=again.outputs)))


def _eager_fails(make_case: Any, at: Any, before: list[int], n: int, error: ErrorRecord) -> tuple[str, bool]:
    """Why the eager runs stop at batch size ``n``, after steps at the sizes ``before`` on the same model and inputs
    (as the compiled run takes them), and whether the size is the cause. A size that runs alone on a fresh case is
    not: the repeated step is (a buffer left attached to the previous step's graph; the eager stage's second step
    reports it)."""
    from ..model.report import later_step
    from ._execution import execute

    if before:
        try:
            fresh = make_case()
            alone = execute(fresh.fn, at(fresh, n))
        except Exception:
            alone = None
        if alone is not None and not alone.error:
            sizes = f"a step at batch size {before[0]}" if len(before) == 1 else \
                f"steps at batch sizes {', '.join(map(str, before))}"
            return (f"eager {later_step(len(before) + 1, error, after=f'{sizes} on the same model')} (this step at "
                    f"batch size {n}, which runs alone on a fresh one): the probe does not survive repeated training "
                    "steps, whatever the batch size"), False
    return (f"the eager run fails at batch size {n} ({error.headline()}): dim 0 of the inputs is not a batch "
            "dimension this probe can vary"), True


def _check_fakes(case: Any, b: int, own: int, n: int) -> dict[str, OpTests]:
    """opcheck's ``test_faketensor`` on every custom op the eager forward calls, at the probe's batch size ``own``
    and at ``n``, for the ops that pass at ``own`` and fail at ``n``: a fake impl that hard-codes a size agrees with
    its kernel at the probe's own size only (and a compiled run at ``n`` then fails somewhere downstream, in
    Inductor's size assert or a broadcast: this names the op). A fake wrong at every size is the opcheck stage's."""
    at_own, at_n = _fake_results(case, b, own), _fake_results(case, b, n)
    return {op: r for op, r in at_n.items() if isinstance(r["test_faketensor"], ErrorRecord)
            and at_own.get(op, {}).get("test_faketensor") == "SUCCESS"}


def _fake_results(case: Any, b: int, n: int) -> dict[str, OpTests]:
    import dataclasses

    import torch

    from . import _batch
    from ..evidence import exceptions
    from ..evidence.oprecorder import OpRecorder

    rec = OpRecorder()
    try:
        args, kwargs = _batch.resize(case.args, case.kwargs, b, n)
        with rec, torch.no_grad():
            dataclasses.replace(case, args=args, kwargs=kwargs).fn(*args, **kwargs)
    except Exception:
        pass  # the ops recorded before the failure are still checked
    out: dict[str, OpTests] = {}
    for op, (a, k) in rec.calls.items():
        res = torch.library.opcheck(op, a, k, test_utils=("test_faketensor",), raise_exception=False)
        outcome = res.get("test_faketensor", "SUCCESS")
        out[str(op)] = {"test_faketensor": outcome if isinstance(outcome, str) else
                        dataclasses.replace(exceptions.error_record(outcome, "test_faketensor"), batch_size=n)}
    return out


def _pick(records: list[Specialization]) -> Specialization | None:
    """The specialization that pinned the batch dimension: the first with a frame outside torch, else the first."""
    return next((r for r in records if r.frame), records[0] if records else None)


SPEC = StageSpec(
    name="dynamic", heading="dyn", order=85, cost=6, run=run,
    summary="torch.compile(backend=\"aot_eager\"), the batch dimension marked dynamic, at the probe's batch size "
            "and three more, forward and backward, compared with eager",
    repro=(
        '_repro_b = next(t.shape[0] for t in _repro_pytree.tree_leaves((_repro_args, _repro_kwargs))\n'
        '                if isinstance(t, torch.Tensor) and t.dim())\n'
        'for _repro_t in _repro_pytree.tree_leaves((_repro_args, _repro_kwargs)):  # the batch dimension, as the stage\n'
        '    if isinstance(_repro_t, torch.Tensor) and _repro_t.dim() and _repro_t.shape[0] == _repro_b:\n'
        '        torch._dynamo.maybe_mark_dynamic(_repro_t, 0)\n'
        '_repro_step(torch.compile(_repro_fn, backend="aot_eager"))'))
