"""``inductor``: ``torch.compile(backend="inductor")`` forward+backward, compared with eager."""
from __future__ import annotations

from typing import Any

from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> dict[str, Any]:
    from ._execution import run_compiled

    return run_compiled(ctx.make_case, "inductor")


SPEC = StageSpec(name="inductor", order=40, cost=3, run=run,
                 summary="the same with backend=\"inductor\" (fallback_random=True)")
