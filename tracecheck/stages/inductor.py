"""``inductor``: ``torch.compile(backend="inductor")`` forward+backward, compared with eager.

On a device Inductor has no code generator for (the emulated NPU; a real NPU has torch_npu's), nothing is compiled:
the stage says why under "not checked" rather than failing the probe for the device."""
from __future__ import annotations

from ..model.records import StageRecord
from ._spec import StageContext, StageSpec


def run(ctx: StageContext) -> StageRecord:
    from .. import compat
    from ._execution import run_compiled

    lacking = compat.devices_without_inductor([ctx.device])
    if lacking:
        return StageRecord(skip_reason=f"Inductor has no code generator for device {lacking[0]} (a real NPU gets "
                                       "torch_npu's; compile with backend=\"aot_eager\" or torchair's there): nothing "
                                       "was compiled")
    return run_compiled(ctx.make_case, "inductor")


SPEC = StageSpec(name="inductor", order=40, cost=3, run=run,
                 summary="the same with backend=\"inductor\" (fallback_random=True)",
                 repro='_repro_compare(torch.compile(_repro_fn, backend="inductor"))')
