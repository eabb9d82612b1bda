"""``explain``: ``torch._dynamo.explain`` (forward only) plus tracecheck's own break count from the trace."""
from __future__ import annotations

from typing import Any

from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> dict[str, Any]:
    from .. import compat
    from ..evidence import exceptions, tracelog
    from ._execution import FORWARD, clip, forward_fails, reference

    # explain runs on the probe's first call, as a user's program compiles it: a library that fills a Python cache on
    # its first call (a quantization map built with .tolist()) breaks the graph then, and not after an eager run
    case = ctx.make_case()
    with tracelog.TraceCollector() as trace:
        try:
            out = compat.explain(case.fn, *case.args, **case.kwargs)
        except Exception as e:
            error = exceptions.error_record(e, "forward")
        else:
            error = None
    if error is not None:
        if forward_fails(reference(ctx.make_case, backward=False)):  # explain is forward-only: no eager backward
            return {"skip_reason": "the eager forward fails (see the eager stage)"}
        return {"error": error, "breaks": trace.breaks, "phases": [FORWARD]}
    return {
        "breaks": trace.breaks,
        "phases": [FORWARD],
        "graph_count": out.graph_count,
        "explain_graph_break_count": out.graph_break_count,
        "explain_reasons": [clip(str(getattr(b, "reason", b)), 2000) for b in out.break_reasons][:20],
    }


SPEC = StageSpec(
    name="explain", order=20, cost=1, run=run, forward_only=True,
    summary="torch._dynamo.explain: graph count, and graph breaks counted from the structured trace",
    repro=(
        '# fullgraph=True raises at the first graph break, with its gb_type ...\n'
        'try:\n'
        '    _repro_step(torch.compile(_repro_fn, backend="eager", fullgraph=True), backward=False)\n'
        'except torch._dynamo.exc.UserError:\n'
        '    pass  # a guard on a value fullgraph=True captured (an .item() branched on): explain says where it breaks\n'
        '# ... where it does not (torch 2.13 captures some .item() and boolean masks under fullgraph=True only),\n'
        '# torch._dynamo.explain lists the breaks\n'
        'torch._dynamo.reset()\n'
        '_repro_explained = torch._dynamo.explain(_repro_fn)(*_repro_args, **_repro_kwargs)\n'
        'if _repro_explained.graph_break_count:\n'
        '    raise RuntimeError(f"{_repro_explained.graph_break_count} graph break(s) under torch._dynamo.explain:\\n"\n'
        '                       + "\\n".join(str(r.reason) for r in _repro_explained.break_reasons))'))
