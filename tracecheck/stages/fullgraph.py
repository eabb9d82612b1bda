"""``fullgraph``: ``torch.compile(fullgraph=True, backend="aot_eager")``: any graph break is an error."""
from __future__ import annotations

from typing import Any

from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> dict[str, Any]:
    from ._execution import run_compiled

    return run_compiled(ctx.make_case, "aot_eager", fullgraph=True)


SPEC = StageSpec(name="fullgraph", heading="fullgr", order=50, cost=1, run=run,
                 summary="torch.compile(fullgraph=True, backend=\"aot_eager\")",
                 repro='_repro_step(torch.compile(_repro_fn, backend="aot_eager", fullgraph=True))')
