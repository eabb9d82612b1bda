"""``fullgraph``: ``torch.compile(fullgraph=True, backend="eager")``: any graph break is an error.

Backend "eager": whether Dynamo captures the whole forward as one graph is Dynamo's alone, decided before any backend
runs; what AOTAutograd makes of that graph is the ``aot_eager`` stage's (the same graph, compiled there), so this
stage does not trace it a second time (issue 42: 2.7 s of the tiny Llama's warm run with aot_eager, 0.9 s without)."""
from __future__ import annotations

from typing import Any

from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> dict[str, Any]:
    from ._execution import run_compiled

    return run_compiled(ctx.make_case, "eager", fullgraph=True)


SPEC = StageSpec(name="fullgraph", heading="fullgr", order=50, cost=1, run=run,
                 summary="torch.compile(fullgraph=True, backend=\"eager\"): a graph break is an error (what "
                         "AOTAutograd makes of the graph is the aot_eager stage's)",
                 repro='_repro_step(torch.compile(_repro_fn, backend="eager", fullgraph=True))')
