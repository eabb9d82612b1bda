"""What crosses to a task process: one frozen record per kind of task, its fields the task's inputs.

The parent builds a task (``api.run`` a ``stages.StageTask`` per (probe, stage), a ``collect.survey.SurveyTask`` per
model file, ``machine.EnvironmentTask``, ``fix.jobs``' records for ``tracecheck fix``); the runner pickles it to a
forked process (isolate/runner.py), where ``isolate.worker.child_main`` sets the process up from the fields below and
calls ``task.run()``. Each kind's ``run`` imports the code it runs there, so the parent never imports torch for it, and
go-to-definition leads from the record to that code. Pure: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass

from .reportio import Json

#: seconds one task process may run (``--timeout``'s default: a cold C++ extension build takes ~30 s, the slowest
#: stage on a large model ~250 s on a loaded 2-core machine)
DEFAULT_TIMEOUT_S = 300.0
#: the least a stage's deadline comes down to (isolate/deadline.py): a compile that takes two minutes where its
#: probe's other stages took seconds is no hang
FLOOR_S = 120.0


def floor_s(cap_s: float) -> float:
    """The seconds a stage is sure to get, whatever its probe's other stages take (isolate/deadline.py): half the cap
    (``--timeout``), at least ``FLOOR_S``, within the cap."""
    return min(cap_s, max(FLOOR_S, cap_s / 2))


@dataclass(frozen=True, kw_only=True)
class ProcessTask:
    """Fields every task process reads before it runs (``isolate.worker.set_up``). Frozen so that nothing changes a
    task between the parent and its process; not hashable where a field is a dict (never needed)."""

    #: install the emulated NPU before the model file imports (devices/emulated_npu.py)
    emulate_npu: bool = False
    #: keep this process's structured trace (TORCH_TRACE) here, for tlparse
    trace_dir: str | None = None

    def run(self) -> Json:
        """The task's work, in the task process; returns plain data (it goes back as JSON)."""
        raise NotImplementedError(type(self).__name__)
