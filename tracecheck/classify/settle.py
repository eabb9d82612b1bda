"""The one place a probe's stage results become what the report says: crashes and unknowns attributed across its
stages (classify/attribute.py's passes, in order), ``--strict``, run order, each stage's target; the verdict follows
from them by one rule (model/verdict.decide). ``api.run`` settles every probe once its stages have run; the live
display settles a copy (``settled_copy``) with the same rule, so no live line says what the report will not.

No step here changes a finding or a stage result it was given: each makes new ones (``dataclasses.replace``, shallow:
an unchanged finding and ``extra`` are shared with the input), so a result a test holds keeps what it said; the live
display's copy is a deep one, as it annotates it.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Callable

from ..model.report import FAIL, PASS, ProbeReport, StageResult
from ..model.targets import Gate
from ..stages import order as stage_order
from ..stages import target_of
from . import attribute
from .attribute import Replacements, Stages

#: the attributions after the crashes', in order: each reads what the one before it settled
ACROSS_STAGES: tuple[Callable[[Stages], Replacements], ...] = (
    attribute.unknowns, attribute.backward_shapes, attribute.downstream_shapes, attribute.named_by_transform,
    attribute.upstream_advice)


def applied(stages: Stages, replacements: Replacements) -> dict[str, StageResult]:
    """``stages`` with the replaced findings in place (a stage's failure follows its finding); the stages that no
    replacement names are the same objects."""
    out: dict[str, StageResult] = {}
    for name, s in stages.items():
        mine = {i: f for (stage, i), f in replacements.items() if stage == name}
        if not mine:
            out[name] = s
            continue
        failure = next((mine[i] for i, f in enumerate(s.findings) if f is s.failure and i in mine), s.failure)
        out[name] = dataclasses.replace(s, findings=[mine.get(i, f) for i, f in enumerate(s.findings)],
                                        failure=failure)
    return out


def crashes_attributed(stages: Stages) -> dict[str, StageResult]:
    """A process that died calling a redefined op died of the redefinition (attribute.crashes)."""
    return applied(stages, attribute.crashes(stages))


def attributed(stages: Stages) -> dict[str, StageResult]:
    """The stages (in stage order) after every attribution across them (``ACROSS_STAGES``)."""
    out = dict(stages)
    for attribution in ACROSS_STAGES:
        out = applied(out, attribution(out))
    return out


def under_strict(s: StageResult) -> StageResult:
    """``--strict``: advice fails a stage as an error does (the first such finding becomes its failure)."""
    failing = [f for f in s.findings if Gate(strict=True).fails_on(f.kind)]
    return dataclasses.replace(s, status=FAIL, failure=failing[0]) if s.status == PASS and failing else s


def settled(stages: Stages, strict: bool) -> dict[str, StageResult]:
    """The stages as the report says them (module docstring)."""
    out = crashes_attributed(stages)
    out = attributed(dict(sorted(out.items(), key=lambda kv: stage_order(kv[0]))))
    if strict:
        out = {name: under_strict(s) for name, s in out.items()}  # the late opcheck and the load findings too
    return {name: dataclasses.replace(s, target=target_of(s.stage)) for name, s in out.items()}


def settle(p: ProbeReport, strict: bool) -> None:
    """Settle ``p``: its stages become the settled ones (the results it held are not changed)."""
    p.stages = settled(p.stages, strict)


def settled_copy(p: ProbeReport, strict: bool) -> ProbeReport:
    """A settled deep copy of ``p`` (its stages so far), ``p`` unchanged: what a live line may say now (the display
    may annotate the copy's results: api._as_settled marks a pending kind)."""
    return dataclasses.replace(p, stages=settled(copy.deepcopy(p.stages), strict))
