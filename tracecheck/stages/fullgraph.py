"""``fullgraph``: ``torch.compile(fullgraph=True)``: any graph break is an error.

Through AOTAutograd (backend ``aot_eager``), whatever other stages run: ``fullgraph=True`` is a user's promise that
the whole forward compiles, and AOTAutograd's trace (the fakes' shapes, the joint graph of forward and backward) is
part of compiling it. With backend ``eager`` (Dynamo alone) the stage passed where ``torch.compile(fullgraph=True)``
fails: a wrong fake that breaks AOTAutograd, bitsandbytes' 8-bit Adam step, xformers' tiled matmul (issue 52). It
costs the time of one more AOTAutograd trace of the forward and backward (benchmarks/bench_fullgraph_backend.py).
"""
from __future__ import annotations

from ..model.records import StageRecord
from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> StageRecord:
    from ._execution import run_compiled

    return run_compiled(ctx.make_case, "aot_eager", fullgraph=True)


SPEC = StageSpec(name="fullgraph", heading="fullgr", order=50, cost=2, run=run,
                 summary="torch.compile(fullgraph=True) through AOTAutograd (backend aot_eager): a graph break, or "
                         "an error tracing the forward and backward, is an error",
                 repro='_repro_step(torch.compile(_repro_fn, backend="aot_eager", fullgraph=True))')
