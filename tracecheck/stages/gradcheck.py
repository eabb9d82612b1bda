"""``gradcheck``: the registered backward of every custom op and ``autograd.Function`` the probe calls, against
numerical derivatives of its forward, at the inputs the probe called it with (tracecheck/stages/_gradients.py).

opcheck does not check numerical gradients (the custom-op chapter says so: call gradcheck yourself), and a
compiled run reuses the same backward formula, so a wrong formula passes every other stage. Beside the calls, the
probe's own gradient (``_gradients.end_to_end``) decides what a call's mismatch means: a call wrong alone and right
end to end reroutes its gradient by design (a note), a probe wrong end to end with every call right has a gradient
written besides autograd (a finding).
"""
from __future__ import annotations

from ..model.records import StageRecord
from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> StageRecord:
    from ._gradients import NO_GRAD_INPUT, check_call, end_to_end, record_calls
    from ._execution import backward_of, phases, seed_all

    case = ctx.make_case()
    seed_all()
    calls, error = record_calls(case.fn, case.args, case.kwargs, backward=lambda out: backward_of(case, out))
    if not calls:
        from ..model.report import headline

        why = ("the eager forward under tracecheck's op recorder fails before any custom op ran "
               f"({headline(error)})") if error else \
            "the probe calls no custom op or autograd.Function"
        return StageRecord(skip_reason=why)
    outcomes = [check_call(c) for c in calls]
    if all(o.skip for o in outcomes):
        reasons = sorted({o.skip for o in outcomes})
        return StageRecord(skip_reason="no input of any custom op or autograd.Function call requires grad" if
                           reasons == [NO_GRAD_INPUT] else "; ".join(f"{o.name}: {o.skip}" for o in outcomes))
    # each call's own check, then the probe's gradient as training gets it: a side effect no call's check sees
    # (2x), or a call's gradient rerouted by design (wrong alone, right end to end)
    return StageRecord(gradcheck=[*outcomes, end_to_end(ctx.make_case)], phases=phases(True))


SPEC = StageSpec(
    name="gradcheck", heading="grad", order=80, cost=1, run=run, needs=("custom ops",), compiles=False,
    summary="each custom op's and autograd.Function's backward against numerical derivatives (float64 "
            "gradcheck, else a float32 central difference)")
