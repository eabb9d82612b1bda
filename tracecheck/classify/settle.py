"""The one place a probe's stage results become what the report says: crashes and unknowns attributed across its
stages, ``--strict``, run order, each stage's target; the verdict follows from them by one rule (model/verdict.decide). ``api.run`` settles every probe once its stages have run;
the live display settles a copy (``settled_copy``) with the same rule, so no live line says what the report will not."""
from __future__ import annotations

import copy

from ..model.report import ProbeReport
from ..stages import order as stage_order
from ..stages import target_of
from . import results


def settle(p: ProbeReport, strict: bool) -> None:
    """Settle ``p`` in place (module docstring)."""
    results.attribute_crashes(p.stages)
    p.stages = dict(sorted(p.stages.items(), key=lambda kv: stage_order(kv[0])))
    results.attribute_unknowns(p.stages)
    if strict:
        results.apply_strict(p.stages)  # the late opcheck and the load findings too
    for s in p.stages.values():
        s.target = target_of(s.stage)


def settled_copy(p: ProbeReport, strict: bool) -> ProbeReport:
    """A settled deep copy of ``p`` (its stages so far), ``p`` unchanged: what a live line may say now."""
    out = copy.deepcopy(p)
    settle(out, strict)
    return out
