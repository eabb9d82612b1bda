"""``eager``: the reference outputs and gradients; a missing autograd formula shows here, at backward."""
from __future__ import annotations

from typing import Any

from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> dict[str, Any]:
    from ..evidence import exceptions
    from ..evidence.oprecorder import registered_custom_ops
    from ._execution import execute, phases

    before = registered_custom_ops()
    with exceptions.WarningCollector() as w:
        case = ctx.make_case()
        ex = execute(case.fn, case)
    # a custom op registered only now (an extension loaded on first call): api.py runs opcheck after all
    lazy = sorted(registered_custom_ops() - before)
    return {"error": ex.error, "warnings": w.messages, "phases": phases(ex),
            "registered_custom_ops": lazy}


SPEC = StageSpec(
    name="eager", order=10, cost=0, run=run, compiles=False,
    summary="the reference outputs and gradients; a missing autograd formula shows here, at backward",
    repro='_repro_step(_repro_fn)')
