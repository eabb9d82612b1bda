"""``fullgraph``: ``torch.compile(fullgraph=True)``: any graph break is an error.

The backend: Dynamo alone decides whether the forward is one graph, before any backend runs, so in a run with the
``aot_eager`` stage (which traces the same forward with AOTAutograd) each graph runs as Dynamo captured it (backend
"eager": 2.7 s of the tiny Llama's warm run with aot_eager, 1.3 s without). Except a graph holding data-dependent
values (unbacked symbols: ``fullgraph=True`` captures ``.item()`` and ``nonzero`` instead of breaking there), which
no other stage compiles: it goes through ``aot_eager``, whose joint trace may need a guard on them. Without the
``aot_eager`` stage in the run (``tracecheck fix``'s diagnosis), every graph goes through ``aot_eager``.
"""
from __future__ import annotations

from typing import Any

from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> dict[str, Any]:
    from ._execution import run_compiled

    return run_compiled(ctx.make_case, _eager_unless_unbacked if ctx.options.with_aot_eager else "aot_eager",
                        fullgraph=True)


def _eager_unless_unbacked(gm: Any, example_inputs: list[Any]) -> Any:
    """The backend of a run with the aot_eager stage: the graph as captured, or aot_eager's when it holds unbacked
    symbols."""
    from .. import compat

    if compat.has_unbacked_symbols(gm):
        return compat.lookup_backend("aot_eager")(gm, example_inputs)
    return gm.forward


SPEC = StageSpec(name="fullgraph", heading="fullgr", order=50, cost=1, run=run, options=("with_aot_eager",),
                 summary="torch.compile(fullgraph=True): a graph break is an error (graphs run as Dynamo captured "
                         "them, through aot_eager where they hold data-dependent values or the run has no aot_eager "
                         "stage)",
                 repro='_repro_step(torch.compile(_repro_fn, backend="aot_eager", fullgraph=True))')
