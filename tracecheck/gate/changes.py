"""One difference between a baseline and a new run (``Change``), and the words and aspects the comparison
(comparison.py) writes and the grouping into root causes (causes.py) reads. Pure: no torch import."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model.reportio import Json
from ..stages import LOWER_IS_BETTER, NEUTRAL, REGISTRY
from .snapshot import BreakSnapshot, Location

#: a change's effect: worse (the exit code's rule), better, or neither (shown only)
REGRESSED, IMPROVED, CHANGED = "regressed", "improved", "changed"
#: the change aspects of compile coverage: ops captured (more is better) and frames run in eager (fewer is)
CAPTURED, EAGER_FRAMES = "coverage.calls_captured", "coverage.frames_eager"

#: Counts a stage adds to StageResult.extra (``StageSpec.counts``) that must not grow, and those that are shown
#: when they change but are neither better nor worse. A stage's ``recompiles`` is compared once, on its own.
COUNTS_LOWER_IS_BETTER = tuple(dict.fromkeys(k for s in REGISTRY.values() for k, how in s.counts.items()
                                             if how == LOWER_IS_BETTER))
COUNTS_NEUTRAL = tuple(dict.fromkeys(k for s in REGISTRY.values() for k, how in s.counts.items() if how == NEUTRAL))

#: what each count aspect counts, as a change and a root cause say it
COUNT_NOUNS = {"graph_count": "graphs", "graph_break_count": "graph breaks", "recompiles": "recompiles",
               CAPTURED: "ops captured", EAGER_FRAMES: "frames run in eager",
               **{f"compiled_autograd.{k}": f"compiled autograd {k.replace('_', ' ')}"
                  for k in (*COUNTS_LOWER_IS_BETTER, *COUNTS_NEUTRAL)}}
#: counts that move with a new (gone) break or failure kind in their stage, and fold into it
LOWER_IS_BETTER_ASPECTS = ("graph_count", "graph_break_count", "recompiles", EAGER_FRAMES,
                           *(f"compiled_autograd.{k}" for k in COUNTS_LOWER_IS_BETTER))

#: how a change in a stage of a target the gate does not require says so, and how a regression that more ops
#: captured outweighs says so, at the end of its detail; a root cause says it once
_NOT_REQUIRED_WHY = r"target [\w-]+ not required; .* gates on it"
NOT_REQUIRED = re.compile(rf" \({_NOT_REQUIRED_WHY}\)$")
SOFTENED_SUFFIX = re.compile(rf" \(({_NOT_REQUIRED_WHY}|outweighed: [^()]*)\)$")
#: how ops captured that rose together with a new break says so (``group_changes`` folds such a change into it)
CAME_WITH = "came with"


def not_required_detail(detail: str, target: str, how_to_require: str) -> str:
    """A change's detail in a stage of a target the gate does not require (``NOT_REQUIRED`` reads it back)."""
    return f"{detail} (target {target} not required; {how_to_require} gates on it)"


@dataclass(frozen=True)
class Change:
    """One difference between baseline and new run. ``effect`` is regressed, improved or changed (neutral).

    ``before`` and ``after`` are the aspect's values on each side: a status, a kind, a count, phases, a break's
    description (None where a side has none). ``location`` is ``{"file", "line"}`` (relative) for a graph break or
    a kind's findings, so CI can annotate the user's line; ``graph_break`` the break itself (its GB code taken from
    the baseline's side where the new one has none), which ``group_changes`` groups on.
    """

    probe: str
    stage: str | None
    aspect: str
    before: object
    after: object
    effect: str
    detail: str
    location: Location | None = None
    graph_break: BreakSnapshot | None = None
    #: why a count's move is not what it seems (within the tolerance; outweighed), also said at the end of ``detail``
    why: str = ""

    def to_dict(self) -> Json:
        return {"probe": self.probe, "stage": self.stage, "aspect": self.aspect, "before": self.before,
                "after": self.after, "effect": self.effect, "detail": self.detail, "location": self.location,
                "graph_break": _break_json(self.graph_break) if self.graph_break is not None else None,
                "why": self.why}


def _break_json(b: BreakSnapshot) -> Json:
    """A change's break in the comparison's JSON: kind, gb_type, file, line and gb_code always; code and owner
    where known."""
    return {"kind": b.kind, "gb_type": b.gb_type, "file": b.file, "line": b.line, "gb_code": b.gb_code,
            **({"code": b.code} if b.code else {}), **({"owner": b.owner} if b.owner else {})}
