"""``eager``: the reference outputs and gradients; a missing autograd formula shows here, at backward."""
from __future__ import annotations

from typing import Any

from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> dict[str, Any]:
    from .. import capture
    from ._execution import execute, phases

    with capture.WarningCollector() as w:
        case = ctx.make_case()
        ex = execute(case.fn, case)
    return {"error": ex.error, "warnings": w.messages, "ran_backward": ex.ran_backward, "phases": phases(ex)}


SPEC = StageSpec(
    name="eager", order=10, run=run,
    summary="the reference outputs and gradients; a missing autograd formula shows here, at backward")
