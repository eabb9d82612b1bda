"""A probe's verdict, decided by one rule: from what each stage ended as (``StageOutcome``) and how the run is gated.

The report decides each probe once (``ProbeReport.verdict``, stored); the baseline decides a snapshot's probe with
the same ``decide`` (gate/baseline.py), so a report and a baseline of the same run never disagree on what failed;
renderers read the stored ``Verdict`` and ``StageOutcome.failing``, never the rule again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .targets import DEFAULT_REQUIRE, TARGETS, Gate

#: StageResult.status values. INTERNAL: tracecheck's own code failed in the stage (the traceback is kept in
#: ``StageResult.internal_error``); it says nothing about the probe, and the run exits 3.
PASS, FAIL, SKIP, TIMEOUT, CRASH, INTERNAL = "pass", "fail", "skip", "timeout", "crash", "internal-error"
#: statuses that fail a probe when the stage's target is required
FAILED = (FAIL, TIMEOUT, CRASH)
STATUSES = (PASS, FAIL, SKIP, TIMEOUT, CRASH, INTERNAL)


@dataclass(frozen=True)
class StageOutcome:
    """What of one stage decides its probe: its status and target, and the kinds it found, split as a plain run
    gates them (``errors`` fail a stage, ``advice`` fails one only when gated: ``--strict`` or a baseline's
    ``severity``). A report's stage and a baseline's snapshot both reduce to this."""

    stage: str
    status: str
    target: str | None
    errors: tuple[str, ...] = ()
    advice: tuple[str, ...] = ()

    def failing(self, gate: Gate, gated: frozenset[str] = frozenset()) -> tuple[str, ...]:
        """The kinds that fail this stage: its errors when it failed, and its advice that ``gate`` (``strict``) or
        ``gated`` turns into errors."""
        errors = self.errors if self.status in FAILED else ()
        return (*errors, *(k for k in self.advice if gate.strict or k in gated))

    def fails(self, gate: Gate, gated: frozenset[str] = frozenset()) -> bool:
        """Does this stage fail its probe: a failed status or a gated kind, in a target ``gate`` requires."""
        return gate.requires(self.target) and (self.status in FAILED or bool(self.failing(gate, gated)))


@dataclass(frozen=True)
class Verdict:
    """``status``: ``fail`` when a stage of a required target failed, else ``internal-error`` when a stage hit a
    tracecheck bug, else ``pass``. ``kinds``: what failed the probe; ``advice``: the advice kinds found in any
    stage (taxonomy severity), which fail nothing unless the run was ``--strict`` (then they are in ``kinds``
    too). ``targets``: per target with a stage that ran, ``pass``, ``fail`` or ``internal-error``; ``require``:
    the targets that gate; ``not_required``: the kinds that failed stages of the other targets (shown, gating
    nothing)."""

    status: str  # "pass" | "fail" | "internal-error"
    first_failing_stage: str | None
    kinds: list[str]
    advice: list[str] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)
    require: list[str] = field(default_factory=lambda: list(DEFAULT_REQUIRE))
    not_required: list[str] = field(default_factory=list)


def decide(outcomes: Iterable[StageOutcome], gate: Gate, gated: frozenset[str] = frozenset()) -> Verdict:
    """The verdict of a probe whose stages ended as ``outcomes`` (in run order; ``load`` is ranked first)."""
    ranked = sorted(outcomes, key=lambda o: o.stage != "load")  # stable: run order otherwise
    failing = [o for o in ranked if o.fails(gate, gated)]
    internal = [o for o in ranked if o.status == INTERNAL and gate.requires(o.target)]
    not_required = [o for o in ranked if not gate.requires(o.target) and o.status in FAILED]
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
        require=list(gate.require),
        not_required=_once(k for o in not_required for k in o.failing(gate, gated)),
    )


def _once(kinds: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(kinds))
