"""``compiled_autograd``: training steps with and without compiled autograd: unique graphs, captures, hooks
captured, and recompiles with their reasons (the measurement is in ``_compiled_autograd``)."""
from __future__ import annotations

from ..model.records import StageRecord
from ._spec import LOWER_IS_BETTER, NEUTRAL, StageContext, StageSpec


def run(ctx: StageContext) -> StageRecord:
    from ._compiled_autograd import stage_compiled_autograd

    return stage_compiled_autograd(ctx.make_case, steps=ctx.options.steps,
                                   dynamic=ctx.options.dynamic)


SPEC = StageSpec(
    name="compiled_autograd", heading="CA", order=70, cost=6, run=run, needs=("backward",),
    options=("steps", "dynamic"),
    counts={"unique_graphs_without_ca": LOWER_IS_BETTER, "unique_graphs_with_ca": LOWER_IS_BETTER,
            "captures": LOWER_IS_BETTER, "hooks_captured": NEUTRAL},
    summary="--steps training steps with and without compiled autograd: unique graphs, captures, hooks "
            "captured, recompiles and their reasons",
    repro=(
        'from torch._dynamo import compiled_autograd as _repro_ca\n'
        '_repro_enable = getattr(_repro_ca, "_enable", None) or _repro_ca.enable  # 2.13: _enable only\n'
        '_repro_compiled = torch.compile(_repro_fn, backend="aot_eager")\n'
        'with _repro_enable(torch.compile(backend="aot_eager")):\n'
        '    for _ in range(3):  # training steps: captures and recompiles show up after the first\n'
        '        _repro_step(_repro_compiled, reseed=False)'))
