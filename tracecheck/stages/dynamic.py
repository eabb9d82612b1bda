"""``dynamic``: ``torch.compile(dynamic=True, backend="inductor")`` called at the probe's batch size and at two
more (tracecheck/batch.py says which dimension and which sizes), forward and backward, each compared with eager.

Findings: the call at a new size raises (a fake impl that hard-codes a size fails Inductor's size assert:
``fake-mismatch``); the last size still recompiles, i.e. the batch dimension was specialized (``dynamic-shape``,
with the guard that failed and the frame whose code forced a constant: ``SpecializationCollector``); compiled
values differ from eager at some size (``numeric-mismatch``).
"""
from __future__ import annotations

import re
from typing import Any

from ._spec import StageContext, StageSpec

#: a guard failure on a tensor's size or stride (2.13: "tensor 'x' size mismatch at index 0. expected 2, actual
#: 3"; a guard expression on ``.size()[i]``); another reason is a plain recompile, not a specialized dimension
_SIZE_GUARD = re.compile(r"size mismatch|stride mismatch|\.size\(\)\[\d+\]|\.stride\(\)\[\d+\]")


def run(ctx: StageContext) -> dict[str, Any]:
    import dataclasses

    import torch

    from .. import batch, capture
    from ._compiled_autograd import RecompileCollector
    from ._execution import compare, execute, phases, reference

    own = reference(ctx.make_case)
    if own.error:  # the probe's own size fails in eager (forward or backward): nothing to compare with
        return {"skip_reason": f"the eager {own.error['phase']} fails (see the eager stage)"}
    case, ref_case = ctx.make_case(), ctx.make_case()
    b = batch.batch_size(case.args, case.kwargs)
    if b is None:
        return {"skip_reason": "no tensor input has a dimension that can vary"}
    plan = batch.sizes(b)
    refs = []
    for n in plan:  # eager first: a size the probe itself cannot take is no finding (the first is ``own``'s size)
        args, kwargs = batch.resize(ref_case.args, ref_case.kwargs, b, n)
        ex = execute(ref_case.fn, dataclasses.replace(ref_case, args=args, kwargs=kwargs))
        if ex.error:
            return {"skip_reason": f"the eager run fails at batch size {n} ({ex.error['type']}): dim 0 of the "
                                   "inputs is not a batch dimension this probe can vary"}
        refs.append(ex)
    compiled = torch.compile(case.fn, backend="inductor", dynamic=True)
    mismatches: list[dict[str, Any]] = []
    error, ran_backward = None, False
    with torch._inductor.config.patch(fallback_random=True), RecompileCollector() as rc, \
            capture.SpecializationCollector() as spec, capture.TraceCollector() as trace, \
            capture.WarningCollector() as w:
        for step, (n, ref) in enumerate(zip(plan, refs)):
            rc.step = spec.step = step
            args, kwargs = batch.resize(case.args, case.kwargs, b, n)
            got = execute(compiled, dataclasses.replace(case, args=args, kwargs=kwargs))
            ran_backward = ran_backward or got.ran_backward
            if got.error:
                error = {**got.error, "batch_size": n}
                break
            mismatches += [{**m, "batch_size": n} for m in compare(ref, got)]
    fakes = _check_fakes(ref_case, b, plan[1])
    last = len(plan) - 1
    at_last = [r for r in rc.records if r["step"] == last and r["source"] == "dynamo"]
    # a specialization of the batch dimension to the size just called (a weight's in_features is specialized at
    # every compile, and says nothing about the batch)
    specialized = [s for s in spec.records if s["step"] == last and s["value"] == str(plan[last])
                   and any(src.endswith(".size()[0]") for src in s["sources"])]
    size_guards = [r for r in at_last if specialized or _SIZE_GUARD.search(r["reason"])]
    steady = [{**r, "specialization": _pick(specialized)} for r in size_guards]
    recompiles = [{k: r[k] for k in ("reason", "step", "user_frame")} for r in rc.records if r["source"] == "dynamo"]
    return {
        "fake_checks": fakes, "error": error, "breaks": trace.breaks, "warnings": w.messages, "mismatches": mismatches[:3], "phases": phases(ran_backward),
        "ran_backward": ran_backward, "dynamic_specializations": steady,
        "steady_state_recompiles": [r for r in at_last if r not in size_guards],
        "extra": {"dynamic": {"batch_sizes": plan[: plan.index(error["batch_size"]) + 1] if error else plan,
                              "symbolic": error is None and not at_last, "recompiles": recompiles,
                              "specializations": [_brief(s) for s in spec.records][:10]}},
    }


def _check_fakes(case: Any, b: int, n: int) -> dict[str, Any]:
    """opcheck's ``test_faketensor`` on every custom op the eager forward calls at batch size ``n``: a fake impl
    that hard-codes a size agrees with its kernel at the probe's own size only (and a compiled run at ``n`` then
    fails somewhere downstream, in Inductor's size assert or a broadcast: this names the op)."""
    import dataclasses

    import torch

    from .. import batch, capture
    from ..oprecorder import OpRecorder

    args, kwargs = batch.resize(case.args, case.kwargs, b, n)
    rec = OpRecorder()
    try:
        with rec, torch.no_grad():
            dataclasses.replace(case, args=args, kwargs=kwargs).fn(*args, **kwargs)
    except Exception:
        pass  # the ops recorded before the failure are still checked
    out: dict[str, Any] = {}
    for op, (a, k) in rec.calls.items():
        res = torch.library.opcheck(op, a, k, test_utils=("test_faketensor",), raise_exception=False)
        outcome = res.get("test_faketensor", "SUCCESS")
        out[str(op)] = {"test_faketensor": outcome if isinstance(outcome, str) else
                        {**capture.error_record(outcome, "test_faketensor"), "batch_size": n}}
    return out


def _pick(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The specialization that pinned the batch dimension: the first with a frame outside torch, else the first."""
    return next((r for r in records if r.get("frame")), records[0] if records else None)


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    frame = r.get("frame") or {}
    return {"symbol": r["symbol"], "sources": r["sources"], "value": r["value"], "step": r["step"],
            "at": f"{frame.get('file')}:{frame.get('line')}" if frame else None}


SPEC = StageSpec(
    name="dynamic", heading="dyn", order=85, cost=3, run=run,
    summary="torch.compile(dynamic=True, backend=\"inductor\") at the probe's batch size and two more, "
            "forward and backward, compared with eager")
