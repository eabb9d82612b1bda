"""A probe's verdict, decided by one rule: from what each stage ended as (``StageOutcome``) and how the run is gated.

The report decides its probes with it (``ProbeReport.verdict``, kept until the stages or the gate change); the
baseline decides a snapshot's probe with the same ``decide`` (gate/snapshot.py), so a report and a baseline of the
same run never disagree on what failed; renderers read the ``Verdict`` and ``StageOutcome.failing``, never a rule
of their own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from . import taxonomy
from .targets import DEFAULT_REQUIRE, TARGETS, Gate

#: the pseudo-stage of the findings made while loading the file or calling the probe function (ranked first)
LOAD_STAGE = "load"

#: StageResult.status values. INTERNAL: tracecheck's own code failed in the stage (the traceback is kept in
#: ``StageResult.internal_error``); it says nothing about the probe, and the run exits 3.
PASS, FAIL, SKIP, TIMEOUT, CRASH, INTERNAL = "pass", "fail", "skip", "timeout", "crash", "internal-error"
#: statuses that fail a probe when the stage's target is required
FAILED = (FAIL, TIMEOUT, CRASH)
STATUSES = (PASS, FAIL, SKIP, TIMEOUT, CRASH, INTERNAL)


@dataclass(frozen=True)
class StageOutcome:
    """What of one stage decides its probe: its status and target, and the kinds it found, in the order found. A
    report's stage (``StageResult.outcome``) and a baseline's snapshot (gate/snapshot.py) both reduce to this."""

    stage: str
    status: str
    target: str | None
    kinds: tuple[str, ...] = ()

    @property
    def advice(self) -> tuple[str, ...]:
        """The advice kinds found (taxonomy severity): they fail nothing unless gated."""
        return tuple(k for k in self.kinds if taxonomy.is_advice(k))

    def failing(self, gate: Gate, gated: frozenset[str] = frozenset()) -> tuple[str, ...]:
        """The kinds that failed this stage, in the order found: none unless it failed (``FAILED``); its errors, and
        its advice where ``gate`` is strict or ``gated`` (a baseline's severity setting) names the kind."""
        if self.status not in FAILED:
            return ()
        return tuple(k for k in self.kinds if gate.fails_on(k) or k in gated)

    def fails(self, gate: Gate) -> bool:
        """Does this stage fail its probe: it failed, in a target ``gate`` requires."""
        return self.status in FAILED and gate.requires(self.target)


@dataclass(frozen=True)
class Verdict:
    """``status``: ``fail`` when a stage of a required target failed, else ``internal-error`` when a stage hit a
    tracecheck bug, else ``pass``. ``kinds``: what failed the probe; ``advice``: the advice kinds found in any
    stage (taxonomy severity), which fail nothing unless the run was ``--strict`` (then they are in ``kinds``
    too). ``targets``: per target with a stage that ran, ``pass``, ``fail`` or ``internal-error``; ``require``:
    the targets that gate; ``not_required``: the kinds that failed stages of the other targets (shown, gating
    nothing). Tuples: one verdict is read by every renderer, and none can change it for the others."""

    status: str  # "pass" | "fail" | "internal-error"
    first_failing_stage: str | None
    kinds: tuple[str, ...]
    advice: tuple[str, ...] = ()
    targets: dict[str, str] = field(default_factory=dict)
    require: tuple[str, ...] = DEFAULT_REQUIRE
    not_required: tuple[str, ...] = ()


def decide(outcomes: Iterable[StageOutcome], gate: Gate, gated: frozenset[str] = frozenset()) -> Verdict:
    """The verdict of a probe whose stages ended as ``outcomes`` (in run order; ``load`` is ranked first).
    ``gated``: advice kinds a baseline's severity setting fails like errors (in a stage that failed)."""
    ranked = sorted(outcomes, key=lambda o: o.stage != LOAD_STAGE)  # stable: run order otherwise
    failing = [o for o in ranked if o.fails(gate)]
    internal = [o for o in ranked if o.status == INTERNAL and gate.requires(o.target)]
    not_required = [o for o in ranked if o.status in FAILED and not gate.requires(o.target)]
    targets: dict[str, str] = {}
    for o in ranked:
        if o.target is None:  # a report from before targets: no per-target verdict to give
            continue
        if o.status in FAILED:
            targets[o.target] = FAIL
        elif o.status == INTERNAL and targets.get(o.target) != FAIL:
            targets[o.target] = INTERNAL
        elif o.status == PASS:
            targets.setdefault(o.target, PASS)
    return Verdict(
        status=FAIL if failing else INTERNAL if internal else PASS,
        first_failing_stage=failing[0].stage if failing else None,
        kinds=_once(k for o in failing for k in o.failing(gate, gated)),
        advice=_once(k for o in ranked for k in o.advice),
        targets={t: targets[t] for t in TARGETS if t in targets},
        require=tuple(gate.require),
        not_required=_once(k for o in not_required for k in o.failing(gate, gated)),
    )


def _once(kinds: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(kinds))
