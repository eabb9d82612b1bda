"""How long a stage process may run: a deadline that follows what its probe's other stages took.

One fixed ``--timeout`` either waits minutes on a hung stage of a model whose stages take seconds, or, set low,
kills a slow compile on a loaded machine. Instead a stage may take ``FACTOR`` times the longest stage of its probe
that passed and costs at least as much (``StageSpec.cost``, and at least ``MIN_REFERENCE_COST``: a stage that
skipped, failed early or costs little says nothing about a compile), never less than the floor (``floor_s``: half
``--timeout``, at least ``FLOOR_S``), never more than ``--timeout`` (the cap, and the deadline while no such stage
has passed: the costliest stages start first, with nothing to go by). A loaded machine slows the stage it is
compared with too, so it moves the deadline with it; a larger ``--timeout`` raises the floor with the cap.

The runner asks again while a stage runs (``Runner.run``'s ``deadline``), so a stage started early gets the
shorter deadline as soon as a comparable stage has passed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

from ..model.tasks import FLOOR_S, floor_s  # noqa: F401 - FLOOR_S: the least floor, re-exported

#: a stage may take this many times the longest comparable stage of its probe
FACTOR = 10.0
#: the least cost of a stage that sets another's deadline (eager, vmap, opcheck and gradcheck without a custom op
#: take a fraction of a second on most probes)
MIN_REFERENCE_COST = 2


@dataclass(frozen=True)
class Deadline:
    seconds: float
    #: how it was set, for the timeout's message (``Outcome.died``)
    why: str
    #: the cap itself (no comparable stage had passed, or ten times its time reaches the cap)
    is_cap: bool


class Deadlines:
    """The deadline of each (probe, stage) task of one run: ``cap`` (``--timeout``), the stages' costs, and the
    seconds of the stages that have passed (``passed``)."""

    def __init__(self, cap_s: float, costs: dict[str, int]) -> None:
        self.cap_s, self.costs = cap_s, costs
        self._passed: dict[Hashable, dict[str, float]] = {}

    def passed(self, probe: Hashable, stage: str, seconds: float) -> None:
        """A stage of ``probe`` ran to the end and passed, in ``seconds``."""
        self._passed.setdefault(probe, {})[stage] = seconds

    def reference(self, probe: Hashable, stage: str) -> tuple[str, float] | None:
        """The longest passed stage of ``probe`` that costs at least as much as ``stage`` (and MIN_REFERENCE_COST)."""
        cost = max(self.costs.get(stage, 0), MIN_REFERENCE_COST)
        done = [(s, t) for s, t in self._passed.get(probe, {}).items() if s != stage and self.costs.get(s, 0) >= cost]
        return max(done, key=lambda st: st[1]) if done else None

    def __call__(self, key: Any) -> Deadline:
        """The deadline of the task whose key is ``(probe, stage)``."""
        probe, stage = key
        ref = self.reference(probe, stage)
        cap = f"the {self.cap_s:g} s timeout (--timeout"
        if ref is None:
            return Deadline(self.cap_s, cap + "; no stage of the probe that costs as much had passed)", True)
        name, took = ref
        floor = floor_s(self.cap_s)
        if floor >= self.cap_s or FACTOR * took >= self.cap_s:
            said = f"; the probe's {name} stage took {took:.1f} s" if FACTOR * took >= self.cap_s else ""
            return Deadline(self.cap_s, f"{cap}{said})", True)
        seconds = max(floor, FACTOR * took)
        how = (f"{FACTOR:g}x the {took:.1f} s the probe's {name} stage took" if FACTOR * took > floor else
               f"the least a stage gets (half --timeout, at least {FLOOR_S:g} s): {FACTOR:g}x the {took:.1f} s the "
               f"probe's {name} stage took is less")
        return Deadline(seconds, f"its {seconds:.0f} s deadline, {how} (at least {floor:.0f} s, at most --timeout "
                                 f"{self.cap_s:g} s)", False)
