"""How long a stage process may run: a deadline that follows what its probe's other stages took.

One fixed ``--timeout`` either waits minutes on a hung stage of a model whose stages take seconds, or, set low,
kills a slow compile on a loaded machine. Instead a stage may take ``FACTOR`` times the longest of its probe's
stages that ended on their own and cost at least as much (``StageSpec.cost``: a cheap stage says nothing about a
costly one), never less than ``FLOOR_S``, never more than ``--timeout`` (the cap, and the deadline while no such
stage has ended: the costliest stages start first, with nothing to go by). A loaded machine slows the stages it
is compared with too, so it moves the deadline with them.

The runner asks again while a stage runs (``Runner.run``'s ``deadline``), so a stage started early gets the
shorter deadline as soon as a comparable stage has ended; ``Deadline.why`` is what its timeout message says.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

#: a stage may take this many times the longest comparable stage of its probe
FACTOR = 10.0
#: and at least this long (a compile that takes a minute where its probe's others took seconds is no hang)
FLOOR_S = 120.0


def assured_s(cap_s: float) -> float:
    """The seconds a stage is sure to get, whatever its probe's other stages take: the floor, within the cap."""
    return min(cap_s, FLOOR_S)


@dataclass(frozen=True)
class Deadline:
    seconds: float
    #: what follows "killed after " in the timeout's message: the limit and how it was set
    why: str


class Deadlines:
    """The deadline of each (probe, stage) task of one run: ``cap`` (``--timeout``), the stages' costs, and the
    seconds of the stages that have ended (``ended``)."""

    def __init__(self, cap_s: float, costs: dict[str, int]) -> None:
        self.cap_s, self.costs = cap_s, costs
        self._ended: dict[Hashable, dict[str, float]] = {}

    def ended(self, probe: Hashable, stage: str, seconds: float, on_its_own: bool) -> None:
        """A stage of ``probe`` ended after ``seconds``; ``on_its_own``: with a result (not killed, not dead)."""
        if on_its_own:
            self._ended.setdefault(probe, {})[stage] = seconds

    def reference(self, probe: Hashable, stage: str) -> tuple[str, float] | None:
        """The longest stage of ``probe`` that ended on its own and costs at least as much as ``stage``."""
        cost = self.costs.get(stage, 0)
        done = [(s, t) for s, t in self._ended.get(probe, {}).items() if s != stage and self.costs.get(s, 0) >= cost]
        return max(done, key=lambda st: st[1]) if done else None

    def __call__(self, key: Any) -> Deadline:
        """The deadline of the task whose key is ``(probe, stage)``."""
        probe, stage = key
        ref = self.reference(probe, stage)
        if ref is None:
            return Deadline(self.cap_s, f"the {self.cap_s:g} s timeout (--timeout; no stage of the probe that costs "
                                        "as much had ended)")
        name, took = ref
        scaled = max(FLOOR_S, FACTOR * took)
        if scaled >= self.cap_s:
            return Deadline(self.cap_s, f"the {self.cap_s:g} s timeout (--timeout; the probe's {name} stage took "
                                        f"{took:.1f} s)")
        if scaled > FLOOR_S:
            return Deadline(scaled, f"{scaled:.0f} s, {FACTOR:g}x the {took:.1f} s the probe's {name} stage took "
                                    f"(at least {FLOOR_S:g} s, at most --timeout {self.cap_s:g} s)")
        return Deadline(scaled, f"{FLOOR_S:g} s, the least a stage gets ({FACTOR:g}x the {took:.1f} s the probe's "
                                f"{name} stage took is less; at most --timeout {self.cap_s:g} s)")
