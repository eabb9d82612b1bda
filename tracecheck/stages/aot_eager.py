"""``aot_eager``: ``torch.compile(backend="aot_eager")`` forward+backward, compared with eager."""
from __future__ import annotations

from ..model.records import StageRecord
from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> StageRecord:
    from ._execution import run_compiled

    return run_compiled(ctx.make_case, "aot_eager")


SPEC = StageSpec(
    name="aot_eager", heading="aot", order=30, cost=2, run=run,
    summary="torch.compile(backend=\"aot_eager\") forward+backward, compared with eager against a float64 "
            "reference (torch._dynamo.utils.same)",
    repro='_repro_compare(torch.compile(_repro_fn, backend="aot_eager"))')
